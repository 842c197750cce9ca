"""Questions about errors, sessions, the PostgreSQL dialect and fine-grained
access control that only a real instance settles. Each test records what it
observed (the error's code, text and structured details, as Spanner sent them,
before agentq maps them); ``python -m tests.spanner_live`` prints them at the end.

agentq classifies a commit's NOT_FOUND by code, ResourceInfo details and the
queue's existence, never by its text (issue 29, defect 3): these answers show
what a real instance sends, so the classification can be checked against them.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

from agentq import open_backend
from agentq.backends.spanner import SpannerBackend
from agentq.clock import SystemClock

from .conftest import PROBE
from .harness import LiveDatabase, record_answer
from .probe import outcome, read_receive, send_many


def _dialect(live: LiveDatabase) -> str:
    return "postgresql" if live.postgres else "googlesql"


def _raw(backend: SpannerBackend, work: Any) -> str:
    """What one read-write transaction of the client itself gives (no agentq)."""
    return outcome(lambda: backend.database.run_in_transaction(work))


def test_errors_of_stale_acks_and_duplicate_sends(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    d, q = backend.dialect, backend.dialect.physical("Probe")
    send_many(backend, "Probe", [(1, "here")])
    user, message = ("userid", "messageid") if live.postgres else ("UserId", "MessageId")
    marks = d.params(["u", "m"])
    delete = (
        f"DELETE FROM {d.queue_ident('Probe')} WHERE {user} = {marks[0]} AND {message} = "
        f"{marks[1]} ASSERT_ROWS_MODIFIED 1"
    )
    params = d.param_dict(["u", "m"], [9, "gone"])
    answers = {
        "strict_ack_of_a_missing_message": _raw(
            backend, lambda txn: txn.ack(q, [9, "gone"])
        ),
        "delete_assert_rows_modified_of_a_missing_message": _raw(
            backend, lambda txn: txn.execute_update(delete, params=params)
        ),
        "send_of_an_existing_key": _raw(
            backend, lambda txn: txn.send(q, [1, "here"], payload=b"eA==")
        ),
        "blind_ack_of_a_missing_message": _raw(
            backend, lambda txn: txn.ack(q, [9, "gone"], ignore_not_found=True)
        ),
    }
    record_answer("errors_of_acks_and_sends", _dialect(live), answers)


def test_errors_for_a_queue_that_does_not_exist(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    missing = backend.dialect.physical("NoSuchQueue")
    from agentq.spec import QueueSpec

    spec = QueueSpec("NoSuchQueue", PROBE.key)
    answers = {
        "send": _raw(backend, lambda txn: txn.send(missing, [1, "a"], payload=b"eA==")),
        "ack": _raw(backend, lambda txn: txn.ack(missing, [1, "a"])),
        "receive": read_receive(backend, spec, "1m", read_for=1.0).error or "accepted",
    }
    record_answer("errors_of_a_missing_queue", _dialect(live), answers)


def test_update_on_a_queue_and_a_stale_receive(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """The documents: no UPDATE on queues; RECEIVE only in a strong read."""
    d = backend.dialect
    send_many(backend, "Probe", [(1, "u")])
    payload = "CAST('eQ==' AS bytea)" if live.postgres else "b'y'"
    column = "payload" if live.postgres else "Payload"
    update = f"UPDATE {d.queue_ident('Probe')} SET {column} = {payload} WHERE true"

    def stale_receive() -> Any:
        sql = d.receive_sql(PROBE, 1, "1m")
        with backend.database.snapshot(exact_staleness=timedelta(seconds=15)) as snap:
            rows = snap.execute_sql(sql, timeout=5)
            return next(iter(rows), None)

    record_answer("update_and_stale_receive", _dialect(live), {
        "update": _raw(backend, lambda txn: txn.execute_update(update)),
        "receive_in_a_stale_read": outcome(stale_receive),
    })  # fmt: skip


def test_renewlease_in_a_read_write_transaction_and_its_names(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """RENEWLEASE outside a single-use read (agentq sends it as one), and which
    function name the PostgreSQL dialect has (the FGAC page writes renew_lease_)."""
    d = backend.dialect
    send_many(backend, "Probe", [(1, "r")])
    [[message]] = list(backend.stream("Probe", 1, 0))
    params = d.param_dict(["tokens"], [[message.lease_token]])
    from google.cloud.spanner_v1 import param_types

    types = {d.param_keys(["tokens"])[0]: param_types.Array(param_types.STRING)}
    sql = d.renew_sql("Probe")

    def renew(txn: Any) -> Any:
        return [list(r) for r in txn.execute_sql(sql, params=params, param_types=types)]

    other_name = (
        sql.replace("renewlease_", "renew_lease_")
        if live.postgres
        else sql.replace("RENEWLEASE_", "RENEW_LEASE_")
    )

    def other(txn: Any) -> Any:
        return list(txn.execute_sql(other_name, params=params, param_types=types))

    record_answer("renewlease", _dialect(live), {
        "in_a_read_write_transaction": _raw(backend, renew),
        "named_renew_lease_": _raw(backend, other),
    })  # fmt: skip


def test_read_write_transactions_side_by_side_on_the_clients_sessions(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """Multiplexed sessions (the client's default for read/write since 3.5x): do
    two transactions sending to one queue at once both commit? The emulator
    needs regular sessions for it (the launcher says which it used)."""
    import os

    results: list[str] = []
    both_inside = threading.Barrier(2, timeout=10)

    def send(n: int) -> None:
        def work(tx: Any) -> None:
            tx.send("Probe", (n, "side"), b"x")
            try:
                both_inside.wait()
            except threading.BrokenBarrierError:
                pass  # a re-run after an abort: the other one is done

        results.append(outcome(lambda: backend.transact(work)))

    threads = [threading.Thread(target=send, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    record_answer("read_write_sessions", _dialect(live), {
        "multiplexed_for_read_write": os.environ.get(
            "GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", "true (the client's default)"
        ),
        "two_transactions_at_once": results,
    })  # fmt: skip
    assert results == ["ok", "ok"], results


def test_fine_grained_access_control_errors(
    live: LiveDatabase, backend: SpannerBackend
) -> None:
    """A role that may only SELECT the queue (fgac-queues: receiving needs EXECUTE
    on RECEIVE_<q>, sending INSERT, acking DELETE): what each refusal says."""
    d = backend.dialect
    role = f"{live.namespace}reader"
    queue = d.queue_ident("Probe")
    grant = [f"CREATE ROLE {role}", f"GRANT SELECT ON QUEUE {queue} TO ROLE {role}"]
    ddl = backend.database.update_ddl
    answers: dict[str, str] = {"grant": outcome(lambda: ddl(grant).result(300))}
    if answers["grant"] == "ok":
        url = f"{live.url}&database_role={role}".replace("ddl=auto", "ddl=manual")
        reader = open_backend(url, clock=SystemClock())
        try:
            reader.create_queue(PROBE)
            send_many(backend, "Probe", [(1, "f")])
            answers["send"] = outcome(lambda: send_many(reader, "Probe", [(2, "f")]))  # type: ignore[arg-type]
            answers["receive"] = outcome(lambda: [len(b) for b in reader.stream("Probe", 1, 0)])
            answers["ack"] = outcome(lambda: reader.transact(lambda tx: tx.ack("Probe", (1, "f"))))
        finally:
            reader.close()
        revoke = [f"REVOKE SELECT ON QUEUE {queue} FROM ROLE {role}", f"DROP ROLE {role}"]
        answers["revoke"] = outcome(lambda: ddl(revoke).result(300))
    record_answer("fgac_errors", _dialect(live), answers)


def test_queue_statements_in_this_dialect(live: LiveDatabase) -> None:
    """Whether queues work in this dialect at all (the Java client's tests covered
    GoogleSQL only, "add postgres ... after feature is enabled")."""
    b = open_backend(live.url, clock=SystemClock())
    answers: dict[str, str] = {}
    try:
        answers["create_queue"] = outcome(lambda: b.create_queue(PROBE))
        answers["send"] = outcome(lambda: send_many(b, "Probe", [(1, "d")]))  # type: ignore[arg-type]
        got: list[Any] = []
        answers["receive"] = outcome(
            lambda: got.extend(m for batch in b.stream("Probe", 1, 0) for m in batch)
        )
        if got:
            token = got[0].lease_token
            answers["renew"] = outcome(
                lambda: [r.new_token is not None for r in b.renew("Probe", [token])]
            )
            answers["ack"] = outcome(lambda: b.transact(lambda tx: tx.ack("Probe", (1, "d"))))
    finally:
        b.close()
    record_answer("queues_in_this_dialect", _dialect(live), answers)
