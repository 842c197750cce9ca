"""LangGraph's default durability (``"async"``) on agentq: a step's checkpoint
is stored in the background while the next step's nodes run. A node's agentq
work (``saver.step(config).enqueue``) must not commit before the checkpoint its
step started from: if the process dies in between, the graph carried on makes
that checkpoint again under a new id, runs the node again under a new task id,
and its enqueue (keyed by that task id) would be a second refund."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.surfaces._extras import require

require("langgraph", "langchain")

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver
from agentq.errors import AgentQError, ConfigError
from tests.surfaces.test_langgraph_checkpoint import Ticket, refunds, thread


class _Died(BaseException):
    """The user's process dies (a SIGKILL, in-process)."""


def _look_up_then_refund(saver: AgentQSaver, ran: list[str]) -> Any:
    """look_up → refund (enqueues a refund of the order) → END."""

    def look_up(state: Ticket) -> Ticket:
        ran.append("look_up")
        return {"amount": 30.0}

    def refund(state: Ticket, config: RunnableConfig) -> Ticket:
        ran.append("refund")
        saver.step(config).enqueue("execute_refund", {"order_id": state["order_id"],
                                                      "amount": state["amount"]})  # fmt: skip
        return {"note": "refund enqueued"}

    builder = StateGraph(Ticket)
    builder.add_node("look_up", look_up)
    builder.add_node("refund", refund)
    builder.add_edge(START, "look_up")
    builder.add_edge("look_up", "refund")
    builder.add_edge("refund", END)
    return builder.compile(checkpointer=saver)


