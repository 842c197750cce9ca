"""One turn of a durable run: ask the model, then commit its answer and its calls.

The turn is a task of the agent's turn tool, so a worker holds a lease while
the model is asked. Nothing of the answer is written until the completion
transaction, which also acks the turn's message: the answer appended to the
run, the tool tasks it calls (keyed by run, turn and position, never by the
provider's call id), local calls run through ``tx``, approvals and their
timers, and the run's next status (:func:`agentq.lifecycle.runs.record_turn`).
A worker that lost its lease commits nothing; a turn that crashed before its
commit is asked again (a request in flight at a crash may repeat; a committed
turn never does).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentq.agents.agent import Agent, TurnArgs
from agentq.agents.model import ModelAnswer, ToolCall
from agentq.context import ToolContext
from agentq.envelope import check_args_size
from agentq.errors import AgentQError, PayloadTooLarge, ToolError
from agentq.ledger import Tables, TaskStatus
from agentq.lifecycle import run_budgets, runs
from agentq.run_info import RunStatus
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.decision import Decision
    from agentq.runtime import Runtime

__all__ = ["RUN_HEADER", "TURN_HEADER", "commit_turn", "turn_tool"]

#: Headers each model request carries (a gateway's logs, the scripted model's counts).
RUN_HEADER = "X-AgentQ-Run"
TURN_HEADER = "X-AgentQ-Turn"


#: Each agent's turn tool, made once (a registry shared by runtimes keeps one).
_TURN_TOOLS: dict[int, tuple[Agent, ToolDef]] = {}


def turn_tool(agent: Agent) -> ToolDef:
    """The internal tool whose tasks are ``agent``'s turns (the runtime that runs
    one is the worker's: :attr:`ToolContext.runtime`)."""
    made = _TURN_TOOLS.get(id(agent))
    if made is not None and made[0] is agent:
        return made[1]

    def handler(ctx: ToolContext, args: TurnArgs) -> dict[str, Any]:
        if ctx.runtime is None:
            raise ToolError(f"tool {agent.turn_tool!r} runs only in an agentq worker")
        return run_turn(ctx.runtime, agent, ctx, args)

    definition = ToolDef(
        name=agent.turn_tool, handler=handler, args_model=TurnArgs, result_model=None,
        queue=agent.queue, description=f"a turn of agent {agent.name!r} (internal)",
        max_attempts=agent.max_attempts, timeout=agent.timeout, internal=True, visible=False,
    )  # fmt: skip
    _TURN_TOOLS[id(agent)] = (agent, definition)
    return definition


def run_turn(runtime: Runtime, agent: Agent, ctx: ToolContext, args: TurnArgs) -> dict[str, Any]:
    """Ask the model for turn ``args.turn`` of run ``args.run_id``; the answer
    commits with the turn's ack (``ctx.on_commit``)."""
    rec = runtime.backend.get_record(Tables.RUNS, args.run_id)
    if rec is None or rec["status"] != RunStatus.QUEUED or int(rec["turn"]) != args.turn:
        return {"run_id": args.run_id, "turn": args.turn, "skipped": "the run moved on"}
    limits = run_budgets.owner_limits(runtime.policy, str(rec["owner"]))
    if limits:
        day = runtime.backend.get_record(
            Tables.RUN_USAGE, run_budgets.owner_day_key(str(rec["owner"]), ctx.clock.now())
        )
        over = run_budgets.owner_over_budget(day, limits)
        if over is not None:  # asks the model nothing: the run ends with the reason
            ctx.on_commit(_failer(runtime, args, over))
            return {"run_id": args.run_id, "turn": args.turn, "skipped": over}
    messages = list(rec.get("messages") or ())
    request = ([{"role": "system", "content": agent.instructions}] if agent.instructions
               else []) + messages  # fmt: skip
    started = ctx.clock.now()
    t0 = ctx.clock.monotonic()
    headers = {RUN_HEADER: args.run_id, TURN_HEADER: str(args.turn)}
    with _client(runtime, agent, ctx) as http:
        answer = agent.model.complete(http, request, offered_schemas(runtime, agent), headers)
    latency_ms = (ctx.clock.monotonic() - t0) * 1000.0
    usage: dict[str, Any] = dict(_usage(answer))
    # Priced by the name the endpoint answered with, else the one it was asked for.
    cost = run_budgets.turn_cost(runtime.policy, answer.model, usage)
    if cost is None:
        cost = run_budgets.turn_cost(runtime.policy, _asked_model(agent), usage)
    if cost is not None:
        usage["cost"] = cost
    turn = {
        "number": args.turn, "task_id": ctx.task_id, "messages_sent": len(messages),
        "content": answer.content, "usage": usage, "model": answer.model,
        "started_at": started.isoformat(), "finished_at": ctx.clock.now().isoformat(),
        "latency_ms": round(latency_ms, 3),
    }  # fmt: skip
    ctx.on_commit(_committer(runtime, agent, args, answer, turn))
    return {"run_id": args.run_id, "turn": args.turn, "calls": len(answer.tool_calls),
            "usage": turn["usage"]}  # fmt: skip


def _committer(
    runtime: Runtime, agent: Agent, args: TurnArgs, answer: ModelAnswer, turn: dict[str, Any]
) -> Callable[[Decision], None]:
    def commit(tx: Decision) -> None:
        commit_turn(runtime, agent, tx, args, answer, turn)

    return commit


def _asked_model(agent: Agent) -> str | None:
    """The model name the agent asks for, if its model has one (a framework's
    model object is not a name)."""
    name = getattr(agent.model, "model", None)
    return name if isinstance(name, str) else None


