"""``CREATE QUEUE IF NOT EXISTS`` beside a queue of another shape is refused, naming
both shapes (issue 29, defect 5): the statement leaves the existing queue as it
is, and the catalog used to record the new spec anyway, so sends failed later.
"""

from __future__ import annotations

import pytest

from agentq import open_backend
from agentq.errors import ConfigError
from agentq.spec import KeyColumn, KeyType, PayloadType, QueueSpec

from .fixtures import EmulatorDatabase

FIRST = QueueSpec("Tasks", (KeyColumn("user_id", KeyType.INT), KeyColumn("msg_id", KeyType.STR)))
OTHER = QueueSpec(
    "Tasks",
    (KeyColumn("user_id", KeyType.STR), KeyColumn("msg_id", KeyType.STR)),
    payload=PayloadType.JSON,
)


def test_init_beside_a_queue_of_another_shape_names_both(
    emulator_database: EmulatorDatabase,
) -> None:
    db = emulator_database
    first = open_backend(db.url)
    try:
        first.create_queue(FIRST)  # ddl=auto: applied here
    finally:
        first.close()
    second = open_backend(db.url)
    try:
        with pytest.raises(ConfigError) as info:
            second.create_queue(OTHER)  # ddl=auto: CREATE QUEUE IF NOT EXISTS, a no-op
        text = str(info.value)
        int_, str_ = ("bigint", "character varying") if db.postgres else ("INT64", "STRING(MAX)")
        assert f"key (user_id {int_}, msg_id {str_}), payload" in text  # the database's
        assert f"key (user_id {str_}, msg_id {str_}), payload" in text  # the spec's
        # The catalog still says what the database has.
        fresh = open_backend(db.url)
        try:
            assert fresh.queue_spec("Tasks") == FIRST
            fresh.check_queue_shapes(["Tasks"])  # type: ignore[attr-defined]  # it matches
        finally:
            fresh.close()
        # A worker's start-up check refuses it too.
        with pytest.raises(ConfigError, match="another shape"):
            second.check_queue_shapes(["Tasks"])  # type: ignore[attr-defined]
    finally:
        second.close()
