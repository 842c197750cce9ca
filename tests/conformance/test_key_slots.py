"""Per-key concurrency slots (agentq.keylimits) through the backend contract: the
same record operations on every backend, so the limit holds on Spanner as on
SQLite. Two backend objects on one database stand for two workers."""

from __future__ import annotations

import pytest

from agentq import keylimits
from agentq.backends import Transaction

from .conftest import Harness

KEY = "execute_refund:m-1"


def acquire(tx: Transaction, task_id: str, attempt: int = 1) -> object:
    return keylimits.acquire(tx, KEY, task_id, attempt, 2)


@pytest.mark.needs("state", "fake_time", "threads")
def test_two_workers_share_the_slots_of_a_key(harness: Harness) -> None:
    a, b = harness.backend, harness.reopen()
    assert a.transact(lambda tx: acquire(tx, "t1")) is None
    assert b.transact(lambda tx: acquire(tx, "t2")) is None
    later = b.transact(lambda tx: acquire(tx, "t3"))
    assert later is not None and later > harness.clock.now()  # full: t3 waits
    assert a.transact(lambda tx: keylimits.holders(tx, KEY)) == {"t1": 1, "t2": 1}
    # t1 finishes on worker a: a slot is free and t3 is the first waiting task.
    assert a.transact(lambda tx: keylimits.release(tx, KEY, "t1", 1)) is True
    assert b.transact(lambda tx: keylimits.take_waiter(tx, KEY)) == "t3"
    b.transact(lambda tx: keylimits.hand_over(tx, KEY, "t3", 2))
    assert a.transact(lambda tx: acquire(tx, "t4")) is not None  # t3 has it, not t4
    assert a.transact(lambda tx: keylimits.holders(tx, KEY)) == {"t2": 1, "t3": 2}


@pytest.mark.needs("state", "fake_time")
def test_a_slot_nobody_extends_frees_itself_after_one_lease(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: acquire(tx, "t1"))
    b.transact(lambda tx: acquire(tx, "t2"))
    harness.clock.advance(keylimits.SLOT_SECONDS - 1)
    assert b.transact(lambda tx: keylimits.renew(tx, [(KEY, "t1", 1)])) == []  # t1 lives on
    assert b.transact(lambda tx: acquire(tx, "t3")) is not None
    harness.clock.advance(2)  # t2's worker died: its slot has lapsed, t1's has not
    assert b.transact(lambda tx: acquire(tx, "t3")) is None
    assert b.transact(lambda tx: keylimits.holders(tx, KEY)) == {"t1": 1, "t3": 1}


@pytest.mark.needs("state", "fake_time")
def test_releasing_a_slot_one_does_not_hold_changes_nothing(harness: Harness) -> None:
    b = harness.backend
    b.transact(lambda tx: acquire(tx, "t1", attempt=3))
    assert b.transact(lambda tx: keylimits.release(tx, KEY, "t1", 2)) is False  # older attempt
    assert b.transact(lambda tx: keylimits.release(tx, KEY, "t9", 1)) is False
    assert b.transact(lambda tx: keylimits.holders(tx, KEY)) == {"t1": 3}
    assert b.transact(lambda tx: keylimits.release(tx, KEY, "t1", 3)) is False  # none waiting
    assert b.transact(lambda tx: tx.get_record(keylimits.KEY_SLOTS, KEY)) is None
