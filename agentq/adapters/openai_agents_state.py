"""The OpenAI Agents SDK's interrupted runs (``RunState``) kept in agentq's database.

::

    from agentq.adapters.openai_agents import AgentQTools
    from agentq.adapters.openai_agents_state import approve_saved, load_state, save_state

    tools = AgentQTools(rt, conversation="ticket-7")
    agent = Agent(name="support", tools=tools.function_tools(), model=...)
    result = await Runner.run(agent, "refund order B7: 250")
    if result.interruptions:                         # agentq's policy holds the refund
        await save_state(rt, "ticket-7", result.to_state())   # the process may now end

    # days later, in any process: a human approves (this, or any agentq surface)
    await approve_saved(rt, "ticket-7", agent, call_id, by="ops-lead", tools=tools)

    # and the run goes on, wherever
    state = await load_state(rt, "ticket-7", agent, tools=tools)
    result = await Runner.run(agent, state)

A saved state is a record of the runtime's database (``openai_agents_states``,
keyed by the caller's key) holding ``RunState.to_json()``, a version and the
call ids it waits on. :func:`approve_saved` records the approver's decision in
agentq (the task of the call, its audit) **and** the approved state in one
transaction: neither is written without the other, and a state saved by someone
else meanwhile (another version) is refused rather than overwritten. An
approval given elsewhere (HTTP, the CLI, the console, ``rt.approve``) reaches
the run too: :func:`load_state` with ``tools`` applies agentq's decision of each
call the state waits on (approved, rejected) to the state it returns, so the
SDK's own approval state never says yes where agentq said no.

A state holds the run's context (``to_json``'s ``context_serializer`` rules)
and is trusted input when loaded: keep it here, never in a client's hands (the
SDK says the same). The SDK is imported with this module
(``agentq-runtime[openai-agents]``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from agents import Agent as SDKAgent
from agents import RunState, ToolApprovalItem

from agentq.approvals import ApprovalStatus
from agentq.backends.base import Transaction
from agentq.errors import AgentQError, ConfigError
from agentq.ledger import TaskInfo

if TYPE_CHECKING:
    from agentq.adapters.openai_agents import AgentQTools
    from agentq.decision import Decision
    from agentq.runtime import Runtime

__all__ = [
    "STATES",
    "StateChanged",
    "approve_saved",
    "delete_state",
    "load_state",
    "reject_saved",
    "save_state",
    "stage_state",
]

STATES: Final = "openai_agents_states"
"""The record table of saved run states: ``{"state": RunState.to_json(),
"version", "waiting_on"}``, keyed by the caller's key."""


class StateChanged(AgentQError):
    """The saved state is not the version a decision was made on (saved again or
    deleted meanwhile): nothing was written; load it again and decide on that."""


async def save_state(
    rt: Runtime,
    key: str,
    state: RunState[Any, Any],
    *,
    context_serializer: Callable[[Any], Any] | None = None,
) -> int:
    """Keep ``state`` under ``key`` (replacing what was there); its new version."""
    value = _value(state, context_serializer)
    return await asyncio.to_thread(rt.backend.transact, lambda tx: stage_state(tx, key, value))


def stage_state(tx: Transaction | Decision, key: str, state: RunState[Any, Any] | dict[str, Any],
                ) -> int:  # fmt: skip
    """Keep ``state`` under ``key`` in ``tx`` (a backend transaction or a
    decision), with whatever else it writes; its new version."""
    raw = _raw(tx)
    value = state if isinstance(state, dict) else _value(state, None)
    old = raw.get_record(STATES, _checked(key))
    version = int(old["version"]) + 1 if old else 1
    raw.put_record(STATES, key, {**value, "version": version})
    return version


async def load_state(
    rt: Runtime,
    key: str,
    agent: SDKAgent[Any],
    *,
    tools: AgentQTools | None = None,
    context_deserializer: Callable[[Any], Any] | None = None,
) -> RunState[Any, Any] | None:
    """The state saved under ``key``, for ``agent`` (the run's starting agent),
    or None. With ``tools``, agentq's decision on each agentq call the state
    waits on is applied to it (approved or rejected, by whomever, wherever)."""
    loaded = await _load(rt, key, agent, context_deserializer)
    if loaded is None:
        return None
    state, _ = loaded
    if tools is not None:
        for item in state.get_interruptions():
            decided = await _decision(rt, tools, state, item)
            said = _said(state, item)
            if decided == ApprovalStatus.APPROVED and said is not True:
                state.approve(item)
            elif decided is not None and decided != ApprovalStatus.APPROVED and said is not False:
                state.reject(item, rejection_message=f"not approved in agentq: {decided}")
    return state


async def approve_saved(
    rt: Runtime,
    key: str,
    agent: SDKAgent[Any],
    call_id: str,
    *,
    by: str,
    note: str = "",
    tools: AgentQTools | None = None,
    context_serializer: Callable[[Any], Any] | None = None,
    context_deserializer: Callable[[Any], Any] | None = None,
) -> TaskInfo | None:
    """Approve the call ``call_id`` the state under ``key`` waits on, as ``by``
    (the authenticated approver): agentq's approval of its task (when ``tools``
    made it an agentq call) and the approved state commit in one transaction.
    Returns the task (None: a call of a tool of the SDK's own, approved in the
    state alone). :class:`StateChanged` if the state was saved again meanwhile.
    The context (de)serializers are ``RunState.to_json``'s and ``from_json``'s."""
    return await _decide(rt, key, agent, call_id, by, note, tools, approve=True,
                         serializers=(context_serializer, context_deserializer))


