"""A LangGraph node's agentq work, staged to commit with the node's writes.

:class:`GraphStep` is what :meth:`AgentQSaver.step
<agentq.adapters.langgraph_checkpoint.AgentQSaver.step>` hands a node: its
enqueues and ``on_commit`` functions are done by the transaction that stores the
node's writes, and :meth:`GraphStep.wait` interrupts the graph until they are
done; :func:`resume_waiting` is the body of the continuation task that resumes
it. The storage of checkpoints is :mod:`agentq.adapters.langgraph_checkpoint`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, ConfigDict

from agentq.adapters.calls import outcome
from agentq.decision import Decision, EnqueueOptions
from agentq.errors import ToolError
from agentq.ledger import TaskInfo
from agentq.runtime import Runtime

if TYPE_CHECKING:
    from agentq.adapters.langgraph_checkpoint import AgentQSaver

__all__ = ["GraphStep", "ResumeArgs", "resume_waiting"]

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

    A continuation redelivered after its worker died mid-resume (the waiting
    node's writes stored, the graph neither waiting again nor ended) carries the
    graph on from its last checkpoint (``invoke(None)``): the node is not run
    again. Any other thread whose node no longer waits is left alone. The tool
    can be enqueued by name, so nothing of ``args`` is trusted beyond naming the
    wait: the tasks must be the waiting node's own, and done; a thread is
    carried on only if its history holds that wait."""
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
    if carry_on:
        graph.invoke(None, config)
        return {"thread_id": args.thread_id, "carried_on": args.wait_id}
    outcomes = [outcome(i) for i in infos]
    graph.invoke(Command(resume={waiting[0].id: {"outcomes": outcomes}}), config)
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

        self.saver._stage(self, work)
        return key

    def on_commit(self, fn: Callable[[Decision], Any]) -> None:
        """Stage ``fn(decision)``: application SQL or other task operations done in
        the transaction of this node's writes (re-run with it on a transient abort,
        so it must have no outside effects)."""
        self.saver._stage(self, lambda d, _tasks: fn(d))

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

        self.saver._stage(self, continuation)
        answer = interrupt({_WAIT_MARK: wait_id, "idempotency_keys": keys})
        if isinstance(answer, dict) and isinstance(answer.get("outcomes"), list):
            return list(answer["outcomes"])
        raise ToolError(f"resumed with {answer!r:.80}, not the outcomes of the node's tasks")
