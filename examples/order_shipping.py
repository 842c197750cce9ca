"""Confirm an order and request its shipment in one transaction (the queue documents' first case).

Writing the database and calling the warehouse as two steps (a "dual write")
fails in two ways:

* the state is written but the request is lost (the process dies between the
  two steps): the order says "confirmed" and is never shipped;
* the request is sent but the state is lost (the database write fails after the
  call): the warehouse ships an order that does not exist.

With agentq the order's state and the shipping task commit together or not at
all; a worker sends the request after the commit, with the task id as the
warehouse's Idempotency-Key. Both failures are replayed here against a
warehouse API on loopback and a SQLite file, once each way.
"""

# expect: naive, crash after the commit: order o-1 confirmed, shipments requested 0
# expect: naive, database write fails after the call: order o-2 missing, shipments requested 1
# expect: agentq, crash after the commit: order o-3 confirmed, shipped after restart: 1 request
# expect: agentq, decision fails: order o-4 missing, tasks 0, shipments requested 0

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import httpx

from agentq import Decision, FakeClock, Runtime
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]
ITEMS = {"address": "1 Main St, Springfield", "items": ["book"]}


class Crash(Exception):
    """Stands for the process dying at this point."""


class WriteFailed(Exception):
    """Stands for the decision's database write failing."""


def order_state(db: Path, order: str) -> str:
    with sqlite3.connect(db) as conn:
        row = conn.execute("SELECT state FROM orders WHERE id = ?", (order,)).fetchone()
    return row[0] if row else "missing"


def naive_confirm(db: Path, url: str, order: str, *, fail: str) -> None:
    """The two-step way: commit the order, then call the warehouse (or the reverse)."""
    with sqlite3.connect(db) as conn:
        if fail == "after_commit":
            conn.execute("INSERT INTO orders VALUES (?, 'confirmed')", (order,))
            conn.commit()
            raise Crash  # the process dies before the request is sent
        httpx.post(f"{url}/shipments", json={"order_id": order, **ITEMS},
                   headers={"Idempotency-Key": order})  # fmt: skip
        conn.execute("INSERT INTO orders VALUES (?, 'confirmed')", (order,))
        raise sqlite3.OperationalError("disk I/O error")  # the write is rolled back


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, LoopbackAPI() as api:
        db = Path(tmp) / "shop.db"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT)")

        for order, fail in (("o-1", "after_commit"), ("o-2", "after_call")):
            before = api.requests("/shipments")
            try:
                naive_confirm(db, api.url, order, fail=fail)
            except (Crash, sqlite3.OperationalError):
                pass
            sent = api.requests("/shipments") - before
            what = "crash after the commit" if fail == "after_commit" else (
                "database write fails after the call")  # fmt: skip
            print(f"naive, {what}: order {order} {order_state(db, order)}, "
                  f"shipments requested {sent}")  # fmt: skip

        def runtime() -> Runtime:
            return Runtime(f"sqlite:///{db}", tools=ROOT / "tools", policies=ROOT / "policies",
                           clock=FakeClock(), settings={"shipping_url": api.url})  # fmt: skip

        def confirm(order: str, *, fail: bool) -> Decision:
            def decide(tx: Decision) -> None:
                tx.execute("INSERT INTO orders VALUES (?, 'confirmed')", (order,))
                tx.enqueue("request_shipping", {"order_id": order, **ITEMS})
                if fail:
                    raise WriteFailed("the order's write failed")  # nothing commits

            return decide

        before = api.requests("/shipments")
        rt = runtime()
        rt.transact(confirm("o-3", fail=False))
        rt.close()  # the process dies right after the commit: nothing was sent yet
        rt = runtime()  # a restarted worker finds the task and sends it
        rt.worker().drain()
        sent = api.requests("/shipments") - before
        print(f"agentq, crash after the commit: order o-3 {order_state(db, 'o-3')}, "
              f"shipped after restart: {sent} request")  # fmt: skip

        before = api.requests("/shipments")
        try:
            rt.transact(confirm("o-4", fail=True))
        except WriteFailed:
            pass
        rt.worker().drain()
        tasks = [t for t in rt.tasks(tool="request_shipping") if t.args["order_id"] == "o-4"]
        sent = api.requests("/shipments") - before
        print(f"agentq, decision fails: order o-4 {order_state(db, 'o-4')}, "
              f"tasks {len(tasks)}, shipments requested {sent}")  # fmt: skip
        rt.close()


if __name__ == "__main__":
    main()
