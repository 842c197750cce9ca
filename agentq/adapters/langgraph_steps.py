"""A LangGraph node's agentq work, staged to commit with the node's writes.

:class:`GraphStep` is what :meth:`AgentQSaver.step
<agentq.adapters.langgraph_checkpoint.AgentQSaver.step>` hands a node: its
enqueues and ``on_commit`` functions are done by the transaction that stores the
node's writes, and :meth:`GraphStep.wait` interrupts the graph until they are
done; :func:`resume_waiting` is the body of the continuation task that resumes
it; :class:`StagedNodeWork` keeps what a saver's nodes staged until it is done.
The storage of checkpoints is :mod:`agentq.adapters.langgraph_checkpoint`'s.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict

from agentq.adapters.calls import outcome
from agentq.adapters.langgraph_records import RESUMING, ResumedElsewhere, claim_resume
from agentq.decision import Decision, EnqueueOptions
from agentq.errors import ConfigError, ToolError
from agentq.ledger import TaskInfo
from agentq.runtime import Runtime

if TYPE_CHECKING:
    from agentq.adapters.langgraph_checkpoint import AgentQSaver

__all__ = ["GraphStep", "ResumeArgs", "StagedNodeWork", "resume_waiting"]

#: What a waiting node's interrupt carries (the continuation finds it by this).
_WAIT_MARK = "agentq_wait"

#: A checkpoint a step started from: (thread, namespace, checkpoint id).
_Parent = tuple[str, str, str]
#: Staged work: ``fn(decision, tasks)``, ``tasks`` the keys' tasks enqueued so far in this attempt.
_Work = Callable[[Decision, dict[str, TaskInfo]], Any]


class ResumeArgs(BaseModel):
    """A continuation task's arguments: which thread, which waiting node, which tasks."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    wait_id: str
    task_ids: list[str]


def resume_waiting(rt: Runtime, graph: Any, args: ResumeArgs) -> dict[str, Any]:
    """Resume ``graph``'s thread ``args.thread_id`` whose node waits
    (:meth:`GraphStep.wait`) on the tasks ``args.task_ids``, with their outcomes:
    the body of a continuation task. In a tools folder, where workers find it::

        @tool("resume_refund_graph", visible=False)
        def resume_refund_graph(ctx: ToolContext, args: ResumeArgs) -> dict[str, Any]:
            return resume_waiting(ctx.runtime, build(AgentQSaver(ctx.runtime)), args)

    The graph runs with ``durability="sync"``: each step's checkpoint is stored
    before the next step starts. A continuation redelivered after its worker
    died mid-resume (the waiting node's writes stored, the graph neither waiting
    again nor ended) carries the graph on from its last checkpoint
    (``invoke(None)``): the node is not run again. Any other thread whose node
    no longer waits is left alone. The tool can be enqueued by name, so nothing
    of ``args`` is trusted beyond naming the wait: the tasks must be the waiting
    node's own, and done; a thread is carried on only if its history holds that
    wait.

    Two deliveries of one continuation may run at once (the first stalled past
    its lease, the second took over): each claims the thread before reading it
    (:func:`~agentq.adapters.langgraph_records.claim_resume`), and the writes of
    the one that claimed first are refused from the other's claim on, so the
    graph goes on along one branch and its next nodes' tasks are enqueued once.
    The refused one returns ``skipped`` (its completion is stale anyway)."""
    token = claim_resume(rt.backend, args.thread_id, args.wait_id)
    resuming = RESUMING.set((args.thread_id, token))
    try:
        return _resume(rt, graph, args)
    except ResumedElsewhere:
        return {"thread_id": args.thread_id, "skipped": "resumed by another delivery"}
    finally:
        RESUMING.reset(resuming)


