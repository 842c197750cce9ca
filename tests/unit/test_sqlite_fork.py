"""A process forked from one that uses agentq draws its own random values: the
lease sequence a new SQLite message starts at must not repeat the parent's
(a stale lease token could then match a message that reuses a row id), nor may
its doorbell rings (a ring writing the value already in a slot wakes nobody).

Each fork happens in a fresh interpreter holding only the module under test:
forking the test worker itself (gRPC, psycopg and browser threads alive) can
kill the child before it reports, which would test the threads, not agentq."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")

_LEASE_SEQUENCES = """
import os
from agentq.backends.sqlite import transaction

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
    child = pipe.read()
_, status = os.waitpid(pid, 0)
parent = " ".join(str(transaction._random.getrandbits(62)) for _ in range(3))
print(child, "|", parent, "|", status)
"""

_DOORBELL = """
import os, sys
from agentq.backends.sqlite.doorbell import Doorbell

bell = Doorbell.open(sys.argv[1], 0o600)
assert bell is not None
bell.ring({"work"})  # the parent has rung before the fork
before_child = bell.read()
pid = os.fork()
if pid == 0:  # the child: one ring, then leave at once
    try:
        bell.ring({"work"})
    finally:
        os._exit(0)
_, status = os.waitpid(pid, 0)
after_child = bell.read()
child_changed = Doorbell.changed(before_child, after_child, {"work"}) == {"work"}
bell.ring({"work"})  # the parent's next ring must change the slot again
parent_changed = Doorbell.changed(after_child, bell.read(), {"work"}) == {"work"}
bell.close()
print(status, child_changed, parent_changed)
"""


def _run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_forked_child_starts_other_lease_sequences_than_its_parent() -> None:
    child, parent, status = (part.split() for part in _run(_LEASE_SEQUENCES).split("|"))
    assert status == ["0"]
    assert len(child) == 3 and len(parent) == 3
    assert child != parent


def test_a_forked_child_rings_other_values_than_its_parent(tmp_path: Path) -> None:
    status, child_changed, parent_changed = _run(_DOORBELL, str(tmp_path / "x.db")).split()
    assert status == "0"
    assert child_changed == "True", "the child's ring left the slot as the parent's"
    assert parent_changed == "True", "the parent's next ring left the slot unchanged"
