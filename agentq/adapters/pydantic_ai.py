"""Pydantic AI: agentq's tools as a toolset whose calls are agentq tasks.

::

    from pydantic_ai import Agent
    from agentq.adapters.pydantic_ai import AgentQToolset

    toolset = AgentQToolset(rt, wait_seconds=5)
    agent = Agent(model, toolsets=[toolset], output_type=[str, DeferredToolRequests])

A call enqueues its task (keyed by the conversation and the tool-call id) and
waits up to ``wait_seconds``: a finished task's result goes to the model; an
unfinished one raises ``CallDeferred`` with the task id, and
:meth:`AgentQToolset.results` later turns the finished tasks into
``DeferredToolResults``. A call that agentq's policy sends for approval raises
``ApprovalRequired``; :meth:`AgentQToolset.decide` records the human's decision
in agentq *and* answers Pydantic AI. Pydantic AI's own approval is not an
authorization boundary: a ``DeferredToolResults`` that approves a call agentq
has no approval for runs nothing (the model is told it still awaits approval).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic_ai import (
    CallDeferred,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    RunContext,
    ToolDenied,
)
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import ToolCallPart
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from agentq.adapters.calls import KeyMode, call_key, check_wait, enqueue_and_wait, outcome
from agentq.approvals import ApprovalInfo, ApprovalStatus
from agentq.errors import (
    AgentQError,
    ApprovalError,
    ConfigError,
    IdempotencyConflict,
    InvalidArguments,
    TaskNotFound,
)
from agentq.idempotency import args_digest
from agentq.ledger import TaskStatus
from agentq.runtime import Runtime

__all__ = ["AgentQToolset"]

_ANY_ARGS = SchemaValidator(schema=core_schema.dict_schema())


def _selected(rt: Runtime, names: Iterable[str] | None) -> dict[str, dict[str, Any]]:
    offered = {s["function"]["name"]: s["function"] for s in rt.tool_schemas()}
    if names is None:
        return offered
    wanted = list(names)
    unknown = sorted(set(wanted) - set(offered))
    if unknown:
        raise ConfigError(f"not agent-callable tool(s): {', '.join(unknown)}")
    return {n: offered[n] for n in wanted}


def _denial(approval: ApprovalInfo) -> str:
    """What the model is told of an approval that ended without a yes."""
    if approval.status is ApprovalStatus.REJECTED:
        who = approval.decided_by or "a human"
        return f"rejected by {who}: {approval.decision_note or 'no reason'}"
    why = approval.decision_note or (
        "its task was cancelled" if approval.status is ApprovalStatus.VOID else ""
    )
    return f"approval {approval.status.value}" + (f": {why}" if why else "")


class AgentQToolset(AbstractToolset[Any]):
    """The agent-callable tools of ``rt`` (or the named ones) as a Pydantic AI toolset."""

    def __init__(
        self,
        rt: Runtime,
        *,
        tools: Iterable[str] | None = None,
        wait_seconds: float = 5.0,
        key_mode: KeyMode = "call_id",
        id: str = "agentq",
    ) -> None:
        self.rt = rt
        self.wait_seconds = check_wait(wait_seconds)
        self.key_mode: KeyMode = key_mode
        self._id = id
        self._functions = _selected(rt, tools)

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=ToolDefinition(
                    name=name, description=f["description"], parameters_json_schema=f["parameters"]
                ),
                max_retries=2,
                args_validator=_ANY_ARGS,  # agentq validates: one set of rules, one error text
            )
            for name, f in self._functions.items()
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        conversation = ctx.conversation_id or ctx.run_id or ""
        try:
            key = call_key(
                self.rt, "pydantic-ai", name, tool_args, conversation=conversation,
                call_id=ctx.tool_call_id, mode=self.key_mode,
            )  # fmt: skip
            info = await enqueue_and_wait(self.rt, name, tool_args, key, self.wait_seconds)
        except (InvalidArguments, IdempotencyConflict) as exc:
            raise ModelRetry(str(exc)) from exc
        if info.status is TaskStatus.AWAITING_APPROVAL:
            if ctx.tool_call_approved:
                # Approved in Pydantic AI but not in agentq: nothing runs.
                return outcome(info)
            raise ApprovalRequired(
                metadata={"task_id": info.task_id, "approval_id": info.approval_id}
            )
        if not info.done:
            raise CallDeferred(metadata={"task_id": info.task_id})
        return info.result if info.status is TaskStatus.SUCCEEDED else outcome(info)

    async def decide(
        self,
        requests: DeferredToolRequests,
        decisions: Mapping[str, bool],
        *,
        by: str,
        note: str = "",
    ) -> DeferredToolResults:
        """Record each decision (tool-call id → approve?) in agentq as ``by`` (who
        you authenticated), and answer Pydantic AI the same. Only agentq's record
        lets a call run."""
        pending = {c.tool_call_id: c for c in requests.approvals}
        unknown = sorted(set(decisions) - set(pending))
        if unknown:
            raise ConfigError(f"no approval was requested for tool call(s) {', '.join(unknown)}")
        results = DeferredToolResults()
        for call_id, approve in decisions.items():
            approval_id = str((requests.metadata.get(call_id) or {}).get("approval_id", ""))
            # The metadata came back from the client: only this very call's approval is decided.
            approval = await asyncio.to_thread(self.rt.approval, approval_id)
            self._check_same_call(approval.tool, approval.args, pending[call_id], approval_id)
            if approve:
                await self.rt.aapprove(approval_id, by, note)
                results.approvals[call_id] = True
            else:
                await asyncio.to_thread(self.rt.reject, approval_id, by, note)
                results.approvals[call_id] = ToolDenied(f"rejected by {by}: {note or 'no reason'}")
        return results

    async def results(
        self, requests: DeferredToolRequests, *, wait_seconds: float = 0.0
    ) -> DeferredToolResults:
        """The deferred calls whose tasks have finished (each waited for up to
        ``wait_seconds``), and the approvals a human has decided anywhere (CLI,
        console, HTTP, MCP, :meth:`decide`), as results for the next run.

        An approved call whose task has finished comes back as its result (nothing
        runs again); one approved but not finished as approved (the resumed run
        finds its task); a rejected, expired or voided one as denied, with who and
        why. Unfinished calls and undecided approvals are left out: resume once
        every request has an answer (Pydantic AI requires one for each)."""
        results = DeferredToolResults()
        for asked in requests.approvals:
            approval_id = (requests.metadata.get(asked.tool_call_id) or {}).get("approval_id")
            if isinstance(approval_id, str):
                await self._decided(asked, approval_id, results, check_wait(wait_seconds))
        for call in requests.calls:
            task_id = (requests.metadata.get(call.tool_call_id) or {}).get("task_id")
            if not isinstance(task_id, str):
                continue
            info = await self.rt.wait_async(task_id, check_wait(wait_seconds))
            # The metadata came back from the client: only a task of this very call answers it.
            self._check_same_call(info.tool, info.args, call, task_id, TaskNotFound)
            if info.done:
                ok = info.status is TaskStatus.SUCCEEDED
                results.calls[call.tool_call_id] = info.result if ok else outcome(info)
        return results

    async def _decided(
        self, asked: ToolCallPart, approval_id: str, results: DeferredToolResults, wait: float
    ) -> None:
        """Answer ``asked`` in ``results`` if its approval has been decided."""
        approval = await asyncio.to_thread(self.rt.approval, approval_id)
        # The metadata came back from the client: only this very call's approval answers it.
        self._check_same_call(approval.tool, approval.args, asked, approval_id)
        call_id = asked.tool_call_id
        if approval.status is ApprovalStatus.APPROVED:
            info = await self.rt.wait_async(approval.task_id, wait)
            if info.done:
                ok = info.status is TaskStatus.SUCCEEDED
                results.calls[call_id] = info.result if ok else outcome(info)
            else:
                results.approvals[call_id] = True
        elif approval.status not in (ApprovalStatus.PENDING, ApprovalStatus.ESCALATED):
            results.approvals[call_id] = ToolDenied(_denial(approval))

    def _check_same_call(
        self,
        tool: str,
        args: dict[str, Any],
        call: ToolCallPart,
        what: str,
        error: type[AgentQError] = ApprovalError,
    ) -> None:
        """Refuse a task or approval that is not the one of ``call`` (same tool, same
        validated arguments)."""
        try:
            validated = self.rt.tools.get(call.tool_name).enqueueable_args(call.args_as_dict())
        except AgentQError as exc:
            raise error(f"{what} is not the one of call {call.tool_call_id}: {exc}") from exc
        if tool != call.tool_name or args_digest(tool, args) != args_digest(tool, validated):
            raise error(f"{what} is not the one of call {call.tool_call_id}")
