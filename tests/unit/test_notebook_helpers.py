"""Notebook helpers: escaped and redacted HTML views, run_until_idle on a fake clock
(bounded), the ledger as a DataFrame, the timeline plot."""

from __future__ import annotations

import builtins
import io
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import (
    LEASE_SECONDS,
    AgentQError,
    ConfigError,
    FakeClock,
    MissingExtra,
    NotIdle,
    Policy,
    RetryLater,
    Runtime,
    SystemClock,
    TaskStatus,
    ToolContext,
    WorkerCrash,
    tool,
)

HOSTILE = "<script>alert(1)</script>"
SECRET_URL = "https://user:hunter2@api.example.com/v1?api_key=sk-live-123&page=2"


class Note(BaseModel):
    text: str
    password: str = ""
    url: str = ""


_failures: dict[str, int] = {}


@tool(queue="notes")
def flaky(ctx: ToolContext, args: Note) -> dict[str, str]:
    """Fails twice per text, then succeeds."""
    seen = _failures.get(args.text, 0)
    if seen < 2:
        _failures[args.text] = seen + 1
        raise RuntimeError(f"flaky failure {seen + 1} calling {args.url}")
    return {"echo": args.text}


@tool(queue="notes")
def forever(ctx: ToolContext, args: Note) -> None:
    """Never done: asks to run again in an hour, every time."""
    raise RetryLater(3600)


@tool(queue="notes")
def pay(ctx: ToolContext, args: Note) -> dict[str, str]:
    """Needs a human above nothing at all (see POLICY)."""
    return {"paid": args.text}


POLICY = Policy.model_validate(
    {
        "defaults": {"max_attempts": 5, "backoff_initial": "1s", "notify_tool": None},
        "approvals": [{"tool": "pay", "escalate_after": "72h", "expire_after": "7d"}],
    }
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rt(clock: FakeClock) -> Iterator[Runtime]:
    _failures.clear()
    runtime = Runtime(
        "sqlite:///:memory:", tools=[flaky, forever, pay], policies=POLICY, clock=clock
    )
    yield runtime
    runtime.close()


# -- HTML views --------------------------------------------------------------------


def test_task_view_escapes_untrusted_args_and_hides_secrets(rt: Runtime) -> None:
    task = rt.enqueue_action("flaky", {"text": HOSTILE, "password": "pw-1", "url": SECRET_URL})
    for view in (rt.task(task.task_id)._repr_html_(), rt.tasks()._repr_html_()):
        assert "<script>" not in view
        assert "&lt;script&gt;" in view
        assert "hunter2" not in view and "sk-live-123" not in view and "pw-1" not in view
        assert "REDACTED" in view
        assert "awaiting" not in view and "queued" in view
    rt.worker(concurrency=1).drain()
    error_view = rt.task(task.task_id)._repr_html_()
    assert "flaky failure 1" in error_view
    assert "hunter2" not in error_view and "sk-live-123" not in error_view


def test_task_list_shows_a_row_per_task_and_cuts_long_lists(rt: Runtime) -> None:
    for i in range(55):
        rt.enqueue_action("flaky", {"text": f"t{i}"})
    view = rt.tasks()._repr_html_()
    assert view.startswith("<p>55 task(s)</p>")
    assert view.count("<tr>") == 1 + 50
    assert "and 5 more" in view
    assert rt.tasks()[:3]._repr_html_().startswith("<p>3 task(s)</p>")  # a slice is a table too


def test_approval_and_queue_views(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"text": HOSTILE})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    approval = rt.approval(task.approval_id or "")
    for view in (approval._repr_html_(), rt.approvals()._repr_html_()):
        assert "&lt;script&gt;" in view and "<script>" not in view
        assert "pending" in view
    stats = rt.queue_stats()
    assert [s.queue for s in stats] == sorted(s.queue for s in stats)
    view = stats._repr_html_()
    assert "notes" in view and "depth" in view
    notes = next(s for s in stats if s.queue == "notes")
    assert ">notes<" in notes._repr_html_() and ">0<" in notes._repr_html_()


# -- run_until_idle ------------------------------------------------------------------


def test_run_until_idle_runs_retries_through_their_backoff(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("flaky", {"text": "a"})
    report = rt.run_until_idle()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert rt.task(task.task_id).attempt == 3
    assert report.steps == 2 and report.advanced > timedelta(0)
    assert "handled 3 task(s)" in str(report)


def test_run_until_idle_escalates_and_stops_at_until(rt: Runtime, clock: FakeClock) -> None:
    task = rt.enqueue_action("pay", {"text": "big"})
    report = rt.run_until_idle(until=timedelta(hours=73))
    approval = rt.approval(task.approval_id or "")
    assert approval.status == "escalated"
    assert report.next_due is not None  # the expiry, 7 days after the request
    assert clock.now() - report.now == timedelta(0)
    rt.approve(approval.approval_id, by="manager")
    rt.run_until_idle()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED


def test_run_until_idle_runs_an_unanswered_approval_to_its_expiry(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"text": "never answered"})
    rt.run_until_idle()
    assert rt.approval(task.approval_id or "").status == "expired"
    assert rt.task(task.task_id).done