def _failer(runtime: Runtime, args: TurnArgs, reason: str) -> Callable[[Decision], None]:
    def end(tx: Decision) -> None:
        rec = runs.turn_in_force(tx.tx, args.run_id, args.turn)
        if rec is not None:
            runs.fail(runtime, tx.tx, {**rec, "turn_task_id": None}, reason)

    return end


def _usage(answer: ModelAnswer) -> dict[str, int]:
    u = answer.usage
    prompt, completion = int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": int(u.get("total_tokens", prompt + completion))}  # fmt: skip


def _client(runtime: Runtime, agent: Agent, ctx: ToolContext) -> Any:
    """The turn's HTTP client: the runtime's pool, the policy's allowed hosts for
    the turn tool plus the model's own host (set in code, not by any input)."""
    from agentq.http import SharedTransport, tool_http_client

    allowed = [*runtime.policy.for_tool(agent.turn_tool).allowed_hosts, agent.model.host_entry]
    return tool_http_client(
        tool=agent.turn_tool, task_id=ctx.task_id, allowed_hosts=allowed, clock=ctx.clock,
        timeout=agent.timeout, transport=SharedTransport(runtime.http_transport),
    )  # fmt: skip


def offered_tools(runtime: Runtime, agent: Agent) -> list[ToolDef]:
    """The tools the model is offered: the agent's list (or every visible tool),
    never an internal one."""
    known = runtime.known_tools()
    names = agent.tools if agent.tools is not None else [t.name for t in known if t.visible]
    out = []
    for name in names:
        if name in known and not known.get(name).internal and not runtime.is_internal(name):
            out.append(known.get(name))
    return out


def offered_schemas(runtime: Runtime, agent: Agent) -> list[dict[str, Any]]:
    """The offered tools as chat-completions function schemas."""
    return [t.schema() for t in offered_tools(runtime, agent)]


def commit_turn(
    runtime: Runtime,
    agent: Agent,
    tx: Decision,
    args: TurnArgs,
    answer: ModelAnswer,
    turn: dict[str, Any],
) -> None:
    """In the turn's completion transaction: the answer, its calls and the run's
    next status, or nothing at all if the run moved on meanwhile."""
    rec = runs.turn_in_force(tx.tx, args.run_id, args.turn)
    if rec is None:
        return
    offered = {t.name: t for t in offered_tools(runtime, agent)}
    calls: list[dict[str, Any]] = []
    pending: list[str] = []
    awaiting = False
    for position, call in enumerate(answer.tool_calls):
        entry: dict[str, Any] = {"position": position, "tool": call.name,
                                 "call_id": call.call_id, "args": {}}  # fmt: skip
        try:
            definition, call_args = _checked_call(offered, call)
            entry["args"] = call_args
            if definition.local and not _needs_approval(runtime, definition, call_args):
                entry["local"] = True
                entry["result"] = run_local(definition, tx, call_args)
            else:
                info = tx.enqueue(
                    call.name, call_args, by=str(rec["owner"]),
                    idempotency_key=f"{args.run_id}:{args.turn}:{position}",
                    reason=f"agent {agent.name}, run {args.run_id}, turn {args.turn}",
                )  # fmt: skip
                runs.tag_call(tx.tx, info.task_id, args.run_id, args.turn, position)
                entry["task_id"] = info.task_id
                if info.status is TaskStatus.AWAITING_APPROVAL:
                    awaiting = True
                pending.append(info.task_id)
        except (ToolError, _Refused) as exc:  # the model's mistake: told, not obeyed
            entry["error"] = str(exc)
        calls.append(entry)
    assistant: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool_calls:
        assistant["tool_calls"] = [
            {"id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}}
            for c in answer.tool_calls
        ]  # fmt: skip
    runs.record_turn(
        runtime, tx.tx, rec, {**turn, "calls": calls}, assistant, pending=pending,
        awaiting_approval=awaiting,
        owner_limits=run_budgets.owner_limits(runtime.policy, str(rec["owner"])),
    )  # fmt: skip


class _Refused(AgentQError):
    """A model's call that no tool of the agent takes."""


def _checked_call(offered: dict[str, ToolDef], call: ToolCall) -> tuple[ToolDef, dict[str, Any]]:
    definition = offered.get(call.name)
    if definition is None:
        raise _Refused(f"no tool {call.name!r} is offered to this agent "
                       f"(offered: {', '.join(sorted(offered)) or 'none'})")  # fmt: skip
    try:
        raw = json.loads(call.arguments or "{}")
    except ValueError:
        raise _Refused(f"the arguments of {call.name!r} are not JSON") from None
    if not isinstance(raw, dict):
        raise _Refused(f"the arguments of {call.name!r} are not a JSON object")
    args, text = definition.encoded_args(raw)
    try:
        # Here, before anything of the call is written: raised inside the
        # enqueue it would fail the whole turn's commit, and then the run.
        check_args_size(call.name, len(text))
    except PayloadTooLarge as exc:
        raise _Refused(str(exc)) from None
    return definition, args


def _needs_approval(runtime: Runtime, definition: ToolDef, args: dict[str, Any]) -> bool:
    return definition.requires_approval or runtime.policy.approval_rule(definition.name, args) \
        is not None


def run_local(definition: ToolDef, tx: Decision, args: dict[str, Any]) -> Any:
    """Run a local tool's handler ``(tx, args)`` in this transaction: its writes
    commit with everything else in it, or not at all."""
    return definition.dump_result(definition.handler(tx, definition.validate_args(args)))
