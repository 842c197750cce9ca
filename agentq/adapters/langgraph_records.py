"""The record tables of :class:`~agentq.adapters.langgraph_checkpoint.AgentQSaver`,
their keys, and what is done to a thread's records as a whole (delete, copy,
prune).

* :data:`CHECKPOINTS` (``lg_checkpoints``): one record per checkpoint, keyed
  ``thread|namespace|checkpoint id`` (the parts percent-encoded, so ``|`` only
  separates); a thread's newest checkpoint is the first of a descending
  key-range scan, LangGraph's checkpoint ids growing with time.
* :data:`WRITES` (``lg_writes``): one record per pending write, keyed
  ``thread|namespace|checkpoint id|task id|index``.
* :data:`RESUMES` (``lg_resumes``): one record per thread a continuation or a
  starter resumed, keyed ``thread|``: the token of the resume that may write the
  thread's checkpoints (:func:`claim_resume`, :func:`check_resume`) and, for a
  continuation's, the wait it resumes (:func:`continuation_pending`).

A whole-thread operation runs a batch per transaction over agentq's backend
contract, so it runs on SQLite, PostgreSQL and Spanner unchanged.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any
from urllib.parse import quote

from langchain_core.runnables import RunnableConfig

from agentq.backends import Backend, Transaction
from agentq.errors import AgentQError, ConfigError
from agentq.ledger import TERMINAL, Tables

__all__ = [
    "CHECKPOINTS",
    "RESUMES",
    "RESUMING",
    "SEP",
    "WRITES",
    "ResumedElsewhere",
    "check_resume",
    "checkpoint_key",
    "claim_resume",
    "config_of",
    "continuation_pending",
    "copy_thread",
    "delete_checkpoints",
    "delete_for_runs",
    "delete_thread",
    "key_part",
    "namespace_prefix",
    "prune_threads",
    "scan",
    "thread_of",
    "thread_prefix",
    "write_key",
]

#: The record tables of the checkpointer.
CHECKPOINTS = "lg_checkpoints"
WRITES = "lg_writes"
RESUMES = "lg_resumes"

#: The resume this context runs, if any: (thread id, its token). Set by
#: :func:`~agentq.adapters.langgraph_steps.resume_waiting` around the graph's
#: run (LangGraph runs its nodes and background saves in copies of the context).
RESUMING: ContextVar[tuple[str, str] | None] = ContextVar("agentq_langgraph_resuming", default=None)

#: What separates the parts of a key.
SEP = "|"
#: Records read per page of a scan (a filtered ``list`` reads on until ``limit`` match).
PAGE = 100
#: Records deleted per transaction by ``delete_thread``.
DELETE_BATCH = 500


def key_part(text: str) -> str:
    """``text`` as a part of a key: percent-encoding never writes "|", which only
    separates the parts."""
    return quote(text, safe="")


def thread_prefix(thread_id: str) -> str:
    """The key prefix of a thread's records, in every namespace."""
    return key_part(thread_id) + SEP


def namespace_prefix(thread_id: str, ns: str) -> str:
    """The key prefix of a thread's records in namespace ``ns``."""
    return thread_prefix(thread_id) + key_part(ns) + SEP


def checkpoint_key(thread_id: str, ns: str, checkpoint_id: str) -> str:
    """The key of a checkpoint (and the prefix of its writes' keys)."""
    return namespace_prefix(thread_id, ns) + key_part(checkpoint_id)