def test_run_until_idle_is_bounded_on_a_task_that_never_finishes(
    rt: Runtime, clock: FakeClock
) -> None:
    task = rt.enqueue_action("forever", {"text": "x"})
    with pytest.raises(NotIdle, match=rf"not idle after 5 clock jump.*{task.task_id}.*until="):
        rt.run_until_idle(max_steps=5)
    assert isinstance(NotIdle("x"), AgentQError)
    report = rt.run_until_idle(until=timedelta(hours=2, minutes=30))
    assert report.next_due is not None and not rt.task(task.task_id).done


def test_run_until_idle_waits_out_the_lease_of_a_crashed_worker(rt: Runtime) -> None:
    task = rt.enqueue_action("pay", {"text": "crash"})
    rt.approve(task.approval_id or "", by="alice")
    rt.faults.arm("after_external_call", WorkerCrash())
    report = rt.run_until_idle()
    done = rt.task(task.task_id)
    assert done.status == TaskStatus.SUCCEEDED and done.deliveries == 2
    assert report.advanced >= timedelta(seconds=LEASE_SECONDS)


def test_run_until_idle_needs_the_runtimes_fake_clock(rt: Runtime) -> None:
    with pytest.raises(ConfigError, match="must be the clock the runtime was built with"):
        rt.run_until_idle(clock=FakeClock())
    with (
        Runtime("sqlite:///:memory:", tools=[flaky], clock=SystemClock()) as real,
        pytest.raises(ConfigError, match="needs a FakeClock"),
    ):
        real.run_until_idle()


# -- DataFrame and timeline ----------------------------------------------------------


def test_tasks_frame_has_a_row_per_task_with_times_and_redacted_values(rt: Runtime) -> None:
    pytest.importorskip("pandas")
    rt.enqueue_action("flaky", {"text": "a", "password": "pw-2", "url": SECRET_URL})
    rt.enqueue_action("pay", {"text": "b"})
    rt.run_until_idle(until=timedelta(hours=1))
    frame = rt.tasks_frame()
    assert len(frame) == len(rt.tasks())
    assert {"tool", "status", "attempt", "created_at", "finished_at", "seconds"} <= set(frame)
    assert str(frame["created_at"].dtype).startswith("datetime64")
    text = frame.to_string() + frame.to_html()
    assert "pw-2" not in text and "hunter2" not in text and "sk-live-123" not in text
    assert set(rt.tasks_frame(status="succeeded")["tool"]) == {"flaky"}


def test_tasks_frame_without_pandas_names_the_extra(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_pandas(name: str, *args: Any, **kw: Any) -> Any:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("No module named 'pandas'")
        return real_import(name, *args, **kw)

    monkeypatch.delitem(__import__("sys").modules, "pandas", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_pandas)
    monkeypatch.setattr("importlib.import_module", lambda name: no_pandas(name))
    with pytest.raises(MissingExtra, match=r"agentq-runtime\[notebook\]"):
        rt.tasks_frame()


def test_timeline_plots_a_bar_per_task_with_escalations_marked(rt: Runtime) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    figures_before = set(plt.get_fignums())
    rt.enqueue_action("flaky", {"text": "a"})
    big = rt.enqueue_action("pay", {"text": "b"})
    rt.run_until_idle(until=timedelta(hours=73))
    rt.approve(big.approval_id or "", by="manager")
    rt.run_until_idle()
    fig = rt.plot_timeline()
    # Not a pyplot figure: a notebook shows it once, as the cell's value.
    assert set(plt.get_fignums()) == figures_before
    ax = fig.axes[0]
    assert ax.get_xlabel() == "time since first enqueue (h)"
    assert ax.get_ylabel() == "task (tool, id)"
    # One bar per task, and the approved one's wait for a human as a segment of its own.
    assert len(ax.patches) == len(rt.tasks()) + 1
    labels = {t.get_text() for t in ax.get_legend().get_texts()}
    assert {"succeeded", "awaiting_approval", "escalated", "decided"} <= labels
    out = io.BytesIO()
    fig.savefig(out, format="png")  # a script saves it
    assert out.getvalue().startswith(b"\x89PNG")