def _resume(rt: Runtime, graph: Any, args: ResumeArgs) -> dict[str, Any]:
    """:func:`resume_waiting` once its thread is claimed."""
    from langgraph.types import Command

    config: RunnableConfig = {"configurable": {"thread_id": args.thread_id}}
    state = graph.get_state(config)
    waiting = _waits(state, args.wait_id)
    carry_on = False
    if not waiting:
        # Not waiting: resumed already. If the graph neither waits elsewhere nor
        # ended, the attempt that resumed it died before either: carry it on.
        if state.interrupts or not (state.next or state.tasks):
            return {"thread_id": args.thread_id, "skipped": "the node is not waiting"}
        waiting = next((w for s in graph.get_state_history(config)
                        if (w := _waits(s, args.wait_id))), [])  # fmt: skip
        if not waiting:
            return {"thread_id": args.thread_id, "skipped": "the node is not waiting"}
        carry_on = True
    infos = [rt.task(t) for t in args.task_ids]
    keys = [i.idempotency_key for i in infos]
    if keys != waiting[0].value.get("idempotency_keys") or not all(i.done for i in infos):
        raise ToolError(f"tasks {args.task_ids} are not the waiting node's, all done")
    # durability="sync": each step's checkpoint commits before the next step
    # starts. LangGraph's default ("async") stores it beside the next step: a
    # worker dying between them left that step's enqueues stored under a task id
    # made from a checkpoint never stored, and the redelivery made the checkpoint
    # again under a new id, and the enqueues with it (one call, two tasks).
    if carry_on:
        graph.invoke(None, config, durability="sync")
        return {"thread_id": args.thread_id, "carried_on": args.wait_id}
    outcomes = [outcome(i) for i in infos]
    graph.invoke(Command(resume={waiting[0].id: {"outcomes": outcomes}}), config,
                 durability="sync")  # fmt: skip
    return {"thread_id": args.thread_id, "resumed": args.wait_id}


def _waits(state: Any, wait_id: str) -> list[Any]:
    """The interrupts of a state snapshot that wait on ``wait_id``."""
    return [i for i in state.interrupts
            if isinstance(i.value, dict) and i.value.get(_WAIT_MARK) == wait_id]  # fmt: skip


class GraphStep:
    """One LangGraph node's run, seen from inside the node (:meth:`AgentQSaver.step`).

    What it stages is done by the transaction that stores the node's writes: if
    the node returns (or interrupts), the tasks and LangGraph's record of the
    node commit together; if it raises, or the process dies first, neither does.
    Each staged enqueue gets an idempotency key derived from the thread, the
    LangGraph task (a hash of the checkpoint, the node and its path) and its
    position in the node, so the same node run again (after an interrupt or a
    crash) finds its tasks instead of making new ones."""

    def __init__(
        self, saver: AgentQSaver, thread_id: str, task_id: str, parent: _Parent | None = None
    ) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.task_id = task_id
        #: The checkpoint the node's step started from (thread, namespace, id).
        self.parent = parent
        self._keys: list[str] = []

    def key(self, position: int) -> str:
        """The idempotency key of this node's ``position``-th enqueue (-1: its
        continuation)."""
        digest = hashlib.sha256(f"{self.thread_id}\0{self.task_id}".encode()).hexdigest()[:32]
        return f"langgraph:{digest}:{position}"

    def enqueue(
        self, tool: str, args: Mapping[str, Any] | Any, **options: Unpack[EnqueueOptions]
    ) -> str:
        """Stage an agentq enqueue (``Decision.enqueue``'s arguments; its
        ``idempotency_key`` is this node's unless one is given); returns the key."""
        key = options.get("idempotency_key") or self.key(len(self._keys))
        self._keys.append(key)
        chosen: EnqueueOptions = {**options, "idempotency_key": key}

        def work(d: Decision, tasks: dict[str, TaskInfo]) -> None:
            tasks[key] = d.enqueue(tool, args, **chosen)

        self.saver._work.stage(self, work)
        return key

    def on_commit(self, fn: Callable[[Decision], Any]) -> None:
        """Stage ``fn(decision)``: application SQL or other task operations done in
        the transaction of this node's writes (re-run with it on a transient abort,
        so it must have no outside effects)."""
        self.saver._work.stage(self, lambda d, _tasks: fn(d))

    def wait(self, resume_tool: str) -> list[dict[str, Any]]:
        """Interrupt the graph until this node's staged tasks are done; returns
        what became of each (``task_id``, ``status``, ``result`` or ``error``), in
        the order they were enqueued.

        The interrupt commits with the tasks and a continuation task of
        ``resume_tool`` (:meth:`AgentQSaver.resume_tool`) that waits ``after``
        them: when the last of them succeeds, a worker resumes the graph with
        their outcomes, and this call returns them. If one of them dies, is
        rejected or is cancelled, the continuation is cancelled with it and the
        graph stays interrupted (resume it by hand with ``Command(resume=...)``)."""
        from langgraph.types import interrupt

        keys = list(self._keys)
        wait_id = self.key(-1)

        def continuation(d: Decision, tasks: dict[str, TaskInfo]) -> None:
            found = [tasks[k] for k in keys]
            args = {"thread_id": self.thread_id, "wait_id": wait_id,
                    "task_ids": [t.task_id for t in found]}  # fmt: skip
            d.enqueue(resume_tool, args, idempotency_key=wait_id, after=found)

        self.saver._work.stage(self, continuation)
        answer = interrupt({_WAIT_MARK: wait_id, "idempotency_keys": keys})
        if isinstance(answer, dict) and isinstance(answer.get("outcomes"), list):
            return list(answer["outcomes"])
        raise ToolError(f"resumed with {answer!r:.80}, not the outcomes of the node's tasks")


