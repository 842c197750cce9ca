"""AgentQSaver, the LangGraph checkpointer on agentq's backends: LangGraph's own
conformance suite (langgraph-checkpoint-conformance), a real StateGraph resumed
by a second runtime over the same database, and a node's agentq tasks
committing with its writes, on SQLite and PostgreSQL (the conformance suite on
the Spanner emulator too, both dialects)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.surfaces._extras import require

require("langgraph", "langchain")
conformance = require("langgraph.checkpoint.conformance", "dev")

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.types import ERROR
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import CHECKPOINTS, WRITES, AgentQSaver
from agentq.demo_server import DemoAPI
from agentq.errors import ConfigError
from tests.surfaces.conftest import ROOT


def check_conformance(rt: Runtime) -> None:
    """Every capability of the suite passes: the base ones (put, put_writes,
    get_tuple, list, delete_thread) and the extended ones (delete_for_runs,
    copy_thread, prune), all implemented."""

    @conformance.checkpointer_test(name="AgentQSaver")
    async def saver() -> AsyncIterator[AgentQSaver]:
        yield AgentQSaver(rt)

    report = asyncio.run(conformance.validate(saver))
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base(), report.results
    assert {cap: r.passed for cap, r in report.results.items()} == dict.fromkeys(
        ["put", "put_writes", "get_tuple", "list", "delete_thread",
         "delete_for_runs", "copy_thread", "prune"], True,
    )  # fmt: skip


def test_langgraphs_own_conformance_suite_passes(rt: Runtime) -> None:
    check_conformance(rt)


def test_langgraphs_own_conformance_suite_passes_on_spanner(emulator_database: Any) -> None:
    """The same implementation on Spanner (the emulator, both dialects)."""
    with Runtime(str(emulator_database.url), tools=ROOT / "tools") as rt:
        check_conformance(rt)


class Ticket(TypedDict, total=False):
    order_id: str
    amount: float
    refund: str
    outcomes: list[dict[str, Any]]
    note: str


def refunds(rt: Runtime) -> list[Any]:
    return [t for t in rt.tasks() if t.tool == "execute_refund"]


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


def review_graph(saver: AgentQSaver, seen: list[str]) -> Any:
    """look_up → review (interrupts for a human's note) → done."""

    def look_up(state: Ticket) -> Ticket:
        seen.append("look_up")
        return {"amount": 25.0}

    def review(state: Ticket) -> Ticket:
        seen.append("review")
        return {"note": str(interrupt({"question": f"refund {state['amount']}?"}))}

    builder = StateGraph(Ticket)
    builder.add_node("look_up", look_up)
    builder.add_node("review", review)
    builder.add_edge(START, "look_up")
    builder.add_edge("look_up", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_resumes_in_another_runtime_after_the_one_that_ran_it_is_gone(
    open_rt: Callable[[], Runtime],
) -> None:
    first = open_rt()
    seen: list[str] = []
    paused = review_graph(AgentQSaver(first), seen).invoke({"order_id": "A1"}, thread("t-1"))
    assert paused["__interrupt__"][0].value == {"question": "refund 25.0?"}
    first.close()  # the process that ran it is gone

    second = open_rt()
    saver = AgentQSaver(second)
    graph = review_graph(saver, seen)
    assert graph.get_state(thread("t-1")).next == ("review",)
    done = graph.invoke(Command(resume="ok by ops"), thread("t-1"))
    assert done == {"order_id": "A1", "amount": 25.0, "note": "ok by ops"}
    assert seen == ["look_up", "review", "review"]  # look_up is never run again
    history = list(saver.list(thread("t-1")))
    assert [h.metadata["step"] for h in history] == [2, 1, 0, -1]
    assert [h.checkpoint["id"] for h in history] == sorted(
        (h.checkpoint["id"] for h in history), reverse=True
    )
    assert history[0].parent_config == history[1].config
    assert len(list(saver.list(thread("t-1"), before=history[1].config, limit=1))) == 1
    assert [h.metadata["step"] for h in saver.list(thread("t-1"), filter={"step": 1})] == [1]
    saver.delete_thread("t-1")
    assert saver.get_tuple(thread("t-1")) is None
    assert second.backend.list_records(CHECKPOINTS) == []
    assert second.backend.list_records(WRITES) == []


def test_the_async_graph_api_runs_on_it_too(rt: Runtime) -> None:
    saver = AgentQSaver(rt)
    graph = review_graph(saver, [])

    async def run() -> Any:
        await graph.ainvoke({"order_id": "A2"}, thread("t-2"))
        return await graph.ainvoke(Command(resume="fine"), thread("t-2"))

    assert asyncio.run(run())["note"] == "fine"
    assert saver.get_tuple(thread("t-2")) is not None


def refund_graph(saver: AgentQSaver, *, fail_after_enqueue: bool = False, wait: bool = False,
                 resume_tool: str = "resume_refunds") -> Any:  # fmt: skip
    """decide → refund (its refund an agentq task staged with the node's writes)."""

    def decide(state: Ticket) -> Ticket:
        return {"amount": 30.0}

    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        step = saver.step(config)
        key = step.enqueue("execute_refund", {"order_id": state["order_id"],
                                              "amount": state["amount"]})  # fmt: skip
        if fail_after_enqueue:
            raise RuntimeError("the node failed after its enqueue")
        if wait:
            return {"refund": key, "outcomes": step.wait(resume_tool)}
        return {"refund": key}

    builder = StateGraph(Ticket)
    builder.add_node("decide", decide)
    builder.add_node("refund", refund)
    builder.add_edge(START, "decide")
    builder.add_edge("decide", "refund")
    builder.add_edge("refund", END)
    return builder.compile(checkpointer=saver)


def node_writes(saver: AgentQSaver, thread_id: str) -> list[tuple[str, str, Any]]:
    return [w for t in saver.list(thread(thread_id)) for w in t.pending_writes or []]


def test_a_nodes_tasks_commit_with_its_writes(rt: Runtime, api: DemoAPI) -> None:
    saver = AgentQSaver(rt)
    done = refund_graph(saver).invoke({"order_id": "R1"}, thread("t-3"))
    (task,) = refunds(rt)
    assert task.idempotency_key == done["refund"]
    assert ("refund", done["refund"]) in [(c, v) for _, c, v in node_writes(saver, "t-3")]
    rt.worker().drain()
    assert len(api.applied()) == 1


def test_a_node_that_returns_nothing_still_commits_its_tasks(rt: Runtime) -> None:
    """A last node returning None updates no channel: its refund commits all the
    same (with LangGraph's no-writes marker, or else the checkpoint ending its step)."""
    saver = AgentQSaver(rt)

    def refund(state: Ticket, config: RunnableConfig) -> None:
        saver.step(config).enqueue("execute_refund", {"order_id": "R9", "amount": 12.0})

    builder = StateGraph(Ticket)
    builder.add_node("refund", refund)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    builder.compile(checkpointer=saver).invoke({"order_id": "R9"}, thread("t-9"))
    assert [t.args["order_id"] for t in refunds(rt)] == ["R9"]


def test_a_subgraphs_node_stages_without_its_config(rt: Runtime) -> None:
    """``saver.step()`` finds the node run itself, in a subgraph too (its own
    namespace, its own checkpoints in this saver)."""
    saver = AgentQSaver(rt)

    def refund(state: Ticket) -> Ticket:
        return {"refund": saver.step().enqueue("execute_refund", {"order_id": "S1", "amount": 5})}

    inner = StateGraph(Ticket)
    inner.add_node("refund", refund)
    inner.add_edge(START, "refund")
    inner.add_edge("refund", END)
    outer = StateGraph(Ticket)
    outer.add_node("billing", inner.compile())
    outer.add_edge(START, "billing")
    outer.add_edge("billing", END)
    done = outer.compile(checkpointer=saver).invoke({"order_id": "S1"}, thread("t-10"))
    assert [t.idempotency_key for t in refunds(rt)] == [done["refund"]]
    namespaces = {k.split("|")[1] for k, _ in rt.backend.list_records(CHECKPOINTS)}
    assert len(namespaces) == 2  # the graph's and the subgraph's


def test_staging_is_refused_where_langgraph_would_never_store_the_step(rt: Runtime) -> None:
    """With durability="exit" LangGraph stores no step before the graph exits:
    a node's tasks would be lost with them, so the node is refused at once."""
    with pytest.raises(ConfigError, match="durability='exit'"):
        refund_graph(AgentQSaver(rt)).invoke({"order_id": "X1"}, thread("t-11"), durability="exit")
    assert refunds(rt) == []


def test_a_node_that_fails_after_its_enqueue_leaves_no_task(rt: Runtime) -> None:
    saver = AgentQSaver(rt)
    with pytest.raises(RuntimeError, match="failed after its enqueue"):
        refund_graph(saver, fail_after_enqueue=True).invoke({"order_id": "R2"}, thread("t-4"))
    assert refunds(rt) == []
    channels = {c for _, c, _ in node_writes(saver, "t-4")}
    assert ERROR in channels and "refund" not in channels  # its error, stored alone


def test_a_commit_that_fails_after_the_enqueue_leaves_neither(rt: Runtime) -> None:
    """The crash between them: the transaction of the node's writes fails after
    enqueueing its refund (a fault in the commit). Neither the task nor the
    node's writes exist; the graph, run again, enqueues it once."""
    saver = AgentQSaver(rt)
    graph = refund_graph(saver)
    original = saver._take_staged
    crash = {"armed": True}

    def take(thread_id: str, task_id: str) -> list[Any]:
        staged = original(thread_id, task_id)

        def fault(d: Any, tasks: Any) -> None:
            if crash["armed"] and tasks:
                raise OSError("power lost after the enqueue")

        return [*staged, fault]

    saver._take_staged = take  # type: ignore[method-assign]
    with pytest.raises(OSError, match="power lost"):
        graph.invoke({"order_id": "R3"}, thread("t-5"))
    assert refunds(rt) == []
    assert not [c for _, c, _ in node_writes(saver, "t-5") if c == "refund"]
    assert graph.get_state(thread("t-5")).next == ("refund",)  # no checkpoint past it
    crash["armed"] = False
    done = graph.invoke(None, thread("t-5"))  # resumed from the last checkpoint
    assert [t.idempotency_key for t in refunds(rt)] == [done["refund"]]


def test_a_waiting_graph_is_resumed_by_a_worker_when_its_tasks_finish(
    open_rt: Callable[[], Runtime], api: DemoAPI
) -> None:
    first = open_rt()
    saver = AgentQSaver(first)
    graph = refund_graph(saver, wait=True)
    saver.serve(graph, "resume_refunds")
    paused = graph.invoke({"order_id": "R4"}, thread("t-6"))
    assert "__interrupt__" in paused
    (task,) = refunds(first)
    waiting = [t for t in first.tasks() if t.tool == "resume_refunds"]
    assert [t.status.value for t in waiting] == ["waiting"]
    first.close()  # the graph holds no process while it waits

    worker_rt = open_rt()
    worker_saver = AgentQSaver(worker_rt)
    graph = refund_graph(worker_saver, wait=True)
    worker_saver.serve(graph, "resume_refunds")
    worker_rt.worker().drain()
    state = graph.get_state(thread("t-6"))
    assert state.next == ()
    assert [o["status"] for o in state.values["outcomes"]] == ["succeeded"]
    assert state.values["outcomes"][0]["task_id"] == task.task_id
    assert len(refunds(worker_rt)) == 1 and len(api.applied()) == 1


TOOLS_FOLDER_GRAPH = """
from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from agentq import ToolContext, tool
from agentq.adapters.langgraph_checkpoint import AgentQSaver, ResumeArgs, resume_waiting


class Ticket(TypedDict, total=False):
    order_id: str
    outcomes: list[dict[str, Any]]


def build(saver: AgentQSaver) -> Any:
    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        step = saver.step(config)
        step.enqueue("execute_refund", {"order_id": state["order_id"], "amount": 15.0})
        return {"outcomes": step.wait("resume_refund_graph")}

    builder = StateGraph(Ticket)
    builder.add_node("refund", refund)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", END)
    return builder.compile(checkpointer=saver)


@tool("resume_refund_graph", queue="langgraph", visible=False)
def resume_refund_graph(ctx: ToolContext, args: ResumeArgs) -> dict[str, Any]:
    return resume_waiting(ctx.runtime, build(AgentQSaver(ctx.runtime)), args)
"""


def test_a_tools_folder_declares_the_resume_for_agentq_worker(
    db_url: str, api: DemoAPI, tmp_path: Any
) -> None:
    """The continuation declared with @tool and resume_waiting in a tools folder:
    what `agentq worker --tools tools` loads, with no saver.serve in sight."""
    import shutil

    folder = tmp_path / "tools"
    shutil.copytree(ROOT / "tools", folder)
    (folder / "refund_graph.py").write_text(TOOLS_FOLDER_GRAPH)
    settings = {"payments_url": api.url, "notifications_url": api.url}
    with Runtime(db_url, tools=folder, policies=ROOT / "policies", settings=settings) as rt:
        build = rt.tools.get("resume_refund_graph").handler.__globals__["build"]
        graph = build(AgentQSaver(rt))  # the starter's graph: the folder's own
        assert "__interrupt__" in graph.invoke({"order_id": "F1"}, thread("t-12"))
        rt.worker().drain()  # the refund, then the continuation: the graph resumed
        values = graph.get_state(thread("t-12")).values
        assert [o["status"] for o in values["outcomes"]] == ["succeeded"]
    assert len(api.applied()) == 1
