"""Each private part of google-cloud-spanner the backend relies on, checked against
the installed library; a release that moves one fails with a message naming it
(issue 29, defect 6), not with a silent fallback.

Each hook has two tests: it is there in the installed library, and a library
without it is refused by name.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from google.cloud.spanner_v1 import streamed, transaction
from google.cloud.spanner_v1.database import Database
from google.cloud.spanner_v1.services.spanner import SpannerClient
from google.cloud.spanner_v1.session import Session

from agentq.backends.spanner import hooks
from agentq.backends.spanner.connect import bound_deadlines

ROOT = Path(__file__).resolve().parents[2]


def test_the_dependency_is_bounded_below_the_next_major_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (spec,) = project["optional-dependencies"]["spanner"]
    assert spec == "google-cloud-spanner>=3.71,<4"


def _transport() -> Any:
    from google.auth.credentials import AnonymousCredentials

    return SpannerClient(credentials=AnonymousCredentials()).transport


def test_wrapped_methods_are_there() -> None:
    transport = _transport()
    wrapped = hooks.check_wrapped_methods(transport)
    assert transport.execute_streaming_sql in wrapped


def test_a_transport_without_wrapped_methods_is_refused_by_name() -> None:
    class Moved:
        transport = object()

    with pytest.raises(hooks.ClientLayoutChanged, match=r"transport\._wrapped_methods"):
        bound_deadlines(Moved(), 5.0)


def test_commit_is_replaceable_on_a_transaction() -> None:
    hooks.check_commit_replaceable()


def test_a_run_in_transaction_that_no_longer_calls_txn_commit_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_in_transaction(self: Any, func: Any) -> Any:
        return func(None)  # commits some other way

    monkeypatch.setattr(Session, "run_in_transaction", run_in_transaction)
    with pytest.raises(hooks.ClientLayoutChanged, match=r"txn\.commit"):
        hooks.check_commit_replaceable()


def test_a_transaction_without_commit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(transaction.Transaction, "commit")
    with pytest.raises(hooks.ClientLayoutChanged, match=r"txn\.commit.*no commit method"):
        hooks.check_commit_replaceable()


def test_the_sessions_manager_is_there() -> None:
    hooks.check_sessions_manager()


def test_a_database_without_a_sessions_manager_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(Database, "sessions_manager")
    with pytest.raises(hooks.ClientLayoutChanged, match=r"database\.sessions_manager"):
        hooks.check_sessions_manager()


def test_streamed_result_set_takes_the_call() -> None:
    hooks.check_streamed_result_set()


def test_a_streamed_result_set_with_other_arguments_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Other:
        def __init__(self, session: Any, response_iterator: Any) -> None: ...

    monkeypatch.setattr(streamed, "StreamedResultSet", Other)
    with pytest.raises(hooks.ClientLayoutChanged, match=r"StreamedResultSet\(call\)"):
        hooks.check_streamed_result_set()


def test_opening_checks_every_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentq import open_backend

    hooks.check_hooks.cache_clear()
    monkeypatch.delattr(Database, "sessions_manager")
    try:
        with pytest.raises(hooks.ClientLayoutChanged, match="google-cloud-spanner"):
            open_backend("spanner://projects/p/instances/i/databases/d?endpoint=127.0.0.1:1")
    finally:
        hooks.check_hooks.cache_clear()
