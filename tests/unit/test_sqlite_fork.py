"""A process forked from one that uses agentq draws its own random values: the
lease sequence a new SQLite message starts at must not repeat the parent's
(a stale lease token could then match a message that reuses a row id), nor may
its doorbell rings (a ring writing the value already in a slot wakes nobody)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentq.backends.sqlite import transaction
from agentq.backends.sqlite.doorbell import Doorbell

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")


def test_a_forked_child_starts_other_lease_sequences_than_its_parent() -> None:
    transaction._random.getrandbits(62)  # the parent has drawn before the fork
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next draws and leave at once
        try:
            draws = [transaction._random.getrandbits(62) for _ in range(3)]
            os.write(write_end, " ".join(map(str, draws)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        child = [int(v) for v in pipe.read().split()]
    os.waitpid(pid, 0)
    parent = [transaction._random.getrandbits(62) for _ in range(3)]
    assert len(child) == 3 and child != parent


def test_a_forked_child_rings_other_values_than_its_parent(tmp_path: Path) -> None:
    bell = Doorbell.open(str(tmp_path / "x.db"), 0o600)
    assert bell is not None
    try:
        bell.ring({"work"})  # the parent has rung before the fork
        before_child = bell.read()
        pid = os.fork()
        if pid == 0:  # the child: one ring, then leave at once
            try:
                bell.ring({"work"})
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        after_child = bell.read()
        assert Doorbell.changed(before_child, after_child, {"work"}) == {"work"}
        bell.ring({"work"})  # the parent's next ring must change the slot again
        assert Doorbell.changed(after_child, bell.read(), {"work"}) == {"work"}
    finally:
        bell.close()
