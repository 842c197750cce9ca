"""The chaos run's parts that need no database: the SQL rewrite per dialect, the
refund tool's completion through it, and how an outage's figures become
problems. The runs themselves are ``.ci/run`` steps (``python -m tests.chaos
--backend spanner|postgresql``); the SQLite one is ``test_chaos.py``."""

from __future__ import annotations

import fcntl
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentq.ledger import TaskInfo, TaskStatus
from agentq.tools import ToolRegistry
from tests.chaos.appsql import portable, portable_refund_tool
from tests.chaos.graph_checks import GraphsReport, check_graph_refunds
from tests.chaos.lock_stalls import writer_lock_holders, writer_lock_path
from tests.chaos.outages import Outage, outage_problems
from tests.chaos.run_checks import check_requests
from tests.chaos.runs import Answered
from tests.chaos.workers import ROOT


@pytest.mark.parametrize(
    ("kind", "sql", "params"),
    [
        ("sqlite", "UPDATE orders SET refund_id = ? WHERE id = ?", ("r", "o")),
        ("postgresql", "UPDATE orders SET refund_id = %s WHERE id = %s", ("r", "o")),
        ("spanner", "UPDATE orders SET refund_id = @p1 WHERE id = @p2", {"p1": "r", "p2": "o"}),
    ],
)
def test_placeholders_are_rewritten_for_each_dialect(kind: str, sql: str, params: Any) -> None:
    assert portable(kind, "UPDATE orders SET refund_id = ? WHERE id = ?", ("r", "o")) == (
        sql,
        params,
    )


def test_a_statement_without_parameters_is_left_alone() -> None:
    assert portable("spanner", "SELECT id FROM orders", ()) == ("SELECT id FROM orders", ())


