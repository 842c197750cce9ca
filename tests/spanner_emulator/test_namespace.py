"""``namespace=PREFIX``: several projects (or test runs) in one database.

Spanner has no named schemas for queues, so agentq's queues and its records
table take the namespace as a prefix of their names in the database; agentq's
API keeps the names the project gave. The live suite (``tests/spanner_live``)
gives each test its own namespace in one database per run.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentq import FakeClock, open_backend
from agentq.errors import ConfigError
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

from .fixtures import EmulatorDatabase

INTS = QueueSpec("Tasks", (KeyColumn("n", KeyType.INT),))
STRS = QueueSpec("Tasks", (KeyColumn("name", KeyType.STR),), payload=PayloadType.JSON)


@pytest.mark.parametrize("postgres", [False, True], ids=["googlesql", "postgresql"])
def test_two_namespaces_share_a_database_without_seeing_each_other(
    emulator_database_factory: Callable[[bool], EmulatorDatabase], postgres: bool
) -> None:
    db = emulator_database_factory(postgres)
    clock = FakeClock()
    db.use_clock(clock)
    one = open_backend(db.url + "&namespace=one_", clock=clock)
    two = open_backend(db.url + "&namespace=two_", clock=clock)
    try:
        one.create_queue(INTS)
        two.create_queue(STRS)  # the same name, another shape: another queue
        one.transact(lambda tx: (tx.send("Tasks", 1, b"a"), tx.put_record("t", "k", {"v": 1})))
        two.transact(lambda tx: tx.send("Tasks", "x", {"v": 2}))
        [[m1]] = list(one.stream("Tasks", 5, 0))
        [[m2]] = list(two.stream("Tasks", 5, 0))
        assert (m1.queue, m1.key, m2.queue, m2.key) == ("Tasks", (1,), "Tasks", ("x",))
        assert one.get_record("t", "k") == {"v": 1} and two.get_record("t", "k") is None
        assert one.queues() == ["Tasks"] and two.queues() == ["Tasks"]
        assert one.stats("Tasks").depth == 1 and two.stats("Tasks").depth == 1
        # In the database: prefixed names.
        sql = (
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema IN ('', 'public')"
        )
        with db.client_database().snapshot() as snap:  # type: ignore[attr-defined]
            names = {str(r[0]).lower() for r in snap.execute_sql(sql)}
        assert {"one_tasks", "two_tasks", "one_agentq_records", "two_agentq_records"} <= names
    finally:
        one.close()
        two.close()


def test_a_namespace_is_a_lower_case_name_prefix() -> None:
    base = "spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:1&namespace="
    for bad in ("Upper_", "1x", "a-b", "x" * 41):
        with pytest.raises(ConfigError, match="namespace"):
            open_backend(base + bad)
