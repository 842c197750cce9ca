"""OpenAI Agents SDK: agentq's tools as ``FunctionTool`` s whose calls are agentq tasks.

::

    from agents import Agent, Runner
    from agentq.adapters.openai_agents import AgentQTools

    tools = AgentQTools(rt, conversation="support-ticket-812", wait_seconds=10)
    agent = Agent(name="refunds", tools=tools.function_tools())
    result = await Runner.run(agent, "refund order 1")
    for item in result.interruptions:           # agentq asks a human
        state = result.to_state()
        await tools.approve(state, item, by=authenticated_user)
        result = await Runner.run(agent, state)

Each tool's ``needs_approval`` enqueues the call (keyed by the conversation and
the call id) and answers True when agentq's policy holds it for a human, so the
SDK interrupts the run with that call. :meth:`AgentQTools.approve` records the
decision in agentq as the authenticated approver *and* in the run state; the
tool's invocation then finds the same task and waits (up to ``wait_seconds``)
for its result. ``RunState.approve`` alone is only the client's word: the
invocation finds the task still awaiting agentq's approval, runs nothing, and
tells the model so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable
from typing import Any

from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from agentq.adapters.calls import KeyMode, call_key, check_wait, enqueue_and_wait, outcome
from agentq.errors import AgentQError, ConfigError
from agentq.ledger import TaskInfo, TaskStatus
from agentq.runtime import Runtime

__all__ = ["AgentQTools"]

#: A conversation id, or how to read it from the run's context.
Conversation = str | Callable[[RunContextWrapper[Any]], str]


class AgentQTools:
    """Builds the SDK's tools over ``rt`` for one conversation (or a rule to find it)."""

    def __init__(
        self,
        rt: Runtime,
        *,
        conversation: Conversation,
        tools: Iterable[str] | None = None,
        wait_seconds: float = 10.0,
        key_mode: KeyMode = "call_id",
    ) -> None:
        self.rt = rt
        self.conversation = conversation
        self.wait_seconds = check_wait(wait_seconds)
        self.key_mode: KeyMode = key_mode
        offered = {s["function"]["name"]: s["function"] for s in rt.tool_schemas()}
        names = list(offered) if tools is None else list(tools)
        unknown = sorted(set(names) - set(offered))
        if unknown:
            raise ConfigError(f"not agent-callable tool(s): {', '.join(unknown)}")
        self._functions = {n: offered[n] for n in names}

    def _conversation(self, ctx: RunContextWrapper[Any]) -> str:
        found = self.conversation(ctx) if callable(self.conversation) else self.conversation
        if not isinstance(found, str) or not found:
            raise ConfigError("the conversation id must be a non-empty string")
        return found

    async def _enqueue(
        self,
        ctx: RunContextWrapper[Any],
        tool: str,
        args: dict[str, Any],
        call_id: str,
        wait: float,
    ) -> TaskInfo:
        conversation = self._conversation(ctx)
        key = call_key(
            self.rt, "openai-agents", tool, args, conversation=conversation, call_id=call_id,
            mode=self.key_mode,
        )  # fmt: skip
        return await enqueue_and_wait(self.rt, tool, args, key, wait)

    def _held_for_approval(self, tool: str, params: dict[str, Any]) -> bool:
        definition = self.rt.tools.get(tool)
        validated = definition.enqueueable_args(params)
        return bool(definition.requires_approval or self.rt.policy.approval_rule(tool, validated))

    def function_tools(self) -> list[FunctionTool]:
        """One ``FunctionTool`` per agent-callable tool."""
        return [self._function_tool(name, f) for name, f in self._functions.items()]

    def _function_tool(self, name: str, function: dict[str, Any]) -> FunctionTool:
        async def needs_approval(
            ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
        ) -> bool:
            # Only a call agentq's policy holds for a human is enqueued here (its
            # approval must exist for the approver to decide); any other call is
            # enqueued when invoked, after the SDK's input guardrails.
            try:
                if not self._held_for_approval(name, params):
                    return False
                info = await self._enqueue(ctx, name, dict(params), call_id, 0)
            except AgentQError:
                return False  # the invocation reports the problem to the model
            return info.status is TaskStatus.AWAITING_APPROVAL

        async def invoke(ctx: ToolContext[Any], arguments: str) -> str:
            try:
                args = json.loads(arguments or "{}")
                if not isinstance(args, dict):
                    raise ValueError("arguments must be a JSON object")
                info = await self._enqueue(ctx, name, args, ctx.tool_call_id, self.wait_seconds)
            except (AgentQError, ValueError) as exc:
                return json.dumps({"error": str(exc)})
            return json.dumps(outcome(info), default=str)

        return FunctionTool(
            name=name,
            description=function["description"],
            params_json_schema=function["parameters"],
            on_invoke_tool=invoke,
            strict_json_schema=False,  # pydantic schemas with defaults are not strict-mode schemas
            needs_approval=needs_approval,
        )

    async def _task_of(self, state: RunState[Any, Any], item: ToolApprovalItem) -> TaskInfo:
        raw = item.raw_item
        call_id = getattr(raw, "call_id", None) or (raw.get("call_id") if isinstance(raw, dict)
                                                    else None)  # fmt: skip
        arguments = getattr(raw, "arguments", None) or (
            raw.get("arguments") if isinstance(raw, dict) else None
        )
        name = item.tool_name or getattr(raw, "name", None)
        if not (isinstance(call_id, str) and isinstance(name, str) and name in self._functions):
            raise ConfigError("this approval item is not a call of an agentq tool")
        args = json.loads(arguments or "{}")
        ctx = state._context  # the run's context wrapper, for the conversation rule
        if ctx is None:
            raise ConfigError("the run state has no context")
        return await self._enqueue(ctx, name, args, call_id, 0)

    async def approve(
        self, state: RunState[Any, Any], item: ToolApprovalItem, *, by: str, note: str = ""
    ) -> TaskInfo:
        """Approve the call in agentq as ``by`` (the authenticated approver) and in the
        run state; resume the run with the state afterwards."""
        info = await self._task_of(state, item)
        if info.approval_id is None:
            raise ConfigError(f"task {info.task_id} needs no approval")
        decided = await self.rt.aapprove(info.approval_id, by, note)
        state.approve(item)
        return decided

    async def reject(
        self, state: RunState[Any, Any], item: ToolApprovalItem, *, by: str, note: str = ""
    ) -> TaskInfo:
        """Reject the call in agentq as ``by`` and in the run state."""
        info = await self._task_of(state, item)
        if info.approval_id is None:
            raise ConfigError(f"task {info.task_id} needs no approval")
        approval_id = info.approval_id
        decided = await asyncio.to_thread(self.rt.reject, approval_id, by, note)
        state.reject(item, rejection_message=f"rejected by {by}: {note or 'no reason'}")
        return decided
