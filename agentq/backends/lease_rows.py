"""What the SQL backends (SQLite, PostgreSQL) share about a lease: its token,
the new lease columns of a leased row, the messages built from leased rows, a
renewal's decision and the stats row read back as :class:`QueueStats`.

A lease token names (message id, lease sequence, expiry), behind a prefix of
the backend's own (a token of one backend is not taken by the other). Every
lease or renewal increments the row's sequence, so a token stops matching as
soon as its message is leased again or acknowledged; carrying the expiry tells
"expired" from "acknowledged" without keeping any history, as Spanner's
RENEWLEASE does. Each backend owns its SQL and its transactions; these only
compute.

A leased row, as both backends select it: message id, the key's columns, the
payload, then ``deliver_time``, the lease sequence, the previous lease's expiry
and the expirations counted so far (PostgreSQL may add columns after those).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any

from agentq.backends.base import Message, QueueStats, RedeliveryPolicy, Renewal
from agentq.clock import from_micros
from agentq.spec import QueueSpec

__all__ = [
    "decode_token",
    "encode_token",
    "lease_updates",
    "leased_messages",
    "queue_stats",
    "renewals",
]

def encode_token(prefix: str, queue: str, msg_id: int, seq: int, expiry: int) -> str:
    """The lease token of message ``msg_id`` leased with sequence ``seq`` until
    ``expiry`` (microseconds)."""
    raw = f"{prefix}|{queue}|{msg_id}|{seq}|{expiry}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(prefix: str, queue: str, token: object) -> tuple[int, int, int] | None:
    """(message id, lease sequence, expiry micros) of a token of ``queue``, or
    None if it is not one (unparsable, another backend's, another queue's)."""
    if not isinstance(token, str) or not token or len(token) > 512:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        kind, q, msg_id, seq, expiry = raw.split("|")
        if kind != prefix or q != queue:
            return None
        return int(msg_id), int(seq), int(expiry)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


def lease_updates(
    rows: Sequence[Sequence[Any]],
    nkeys: int,
    now: int,
    policy: RedeliveryPolicy,
    lease_micros: int,
) -> tuple[list[tuple[int, int, int, int, Any]], int, int]:
    """The lease of ``rows`` at ``now``, ``lease_micros`` long: for each row (new
    sequence, expiry, visible-at, expirations, message id), how many of them had a
    lease that expired (leased before and never acked), and the expiry."""
    expiry = now + lease_micros
    updates = []
    expired = 0
    for row in rows:
        deliver, seq, prev_expiry, expirations = row[2 + nkeys : 6 + nkeys]
        if prev_expiry is not None:
            # Leased before and never acked: that lease expired.
            expirations += 1
            expired += 1
        backoff = policy.delay(expirations + 1, (now - deliver) / 1e6)
        visible = expiry + int(backoff * 1_000_000)
        updates.append((seq + 1, expiry, visible, expirations, row[0]))
    return updates, expired, expiry


def leased_messages(
    prefix: str,
    spec: QueueSpec,
    rows: Sequence[Sequence[Any]],
    expiry: int,
    decode: Callable[[QueueSpec, Any], Any],
) -> list[Message]:
    """The messages of ``rows`` leased until ``expiry``, payloads read by ``decode``."""
    nkeys = len(spec.key)
    last = len(rows) - 1
    lease_expiry = from_micros(expiry)
    return [
        Message(
            queue=spec.name,
            key=tuple(row[1 : 1 + nkeys]),
            payload=decode(spec, row[1 + nkeys]),
            deliver_time=from_micros(row[2 + nkeys]),
            lease_token=encode_token(prefix, spec.name, row[0], row[3 + nkeys] + 1, expiry),
            lease_expiry=lease_expiry,
            last_in_batch=i == last,
        )
        for i, row in enumerate(rows)
    ]


def renewals(
    prefix: str,
    queue: str,
    tokens: Sequence[str],
    now: int,
    policy: RedeliveryPolicy,
    lease_micros: int,
    current: Callable[[int], tuple[int, int, int] | None],
    extend: Callable[[tuple[int, int, int, int, int]], object],
) -> list[Renewal]:
    """RENEWLEASE of ``tokens`` at ``now``, each lease extended by ``lease_micros`` (see
    :meth:`agentq.backends.base.Backend.renew` for the rows): ``current(msg_id)``
    reads a message's (lease sequence, deliver time, expirations), None if it is
    gone; ``extend`` writes a renewal's (sequence, expiry, visible-at,
    expirations, message id), both in the caller's transaction."""
    out: list[Renewal] = []
    for token in tokens:
        info = decode_token(prefix, queue, token)
        if info is None:
            continue  # unparsable: no row
        msg_id, seq, expiry = info
        if expiry <= now:
            continue  # expired: no row
        row = current(msg_id)
        if row is None or row[0] != seq:
            # Acknowledged (or superseded) while the token is still unexpired.
            out.append(Renewal(token, None, from_micros(expiry)))
            continue
        _, deliver, expirations = row
        new_seq = seq + 1
        new_expiry = now + lease_micros
        backoff = policy.delay(expirations + 1, (now - deliver) / 1e6)
        extend((new_seq, new_expiry, new_expiry + int(backoff * 1_000_000), expirations, msg_id))
        out.append(
            Renewal(
                token,
                encode_token(prefix, queue, msg_id, new_seq, new_expiry),
                from_micros(new_expiry),
            )
        )
    return out


def queue_stats(
    queue: str, now: int, row: Sequence[Any], counters: Sequence[Any]
) -> QueueStats:
    """:class:`QueueStats` from the stats row (total, ready, scheduled, leased,
    oldest deliver time) and the counters (lease expirations, TTL drops) read at
    ``now``."""
    total, ready, scheduled, leased, oldest = row
    return QueueStats(
        queue=queue,
        depth=total,
        ready=ready,
        scheduled=scheduled,
        leased=leased,
        backing_off=total - ready - scheduled - leased,
        oldest_unacked_age=None if oldest is None else (now - oldest) / 1e6,
        lease_expirations=int(counters[0]),
        ttl_dropped=int(counters[1]),
    )
