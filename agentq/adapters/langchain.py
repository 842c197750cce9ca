"""LangChain and LangGraph: agentq's tools as LangChain tools whose calls are agentq tasks.

::

    from agentq.adapters.langchain import agentq_tools

    tools = agentq_tools(rt, wait_seconds=10, interrupt_on_approval=True)
    graph = ...  # e.g. a LangGraph with ToolNode(tools) and a checkpointer
    graph.invoke(inputs, {"configurable": {"thread_id": "ticket-812"}})

A call's key is the conversation (LangGraph's ``thread_id``, else the
``conversation`` given here) and the model's tool-call id. The tool enqueues,
waits up to ``wait_seconds`` and returns the result, or the task handle when it
has not finished. When agentq's policy holds the call for a human:

* by default the model is told it awaits approval (nothing has run);
* with ``interrupt_on_approval=True`` (inside a LangGraph graph with a
  checkpointer) the graph is interrupted with the approval's id. The human
  decides in agentq (``rt.approve(approval_id, by=...)``) and the graph resumes
  with ``Command(resume=approval_id)``: only the id of this call's approval,
  once agentq records a decision on it, lets the call go on
  (:func:`approval_refusal`). A bare ``True``, another call's id, or the id
  before anyone decided runs nothing: the graph is interrupted again, saying why.

The tools need a model's ``ToolCall`` (its id is the key): invoking one with
plain arguments is refused.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, InjectedToolCallId
from pydantic import BaseModel, ConfigDict, create_model

from agentq.adapters.calls import KeyMode, call_key, check_wait, outcome
from agentq.approvals import ApprovalStatus
from agentq.errors import AgentQError, ConfigError
from agentq.ledger import TaskInfo, TaskStatus
from agentq.runtime import Runtime
from agentq.tools.arguments import refuses_unknown

__all__ = ["AgentQTool", "agentq_tools", "approval_refusal"]

_CALL_ID = "tool_call_id"
#: Refused resume values before the tool gives up asking and tells the model.
_MAX_REFUSALS = 20


def _conversation(config: RunnableConfig, fallback: str | None) -> str:
    configurable = config.get("configurable") or {}
    found = configurable.get("thread_id") or fallback
    if not isinstance(found, str) or not found:
        raise ConfigError(
            "no conversation id: run inside a LangGraph thread (configurable.thread_id) "
            "or give agentq_tools(conversation=...)"
        )
    return found


def approval_refusal(rt: Runtime, info: TaskInfo, resume: object) -> str | None:
    """Why a LangGraph resume value does not let a task awaiting approval go on
    (None: it may). It must be the id of this task's approval, and agentq must
    have recorded a decision on it. Never approves anything."""
    if resume != info.approval_id:
        return (
            f"resume with the agentq approval id {info.approval_id!r} once it is decided in "
            f"agentq, not {resume!r:.60}: nothing ran"
        )
    approval = rt.approval(str(info.approval_id))
    if approval.status not in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED):
        return (
            f"approval {approval.approval_id} is {approval.status.value} in agentq: nothing "
            "ran; decide it in agentq, then resume with its id"
        )
    return None


class AgentQTool(BaseTool):
    """One agentq tool as a LangChain tool (build them with :func:`agentq_tools`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    rt: Any
    wait_seconds: float = 10.0
    key_mode: KeyMode = "call_id"
    conversation: str | None = None
    interrupt_on_approval: bool = False

    def _call(self, config: RunnableConfig, kwargs: dict[str, Any]) -> TaskInfo:
        rt: Runtime = self.rt
        call_id = kwargs.pop(_CALL_ID, None)
        conversation = _conversation(config, self.conversation)
        key = call_key(
            rt, "langchain", self.name, kwargs, conversation=conversation, call_id=call_id,
            mode=self.key_mode,
        )  # fmt: skip
        # No reason: approvers read it as why the call was asked, and a model's call gives none.
        info = rt.enqueue_action(self.name, kwargs, idempotency_key=key)
        if info.status is TaskStatus.AWAITING_APPROVAL and self.interrupt_on_approval:
            info = self._interrupt_for(info)
        if not info.done and info.status is not TaskStatus.AWAITING_APPROVAL:
            info = rt.wait(info.task_id, self.wait_seconds)
        return info

    def _interrupt_for(self, info: TaskInfo) -> TaskInfo:
        """Interrupt the graph until it is resumed with this call's decided approval.

        A refused resume value interrupts again, saying why (LangGraph replays a
        node's interrupts in order, so each resume answers the next one)."""
        from langgraph.types import interrupt

        question: dict[str, Any] = {"approval_id": info.approval_id, "task_id": info.task_id,
                                    "tool": info.tool, "args": info.args}  # fmt: skip
        for _ in range(_MAX_REFUSALS):
            refusal = approval_refusal(self.rt, info, interrupt(question))
            if refusal is None:
                current: TaskInfo = self.rt.task(info.task_id)
                return current
            question = {**question, "refused": refusal}
        return info  # the model is told it still awaits approval

    def _run(self, config: RunnableConfig, **kwargs: Any) -> str:
        kwargs.pop("run_manager", None)
        try:
            info = self._call(config, kwargs)
        except ConfigError:
            raise  # a deployment mistake (no conversation id): not the model's to fix
        except AgentQError as exc:  # bad arguments, a reused key: the model may correct it
            return json.dumps({"error": str(exc)})
        return json.dumps(outcome(info), default=str)


def agentq_tools(
    rt: Runtime,
    *,
    tools: list[str] | None = None,
    wait_seconds: float = 10.0,
    key_mode: KeyMode = "call_id",
    conversation: str | None = None,
    interrupt_on_approval: bool = False,
) -> list[AgentQTool]:
    """LangChain tools for the agent-callable tools of ``rt`` (or the named ones)."""
    check_wait(wait_seconds)
    offered = {s["function"]["name"] for s in rt.tool_schemas()}
    names = sorted(offered) if tools is None else list(tools)
    unknown = sorted(set(names) - offered)
    if unknown:
        raise ConfigError(f"not agent-callable tool(s): {', '.join(unknown)}")
    out = []
    for name in names:
        definition = rt.tools.get(name)
        if _CALL_ID in definition.args_model.model_fields:
            raise ConfigError(f"tool {name!r}: an argument named {_CALL_ID!r} is reserved")
        # The model's arguments plus the tool-call id LangChain injects (hidden from the model).
        # LangChain validates a call against it and passes on only its fields: unless the
        # tool takes extra keys, an unknown one must be refused here, not dropped.
        base = definition.args_model
        if refuses_unknown(base):
            base = type(base.__name__, (base,), {
                "model_config": ConfigDict(extra="forbid"), "__module__": base.__module__,
            })  # fmt: skip
        schema: type[BaseModel] = create_model(
            f"{definition.args_model.__name__}Call",
            __base__=base,
            **{_CALL_ID: (Annotated[str, InjectedToolCallId], ...)},  # type: ignore[call-overload]
        )
        out.append(AgentQTool(
            name=name, description=definition.description, args_schema=schema, rt=rt,
            wait_seconds=wait_seconds, key_mode=key_mode, conversation=conversation,
            interrupt_on_approval=interrupt_on_approval,
        ))  # fmt: skip
    return out