def test_a_process_dying_while_the_steps_checkpoint_is_stored_in_the_background_enqueues_once(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``graph.invoke`` with LangGraph's default durability: the checkpoint after
    ``look_up`` is being stored (in the background) while ``refund`` runs and
    its writes are stored; the process dies before that checkpoint is. Started
    again, the graph carries on from the last checkpoint stored and runs
    ``refund`` again: one refund in all, not one per run of the node."""
    saver = AgentQSaver(rt, checkpoint_wait=2.0)  # the put below never ends: it dies
    ran: list[str] = []
    graph = _look_up_then_refund(saver, ran)
    refund_writes = threading.Event()
    put, put_writes = AgentQSaver.put, AgentQSaver.put_writes

    def dies_storing_look_ups_step(self: AgentQSaver, config: Any, checkpoint: Any,
                                   metadata: Any, versions: Any) -> Any:  # fmt: skip
        if metadata.get("step") == 1:  # the step after look_up's
            # Until refund's writes are stored, or (agentq waits for this
            # checkpoint first) a second: then the process dies.
            refund_writes.wait(1.0)
            raise _Died
        return put(self, config, checkpoint, metadata, versions)

    def refund_writes_stored(self: AgentQSaver, config: Any, writes: Any, task_id: str,
                             task_path: str = "") -> None:  # fmt: skip
        try:
            put_writes(self, config, writes, task_id, task_path)
        finally:
            if any(channel == "note" for channel, _ in writes):
                refund_writes.set()

    with monkeypatch.context() as m:
        m.setattr(AgentQSaver, "put", dies_storing_look_ups_step)
        m.setattr(AgentQSaver, "put_writes", refund_writes_stored)
        with pytest.raises((_Died, AgentQError)):
            graph.invoke({"order_id": "A1"}, thread("t-async"))
    assert ran == ["look_up", "refund"]
    # The user carries it on from its last checkpoint (the default durability again).
    graph.invoke(None, thread("t-async"))
    assert graph.get_state(thread("t-async")).values["note"] == "refund enqueued"
    assert ran == ["look_up", "refund", "refund"]
    assert [t.args["order_id"] for t in refunds(rt)] == ["A1"]


@pytest.mark.parametrize("invoke", ["invoke", "ainvoke"])
def test_a_node_in_an_async_graph_enqueues_once_its_steps_checkpoint_is_stored(
    rt: Runtime, invoke: str
) -> None:
    """With nothing dying, ``graph.invoke`` (and ``ainvoke``: the saver's
    methods on threads) at the default durability enqueues the node's refund
    once, and the thread ends."""
    import asyncio

    saver = AgentQSaver(rt)
    ran: list[str] = []
    graph = _look_up_then_refund(saver, ran)
    if invoke == "ainvoke":
        asyncio.run(graph.ainvoke({"order_id": "A2"}, thread("t-async-2")))
    else:
        graph.invoke({"order_id": "A2"}, thread("t-async-2"))
    assert ran == ["look_up", "refund"]
    assert graph.get_state(thread("t-async-2")).next == ()
    assert [t.args["order_id"] for t in refunds(rt)] == ["A2"]


def test_a_nodes_work_waiting_for_a_checkpoint_whose_put_failed_is_not_done(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background put of the checkpoint after ``look_up`` fails (its value
    cannot be stored) while ``refund``'s writes wait for it: they give up at
    once, without the refund, rather than after ``checkpoint_wait``; carried on,
    the graph enqueues it once."""
    saver = AgentQSaver(rt, checkpoint_wait=20.0)  # no wait at all if it works
    ran: list[str] = []
    graph = _look_up_then_refund(saver, ran)
    doomed: list[Any] = []  # the checkpoint whose put fails (in whichever thread)
    put, put_writes, dump = AgentQSaver.put, AgentQSaver.put_writes, AgentQSaver._dump
    refused: list[BaseException] = []

    def fails_for_look_ups_step(self: AgentQSaver, config: Any, checkpoint: Any,
                                metadata: Any, versions: Any) -> Any:  # fmt: skip
        if metadata.get("step") == 1:
            doomed.append(checkpoint)
        return put(self, config, checkpoint, metadata, versions)

    def unstorable(self: AgentQSaver, value: Any) -> Any:
        if any(value is c for c in doomed):
            raise RuntimeError("the database refused the checkpoint")
        return dump(self, value)

    def records_refusal(self: AgentQSaver, config: Any, writes: Any, task_id: str,
                        task_path: str = "") -> None:  # fmt: skip
        try:
            put_writes(self, config, writes, task_id, task_path)
        except AgentQError as exc:
            refused.append(exc)
            raise

    with monkeypatch.context() as m:
        m.setattr(AgentQSaver, "put", fails_for_look_ups_step)
        m.setattr(AgentQSaver, "_dump", unstorable)
        m.setattr(AgentQSaver, "put_writes", records_refusal)
        with pytest.raises((RuntimeError, AgentQError)):
            graph.invoke({"order_id": "A3"}, thread("t-async-3"))
    assert [type(e).__name__ for e in refused] == ["CheckpointNotStored"]
    assert "its put failed" in str(refused[0]) and refunds(rt) == []
    graph.invoke(None, thread("t-async-3"))
    assert ran == ["look_up", "refund", "refund"]
    assert [t.args["order_id"] for t in refunds(rt)] == ["A3"]


@pytest.mark.parametrize("durability", ["exit", "later"])
def test_a_starter_refuses_a_durability_that_stores_no_step_before_the_graph_exits(
    rt: Runtime, durability: str
) -> None:
    saver = AgentQSaver(rt)
    graph = _look_up_then_refund(saver, [])
    with pytest.raises(ConfigError, match=f"durability '{durability}': 'sync' or 'async'"):
        saver.start_or_carry_on(graph, thread("t-exit"), {"order_id": "X"},
                                durability=durability)  # fmt: skip
    assert refunds(rt) == []


def test_a_starter_at_the_default_durability_of_langgraph_enqueues_once(rt: Runtime) -> None:
    """``start_or_carry_on(..., durability="async")``: the thread runs to its end,
    its refund enqueued once; started again, nothing runs."""
    saver = AgentQSaver(rt)
    ran: list[str] = []
    graph = _look_up_then_refund(saver, ran)
    config = thread("t-async-start")
    assert saver.start_or_carry_on(graph, config, {"order_id": "A4"}, durability="async")
    assert saver.start_or_carry_on(graph, config, {"order_id": "A4"}, durability="async") is None
    assert ran == ["look_up", "refund"]
    assert [t.args["order_id"] for t in refunds(rt)] == ["A4"]


@pytest.mark.parametrize("wait", [0, -1.0, float("nan"), float("inf")])
def test_a_saver_refuses_a_checkpoint_wait_that_is_not_a_time(rt: Runtime, wait: float) -> None:
    with pytest.raises(ConfigError, match=r"checkpoint_wait .*: a number of seconds above 0"):
        AgentQSaver(rt, checkpoint_wait=wait)
