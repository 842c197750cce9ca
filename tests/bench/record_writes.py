"""What the read side's indexes cost each record write, in SQLite's own SQL.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/record_writes.py --records 20000 --rounds 5

Each round fills a fresh database per variant, interleaved (a shared machine's
speed moves), with ``--records`` task records as the runtime writes them, in
transactions of ``--group`` (a worker's commit group), then claims them and
completes them as the worker's fast path does (``json_set`` of the changed
fields). Prints the median CPU microseconds per record of each step and variant,
and each variant's ratio to ``main`` per round. Variants:

* ``main``: the records table alone (today's schema before issue 38);
* ``indexed``: with the index of the tasks' rare statuses (the column the
  record writes set);
* ``tallied``: ``indexed`` and the console chart's per-minute tallies of
  finished tasks, added once per group by the completion
  (:mod:`agentq.backends.sqlite.tallies`: one upsert per minute, owner,
  outcome and run-time bucket the group has).
* ``owned``: ``tallied`` and the tasks' owner column, its two indexes and the
  owners' counting triggers (:mod:`agentq.backends.sqlite.owners`): the
  insert writes the owner; the claim and the completion leave it alone.
* ``tooled``: ``owned`` and the tasks' tool column and its index
  (:mod:`agentq.backends.sqlite.tool_index`), written by the insert alike.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from agentq.backends.sqlite import records, tallies
from agentq.backends.sqlite.indexes import ensure_rare_status
from agentq.backends.sqlite.owners import ensure_owner
from agentq.backends.sqlite.tool_index import ensure_tool
from agentq.backends.tallies import Tally

MAIN_SCHEMA = records.SCHEMA.replace("    rare_status TEXT,\n", "")

RECORD = {
    "task_id": "", "tool": "noop", "kind": "action", "queue": "bench", "status": "queued",
    "attempt": 1, "failures": 0, "throttles": 0, "deliveries": 0, "ordering_key": None,
    "approval_id": None, "idempotency_key": None, "trace": {},
    "created_at": "2026-12-06T13:51:57.384394+00:00",
    "updated_at": "2026-12-06T13:51:57.384394+00:00", "next_attempt_at": None,
    "created_by": "local", "args": {"n": 1, "pad": ""},
}  # fmt: skip
CLAIM = ("UPDATE agentq_records SET v = json_set(v, '$.status', json(?), '$.deliveries', "
         "json(?), '$.started_at', json(?), '$.updated_at', json(?)) WHERE tbl = ? AND k = ?")
COMPLETE = ("UPDATE agentq_records SET v = json_set(v, '$.status', json(?), '$.result', "
            "json(?), '$.finished_at', json(?), '$.updated_at', json(?)) "
            "WHERE tbl = ? AND k = ?")  # fmt: skip
STAMP = json.dumps("2026-12-06T13:52:00.000000+00:00")


def run(
    path: Path, indexed: bool, n: int, group: int, tally: bool, owned: bool = False,
    tooled: bool = False,
) -> dict[str, float]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(records.SCHEMA if indexed else MAIN_SCHEMA)
    if tally:
        conn.executescript(tallies.SCHEMA)
    if indexed:
        ensure_rare_status(conn)
    if owned:
        ensure_owner(conn)
    if tooled:
        ensure_tool(conn)
    rare = ", rare_status = ?" if indexed else ""
    claim_sql = CLAIM.replace(" WHERE", f"{rare} WHERE")
    complete_sql = COMPLETE.replace(" WHERE", f"{rare} WHERE")
    extra: tuple[None, ...] = (None,) if indexed else ()
    keys = [f"tsk_{i:032x}" for i in range(n)]
    out: dict[str, float] = {}

    def timed(name: str, step: Callable[[list[str]], None]) -> None:
        start = time.process_time()  # CPU: a shared machine's load moves wall time
        for first in range(0, n, group):
            conn.execute("BEGIN IMMEDIATE")
            step(keys[first : first + group])
            conn.execute("COMMIT")
        out[name] = (time.process_time() - start) / n * 1e6

    def insert(chunk: list[str]) -> None:
        for k in chunk:
            text = json.dumps({**RECORD, "task_id": k}, separators=(",", ":"))
            if tooled:
                conn.execute("INSERT INTO agentq_records (tbl, k, v, rare_status, owner, tool) "
                             "VALUES ('tasks', ?, ?, ?, ?, ?)",
                             (k, text, None, "local", "noop"))  # fmt: skip
            elif owned:
                conn.execute("INSERT INTO agentq_records (tbl, k, v, rare_status, owner) "
                             "VALUES ('tasks', ?, ?, ?, ?)", (k, text, None, "local"))  # fmt: skip
            elif indexed:
                conn.execute("INSERT INTO agentq_records (tbl, k, v, rare_status) "
                             "VALUES ('tasks', ?, ?, ?)", (k, text, None))  # fmt: skip
            else:
                conn.execute("INSERT INTO agentq_records (tbl, k, v) VALUES ('tasks', ?, ?)",
                             (k, text))  # fmt: skip

    def claim(chunk: list[str]) -> None:
        conn.executemany(claim_sql, [('"running"', "1", STAMP, STAMP, *extra, "tasks", k)
                                     for k in chunk])  # fmt: skip

    def complete(chunk: list[str]) -> None:
        conn.executemany(complete_sql, [('"succeeded"', '{"started":1.0}', STAMP, STAMP, *extra,
                                         "tasks", k) for k in chunk])  # fmt: skip
        if tally:  # a group's run times fall in a bucket or two
            half = len(chunk) // 2
            tallies.add(conn, [Tally(29419912, "local", "succeeded", 20, half),
                               Tally(29419912, "local", "succeeded", 21, len(chunk) - half)])

    timed("insert", insert)
    timed("claim", claim)
    timed("complete", complete)
    conn.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--group", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    variants = {"main": (False, False, False, False), "indexed": (True, False, False, False),
                "tallied": (True, True, False, False), "owned": (True, True, True, False),
                "tooled": (True, True, True, True)}  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="agentq-record-writes-"))
    got: dict[str, dict[str, list[float]]] = {v: {} for v in variants}
    for r in range(args.rounds):
        for name, (indexed, tally, owned, tooled) in variants.items():
            path = root / f"{name}-{r}.db"
            measured = run(path, indexed, args.records, args.group, tally, owned, tooled)
            for step, us in measured.items():
                got[name].setdefault(step, []).append(us)
            path.unlink()
        print(f"round {r + 1}: " + ", ".join(
            f"{v} {s} {got[v][s][-1]:.1f}" for v in variants for s in got[v]), flush=True)
    root.rmdir()
    for name in variants:
        for step, values in got[name].items():
            ratios = [a / b for a, b in zip(values, got["main"][step], strict=True)]
            print(f"{name:8} {step:8} median {statistics.median(values):6.1f} us "
                  f"(min {min(values):.1f} max {max(values):.1f}); "
                  f"vs main median x{statistics.median(ratios):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