class _Recorder:
    """A completion's Decision that records the SQL it is given."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, Any]] = []

    def execute(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        self.statements.append((sql, params))
        return [("re_1",)] if sql.startswith("SELECT") else []


class _Context:
    def __init__(self) -> None:
        self.completions: list[Any] = []
        self.settings = {"orders_table": "orders"}

    def on_commit(self, fn: Any) -> None:
        self.completions.append(fn)


def test_the_refund_tools_completion_runs_in_the_backends_dialect_and_is_counted() -> None:
    loaded = ToolRegistry()
    loaded.load_dir(ROOT / "tools")
    tool = portable_refund_tool(loaded.get("execute_refund"), "postgresql")
    ctx, args = _Context(), tool.args_model.model_validate({"order_id": "o-1", "amount": 5})

    class _Http:
        def post(self, url: str, json: Any) -> Any:
            import httpx

            body = {"refund_id": "re_1", "status": "refunded"}
            return httpx.Response(200, json=body, request=httpx.Request("POST", url))

    ctx.http = _Http()  # type: ignore[attr-defined]
    ctx.settings["payments_url"] = "http://127.0.0.1:9"
    tool.handler(ctx, args)
    tx = _Recorder()
    (completion,) = ctx.completions
    completion(tx)
    update, select, insert = tx.statements
    assert update == (
        "UPDATE orders SET state = 'refunded', refund_id = %s WHERE id = %s",
        ("re_1", "o-1"),
    )
    assert select[1] == ("o-1",)
    assert insert[0].startswith("INSERT INTO refund_commits") and insert[1][0] == "o-1"


def test_an_outage_names_each_worker_and_the_server_that_did_not_come_back() -> None:
    fine = Outage("fast", 0.0, 4.0, [11, 12], {11: 0.5, 12: 1.0}, http_back=0.7)
    stuck = Outage("immediate", 10.0, 14.0, [21, 22], {21: 2.0, 22: None}, http_back=None)
    assert outage_problems([fine], http=True) == []
    problems = outage_problems([fine, stuck], http=True)
    assert any("[22]" in p and "immediate" in p for p in problems)
    assert any("agentq serve accepted no enqueue" in p for p in problems)
    assert outage_problems([Outage("fast", error="pg_ctl failed")], http=False) == [
        "restart -m fast failed: pg_ctl failed"
    ]


def _refund(task_id: str, status: TaskStatus = TaskStatus.SUCCEEDED) -> TaskInfo:
    return TaskInfo.model_construct(task_id=task_id, tool="execute_refund", status=status)


def _graph_problems(
    tasks: dict[str, list[TaskInfo]], charges: dict[str, int], *, ended: bool = True
) -> tuple[GraphsReport, list[str]]:
    report, problems = GraphsReport(), []
    check_graph_refunds(report, "chaos-graph:lg00001", [[40.0], [12.5, 300.0]], ended, tasks,
                        Counter(charges), problems)  # fmt: skip
    return report, problems


def test_a_graphs_refund_charged_twice_or_enqueued_twice_or_missing_is_a_problem() -> None:
    calls = ["lg00001-t1-c0", "lg00001-t2-c0", "lg00001-t2-c1"]
    once = {order: [_refund(f"task-{i}")] for i, order in enumerate(calls)}
    report, problems = _graph_problems(once, {"task-0": 1, "task-1": 1, "task-2": 1})
    assert problems == [] and (report.refunds, report.charges) == (3, 3)

    report, problems = _graph_problems(once, {"task-0": 2, "task-1": 1, "task-2": 1})
    assert report.charged_twice == 1 and any("charged 2" in p for p in problems)

    # A node run again after a crash that enqueued apart from its step's commit.
    twice = once | {"lg00001-t1-c0": [_refund("task-0"), _refund("task-9")]}
    report, problems = _graph_problems(twice, {"task-0": 1, "task-9": 1, "task-1": 1, "task-2": 1})
    assert report.enqueued_twice == 1 and any("enqueued 2 times" in p for p in problems)

    # Ended, yet a call of its plan was never made (or never charged).
    report, problems = _graph_problems({"lg00001-t1-c0": once["lg00001-t1-c0"]}, {"task-0": 1})
    assert sum("ended, yet call" in p for p in problems) == 2
    report, problems = _graph_problems(once, {"task-0": 1, "task-1": 1})
    assert any("task-2 succeeded, charged 0" in p for p in problems)

    # Not ended (waiting on a human's no): the rejected refund must not be charged.
    rejected = once | {"lg00001-t2-c1": [_refund("task-2", TaskStatus.DEAD)]}
    assert _graph_problems(rejected, {"task-0": 1, "task-1": 1}, ended=False)[1] == []
    _, problems = _graph_problems(rejected, {"task-0": 1, "task-1": 1, "task-2": 1}, ended=False)
    assert any("dead, yet charged 1" in p for p in problems)
    # Dead because each delivery's worker was killed after the charge: the
    # effect applied once, and the task still reads as dead (accepted).
    crashed = TaskInfo.model_construct(
        task_id="task-2", tool="execute_refund", status=TaskStatus.DEAD,
        error="delivered 5 times without completing (max_attempts 5)")  # fmt: skip
    killed = once | {"lg00001-t2-c1": [crashed]}
    _, problems = _graph_problems(killed, {"task-0": 1, "task-1": 1, "task-2": 1}, ended=False)
    assert problems == []


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="the kernel's table of locks")
def test_the_writer_lock_holder_is_read_from_the_kernels_table_of_locks(tmp_path: Path) -> None:
    db = tmp_path / "chaos.db"
    lock = writer_lock_path(f"sqlite:///{db}")
    assert lock == f"{db}-agentq.lock" and writer_lock_path("postgresql://x/y") is None
    assert writer_lock_holders(str(lock)) == set()  # no file yet
    fd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert writer_lock_holders(str(lock)) == set()
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert writer_lock_holders(str(lock)) == {os.getpid()}
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert writer_lock_holders(str(lock)) == set()
    finally:
        os.close(fd)


def test_a_committed_turn_asked_again_is_a_problem_unless_its_asker_was_killed() -> None:
    thread = "chaos-graph:lg00001"
    first = Answered(thread, 1, 1, 200, pid=11, asked_at=1.0, at=1.1)
    again = Answered(thread, 1, 1, 200, pid=12, asked_at=2.0, at=2.1)
    turn2 = Answered(thread, 2, 2, 200, pid=12, asked_at=3.0, at=3.1)

    def check(answers: list[Answered], kills: list[tuple[float, int]]) -> tuple[Any, list[str]]:
        report, problems = GraphsReport(), []
        check_requests(report, {thread}, answers, kills, [], [], problems)
        return report, problems

    report, problems = check([first, turn2], [])
    assert problems == [] and report.model_answers == 2
    report, problems = check([first, again, turn2], [])
    assert report.asked_again == 1 and any("turn 1 asked again" in p for p in problems)
    report, problems = check([first, again, turn2], [(1.5, 11)])  # the first asker died
    assert problems == [] and report.repeats_explained == {"kill": 1}
    report, problems = check([first, again, turn2], [(2.5, 11)])  # killed only after the redo
    assert report.asked_again == 1
    late = Answered(thread, 1, 1, 200, pid=13, asked_at=4.0, at=4.1)
    report, problems = check([first, turn2, late], [(1.5, 11)])
    assert report.out_of_order == 1 and any("after turn 2" in p for p in problems)


def test_a_kill_of_the_askers_pid_counts_only_between_its_request_and_the_redo() -> None:
    # A long run forks more processes than there are pids: pid 11 answered, was
    # killed, and its pid went to another process killed minutes later. The
    # turn asked again is explained by the first kill, whatever came after.
    thread = "chaos-graph:lg00001"
    first = Answered(thread, 1, 1, 200, pid=11, asked_at=100.0, at=100.1)
    again = Answered(thread, 1, 1, 200, pid=12, asked_at=111.5, at=111.6)

    def check(kills: list[tuple[float, int]]) -> tuple[Any, list[str]]:
        report, problems = GraphsReport(), []
        check_requests(report, {thread}, [first, again], kills, [], [], problems)
        return report, problems

    report, problems = check([(100.12, 11), (400.0, 11)])  # killed, then its pid reused
    assert problems == [] and report.repeats_explained == {"kill": 1}
    report, problems = check([(50.0, 11), (400.0, 11)])  # an earlier holder of the pid only
    assert report.asked_again == 1 and any("its pid's kills: [50.0, 400.0]" in p for p in problems)
    report, problems = check([(99.5, 11)])  # killed as it sent: the model read it after
    assert problems == []
