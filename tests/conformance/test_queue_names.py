"""Queue names on every backend: unique regardless of case (Spanner identifiers
are case-insensitive, and so are SQLite's table names), and never a table the
application already has."""

from __future__ import annotations

import pytest

from agentq.backends import Transaction
from agentq.errors import ConfigError, QueueNotFound
from agentq.spec import QueueSpec

from .conftest import Harness


@pytest.mark.needs()
@pytest.mark.parametrize("second", ["Tasks", "TASKS", "tAsKs"])
def test_names_differing_only_in_case_are_one_queue_and_refused(
    harness: Harness, second: str
) -> None:
    b = harness.backend
    b.create_queue(QueueSpec.simple("tasks"))
    with pytest.raises(ConfigError, match=rf"{second!r}.*'tasks'.*case"):
        b.create_queue(QueueSpec.simple(second))
    assert b.queues() == ["tasks"]
    # Nothing sent to 'tasks' can be reached under the other spelling.
    with pytest.raises(QueueNotFound):
        b.transact(lambda tx: tx.send(second, "1", b"x"))
    with pytest.raises(QueueNotFound):
        b.stream(second)


@pytest.mark.needs("state")
def test_a_message_sent_to_one_queue_is_never_received_from_another_spelling(
    harness: Harness,
) -> None:
    b = harness.backend
    b.create_queue(QueueSpec.simple("tasks"))
    with pytest.raises(ConfigError):
        b.create_queue(QueueSpec.simple("Tasks"))
    b.transact(lambda tx: tx.send("tasks", "1", b"x"))
    with pytest.raises(QueueNotFound):
        list(b.stream("Tasks"))
    assert [m.key for batch in b.stream("tasks") for m in batch] == [("1",)]


@pytest.mark.needs("state", "sqlite_sql")
@pytest.mark.parametrize("name", ["orders", "Orders"])
def test_a_queue_named_like_an_application_table_is_refused_naming_it(
    harness: Harness, name: str
) -> None:
    b = harness.backend

    def make_table(tx: Transaction) -> None:
        tx.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, state TEXT)")
        tx.execute("INSERT INTO orders VALUES (1, 'new')")

    b.transact(make_table)
    with pytest.raises(ConfigError, match=r"table 'orders'.*not an agentq queue"):
        b.create_queue(QueueSpec.simple(name))
    assert b.queues() == []
    # The application's table is untouched.
    assert b.transact(lambda tx: tx.execute("SELECT id, state FROM orders")) == [(1, "new")]
