"""Durable agent runs: the one owner of a run's status and of its turns' joins.

A run is a record (table ``runs``) carried forward by tasks, never by a waiting
process:

* its **turn** is a task of the agent's turn tool (:mod:`agentq.agents`): a
  worker leases it, asks the model, and commits the answer, the tool tasks it
  calls and the turn task's ack in one transaction (:func:`record_turn`);
* each **tool call** is an ordinary task tagged with its run, turn and position;
  the transaction that ends the last of a turn's calls (succeeded, dead,
  rejected, cancelled, expired) appends their results to the conversation and
  sends the next turn (:func:`task_ended`, called from
  :func:`agentq.lifecycle.consequences.after_final`): "waiting for several
  events" of the queue documents, so a run awaiting a human for days is one row.

Every status change is an event checked against :data:`RUN_TRANSITIONS` inside
the transaction that applies it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

from agentq.backends import Transaction
from agentq.errors import IdempotencyConflict, IllegalTransition, InvalidArguments, RunNotFound
from agentq.ids import new_run_id
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import run_budgets, run_messages, tasks
from agentq.lifecycle.records import Env, iso
from agentq.lifecycle.states import NEW, Event
from agentq.run_info import RUN_TERMINAL, RunStatus

__all__ = [
    "MAX_INPUT_CHARS",
    "RUN_TRANSITIONS",
    "RunEvent",
    "add_message",
    "approval_decided",
    "cancel",
    "create",
    "fail",
    "key_record",
    "read",
    "record_turn",
    "tag_call",
    "task_ended",
    "turn_in_force",
]

#: Longest user message a run takes (a model's context is the real bound).
MAX_INPUT_CHARS: Final = 100_000


class RunEvent(StrEnum):
    """What can happen to a run."""

    START = "start"  # a new run: its first turn is queued
    AWAIT_TOOLS = "await_tools"  # a turn committed tool tasks
    AWAIT_APPROVAL = "await_approval"  # ... one of which waits for a human
    APPROVED = "approved"  # the last call awaiting a human was decided
    NEXT_TURN = "next_turn"  # every call of the turn ended: the next turn is queued
    SUCCEED = "succeed"  # the model answered without calling a tool
    FAIL = "fail"  # a model call failed for good, or a budget ran out
    CANCEL = "cancel"  # a user withdrew the run
    MESSAGE = "message"  # a user wrote again after the run's answer


_R = RunStatus
_E = RunEvent
_WAITING = (_R.AWAITING_TOOLS, _R.AWAITING_APPROVAL)

#: (state, event) -> next state. Anything absent is illegal.
RUN_TRANSITIONS: Final[dict[tuple[str, RunEvent], RunStatus]] = {
    (NEW, _E.START): _R.QUEUED,
    (_R.QUEUED, _E.AWAIT_TOOLS): _R.AWAITING_TOOLS,
    (_R.QUEUED, _E.AWAIT_APPROVAL): _R.AWAITING_APPROVAL,
    (_R.QUEUED, _E.NEXT_TURN): _R.QUEUED,  # a turn whose calls all ended in its commit
    (_R.QUEUED, _E.SUCCEED): _R.SUCCEEDED,
    (_R.QUEUED, _E.FAIL): _R.FAILED,
    (_R.QUEUED, _E.CANCEL): _R.CANCELLED,
    (_R.AWAITING_APPROVAL, _E.APPROVED): _R.AWAITING_TOOLS,
    (_R.SUCCEEDED, _E.MESSAGE): _R.QUEUED,
    **{(s, _E.NEXT_TURN): _R.QUEUED for s in _WAITING},
    **{(s, _E.FAIL): _R.FAILED for s in _WAITING},
    **{(s, _E.CANCEL): _R.CANCELLED for s in _WAITING},
}


def _moved(
    rec: Mapping[str, Any], event: RunEvent, tx: Transaction, **changes: Any
) -> dict[str, Any]:
    current = str(rec.get("status", NEW))
    nxt = RUN_TRANSITIONS.get((current, event))
    if nxt is None:
        allowed = sorted(str(e) for (s, e) in RUN_TRANSITIONS if s == current)
        raise IllegalTransition(
            f"run {rec.get('run_id')!r} is {current}: {event} is not allowed "
            f"(allowed: {', '.join(allowed) or 'nothing: it is final'})"
        )
    return {**rec, **changes, "status": str(nxt), "updated_at": iso(tx.now)}


def read(tx: Transaction, run_id: str) -> dict[str, Any]:
    """A run's record as of this transaction (:class:`RunNotFound` if none)."""
    rec = tx.get_record(Tables.RUNS, run_id) if isinstance(run_id, str) and run_id else None
    if rec is None:
        raise RunNotFound(f"no run {run_id!r}")
    return rec


