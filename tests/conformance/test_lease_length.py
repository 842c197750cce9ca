"""A lease length of the backend's own (``lease_seconds``, SQLite and PostgreSQL):
leases and renewals last that long, and a bad value is one clear error. Spanner's
is fixed at 10 s, as its queues define it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from agentq.backends import LEASE_SECONDS, Backend, open_backend
from agentq.backends.postgres.config import parse_url
from agentq.errors import ConfigError

from .conftest import Harness
from .test_queue_contract import TASKS


def with_lease(url: str, seconds: Any) -> str:
    """``url`` with ``lease_seconds=seconds`` added to its query."""
    return url + ("&" if "?" in url else "?") + f"lease_seconds={seconds}"


def _receive(backend: Backend) -> list[Any]:
    return [m for batch in backend.stream("Tasks", 10, 0) for m in batch]


@pytest.mark.needs("state", "fake_time", "queue_metrics")
def test_a_configured_lease_length_is_honoured_on_lease_and_renew(harness: Harness) -> None:
    # (A :memory: URL opens a database of its own: the test uses that one alone.)
    short = open_backend(with_lease(harness.url, 3), clock=harness.clock)
    try:
        assert short.lease_seconds == 3.0
        assert harness.backend.lease_seconds == LEASE_SECONDS  # the default is unchanged
        assert "lease_seconds=3" in short.url  # a worker opened from it leases alike
        short.create_queue(TASKS)
        short.transact(lambda tx: tx.send("Tasks", (1, "a"), b"p"))
        clock = harness.clock
        [msg] = _receive(short)
        assert msg.lease_expiry == clock.now() + timedelta(seconds=3)
        clock.advance(2)
        [row] = short.renew("Tasks", [msg.lease_token])
        assert row.new_token is not None
        assert row.lease_expiry == clock.now() + timedelta(seconds=3)  # renewed by 3 s, not 10
        clock.advance(2.5)  # past the first lease, within the renewed one
        assert _receive(short) == []
        clock.advance(0.5)  # the renewed lease ran out: backoff, then redelivery
        assert short.renew("Tasks", [row.new_token]) == []
        assert short.stats("Tasks").backing_off == 1
        clock.advance(short.redelivery.delay(1, 5))
        [again] = _receive(short)
        assert again.key == (1, "a")
        assert short.stats("Tasks").lease_expirations == 1
    finally:
        short.close()


@pytest.mark.needs("state", "fake_time", "queue_metrics")
def test_lease_seconds_given_to_open_backend_overrides_the_urls(harness: Harness) -> None:
    short = open_backend(with_lease(harness.url, 30), clock=harness.clock, lease_seconds=2.5)
    try:
        assert short.lease_seconds == 2.5
        short.create_queue(TASKS)
        short.transact(lambda tx: tx.send("Tasks", (1, "a"), b"p"))
        [msg] = _receive(short)
        assert msg.lease_expiry == harness.clock.now() + timedelta(seconds=2.5)
    finally:
        short.close()


@pytest.mark.needs()
def test_spanner_leases_last_ten_seconds_and_take_no_length(harness: Harness) -> None:
    if not harness.kind.startswith("spanner"):
        pytest.skip(f"{harness.kind}: lease_seconds is an option here (tests above)")
    assert harness.backend.lease_seconds == LEASE_SECONDS
    with pytest.raises(ConfigError, match="lease_seconds"):
        open_backend(with_lease(harness.url, 2), clock=harness.clock)


BAD = ["0", "-1", "0.5", "3601", "abc", "", "nan", "inf", "1e999"]


@pytest.mark.parametrize("value", BAD)
def test_a_bad_lease_length_in_a_url_is_one_clear_line(value: str, tmp_path: Any) -> None:
    for opener in (
        lambda: open_backend(with_lease(f"sqlite:///{tmp_path / 'q.db'}", value)),
        lambda: parse_url(with_lease("postgresql://u@127.0.0.1:9/db", value)),
    ):
        with pytest.raises(ConfigError) as info:
            opener()
        message = str(info.value)
        assert message == (
            f"lease_seconds must be a number of seconds from 1 to 3600, not {value!r}"
        )
    assert not (tmp_path / "q.db").exists()  # refused before the file was made


@pytest.mark.parametrize("value", [0, -2.0, 0.25, 4000, "soon", None, True, float("nan")])
def test_a_bad_lease_length_given_to_open_backend_is_one_clear_line(
    value: Any, tmp_path: Any
) -> None:
    for url in (f"sqlite:///{tmp_path / 'q.db'}", "postgresql://u@127.0.0.1:9/db"):
        with pytest.raises(ConfigError, match=r"^lease_seconds must be a number of seconds"):
            open_backend(url, lease_seconds=value)