def write_key(thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    """The key of a task's ``idx``-th write to a checkpoint."""
    base = checkpoint_key(thread_id, ns, checkpoint_id)
    return f"{base}{SEP}{key_part(task_id)}{SEP}{idx}"


def config_of(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The LangGraph config that names a checkpoint."""
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def thread_of(config: RunnableConfig) -> str:
    """``config``'s ``thread_id`` (a :class:`~agentq.errors.ConfigError` without one)."""
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or thread_id == "":
        raise ConfigError("a LangGraph checkpoint needs configurable.thread_id")
    return str(thread_id)


def scan(
    backend: Backend, table: str, prefix: str, *, after: str = "", descending: bool = False,
    where: Mapping[str, Sequence[str | None]] | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:  # fmt: skip
    """Every record of ``table`` under ``prefix``, a page at a time."""
    while True:
        page = backend.list_records(table, prefix, PAGE, after, descending=descending, where=where)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1][0]


class ResumedElsewhere(AgentQError):
    """Another resume of the thread claimed it after this one did (a later
    delivery of its continuation, which took over once this one's lease
    lapsed): this one's writes are refused, so that the graph goes on along one
    branch, and its nodes' tasks are enqueued once."""


def claim_resume(backend: Backend, thread_id: str, wait_id: str | None = None) -> str:
    """Make this resume the one that may write ``thread_id``'s checkpoints
    (taking it from any resume before it); returns its token. Claimed before
    the graph's state is read: what an earlier resume wrote before losing it is
    then what this one goes on from, never a sibling of it. ``wait_id``: the
    wait a continuation resumes (the idempotency key of its task), which a
    starter reads to leave the thread to it (:func:`continuation_pending`)."""
    token = secrets.token_hex(16)
    claim = {"token": token} if wait_id is None else {"token": token, "wait_id": wait_id}
    backend.transact(lambda tx: tx.put_record(RESUMES, thread_prefix(thread_id), claim))
    return token


def continuation_pending(backend: Backend, thread_id: str) -> bool:
    """Whether the last resume of ``thread_id`` was a continuation whose task is
    not done: a worker runs it, or will once its lease lapses, and carries the
    graph on itself, so a user's process must not run the graph beside it."""
    claim = backend.get_record(RESUMES, thread_prefix(thread_id))
    wait_id = None if claim is None else claim.get("wait_id")
    if not wait_id:
        return False
    key = backend.get_record(Tables.IDEMPOTENCY, str(wait_id))
    task = None if key is None else backend.get_record(Tables.TASKS, str(key["task_id"]))
    if task is None or (task.get("args") or {}).get("thread_id") != thread_id:
        return False  # pruned (done long ago), or not this thread's
    return task["status"] not in TERMINAL


def check_resume(tx: Transaction, thread_id: str) -> None:
    """In a transaction writing ``thread_id``'s checkpoints or writes: raise
    :class:`ResumedElsewhere` if this context resumes that thread and another
    resume claimed it since (read in the transaction, so a claim and a write
    cannot interleave)."""
    resuming = RESUMING.get()
    if resuming is None or resuming[0] != thread_id:
        return
    rec = tx.get_record(RESUMES, thread_prefix(thread_id))
    if rec is None or rec.get("token") != resuming[1]:
        raise ResumedElsewhere(
            f"LangGraph thread {thread_id!r} was resumed by another delivery of its "
            "continuation since this one began: this one writes nothing"
        )


def _deleter(table: str, keys: list[str]) -> Callable[[Transaction], list[str]]:
    return lambda tx: tx.delete_records(table, keys)


def _putter(table: str, rows: list[tuple[str, dict[str, Any]]]) -> Callable[[Transaction], None]:
    def put(tx: Transaction) -> None:
        for key, rec in rows:
            tx.put_record(table, key, rec)

    return put


def delete_thread(backend: Backend, thread_id: str) -> None:
    """Delete every checkpoint and write of ``thread_id``, in every namespace
    (a batch per transaction: a put racing it may survive)."""
    prefix = thread_prefix(str(thread_id))
    for table in (WRITES, CHECKPOINTS, RESUMES):
        while True:
            keys = [k for k, _ in backend.list_records(table, prefix, DELETE_BATCH)]
            if not keys:
                break
            backend.transact(_deleter(table, keys))


def delete_checkpoints(backend: Backend, keys: Sequence[str]) -> None:
    """Delete checkpoints by key, with their writes."""
    for key in keys:
        writes = [k for k, _ in scan(backend, WRITES, key + SEP)]
        for start in range(0, len(writes), DELETE_BATCH):
            backend.transact(_deleter(WRITES, writes[start : start + DELETE_BATCH]))
    for start in range(0, len(keys), DELETE_BATCH):
        backend.transact(_deleter(CHECKPOINTS, list(keys[start : start + DELETE_BATCH])))


def delete_for_runs(backend: Backend, run_ids: Sequence[str]) -> None:
    """Delete the checkpoints whose record names one of ``run_ids``, with their writes."""
    if not run_ids:
        return
    where = {"run_id": [str(r) for r in run_ids]}
    delete_checkpoints(backend, [k for k, _ in scan(backend, CHECKPOINTS, "", where=where)])


def copy_thread(backend: Backend, source_thread_id: str, target_thread_id: str) -> None:
    """Copy every checkpoint and write of a thread, in every namespace, to
    another thread id (a batch per transaction)."""
    source = thread_prefix(str(source_thread_id))
    target = thread_prefix(str(target_thread_id))
    for table in (CHECKPOINTS, WRITES):
        rows = list(scan(backend, table, source))
        for start in range(0, len(rows), PAGE):
            batch = [
                (target + key[len(source) :],
                 {**rec, "thread_id": str(target_thread_id)} if table == CHECKPOINTS
                 else rec)
                for key, rec in rows[start : start + PAGE]
            ]  # fmt: skip
            backend.transact(_putter(table, batch))


def prune_threads(
    backend: Backend, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> None:
    """``keep_latest``: keep each namespace's newest checkpoint (with its writes)
    of each thread and delete the others; ``delete``: delete the threads."""
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"unknown prune strategy {strategy!r}: keep_latest or delete")
    for thread_id in thread_ids:
        if strategy == "delete":
            delete_thread(backend, thread_id)
            continue
        newest: set[str] = set()
        older: list[str] = []
        for key, rec in scan(backend, CHECKPOINTS, thread_prefix(str(thread_id)), descending=True):
            if rec["checkpoint_ns"] in newest:
                older.append(key)
            else:
                newest.add(rec["checkpoint_ns"])
        delete_checkpoints(backend, older)