class StagedNodeWork:
    """The agentq work the nodes of one :class:`AgentQSaver
    <agentq.adapters.langgraph_checkpoint.AgentQSaver>` staged and that is not
    done yet: by node run until the transaction of the node's writes does it, and
    by checkpoint when that transaction failed (the ``put`` of the checkpoint that
    follows does it, or nothing does). LangGraph runs a step's nodes on threads:
    every method holds one lock."""

    def __init__(self) -> None:
        # What nodes staged, by (thread, LangGraph task id): the node's step and its work.
        self._staged: dict[tuple[str, str], tuple[GraphStep, list[_Work]]] = {}
        # Staged work whose writes' transaction failed, by (thread, namespace,
        # checkpoint, task): done by the ``put`` of the checkpoint that follows
        # (it holds the node's effects) or by neither. LangGraph may store that
        # checkpoint even though a task's writes failed; that ``put`` waits for
        # the writes in flight to its parent (counted here) before it looks.
        self._unsaved: dict[tuple[str, str, str, str], list[_Work]] = {}
        self._in_flight: dict[_Parent, int] = {}
        self._lock = threading.Condition()

    def begin(self, step: GraphStep) -> None:
        """``step``'s node run stages from now on; a retried node starts over: its
        last attempt's work goes."""
        with self._lock:
            self._staged[(step.thread_id, step.task_id)] = (step, [])

    def stage(self, step: GraphStep, work: _Work) -> None:
        """Add ``work`` to what ``step`` staged (refused once the step is over)."""
        with self._lock:
            found = self._staged.get((step.thread_id, step.task_id))
            if found is None or found[0] is not step:
                raise ConfigError("this node's step is over (or superseded): stage nothing more")
            found[1].append(work)

    def take(self, thread_id: str, task_id: str) -> list[_Work]:
        """What the node run ``task_id`` staged, for the transaction of its writes."""
        with self._lock:
            return self._staged.pop((thread_id, task_id), (None, []))[1]

    def writes_started(self, parent: _Parent, task_id: str) -> None:
        """A node's writes (with its staged work) are being stored."""
        with self._lock:
            self._unsaved.pop((*parent, task_id), None)  # the node ran again
            self._in_flight[parent] = self._in_flight.get(parent, 0) + 1

    def writes_ended(self, parent: _Parent, task_id: str, unsaved: list[_Work]) -> None:
        """A node's writes were stored, or (``unsaved``: its work) were not."""
        with self._lock:
            if unsaved:
                self._unsaved[(*parent, task_id)] = unsaved
            left = self._in_flight.pop(parent) - 1
            if left:
                self._in_flight[parent] = left
            self._lock.notify_all()

    def take_unsaved(self, parent: _Parent) -> dict[str, list[_Work]]:
        """The work of the nodes of the step from ``parent`` that is not stored:
        their writes failed, or they wrote nothing (LangGraph then calls no
        ``put_writes``). Called by the ``put`` that ends the step, when every
        node of it has returned; it waits for the writes in flight to ``parent``."""
        with self._lock:
            self._lock.wait_for(lambda: parent not in self._in_flight)
            mine = {k[3]: w for k, w in self._unsaved.items() if k[:3] == parent}
            for task_id in mine:
                del self._unsaved[(*parent, task_id)]
            for key, (step, work) in list(self._staged.items()):
                if step.parent == parent:
                    del self._staged[key]
                    if work:
                        mine[step.task_id] = work
            return mine
