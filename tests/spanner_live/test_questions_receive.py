"""Questions about receiving that only a real instance settles: each test records
what it observed (``record_answer``), which ``python -m tests.spanner_live``
prints at the end. On the emulator they observe the queue stand-in (see
``tests/spanner_emulator/README.md`` for what it plays and why).

They assert only what the documents promise, so that a surprising answer is
reported, not turned into a failure; the answers are what agentq's design
rests on (see ``tests/spanner_live/README.md``, question by question).
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from agentq import open_backend
from agentq.backends.spanner import SpannerBackend
from agentq.backends.spanner.streaming import strong_query
from agentq.clock import SystemClock

from .conftest import PROBE
from .harness import LiveDatabase, record_answer
from .probe import read_receive, send_many


def _dialect(live: LiveDatabase) -> str:
    return "postgresql" if live.postgres else "googlesql"


def test_which_receive_durations_are_accepted(live: LiveDatabase, backend: SpannerBackend) -> None:
    """The documents write '20m' and advise against extremely short durations;
    agentq writes whole minutes, and '0s' only with receive_short=0s."""
    answers = {}
    for duration in ("0s", "1s", "30s", "90s", "1m", "20m", "60m", "1h", "2h"):
        wire = read_receive(backend, PROBE, duration, read_for=1.0)
        answers[duration] = wire.error or (
            f"ended by itself after {wire.ended_after:.1f} s"
            if wire.ended_after is not None
            else "accepted (open after 1 s)"
        )
    record_answer("receive_durations", _dialect(live), answers)
    assert answers["20m"].startswith("accepted"), answers  # the documents' own form


def test_what_a_0s_receive_leases_and_returns(live: LiveDatabase, backend: SpannerBackend) -> None:
    """Whether '0s' leases ready messages and hands over every ready batch."""
    send_many(backend, "Probe", [(i, f"z{i}") for i in range(5)])
    wire = read_receive(backend, PROBE, "0s", batch=2, read_for=5.0)
    left = _available(live, 5)
    record_answer("zero_duration_receive", _dialect(live), {
        **wire.summary(), "of_5_ready": wire.rows, "still_available_after": left,
    })  # fmt: skip


def test_when_an_idle_receive_sends_its_first_response(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """Whether the stream's metadata comes at once or with the first message:
    agentq reads the raw stream, cancellable either way."""
    wire = read_receive(backend, PROBE, "1m", read_for=3.0)
    record_answer("idle_receive_first_response", _dialect(live), wire.summary())
    assert wire.error is None, wire.error


def test_resume_tokens_and_responses_of_a_receive(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """Whether RECEIVE's responses carry resume tokens (without them the client's
    own reader holds rows back until the stream ends) and how rows are split into
    responses and batches."""
    send_many(backend, "Probe", [(i, f"w{i}") for i in range(6)])
    wire = read_receive(backend, PROBE, "1m", batch=3, read_for=3.0, stop_after_rows=6)
    answer = {**wire.summary(), "per_response": wire.responses}
    record_answer("receive_wire", _dialect(live), answer)
    assert wire.error is None and wire.rows == 6, wire.summary()


def test_batch_shapes_and_delivery_order(live: LiveDatabase, backend: SpannerBackend) -> None:
    """Batches of at most max_batch_size, from one split; is any order kept?"""
    now = backend.clock.now()

    def send(tx: object) -> None:
        for i in range(12):  # oldest delivery time first, spread over keys
            when = now - timedelta(seconds=12 - i)
            tx.send("Probe", (i % 4, f"o{i:02}"), b"x", deliver_time=when)  # type: ignore[attr-defined]

    backend.transact(send)  # type: ignore[arg-type]
    batches = list(backend.stream("Probe", max_batch_size=5, max_duration=0))
    received = [m.key[1] for b in batches for m in b]
    record_answer("batches_and_order", _dialect(live), {
        "batch_sizes": [len(b) for b in batches], "order": received,
        "by_deliver_time": received == sorted(received),
    })  # fmt: skip
    assert all(1 <= len(b) <= 5 for b in batches)
    assert sorted(received) == [f"o{i:02}" for i in range(12)]


def test_lease_length_and_renewal(live: LiveDatabase, backend: SpannerBackend) -> None:
    """The documents: a lease of 10 s, renewed by 10 s."""
    send_many(backend, "Probe", [(1, "lease")])
    [[message]] = list(backend.stream("Probe", 1, 0))
    left = (message.lease_expiry - backend.clock.now()).total_seconds()
    [renewal] = backend.renew("Probe", [message.lease_token])
    renewed = (renewal.lease_expiry - backend.clock.now()).total_seconds()
    record_answer("lease_length", _dialect(live), {
        "left_at_receipt_s": round(left, 2), "after_renewal_s": round(renewed, 2),
        "new_token": renewal.new_token is not None,
    })  # fmt: skip
    backend.transact(lambda tx: tx.ack("Probe", (1, "lease"), must_exist=False))


def test_redelivery_after_a_lease_expires(live: LiveDatabase, backend: SpannerBackend) -> None:
    """The documents: back-off within the first hour. How long the first one is
    (a bounded wait: 90 s)."""
    send_many(backend, "Probe", [(1, "lapse")])
    [[message]] = list(backend.stream("Probe", 1, 0))
    expiry = message.lease_expiry
    other = open_backend(live.url.replace("ddl=auto", "ddl=manual"), clock=SystemClock())
    seen: object = None
    try:
        other.create_queue(PROBE)
        deadline = time.monotonic() + 90  # real clock: a bounded wait for Spanner's backoff
        while seen is None and time.monotonic() < deadline:
            if [m for b in other.stream("Probe", 1, 0) for m in b]:
                seen = backend.clock.now()
    finally:
        other.close()
    after = None if seen is None else round((seen - expiry).total_seconds(), 1)  # type: ignore[operator]
    record_answer("first_redelivery_after_expiry_s", _dialect(live),
                  after if after is not None else "not within 90 s")  # fmt: skip


def test_how_far_an_unread_receive_leases_ahead(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """Whether a RECEIVE leases on while its reader reads nothing (agentq ends
    its stream when the worker is full, issue 29): 30 ready, one row read, then
    2 s without reading."""
    send_many(backend, "Probe", [(i, f"u{i:02}") for i in range(30)])
    sql = backend.dialect.receive_sql(PROBE, 1, "1m")
    # One response read, then none while the call stays open: a reader whose
    # worker is full.
    with strong_query(backend, sql, timeout=60) as (call, _rows):
        for partial in call:
            if partial.values:
                break
        threading.Event().wait(2.0)  # real time: the server's chance to lease on
        available = _available(live, 30)
    record_answer("unread_receive_leases_ahead", _dialect(live), {
        "ready": 30, "read": 1, "still_available_after_2s": available,
        "leased_but_unread": 30 - available - 1,
    })  # fmt: skip


def test_whether_a_leased_message_shows_in_sql_as_due(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """SQL cannot see leases (the documents say nothing of it): does a leased
    message's DeliverTime move? agentq's short receive reads the due keys first."""
    send_many(backend, "Probe", [(1, "due")])
    d = backend.dialect
    deliver = "deliver_time" if d.postgres else "DeliverTime"
    sql = f"SELECT {deliver} FROM {d.queue_ident('Probe')}"

    def read() -> object:
        with backend.database.snapshot() as snap:
            return [r[0] for r in snap.execute_sql(sql)]

    before = read()
    list(backend.stream("Probe", 1, 0))
    after = read()
    record_answer("leased_message_deliver_time", _dialect(live), {
        "before": before, "after_lease": after, "moved": before != after,
    })  # fmt: skip


def test_what_an_idle_receive_returns_at_its_end(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """An idle '1m' RECEIVE: a clean end of stream, or an error (65 s: real time)."""
    wire = read_receive(backend, PROBE, "1m", read_for=65.0)
    record_answer("idle_receive_end", _dialect(live), wire.summary())


def _available(live: LiveDatabase, ready: int) -> int:
    """How many of the probe queue's messages another worker can receive now."""
    other = open_backend(live.url.replace("ddl=auto", "ddl=manual"), clock=SystemClock())
    try:
        other.create_queue(PROBE)
        got = [m for b in other.stream("Probe", ready, 0) for m in b]
        return len(got)
    finally:
        other.close()

