"""LangGraph on agentq when a process dies at the worst moments the chaos run
(``python -m tests.chaos --frameworks langgraph``) hits: a user's process
between a node's writes and its step's checkpoint, a worker resuming a graph
after the waiting node's writes. Neither may repeat a committed step, start a
thread over, or leave it stuck."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.surfaces._extras import require

require("langgraph", "langchain")

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver, ResumeArgs, resume_waiting
from agentq.demo_server import DemoAPI
from tests.surfaces.conftest import ROOT
from tests.surfaces.test_langgraph_checkpoint import Ticket, refunds, thread


class _Died(BaseException):
    """The starter's process dies (a SIGKILL, in-process)."""


def _example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``examples/langgraph_durable_refunds.py``, imported: its starter is the
    one the docs show users."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("lg_example", ROOT / "examples" /
                                                  "langgraph_durable_refunds.py")  # fmt: skip
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lg_example", example)  # its TypedDict's hints
    spec.loader.exec_module(example)
    return example


def _two_refunds(
    rt: Runtime, prefix: str, resume_tool: str, thread_id: str
) -> tuple[Any, ResumeArgs]:
    """A graph whose node ``refund`` enqueues ``<prefix>1`` and waits, then
    ``second`` enqueues ``<prefix>2`` and waits; its thread ``thread_id`` run to
    the first wait, that refund executed: the graph and its continuation's args."""
    saver = AgentQSaver(rt)

    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        step = saver.step(config)
        step.enqueue("execute_refund", {"order_id": f"{prefix}1", "amount": 30.0})
        return {"outcomes": step.wait(resume_tool)}

    def second(state: Ticket, config: RunnableConfig) -> Ticket:
        step = saver.step(config)
        step.enqueue("execute_refund", {"order_id": f"{prefix}2", "amount": 20.0})
        return {"outcomes": step.wait(resume_tool)}

    builder = StateGraph(Ticket)
    builder.add_node("refund", refund)
    builder.add_node("second", second)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", "second")
    builder.add_edge("second", END)
    graph = builder.compile(checkpointer=saver)
    saver.serve(graph, resume_tool)
    graph.invoke({"order_id": f"{prefix}1"}, thread(thread_id))
    rt.worker(queues=["payments"]).drain()  # the first refund; its continuation is sent
    (continuation,) = [t for t in rt.tasks() if t.tool == resume_tool]
    return graph, ResumeArgs(**continuation.args)