async def reject_saved(
    rt: Runtime,
    key: str,
    agent: SDKAgent[Any],
    call_id: str,
    *,
    by: str,
    note: str = "",
    tools: AgentQTools | None = None,
    context_serializer: Callable[[Any], Any] | None = None,
    context_deserializer: Callable[[Any], Any] | None = None,
) -> TaskInfo | None:
    """Reject the call, as :func:`approve_saved` approves it."""
    return await _decide(rt, key, agent, call_id, by, note, tools, approve=False,
                         serializers=(context_serializer, context_deserializer))


async def delete_state(rt: Runtime, key: str) -> bool:
    """Forget the state saved under ``key`` (a finished run); whether there was one."""
    return await asyncio.to_thread(
        rt.backend.transact, lambda tx: tx.delete_record(STATES, _checked(key))
    )


# --- internals ------------------------------------------------------------------


def _checked(key: str) -> str:
    if not isinstance(key, str) or not key:
        raise ConfigError("a saved state's key is a non-empty string")
    return key


def _value(state: RunState[Any, Any], serializer: Callable[[Any], Any] | None) -> dict[str, Any]:
    data = state.to_json(context_serializer=serializer)
    json.dumps(data)  # a context that is not JSON fails here, before any write
    return {"state": data, "waiting_on": [_call_id(i) for i in state.get_interruptions()]}


async def _load(
    rt: Runtime, key: str, agent: SDKAgent[Any], deserializer: Callable[[Any], Any] | None
) -> tuple[RunState[Any, Any], int] | None:
    rec = await asyncio.to_thread(rt.backend.get_record, STATES, _checked(key))
    if rec is None:
        return None
    state = await RunState.from_json(agent, rec["state"], context_deserializer=deserializer)
    return state, int(rec["version"])


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    found = getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict)
                                               else None)  # fmt: skip
    return str(found or "")


def _said(state: RunState[Any, Any], item: ToolApprovalItem) -> bool | None:
    """What the state itself says of the item's call (None: undecided)."""
    context = state._context  # the run's context wrapper, where the SDK keeps decisions
    if context is None or not item.tool_name:
        return None
    return context.is_tool_approved(item.tool_name, _call_id(item))


def _item(state: RunState[Any, Any], call_id: str) -> ToolApprovalItem:
    for item in state.get_interruptions():
        if _call_id(item) == call_id:
            return item
    waiting = ", ".join(_call_id(i) for i in state.get_interruptions()) or "none"
    raise ConfigError(f"the saved state waits on no call {call_id!r} (it waits on: {waiting})")


async def _task(
    tools: AgentQTools, state: RunState[Any, Any], item: ToolApprovalItem
) -> TaskInfo | None:
    try:
        return await tools._task_of(state, item)
    except ConfigError:
        return None  # not a call of an agentq tool


async def _decision(
    rt: Runtime, tools: AgentQTools, state: RunState[Any, Any], item: ToolApprovalItem
) -> ApprovalStatus | None:
    """agentq's decision on the item's call (None: none yet, or not an agentq call)."""
    info = await _task(tools, state, item)
    if info is None or info.approval_id is None:
        return None
    approval = await asyncio.to_thread(rt.approval, info.approval_id)
    if approval.status in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
        return None
    return approval.status


async def _decide(
    rt: Runtime,
    key: str,
    agent: SDKAgent[Any],
    call_id: str,
    by: str,
    note: str,
    tools: AgentQTools | None,
    *,
    approve: bool,
    serializers: tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None],
) -> TaskInfo | None:
    loaded = await _load(rt, key, agent, serializers[1])
    if loaded is None:
        raise StateChanged(f"no state is saved under {key!r}")
    state, version = loaded
    item = _item(state, call_id)
    info = await _task(tools, state, item) if tools is not None else None
    if info is not None and info.approval_id is None:
        raise ConfigError(f"task {info.task_id} needs no approval")
    if approve:
        state.approve(item)
    else:
        state.reject(item, rejection_message=f"rejected by {by}: {note or 'no reason'}")
    value = _value(state, serializers[0])

    def decide(tx: Decision) -> TaskInfo | None:
        current = tx.tx.get_record(STATES, key)
        if current is None or int(current["version"]) != version:
            raise StateChanged(f"the state under {key!r} was saved again since it was loaded")
        decided = None
        if info is not None and info.approval_id is not None:
            decided = (tx.approve(info.approval_id, by, note) if approve
                       else tx.reject(info.approval_id, by, note))  # fmt: skip
        tx.tx.put_record(STATES, key, {**value, "version": version + 1})
        return decided

    return await asyncio.to_thread(rt.transact, decide)


def _raw(tx: Transaction | Decision) -> Transaction:
    inner = getattr(tx, "tx", None)
    return inner if inner is not None else tx  # type: ignore[return-value]