def _store(tx: Transaction, rec: Mapping[str, Any]) -> None:
    tx.put_record(Tables.RUNS, str(rec["run_id"]), rec)


def key_record(owner: str, key: str) -> str:
    """The key of the record naming the run ``owner``'s ``key`` started."""
    # The owner's length first: no owner's key can be spelled as another's.
    return f"{len(owner)}:{owner}:{key}"


def create(
    env: Env,
    tx: Transaction,
    *,
    agent: str,
    turn_tool: str,
    turn_queue: str,
    input: str,
    owner: str,
    idempotency_key: str | None = None,
    budget: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Start a run (its first turn queued), or find the one ``idempotency_key``
    named for ``owner``: returns the record and whether this call created it.
    The same key with another agent or input raises :class:`IdempotencyConflict`."""
    if not isinstance(input, str) or not input.strip():
        raise InvalidArguments("a run needs an input: the user's message, a non-empty string")
    if len(input) > MAX_INPUT_CHARS:
        raise InvalidArguments(f"a run's input is at most {MAX_INPUT_CHARS} characters")
    if idempotency_key is not None:
        named = tx.get_record(Tables.RUN_KEYS, key_record(owner, idempotency_key))
        if named is not None:
            found = read(tx, str(named["run_id"]))
            if found["agent"] != agent or found["input"] != input:
                raise IdempotencyConflict(
                    f"idempotency key {idempotency_key!r} already started run "
                    f"{found['run_id']!r} of agent {found['agent']!r} with another input"
                )
            return found, False
    ordered = env.backend.ordered_keys
    run_id = new_run_id(tx.now if ordered else None)
    now = iso(tx.now)
    rec: dict[str, Any] = {
        "run_id": run_id, "agent": agent, "owner": owner, "input": input,
        "status": NEW, "turn": 0, "turns": [], "pending": [], "output": None, "error": None,
        "messages": [{"role": "user", "content": input}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "idempotency_key": idempotency_key, "turn_tool": turn_tool, "turn_queue": turn_queue,
        "budget": dict(budget or {}), "created_at": now, "updated_at": now,
    }  # fmt: skip
    rec = _send_turn(env, tx, _moved(rec, _E.START, tx))
    _store(tx, rec)
    if idempotency_key is not None:
        tx.put_record(Tables.RUN_KEYS, key_record(owner, idempotency_key), {"run_id": run_id})
    return rec, True


def _send_turn(env: Env, tx: Transaction, rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with its next turn's task created and sent (the caller stores it)."""
    number = int(rec["turn"]) + 1
    task = tasks.create(
        env, tx, tool=str(rec["turn_tool"]), queue=str(rec["turn_queue"]),
        args={"run_id": rec["run_id"], "turn": number}, kind="action", event=Event.ENQUEUE,
        created_by=str(rec["owner"]),
        extra={"run": {"run_id": rec["run_id"], "turn": number, "role": "turn"}},
    )  # fmt: skip
    return {**rec, "turn": number, "turn_task_id": task["task_id"], "pending": []}


def turn_in_force(tx: Transaction, run_id: str, turn: int) -> dict[str, Any] | None:
    """The run's record if ``turn`` is the turn it waits for (queued), else None:
    a turn of a run cancelled or moved on meanwhile commits nothing."""
    rec = tx.get_record(Tables.RUNS, run_id)
    if rec is None or rec["status"] != RunStatus.QUEUED or int(rec["turn"]) != turn:
        return None
    return rec


def record_turn(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    turn: Mapping[str, Any],
    assistant: Mapping[str, Any],
    *,
    pending: Sequence[str],
    awaiting_approval: bool,
    owner_limits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Commit a model turn (in the turn task's completion transaction): its
    answer appended, its usage counted, and the run moved on: to its calls
    (``pending`` tasks, created by the caller in this transaction), to its next
    turn (every call ended already: local or refused), or to its end (no call:
    the answer is the output). A budget it runs out of (the run's, or its owner's
    daily ``owner_limits``) fails the run instead."""
    usage = dict(rec.get("usage") or {})
    used = turn.get("usage") or {}
    for field in ("prompt_tokens", "completion_tokens", "total_tokens"):
        usage[field] = int(usage.get(field, 0)) + int(used.get(field, 0))
    if used.get("cost") is not None:
        usage["cost"] = float(usage.get("cost") or 0.0) + float(used["cost"])
    new = {
        **rec, "usage": usage, "turns": [*rec.get("turns", []), dict(turn)],
        "messages": [*rec.get("messages", []), dict(assistant)],
    }  # fmt: skip
    new.pop("turn_task_id", None)
    over = run_budgets.over_run_budget(new)
    if owner_limits:
        over = run_budgets.count_owner_usage(tx, str(rec["owner"]), used, owner_limits) or over
    if over is not None:
        return fail(env, tx, new, over, pending=pending)
    if pending:
        event = _E.AWAIT_APPROVAL if awaiting_approval else _E.AWAIT_TOOLS
        new = _moved(new, event, tx, pending=list(pending))
        _store(tx, new)
        return new
    if turn.get("calls"):
        return _next_turn(env, tx, new, _E.NEXT_TURN)
    new = _moved(new, _E.SUCCEED, tx, output=assistant.get("content") or "", pending=[])
    _store(tx, new)
    return new


def _next_turn(env: Env, tx: Transaction, rec: dict[str, Any], event: RunEvent) -> dict[str, Any]:
    """The calls of the run's last turn ended: their results join the
    conversation and the next turn is sent, unless the turn budget is spent."""
    last = (rec.get("turns") or [{}])[-1]
    messages = [*rec.get("messages", []), *run_messages.tool_messages(tx, last)]
    rec = {**rec, "messages": messages}
    max_turns = (rec.get("budget") or {}).get("max_turns")
    if max_turns is not None and int(rec["turn"]) >= int(max_turns):
        return fail(env, tx, rec, f"turn budget exceeded: {rec['turn']} turns, the budget is "
                                  f"{max_turns}")  # fmt: skip
    new = _send_turn(env, tx, _moved(rec, event, tx))
    _store(tx, new)
    return new


def tag_call(tx: Transaction, task_id: str, run_id: str, turn: int, position: int) -> None:
    """Mark a tool call's task (created in this transaction) as the run's: its
    end is then a join of the run (:func:`task_ended`)."""
    task = tasks.read(tx, task_id)
    tagged = {**task, "run": {"run_id": run_id, "turn": turn, "position": position,
                              "role": "call"}}  # fmt: skip
    tasks.store(tx, tagged)


def task_ended(env: Env, tx: Transaction, task: Mapping[str, Any]) -> None:
    """A task of a run is final (in the transaction that ended it): a turn that
    died fails the run; the last call of a turn sends the next one."""
    tag = task.get("run") or {}
    rec = tx.get_record(Tables.RUNS, str(tag.get("run_id")))
    if rec is None or rec["status"] in RUN_TERMINAL:
        return  # pruned, or ended already (its own cancel or failure ends its tasks)
    if tag.get("role") == "turn":
        if rec.get("turn_task_id") == task["task_id"] and task["status"] != TaskStatus.SUCCEEDED:
            fail(env, tx, rec, f"turn {tag.get('turn')} {task['status']}: "
                               f"{task.get('error') or 'no detail'}")  # fmt: skip
        return
    task_id = str(task["task_id"])
    if int(tag.get("turn", -1)) != int(rec["turn"]) or task_id not in rec.get("pending", []):
        return
    left = [t for t in rec["pending"] if t != task_id]
    if left:
        rec = {**rec, "pending": left, "updated_at": iso(tx.now)}
        if rec["status"] == RunStatus.AWAITING_APPROVAL and not _any_awaiting(tx, left):
            rec = _moved(rec, _E.APPROVED, tx)
        _store(tx, rec)
        return
    _next_turn(env, tx, {**rec, "pending": []}, _E.NEXT_TURN)


def _any_awaiting(tx: Transaction, task_ids: Sequence[str]) -> bool:
    records = tx.get_records(Tables.TASKS, list(task_ids))
    return any(r.get("status") == TaskStatus.AWAITING_APPROVAL for r in records.values())


def approval_decided(env: Env, tx: Transaction, task: Mapping[str, Any]) -> None:
    """A call of a run was approved (and sent): the run awaits its tools, not a
    human, once no other call of its turn awaits one."""
    tag = task.get("run") or {}
    rec = tx.get_record(Tables.RUNS, str(tag.get("run_id")))
    if rec is None or rec["status"] != RunStatus.AWAITING_APPROVAL:
        return
    others = [t for t in rec.get("pending", []) if t != task["task_id"]]
    if not _any_awaiting(tx, others):
        _store(tx, _moved(rec, _E.APPROVED, tx))


def fail(
    env: Env, tx: Transaction, rec: Mapping[str, Any], reason: str, *, pending: Sequence[str] = ()
) -> dict[str, Any]:
    """End a run as failed with ``reason``; its unfinished tasks (and their
    approvals and timers) are cancelled in this transaction."""
    return _end(env, tx, rec, _E.FAIL, reason, pending)


def cancel(env: Env, tx: Transaction, run_id: str, reason: str = "cancelled") -> dict[str, Any]:
    """Cancel a run: its queued turn and its unfinished calls (with their
    approvals and timers) are cancelled in this transaction. A finished run
    raises :class:`IllegalTransition`."""
    return _end(env, tx, read(tx, run_id), _E.CANCEL, reason, ())


def _end(
    env: Env,
    tx: Transaction,
    rec: Mapping[str, Any],
    event: RunEvent,
    reason: str,
    pending: Sequence[str],
) -> dict[str, Any]:
    new = _moved(rec, event, tx, error=reason)
    doomed = [*rec.get("pending", []), *pending]
    if rec.get("turn_task_id"):
        doomed.append(str(rec["turn_task_id"]))
    new["pending"] = []
    new.pop("turn_task_id", None)
    _store(tx, new)  # first: the cancels below find the run ended, and do nothing to it
    records = tx.get_records(Tables.TASKS, list(dict.fromkeys(doomed))) if doomed else {}
    why = f"its run failed: {reason}" if event is _E.FAIL else f"its run was cancelled: {reason}"
    for task_id, task in records.items():
        if task.get("status") not in TERMINAL:
            tasks.cancel(env, tx, task_id, reason=why)
    return new


def add_message(
    env: Env, tx: Transaction, run_id: str, text: str, *, by: str, key: str | None = None
) -> dict[str, Any]:
    """A user's next message to a run that answered (succeeded): appended, and
    the next turn queued. ``by`` must be the run's owner. With ``key``, the
    same key and text again is this message (the run as it is now, nothing
    appended); the same key with another text raises
    :class:`IdempotencyConflict`."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArguments("a message needs text: a non-empty string")
    if len(text) > MAX_INPUT_CHARS:
        raise InvalidArguments(f"a message is at most {MAX_INPUT_CHARS} characters")
    rec = read(tx, run_id)
    if by != rec["owner"]:
        raise RunNotFound(f"no run {run_id!r}")
    keys: dict[str, str] = dict(rec.get("message_keys") or {})
    if key is not None:
        # A digest, not the text: the record already holds the text once.
        digest = hashlib.sha256(text.encode()).hexdigest()
        if key in keys:
            if keys[key] != digest:
                raise IdempotencyConflict(
                    f"message key {key!r} already sent another text to run {run_id!r}"
                )
            return rec
        keys[key] = digest
    messages = [*rec.get("messages", []), {"role": "user", "content": text}]
    changes: dict[str, Any] = {"messages": messages, "output": None}
    if key is not None:
        changes["message_keys"] = keys
    new = _send_turn(env, tx, _moved(rec, _E.MESSAGE, tx, **changes))
    _store(tx, new)
    return new
