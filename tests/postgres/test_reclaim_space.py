"""``reclaim_space`` on PostgreSQL gives back the space that pruned records left:
a plain ``VACUUM`` truncates the records table's empty pages, and the figure
reported, a step at a time, is what the table shrank by."""

from __future__ import annotations

import base64
import os
from typing import Any

import pytest

from agentq import Runtime
from agentq.backends import open_backend
from agentq.runtime.retention import RECLAIM_STEP

pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")


def _table_bytes(factory: Any, url: str) -> int:
    admin = factory.admin(url)
    try:
        (size,) = admin.execute("SELECT pg_total_relation_size('agentq.records')").fetchone()
    finally:
        admin.close()
    return int(size)


def _fill_then_delete(b: Any, count: int) -> None:
    # Text that does not compress, so each record takes its own TOAST pages.
    blob = base64.b64encode(os.urandom(6000)).decode()

    def fill(tx: Any) -> None:
        for i in range(count):
            tx.put_record("ledger", f"k{i:04d}", {"blob": blob, "i": i})

    b.transact(fill)
    b.transact(lambda tx: [tx.delete_record("ledger", f"k{i:04d}") for i in range(count)])


def test_deleted_records_space_goes_back_step_by_step(postgres_url_factory: Any) -> None:
    url = postgres_url_factory.create()
    b = open_backend(url)
    try:
        _fill_then_delete(b, 400)  # about 3 MiB
        before = _table_bytes(postgres_url_factory, url)
        steps = []
        while (freed := b.reclaim_space(RECLAIM_STEP)) == RECLAIM_STEP:
            steps.append(freed)
        steps.append(freed)
        given_back = sum(steps)
        assert len(steps) >= 3 and all(0 <= s <= RECLAIM_STEP for s in steps)
        assert given_back == before - _table_bytes(postgres_url_factory, url)
        assert given_back > 2 * RECLAIM_STEP
        assert b.reclaim_space(RECLAIM_STEP) == 0  # nothing left to give
    finally:
        b.close()


def test_a_periodic_prune_keeps_the_space_for_reuse(postgres_url_factory: Any) -> None:
    url = postgres_url_factory.create()
    b = open_backend(url)
    try:
        _fill_then_delete(b, 100)
        before = _table_bytes(postgres_url_factory, url)
        assert b.reclaim_space(RECLAIM_STEP, keep_free=0.25) == 0
        assert _table_bytes(postgres_url_factory, url) == before
    finally:
        b.close()


def test_runtime_reclaim_space_reports_the_whole_figure(postgres_url_factory: Any) -> None:
    url = postgres_url_factory.create()
    with Runtime(url) as rt:
        _fill_then_delete(rt.backend, 300)
        # VACUUM stops truncating when another session asks for a lock on the
        # table (the runtime's own readers may): a call can give back less than
        # is free, and the next gives back more. Each call must report exactly
        # what the table shrank by, and one call's figure may exceed a step.
        figures = []
        for _ in range(3):
            before = _table_bytes(postgres_url_factory, url)
            freed = rt.reclaim_space()
            assert freed == before - _table_bytes(postgres_url_factory, url)
            figures.append(freed)
            if freed > RECLAIM_STEP:
                break
        assert max(figures) > RECLAIM_STEP, figures