def test_a_starter_killed_between_a_nodes_writes_and_its_checkpoint_carries_the_thread_on(
    db_url: str, api: DemoAPI, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example's starter dies after ``decide``'s writes are stored and before
    the checkpoint that ends its step (the chaos run's kills land there). The
    thread's ``next`` is then empty (its node is among ``tasks``, with its
    writes): started again, it carries the thread on (``decide`` is not run
    again) rather than starting it over, which would ask the model again and
    enqueue a second refund."""
    example = _example(monkeypatch)
    put = AgentQSaver.put

    def dies_after_decide(self: AgentQSaver, config: Any, checkpoint: Any, metadata: Any,
                          versions: Any) -> Any:  # fmt: skip
        if metadata.get("step") == 1:
            raise _Died
        return put(self, config, checkpoint, metadata, versions)

    with monkeypatch.context() as m, pytest.raises(_Died):
        m.setattr(AgentQSaver, "put", dies_after_decide)
        example.starter(db_url, api.url, tmp_path)
    with Runtime(db_url) as rt:
        state = example.build(AgentQSaver(rt), tmp_path).get_state(example.THREAD)
        assert state.next == () and [t.name for t in state.tasks] == ["decide"]
    example.starter(db_url, api.url, tmp_path)  # the user starts it again
    assert (tmp_path / "ran.txt").read_text().split().count("model") == 1
    with Runtime(db_url) as rt:
        assert len(refunds(rt)) == 1


def test_a_continuation_redelivered_after_its_worker_died_mid_resume_carries_the_graph_on(
    rt: Runtime, api: DemoAPI
) -> None:
    """The worker resuming a graph dies after the waiting node's writes are stored,
    in the node after it (the chaos run's kills while the model answers a
    resumed graph). The continuation, redelivered, finds the node no longer
    waiting: it carries the graph on from its last checkpoint instead of leaving
    it stuck, and the waiting node is not run again."""
    saver = AgentQSaver(rt)
    dies = {"report": 1}
    ran: list[str] = []

    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        ran.append("refund")
        step = saver.step(config)
        step.enqueue("execute_refund", {"order_id": "Q1", "amount": 30.0})
        return {"outcomes": step.wait("resume_q")}

    def report(state: Ticket) -> Ticket:
        ran.append("report")
        if dies["report"]:
            dies["report"] -= 1
            raise _Died
        return {"note": "reported"}

    builder = StateGraph(Ticket)
    builder.add_node("refund", refund)
    builder.add_node("report", report)
    builder.add_edge(START, "refund")
    builder.add_edge("refund", "report")
    builder.add_edge("report", END)
    graph = builder.compile(checkpointer=saver)
    saver.serve(graph, "resume_q")
    graph.invoke({"order_id": "Q1"}, thread("t-13"))
    rt.worker(queues=["payments"]).drain()  # the refund; its continuation is sent
    (continuation,) = [t for t in rt.tasks() if t.tool == "resume_q"]
    args = ResumeArgs(**continuation.args)
    with pytest.raises(_Died):
        resume_waiting(rt, graph, args)  # the worker dies in `report`
    assert graph.get_state(thread("t-13")).next == ("report",)
    assert resume_waiting(rt, graph, args)["carried_on"] == args.wait_id  # redelivered
    state = graph.get_state(thread("t-13"))
    assert state.next == () and state.values["note"] == "reported"
    assert ran == ["refund", "refund", "report", "report"]  # resumed once, then carried on
    assert resume_waiting(rt, graph, args)["skipped"]  # once more: it ended, nothing runs
    assert resume_waiting(rt, graph, args.model_copy(update={"wait_id": "forged"}))["skipped"]
    assert len(refunds(rt)) == 1 and len(api.applied()) == 1


def test_a_stale_resume_racing_the_redelivered_one_enqueues_nothing_twice(
    rt: Runtime, api: DemoAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deliveries of one continuation resume the graph at once: the first
    worker stalls (frozen, or a pause past its lease) after it read the waiting
    checkpoint, the continuation is redelivered, and the second worker resumes
    the graph through its next node's refund. When the stale worker wakes and
    goes on, nothing it writes may add a second refund for the same call (the
    chaos run's ``enqueued_twice``: two tasks for one call, each charged)."""
    import threading

    graph, args = _two_refunds(rt, "R", "resume_r", "t-race")

    stale = threading.local()  # its reads, in the stale worker's thread
    read_it, go_on = threading.Event(), threading.Event()
    get_tuple = AgentQSaver.get_tuple

    def stalls_after_reading(self: AgentQSaver, config: Any) -> Any:
        found = get_tuple(self, config)
        reads = getattr(stale, "reads", None)
        if reads is not None:
            stale.reads = reads + 1
            # The resume's own read of the waiting checkpoint (after the
            # check's, in get_state): then it stalls.
            if stale.reads == 2 and not read_it.is_set():
                read_it.set()
                assert go_on.wait(30)
        return found

    outcome: list[Any] = []

    def stale_worker() -> None:
        stale.reads = 0
        try:
            outcome.append(resume_waiting(rt, graph, args))
        except BaseException as exc:  # reported below
            outcome.append(exc)

    monkeypatch.setattr(AgentQSaver, "get_tuple", stalls_after_reading)
    t = threading.Thread(target=stale_worker)
    t.start()
    try:
        assert read_it.wait(30)
        assert resume_waiting(rt, graph, args)["resumed"] == args.wait_id  # the redelivery
    finally:
        go_on.set()
        t.join(30)
    assert not t.is_alive()
    r2 = [r for r in refunds(rt) if r.args["order_id"] == "R2"]
    assert len(r2) == 1, [(r.task_id, r.idempotency_key) for r in r2]
    assert outcome == [{"thread_id": "t-race", "skipped": "resumed by another delivery"}]
    # One branch: the waiting checkpoint has one child, and the thread waits in
    # `second` for R2, whose continuation is the one sent.
    history = list(graph.get_state_history(thread("t-race")))
    parents = [h.parent_config["configurable"]["checkpoint_id"] for h in history
               if h.parent_config is not None]  # fmt: skip
    assert len(parents) == len(set(parents))
    state = graph.get_state(thread("t-race"))
    assert state.next == ("second",) and len(state.interrupts) == 1
    assert len([t for t in rt.tasks() if t.tool == "resume_r"]) == 2  # R1's, R2's
    assert len(refunds(rt)) == 2


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_starter_restarted_while_a_worker_carries_the_graph_on_runs_no_node(
    db_url: str, api: DemoAPI, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, flavour: str
) -> None:
    """The user restarts the example's starter (or its asyncio twin) while a
    worker resumes the graph: the refund is charged, the continuation resumed
    the refund node and the worker runs ``report`` (a model's turn, in the
    chaos run). The thread then neither waits nor ended, as after a starter's
    crash; carrying it on beside the worker would run ``report`` twice (the
    model asked twice, the thread branched). The starter leaves it to the
    worker, and does nothing once the graph ended."""
    import asyncio
    import threading

    example = _example(monkeypatch)

    def starter() -> None:
        if flavour == "sync":
            return example.starter(db_url, api.url, tmp_path)  # type: ignore[no-any-return]
        with example.open_runtime(db_url, api.url) as rt:
            saver = AgentQSaver(rt)
            graph = example.build(saver, tmp_path)
            start = {"request": "refund order C3"}
            asyncio.run(saver.astart_or_carry_on(graph, example.THREAD, start))

    starter()  # the graph waits for its refund's approval
    in_report, go_on = threading.Event(), threading.Event()
    note = example.note

    def stalls_in_the_workers_report(tmp: Any, what: str) -> None:
        note(tmp, what)
        if what == "report" and not in_report.is_set():  # the first is the worker's
            in_report.set()
            assert go_on.wait(30)

    monkeypatch.setattr(example, "note", stalls_in_the_workers_report)
    with example.open_runtime(db_url, api.url) as rt:
        graph = example.build(AgentQSaver(rt), tmp_path)
        (approval,) = rt.approvals("pending")
        rt.approve(approval.approval_id, by="ops-lead")
        rt.worker(queues=["payments"]).drain()  # the refund; its continuation is sent
        worker = threading.Thread(target=rt.worker(queues=["langgraph"]).drain)
        worker.start()
        try:
            assert in_report.wait(30)
            starter()  # the user starts it again
        finally:
            go_on.set()
            worker.join(30)
        assert not worker.is_alive()
        starter()  # and again, once it ended
        state = graph.get_state(example.THREAD)
        assert state.next == () and state.values["answer"].startswith("Refunded 250.0")
        ran = (tmp_path / "ran.txt").read_text().split()
        assert (ran.count("model"), ran.count("refund"), ran.count("report")) == (1, 2, 1), ran
        assert len(refunds(rt)) == 1 and len(api.applied()) == 1
        history = list(graph.get_state_history(example.THREAD))
        parents = [h.parent_config["configurable"]["checkpoint_id"] for h in history
                   if h.parent_config is not None]  # fmt: skip
        assert len(parents) == len(set(parents))  # one branch


def test_of_two_starters_running_one_thread_at_once_only_the_last_to_claim_writes(
    db_url: str, api: DemoAPI, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two of the user's processes start one thread at once (a double click,
    a restart while the first still runs): the first stalls inside ``decide``,
    the second runs the graph to its refund's wait. When the first goes on,
    its writes are refused (the second claimed the thread after it): the
    graph stays on one branch, with one refund."""
    import threading

    example = _example(monkeypatch)
    in_decide, go_on = threading.Event(), threading.Event()
    note = example.note

    def first_decide_stalls(tmp: Any, what: str) -> None:
        note(tmp, what)
        if what == "model" and not in_decide.is_set():
            in_decide.set()
            assert go_on.wait(30)

    monkeypatch.setattr(example, "note", first_decide_stalls)
    failed: list[BaseException] = []

    def first() -> None:
        try:
            example.starter(db_url, api.url, tmp_path)
        except BaseException as exc:  # reported below
            failed.append(exc)

    t = threading.Thread(target=first)
    t.start()
    try:
        assert in_decide.wait(30)
        example.starter(db_url, api.url, tmp_path)  # the second runs to the wait
    finally:
        go_on.set()
        t.join(30)
    assert not t.is_alive() and failed == []
    with example.open_runtime(db_url, api.url) as rt:
        graph = example.build(AgentQSaver(rt), tmp_path)
        state = graph.get_state(example.THREAD)
        assert state.next == ("refund",) and len(state.interrupts) == 1
        assert len(refunds(rt)) == 1
        history = list(graph.get_state_history(example.THREAD))
        parents = [h.parent_config["configurable"]["checkpoint_id"] for h in history
                   if h.parent_config is not None]  # fmt: skip
        assert len(parents) == len(set(parents))  # one branch


def test_a_starter_refuses_a_graph_not_checkpointed_by_its_saver(rt: Runtime) -> None:
    """Only an ``AgentQSaver`` on the same runtime fences a start: a graph
    compiled with another checkpointer (or none) is one clear ConfigError."""
    from langgraph.checkpoint.memory import InMemorySaver

    from agentq.errors import ConfigError

    builder = StateGraph(Ticket)
    builder.add_node("note", lambda state: {"note": "ran"})
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    saver = AgentQSaver(rt)
    for graph in (builder.compile(checkpointer=InMemorySaver()), builder.compile()):
        with pytest.raises(ConfigError, match="compiled with an AgentQSaver"):
            saver.start_or_carry_on(graph, thread("t-other"), {"order_id": "X"})
    graph = builder.compile(checkpointer=saver)
    assert saver.start_or_carry_on(graph, thread("t-own"), {"order_id": "X"})["note"] == "ran"
    assert saver.start_or_carry_on(graph, thread("t-own"), {"order_id": "X"}) is None  # ended


def test_a_worker_dying_before_the_resumed_steps_checkpoint_enqueues_the_next_nodes_call_once(
    rt: Runtime, api: DemoAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker resuming a graph dies after the resumed node's step ended and
    before that step's checkpoint is stored (the chaos run's ``enqueued_twice``
    on PostgreSQL: one refund call enqueued twice, each task charged). The
    resume ran with LangGraph's default durability (``"async"``): the next node
    started beside the checkpoint's write and stored its enqueue under a task
    id made from a checkpoint that never was; the redelivered continuation made
    that checkpoint again, under a new id, and the node's enqueue with it. Each
    step's checkpoint now commits before the next step starts."""
    graph, args = _two_refunds(rt, "S", "resume_s", "t-async")

    put = AgentQSaver.put
    dying = {"puts": 1}

    def dies_storing_the_resumed_step(self: AgentQSaver, config: Any, checkpoint: Any,
                                      metadata: Any, versions: Any) -> Any:  # fmt: skip
        if dying["puts"]:
            dying["puts"] -= 1
            raise _Died
        return put(self, config, checkpoint, metadata, versions)

    with monkeypatch.context() as m, pytest.raises(_Died):
        m.setattr(AgentQSaver, "put", dies_storing_the_resumed_step)
        resume_waiting(rt, graph, args)
    resume_waiting(rt, graph, args)  # the continuation, redelivered
    s2 = [t for t in rt.tasks() if t.tool == "execute_refund" and t.args["order_id"] == "S2"]
    assert len(s2) == 1, [t.task_id for t in s2]  # 2: the call enqueued twice
    assert graph.get_state(thread("t-async")).interrupts  # waiting for S2, once
