"""The overview's throughput and latency chart (issue 28 item 16): drawn on the
server as SVG (no script, nothing fetched), tasks that ended per minute (per
half hour over a day), succeeded and failed apart, with the p50 and p95 of their
run time; only the tasks the principal may see, never the runtime's own."""

from __future__ import annotations

import re
from collections.abc import Callable

from tests.console._need import need_ui

need_ui()

from agentq import FakeClock, Runtime  # noqa: E402
from agentq.console import charts  # noqa: E402
from agentq.lifecycle import tallies  # noqa: E402
from tests.console.conftest import Served  # noqa: E402
from tests.console.conftest import dead as _dead  # noqa: E402


def _chart(page: str) -> str:
    found = re.search(r'<div class="charts" id="charts".*?</div>', page, re.S)
    assert found, "no chart on the overview"
    return found[0]


def _bars(chart: str) -> list[str]:
    return re.findall(r'<rect class="bar (?:ok|bad)"[^>]*><title>([^<]+)</title></rect>', chart)


def _points(chart: str) -> list[str]:
    return re.findall(r'<circle class="point p\d\d"[^>]*><title>([^<]+)</title></circle>', chart)


def _world(rt: Runtime) -> tuple[str, str]:
    """Three quick successes and a failure in one minute; ten minutes later two
    runs of 2 s and 4 s. Returns the two minutes (HH:MM)."""
    first = rt.clock.now()
    for n in range(3):
        rt.enqueue_action("pay", {"ref": f"p-{n}", "amount": 3})
    rt.worker().drain()
    _dead(rt)
    rt.clock.advance(600)  # type: ignore[attr-defined]
    second = rt.clock.now()
    for seconds in (2, 4):
        rt.enqueue_action("crunch", {"ref": f"c-{seconds}", "seconds": seconds})
        rt.worker().drain()
    rt.clock.advance(300)  # type: ignore[attr-defined]
    return f"{first:%H:%M}", f"{second:%H:%M}"


def test_the_overview_charts_throughput_and_run_time_percentiles(
    serve: Callable[..., Served],
) -> None:
    served = serve()
    first, second = _world(served.rt)
    with served.client("viewer") as client:
        page = client.get("/").text
    chart = _chart(page)
    assert sorted(_bars(chart)) == sorted([
        f"{first} UTC: 3 succeeded", f"{first} UTC: 1 failed", f"{second} UTC: 2 succeeded",
    ])  # fmt: skip
    # Percentiles to the histogram's resolution (eight buckets a decade): the
    # middles of the buckets of 2 s and of 4 s.
    assert f"{second} UTC: p50 run time 2.1 s" in _points(chart)
    assert f"{second} UTC: p95 run time 3.7 s" in _points(chart)
    assert "6 in the last hour" in chart and "1 failed</span>" in chart
    # Drawn with plain elements: the CSP allows no inline style, no inline script.
    assert "style=" not in chart and "<script" not in chart
    assert '<a href="/console/?window=24h">last day</a>' in page


def test_the_chart_window_and_what_falls_out_of_it(serve: Callable[..., Served]) -> None:
    served = serve()
    _world(served.rt)
    served.rt.clock.advance(2 * 3600)  # type: ignore[attr-defined]
    with served.client("viewer") as client:
        hour = _chart(client.get("/").text)
        day = _chart(client.get("/", params={"window": "24h"}).text)
        assert client.get("/", params={"window": "1y"}).status_code == 400
    assert _bars(hour) == [] and "0 in the last hour" in hour
    assert 'data-window="24h"' in day and "6 in the last day" in day
    assert sum(int(re.search(r": (\d+) ", b)[1]) for b in _bars(day)) == 6  # type: ignore[index]


def test_the_chart_counts_only_what_the_principal_may_see(serve: Callable[..., Served]) -> None:
    served = serve()
    rt = served.rt
    rt.enqueue_action("pay", {"ref": "theirs", "amount": 3})
    rt.enqueue_action("pay", {"ref": "mine", "amount": 3}, by="agent")
    rt.enqueue_action("pay", {"ref": "asks", "amount": 500})  # its notice: the runtime's own
    rt.worker().drain()
    assert any(t.kind != "action" and t.done for t in rt.tasks())
    rt.clock.advance(60)  # type: ignore[attr-defined]
    with served.client("agent") as agent:
        assert "1 in the last hour" in _chart(agent.get("/").text)
    with served.client("viewer") as operator:
        assert "2 in the last hour" in _chart(operator.get("/").text)


def test_bucket_percentiles_and_axis_rounding() -> None:
    start = FakeClock().now()
    runs = [2.0, 4.0, 4.0, 4.0]
    bucket = charts.Bucket(
        start=start, run_times={tallies.bucket_of(2.0): 1, tallies.bucket_of(4.0): 3}
    )
    assert bucket.percentile(25) == tallies.bucket_seconds(tallies.bucket_of(2.0))
    assert (
        bucket.percentile(50)
        == bucket.percentile(95)
        == tallies.bucket_seconds(tallies.bucket_of(4.0))
    )
    # Each within its bucket's resolution (an eighth of a decade) of the run time.
    for run in runs:
        assert abs(tallies.bucket_seconds(tallies.bucket_of(run)) / run - 1) < 0.16
    assert charts.Bucket(start=start).percentile(50) is None
    assert [charts._nice(v) for v in (0, 0.03, 7, 12, 240, 999)] == [1.0, 0.05, 10, 20, 250, 1000]
