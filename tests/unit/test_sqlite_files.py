"""The SQLite backend's files (the database, its -wal and -shm, the writer
lock and the doorbell) hold the whole ledger: they are created readable by their owner only,
whatever the umask, unless the URL relaxes it."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq.backends import open_backend
from agentq.errors import ConfigError
from agentq.spec import QueueSpec

SUFFIXES = ("", "-wal", "-shm", "-agentq.lock", "-bell")


@pytest.fixture(params=[0o000, 0o022], ids=["umask-000", "umask-022"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _modes_while_open(db: Path, query: str = "") -> dict[str, int]:
    backend = open_backend(f"sqlite:///{db}{query}")
    try:
        backend.create_queue(QueueSpec.simple("Jobs"))
        backend.transact(lambda tx: tx.send("Jobs", "1", b"x"))
        # All of them exist while the backend is open (the WAL goes away on close).
        return {s: stat.S_IMODE(os.stat(f"{db}{s}").st_mode) for s in SUFFIXES}
    finally:
        backend.close()


def test_database_wal_shm_and_lock_files_are_created_owner_only(tmp_path: Path, umask: int) -> None:
    modes = _modes_while_open(tmp_path / "ledger.db")
    assert modes == dict.fromkeys(SUFFIXES, 0o600)


@pytest.mark.parametrize("spelling", ["0640", "640", "0o640"])
def test_the_url_may_relax_the_mode(tmp_path: Path, umask: int, spelling: str) -> None:
    modes = _modes_while_open(tmp_path / "shared.db", f"?file_mode={spelling}")
    assert modes == dict.fromkeys(SUFFIXES, 0o640)


def test_an_existing_database_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    open_backend(f"sqlite:///{db}").close()
    db.chmod(0o640)  # an operator chose to share it with a group
    assert _modes_while_open(db)[""] == 0o640


@pytest.mark.parametrize("value", ["0700", "0400", "0200", "rw", "0666x", "01640", "0o9", ""])
def test_an_invalid_file_mode_is_a_clear_error(tmp_path: Path, value: str) -> None:
    db = tmp_path / "x.db"
    with pytest.raises(ConfigError, match="file_mode"):
        open_backend(f"sqlite:///{db}?file_mode={value}")
    assert not db.exists()  # refused before anything was created


def test_gitignore_covers_every_file_agentq_makes_beside_the_database(tmp_path: Path) -> None:
    """Issue 28, item 4: ``x.db-bell`` and ``x.db-agentq.lock`` showed up in
    ``git status`` of a project that ran the README's snippets."""
    import fnmatch

    from agentq import Runtime

    root = Path(__file__).resolve().parents[2]
    lines = [line.strip() for line in (root / ".gitignore").read_text().splitlines()]
    patterns = [p for p in lines if p and not p.startswith("#") and "/" not in p]
    db = tmp_path / "agentq.db"
    with Runtime(f"sqlite:///{db}", tools=root / "tools", policies=root / "policies") as rt:
        rt.enqueue_action("execute_refund", {"order_id": "o-1", "amount": 5})
        made = sorted(p.name for p in tmp_path.iterdir())
    assert "agentq.db-bell" in made and "agentq.db-agentq.lock" in made, made
    uncovered = [n for n in made if not any(fnmatch.fnmatch(n, p) for p in patterns)]
    assert uncovered == []
