"""Starting a LangGraph thread from a user's process, or carrying it on, beside
the workers that resume it.

A user's process that may have died mid-run is started again as users start
it: same thread, same input. :func:`start_or_carry_on` is what it runs. It
starts the thread if it has no checkpoint, carries it on from its last one
(``invoke(None)``) if it stopped mid-run, and does nothing if the thread waits
for its tasks, ended, or is being carried on by a worker: a continuation
(:func:`~agentq.adapters.langgraph_steps.resume_waiting`) that resumed it and
is not done runs the graph on itself, and a second run beside it would ask the
model again. Like a continuation, the starter claims the thread before it
reads it (:func:`~agentq.adapters.langgraph_records.claim_resume`), so that of
two processes running the graph at once only the last to claim writes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.runnables import RunnableConfig

from agentq.adapters.langgraph_records import (
    RESUMING,
    ResumedElsewhere,
    claim_resume,
    continuation_pending,
    thread_of,
)
from agentq.errors import ConfigError
from agentq.runtime import Runtime

__all__ = ["astart_or_carry_on", "settled", "start_or_carry_on"]


def settled(state: Any) -> bool:
    """Whether a thread's state (``graph.get_state``) needs no run from a user's
    process: it waits (``interrupts``: a worker resumes it once its tasks are
    done) or it ended. ``next`` alone does not say it ended: a process that
    died after a node's writes were stored and before the checkpoint that ends
    its step leaves ``next`` empty and the node among ``tasks``, its writes
    kept; that thread is carried on, not started over."""
    ended = bool(state.values) and not state.next and not state.tasks
    return bool(state.interrupts) or ended


def start_or_carry_on(
    rt: Runtime, graph: Any, config: RunnableConfig, input: Any, *, durability: str = "sync"
) -> Any:
    """Start ``graph``'s thread (``config``'s ``thread_id``) with ``input`` if it
    has no checkpoint, or carry it on from its last one; returns what
    ``graph.invoke`` returned, or None if nothing ran: the thread waits, ended,
    a worker's continuation carries it on, or another process claimed it while
    this one ran (this one's writes were refused from then on).

    The graph runs with ``durability="sync"`` unless told otherwise: each step's
    checkpoint commits before the next step starts, so a step that committed is
    never run again and a node's agentq work never waits for one. ``"async"``
    (LangGraph's default) stores each in the background; a node's agentq work
    then waits for its step's (:mod:`~agentq.adapters.langgraph_stored`).
    ``"exit"`` is refused (:class:`~agentq.errors.ConfigError`)."""
    thread_id = _checked(rt, graph, config, durability)
    if settled(graph.get_state(config)) or continuation_pending(rt.backend, thread_id):
        return None
    resuming = RESUMING.set((thread_id, claim_resume(rt.backend, thread_id)))
    try:
        state = graph.get_state(config)  # after the claim: nothing written since is lost
        if settled(state):
            return None
        return graph.invoke(_first(state, input), config, durability=durability)
    except ResumedElsewhere:
        return None
    finally:
        RESUMING.reset(resuming)


async def astart_or_carry_on(
    rt: Runtime, graph: Any, config: RunnableConfig, input: Any, *, durability: str = "sync"
) -> Any:
    """:func:`start_or_carry_on` for an asyncio program (``aget_state``,
    ``ainvoke``; agentq's reads and the claim on a thread)."""
    thread_id = _checked(rt, graph, config, durability)
    if settled(await graph.aget_state(config)):
        return None
    if await asyncio.to_thread(continuation_pending, rt.backend, thread_id):
        return None
    token = await asyncio.to_thread(claim_resume, rt.backend, thread_id)
    resuming = RESUMING.set((thread_id, token))  # the saver's threads copy the context
    try:
        state = await graph.aget_state(config)
        if settled(state):
            return None
        return await graph.ainvoke(_first(state, input), config, durability=durability)
    except ResumedElsewhere:
        return None
    finally:
        RESUMING.reset(resuming)


def _checked(rt: Runtime, graph: Any, config: RunnableConfig, durability: str) -> str:
    """``config``'s thread id, once ``graph`` is known to keep its checkpoints
    with an ``AgentQSaver`` on ``rt`` (whose writes the claim fences) and
    ``durability`` to store each step before the graph exits."""
    if durability not in _DURABILITIES:
        raise ConfigError(
            f"durability {durability!r}: 'sync' or 'async' ('exit' stores no step "
            "before the graph exits, and a node's agentq work would go with them)"
        )
    if getattr(getattr(graph, "checkpointer", None), "rt", None) is not rt:
        raise ConfigError(
            "start_or_carry_on runs a graph compiled with an AgentQSaver on the same "
            "runtime (builder.compile(checkpointer=saver))"
        )
    return thread_of(config)


_DURABILITIES = ("sync", "async")


def _first(state: Any, input: Any) -> Any:
    """What to invoke a thread with: its input if it has no checkpoint, else
    None (LangGraph then carries it on from its last checkpoint)."""
    return None if state.values else input
