"""The overview's workers panel and its warning when work waits with nobody to
do it (issue 28 item 16): live workers with their last heartbeat, lost and
silent ones marked, the warning per queue, all of it in the live stream too.
Worker hosts and ids are for operators; others see how many are live."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq.executor.heartbeat import Heartbeat  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.console.test_console_pages import _next_event  # noqa: E402


def _beat(served: Served, worker_id: str, queues: list[str] | None = None) -> Heartbeat:
    heartbeat = Heartbeat(served.rt.worker(queues=queues), 5.0, None, worker_id=worker_id)
    heartbeat.publish()
    return heartbeat


def test_work_waiting_with_no_live_worker_is_warned_about(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    with served.client("viewer") as client:
        assert 'id="no-worker"' not in client.get("/").text  # nothing waits: no warning
        rt.enqueue_action("pay", {"ref": "waits", "amount": 3})
        page = client.get("/").text
        warning = re.search(r'<div class="warning" id="no-worker">(.*?)</div>', page, re.S)
        assert warning, page
        assert '<p data-queue="work"><strong>1 task(s) wait in queue work' in warning[1]
        assert "<code>agentq worker</code>" in warning[1]
        assert 'id="no-workers"' in page  # and the panel says no worker beats

        # A live worker for another queue: the warning stays, naming the queue to serve.
        _beat(served, "notices-only", queues=["notices"])
        page = client.get("/").text
        assert "<code>agentq worker --queue work</code>" in page
        # One that serves it: no warning; the panel lists both, live, just heard from.
        _beat(served, "worker-1")
        page = client.get("/").text
        assert 'id="no-worker"' not in page
        row = re.search(r'<tr data-worker="worker-1" class="worker live">(.*?)</tr>', page, re.S)
        assert row, page
        assert '<td class="beat"><time' in row[1] and ">just now</time>" in row[1]
        assert '<span class="status live">live</span>' in row[1]

        # Silent for a minute: not live any more, so the work waits again.
        rt.clock.advance(61)  # type: ignore[attr-defined]
        page = client.get("/").text
        assert 'id="no-worker"' in page
        row = re.search(r'<tr data-worker="worker-1" class="worker silent">(.*?)</tr>', page, re.S)
        assert row and ">1 min ago</time>" in row[1]


def test_a_lost_worker_is_marked_lost(serve: Callable[..., Served]) -> None:
    served = serve()
    gone, watcher = _beat(served, "gone"), _beat(served, "watcher")
    del gone  # killed: it never beats again
    served.rt.clock.advance(31)  # type: ignore[attr-defined]  # past its 30 s timeout
    watcher.publish()
    assert watcher.check_others() == 1
    with served.client("viewer") as client:
        page = client.get("/").text
    assert '<tr data-worker="gone" class="worker lost">' in page
    assert '<tr data-worker="watcher" class="worker live">' in page


def test_only_operators_see_which_workers_run_where(serve: Callable[..., Served]) -> None:
    served = serve()
    _beat(served, "worker-on-host-x")
    with served.client("agent") as agent:
        page = agent.get("/").text
    assert "worker-on-host-x" not in page
    assert '<p class="hint" id="workers-count">1 live worker(s)</p>' in page


def test_the_live_stream_sends_the_workers_and_the_warning(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    with served.client("viewer") as client, client.stream("GET", "/events") as stream:
        lines = stream.iter_lines()
        assert 'id="no-workers"' in _next_event(lines, "workers")
        rt.enqueue_action("pay", {"ref": "waits", "amount": 3})
        for _ in range(200):
            if 'id="no-worker"' in _next_event(lines, "queues"):
                break
        else:
            raise AssertionError("the warning never came in the live figures")
        _beat(served, "worker-1")
        for _ in range(200):
            if 'data-worker="worker-1"' in _next_event(lines, "workers"):
                break
        else:
            raise AssertionError("the worker never came in the live panel")
