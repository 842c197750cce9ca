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

from typing import Any, Literal

from langchain_core.runnables import RunnableConfig

from agentq.adapters.langgraph_records import (
    RESUMING,
    ResumedElsewhere,
    claim_resume,
    continuation_pending,
    thread_of,
)
from agentq.runtime import Runtime

__all__ = ["settled", "start_or_carry_on"]


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
    rt: Runtime,
    graph: Any,
    config: RunnableConfig,
    input: Any,
    *,
    durability: Literal["sync", "async"] = "sync",
) -> Any | None:
    """Start ``graph``'s thread (``config``'s ``thread_id``) with ``input`` if it
    has no checkpoint, or carry it on from its last one; returns what
    ``graph.invoke`` returned, or None if nothing ran: the thread waits, ended,
    a worker's continuation carries it on, or another process claimed it while
    this one ran (this one's writes were refused from then on).

    ``durability="sync"`` (the default) commits each step's checkpoint before
    the next step starts, so a step that committed is never run again."""
    thread_id = thread_of(config)
    if settled(graph.get_state(config)) or continuation_pending(rt.backend, thread_id):
        return None
    token = claim_resume(rt.backend, thread_id)
    resuming = RESUMING.set((thread_id, token))
    try:
        state = graph.get_state(config)  # after the claim: nothing written since is lost
        if settled(state):
            return None
        return graph.invoke(None if state.values else input, config, durability=durability)
    except ResumedElsewhere:
        return None
    finally:
        RESUMING.reset(resuming)
