"""Giving deleted rows' space back to the file system.

SQLite reuses the pages that deletes free (its freelist) for later writes, so a
database whose old records are deleted stops growing; but the file never
shrinks by itself. New databases are therefore created with
``auto_vacuum=INCREMENTAL`` (:meth:`Database.connect` sets it before the first
table exists), and :func:`reclaim` moves a bounded number of free pages to the
end of the file and truncates them, in one short write transaction, so it never
holds the write lock for long.

A database created before (``auto_vacuum=NONE``) keeps working, reusing its
free pages; :func:`vacuum` converts it once (a full ``VACUUM``, which rewrites
the whole file under the write lock: ``agentq prune --vacuum``, with the workers
stopped).
"""

from __future__ import annotations

import math
import sqlite3
from dataclasses import dataclass

from agentq.backends.sqlite.connection import Database

__all__ = ["INCREMENTAL", "Storage", "reclaim", "storage", "vacuum"]

#: ``PRAGMA auto_vacuum`` value of incremental auto-vacuum.
INCREMENTAL = 2
_MODES = {0: "none", 1: "full", INCREMENTAL: "incremental"}


@dataclass(frozen=True)
class Storage:
    """How the database file's pages are used."""

    page_size: int
    pages: int
    free_pages: int
    auto_vacuum: str

    @property
    def size(self) -> int:
        """Bytes of the database (the main file, without its WAL)."""
        return self.page_size * self.pages

    @property
    def free(self) -> int:
        """Bytes of free pages: reused by later writes, or given back by :func:`reclaim`."""
        return self.page_size * self.free_pages


def _pragma(conn: sqlite3.Connection, name: str) -> int:
    return int(conn.execute(f"PRAGMA {name}").fetchone()[0])


def _storage(conn: sqlite3.Connection) -> Storage:
    mode = _pragma(conn, "auto_vacuum")
    return Storage(
        page_size=_pragma(conn, "page_size"),
        pages=_pragma(conn, "page_count"),
        free_pages=_pragma(conn, "freelist_count"),
        auto_vacuum=_MODES.get(mode, str(mode)),
    )


def storage(db: Database) -> Storage:
    """The database's pages, free pages and auto-vacuum mode."""
    return db.read(_storage)


def reclaim(db: Database, max_bytes: int, keep_free: float = 0.0) -> int:
    """Give up to ``max_bytes`` of free pages back to the file system, keeping
    ``keep_free`` times the database's pages free for reuse; returns the bytes
    given back (0 unless the database uses incremental auto-vacuum)."""

    def body(conn: sqlite3.Connection) -> int:
        if _pragma(conn, "auto_vacuum") != INCREMENTAL:
            return 0
        # A steady stream of inserts and prunes reuses its free pages: giving them
        # back only for the file to grow again would be work for nothing.
        spare = _pragma(conn, "freelist_count") - math.ceil(keep_free * _pragma(conn, "page_count"))
        pages = min(spare, max_bytes // _pragma(conn, "page_size"))
        for _ in range(pages):
            # Python's driver steps a statement once, and one step of this pragma
            # frees one page: so one page per call, each reset by close().
            conn.execute("PRAGMA incremental_vacuum(1)").close()
        return pages * _pragma(conn, "page_size")

    if max_bytes <= 0:
        return 0
    # Not durable: a reclaim lost to a power failure leaves free pages, reused later.
    return db.write(body, durable=False)


def vacuum(db: Database) -> tuple[Storage, Storage]:
    """Rebuild the whole file with incremental auto-vacuum (converting a database
    created without it), then truncate the WAL; returns the storage before and
    after. Takes the write lock for as long as SQLite needs to copy the database."""

    def run(conn: sqlite3.Connection) -> tuple[Storage, Storage]:
        before = _storage(conn)
        # Outside any transaction (VACUUM cannot run in one): read() gives the
        # connection to this thread alone, with no open group.
        conn.execute(f"PRAGMA auto_vacuum={INCREMENTAL}")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        return before, _storage(conn)

    return db.read(run)
