"""Issue 38 item 1 on SQLite: a listing of one agent's durable runs (``GET
/v1/runs?agent=...``, the console's runs page filtered on an agent, ``agentq
runs --agent``: :meth:`Runtime.run_page` with ``agent``) reads that agent's runs
through the index of the ``tool`` column, which holds a run's agent
(``agentq.backends.tool_column``), not every run. Before, the filter was
checked in each run's JSON (a run's record holds its whole conversation): a
listing of a rare agent's runs, or of an agent with none, read the whole runs
table, which these tests saw on the code before (the work grew with the other
agent's runs).

Each listing runs at two sizes of the table (the same runs of ``helper``
beside 100 and 2,000 runs of ``triage``), and the work SQLite does for it (its
virtual machine's steps, which count the rows a query reads and drops) must
not grow."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq import Runtime
from agentq.backends import Backend, open_backend
from tests.record_counter import SQLiteSteps

NOISE_SMALL, NOISE_LARGE = 100, 2000
_TALK = [{"role": "user", "content": "x" * 300}, {"role": "assistant", "content": "y" * 300}]


def _run(key: str, agent: str, status: str = "succeeded", owner: str = "ann") -> dict[str, Any]:
    return {"run_id": key, "agent": agent, "owner": owner, "input": "hi", "status": status,
            "turn": 1, "messages": _TALK, "created_at": "2026-01-01T00:00:00+00:00",
            "updated_at": "2026-01-01T00:00:00+00:00"}  # fmt: skip


def _table(b: Backend, noise: int) -> None:
    """60 runs of helper's (the oldest), then ``noise`` of triage's (bob's and
    ann's), then three of triage's that carl started, then one newer run of
    helper's."""
    b.transact(lambda tx: [
        tx.put_record("runs", f"r{i:06d}", _run(f"r{i:06d}", "helper")) for i in range(60)
    ] + [
        tx.put_record("runs", f"r{i:06d}", _run(f"r{i:06d}", "triage", owner="bob" if i % 3
                                                else "ann"))
        for i in range(60, 60 + noise)
    ] + [
        tx.put_record("runs", f"r99999{i}", _run(f"r99999{i}", "triage", owner="carl"))
        for i in range(3)
    ] + [tx.put_record("runs", "r999999", _run("r999999", "helper"))])  # fmt: skip


# fmt: off
#: What Runtime.run_page is asked, and how many runs it lists.
LISTINGS: dict[str, tuple[dict[str, Any], int]] = {
    "an agent's newest page": ({"agent": "helper", "limit": 50}, 50),
    "an agent's page after a cursor": ({"agent": "helper", "after": "r000050",
                                        "limit": 10}, 10),
    "an agent's succeeded runs": ({"status": "succeeded", "agent": "helper", "limit": 10}, 10),
    "an agent's failed runs": ({"status": "failed", "agent": "helper", "limit": 10}, 0),
    "an agent with no runs": ({"agent": "void", "limit": 100}, 0),
}
# fmt: on


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Runtime, Runtime]]:
    """Two runs tables alike but for the other agent's runs: 100 and 2,000."""
    folder = tmp_path_factory.mktemp("agents")
    small, large = (Runtime(f"sqlite:///{folder / name}") for name in ("s.db", "l.db"))
    for rt, noise in ((small, NOISE_SMALL), (large, NOISE_LARGE)):
        _table(rt.backend, noise)
    yield small, large
    small.close()
    large.close()


def _steps(rt: Runtime, options: dict[str, Any], expected: int) -> int:
    with SQLiteSteps(rt.backend) as counted:
        runs = rt.run_page(**options).runs
    assert len(runs) == expected, runs
    assert all(r.agent == "helper" for r in runs)
    return counted.steps


@pytest.mark.parametrize("name", list(LISTINGS))
def test_an_agents_runs_listing_reads_its_page(sizes: tuple[Runtime, Runtime], name: str) -> None:
    small, large = (_steps(rt, *LISTINGS[name]) for rt in sizes)
    # 20x the other agent's runs: the same work, give or take a level of the B-tree.
    assert large <= small + 2, (name, small, large)


def test_an_owners_listing_of_an_agents_runs_still_walks_the_owners(
    sizes: tuple[Runtime, Runtime],
) -> None:
    """A principal's own runs of an agent (``GET /v1/runs?agent=...`` as an
    agent): the owner's index, narrower for a principal, the agent checked on
    what it reads. Carl's three runs of triage's: the walk of triage's runs in
    the tool index would grow with the others' runs of triage's."""

    def steps(rt: Runtime) -> int:
        with SQLiteSteps(rt.backend) as counted:
            runs = rt.run_page(agent="triage", owner="carl", limit=10).runs
        assert [r.run_id for r in runs] == ["r999992", "r999991", "r999990"]
        return counted.steps

    small, large = (steps(rt) for rt in sizes)
    assert large <= small + 2, (small, large)


def test_a_database_whose_runs_came_before_their_agents_gets_them_once(tmp_path: Path) -> None:
    """A database of the previous release (the tool column, but runs stored
    without their agents in it) gets its runs' agents when first opened, once,
    with two backends opening it at once."""
    path = tmp_path / "old.db"
    made = open_backend(f"sqlite:///{path}")
    made.transact(lambda tx: [
        tx.put_record("runs", "r1", {"status": "succeeded", "agent": "helper"}),
        tx.put_record("runs", "r2", {"status": "failed", "agent": "triage", "tool": "helper"}),
        tx.put_record("runs", "r3", {"status": "succeeded", "agent": 3}),
        tx.put_record("tasks", "t1", {"status": "succeeded", "tool": "refund", "agent": "x"}),
    ])  # fmt: skip
    made.close()
    with sqlite3.connect(path) as conn:  # as the previous release left it
        conn.execute("UPDATE agentq_records SET tool = NULL WHERE tbl = 'runs'")
        conn.execute("INSERT INTO agentq_records (tbl, k, v) VALUES ('runs', 'r0', "
                     """'{"agent":"helper","x":"\\u0000"}')""")  # fmt: skip
        conn.execute("DELETE FROM agentq_records WHERE tbl = 'agentq#marks' AND k = 'runs_agent'")
    first, second = open_backend(f"sqlite:///{path}"), open_backend(f"sqlite:///{path}")
    try:
        for b in (first, second):
            listed = b.list_records("runs", where={"agent": ["helper"]})
            assert [k for k, _ in listed] == ["r0", "r1"]
        first.transact(lambda tx: tx.put_record("runs", "r4", {"agent": "helper"}))
        assert [k for k, _ in second.list_records("runs", where={"agent": ["helper"]})] == [
            "r0", "r1", "r4"]  # fmt: skip
    finally:
        first.close()
        second.close()
    with sqlite3.connect(path) as conn:
        named = conn.execute("SELECT tbl, k, tool FROM agentq_records WHERE tool IS NOT NULL "
                             "ORDER BY tbl, k").fetchall()  # fmt: skip
        marks = conn.execute("SELECT k FROM agentq_records WHERE tbl = 'agentq#marks' "
                             "AND k = 'runs_agent'").fetchall()  # fmt: skip
    assert named == [("runs", "r0", "helper"), ("runs", "r1", "helper"), ("runs", "r2", "triage"),
                     ("runs", "r4", "helper"), ("tasks", "t1", "refund")]  # fmt: skip
    assert marks == [("runs_agent",)]
