"""A LangGraph checkpointer on agentq's backends, in the same database as the tasks.

::

    from agentq.adapters.langgraph_checkpoint import AgentQSaver

    saver = AgentQSaver(rt)
    graph = builder.compile(checkpointer=saver)
    graph.invoke(inputs, {"configurable": {"thread_id": "ticket-812"}})

:class:`AgentQSaver` is a ``langgraph.checkpoint.base.BaseCheckpointSaver``
(sync, and async on a thread: :mod:`agentq.adapters.langgraph_threaded`) written
once over agentq's backend contract, so it runs on SQLite, PostgreSQL and
Spanner unchanged. It keeps two record tables (their keys and the whole-thread
operations are :mod:`agentq.adapters.langgraph_records`'):

* ``lg_checkpoints``: one record per checkpoint, keyed
  ``thread|namespace|checkpoint id`` (the parts percent-encoded, so ``|`` only
  separates), holding the checkpoint and its metadata as the saver's ``serde``
  typed them (base64). LangGraph's checkpoint ids grow with time, so a thread's
  newest checkpoint is the first of a descending key-range scan.
* ``lg_writes``: one record per pending write, keyed
  ``thread|namespace|checkpoint id|task id|index``; a regular write is inserted
  once (a repeated ``put_writes`` of the same task and index keeps the first),
  a special one (error, interrupt, resume: LangGraph's negative indexes)
  replaces the one before.

**A node's agentq tasks commit with its writes.** Inside a node,
:meth:`AgentQSaver.step` stages agentq work (``step.enqueue(...)``,
``step.on_commit(fn)``); it is done by the transaction that stores the node's
writes (``put_writes`` for that node's task), so the tasks exist if and only if
LangGraph's record that the node ran does. A node that raises after staging
stores its error and enqueues nothing. :meth:`GraphStep.wait` interrupts the
graph until the staged tasks are done and enqueues, in the same transaction,
a continuation task (``after`` them) that resumes the graph in whichever worker
takes it (:meth:`AgentQSaver.resume_tool`): a graph waiting days for an
approval holds no process. ``docs/langgraph.md`` says what each guarantee
rests on.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import ERROR

from agentq.adapters.langgraph_records import (
    CHECKPOINTS,
    SEP,
    WRITES,
    check_resume,
    checkpoint_key,
    config_of,
    copy_thread,
    delete_for_runs,
    delete_thread,
    key_part,
    namespace_prefix,
    prune_threads,
    scan,
    thread_of,
    thread_prefix,
    write_key,
)
from agentq.adapters.langgraph_starts import astart_or_carry_on, start_or_carry_on
from agentq.adapters.langgraph_steps import (
    GraphStep,
    ResumeArgs,
    StagedNodeWork,
    _Work,
    resume_waiting,
)
from agentq.adapters.langgraph_stored import StoredCheckpoints
from agentq.adapters.langgraph_threaded import ThreadedSaver
from agentq.backends import Transaction
from agentq.decision import Decision
from agentq.envelope import task_queue_spec
from agentq.errors import ConfigError
from agentq.ledger import TaskInfo
from agentq.runtime import Runtime
from agentq.tools.definition import ToolDef

if TYPE_CHECKING:
    from agentq.context import ToolContext

__all__ = [
    "CHECKPOINTS",
    "WRITES",
    "AgentQSaver",
    "GraphStep",
    "ResumeArgs",
    "resume_waiting",
]


class AgentQSaver(ThreadedSaver):
    """LangGraph checkpoints and pending writes in agentq's database (module docs)."""

    def __init__(
        self,
        rt: Runtime,
        *,
        serde: SerializerProtocol | None = None,
        checkpoint_wait: float = 30.0,
    ) -> None:
        """``checkpoint_wait``: how many seconds a node's agentq work waits for
        the checkpoint its step started from, which LangGraph's default
        ``durability="async"`` may still be storing (:mod:`~agentq.adapters.langgraph_stored`)."""
        if not 0 < checkpoint_wait < float("inf"):
            raise ConfigError(f"checkpoint_wait {checkpoint_wait!r}: a number of seconds above 0")
        super().__init__(serde=serde)
        self.rt = rt
        self.checkpoint_wait = checkpoint_wait
        # What the nodes staged that is not done yet (langgraph_steps.StagedNodeWork).
        self._work = StagedNodeWork()
        self._stored = StoredCheckpoints()

    # -- a node's agentq work ---------------------------------------------------

    def step(self, config: RunnableConfig | None = None) -> GraphStep:
        """The node run being executed (LangGraph's ``get_runtime().execution_info``,
        or the ``config`` LangGraph passes the node), for staging agentq work that
        commits with the node's writes. Call it once per node run: a second call
        supersedes the first."""
        if config is None:
            from langgraph.config import get_config

            config = get_config()
        configurable = config.get("configurable") or {}
        task_id = configurable.get("__pregel_task_id")
        if not isinstance(task_id, str) or not task_id:
            raise ConfigError("AgentQSaver.step runs inside a LangGraph node")
        if configurable.get("__pregel_durability") == "exit":
            raise ConfigError(
                "durability='exit' stores a graph's steps only when it exits: a node's "
                "agentq work would be lost with the steps never stored; use 'sync' or 'async'"
            )
        thread_id = thread_of(config)
        # The node's namespace is its graph's plus "node:task id"; the checkpoint
        # map names the checkpoint each enclosing graph's step started from.
        node_ns = str(configurable.get("checkpoint_ns", ""))
        graph_ns = node_ns.rsplit("|", 1)[0] if "|" in node_ns else ""
        parent_id = (configurable.get("checkpoint_map") or {}).get(graph_ns)
        parent = (thread_id, graph_ns, str(parent_id)) if parent_id else None
        step = GraphStep(self, thread_id, task_id, parent)
        self._work.begin(step)
        return step

    def _take_staged(self, thread_id: str, task_id: str) -> list[_Work]:
        """What the node run ``task_id`` staged (``put_writes`` does it)."""
        return self._work.take(thread_id, task_id)

    def _do_staged(self, tx: Transaction, work: Sequence[_Work]) -> None:
        decision = Decision(self.rt, tx)
        tasks: dict[str, TaskInfo] = {}
        for one in work:
            one(decision, tasks)

    def serve(self, graph: Any, name: str, *, queue: str = "langgraph") -> ToolDef:
        """Register :meth:`resume_tool` on this saver's runtime (and create its
        queue), so its workers resume ``graph``'s waiting threads; returns it."""
        definition = self.rt.tools.add(self.resume_tool(graph, name, queue=queue))
        self.rt.backend.create_queue(task_queue_spec(queue))
        return definition

    def resume_tool(self, graph: Any, name: str, *, queue: str = "langgraph") -> ToolDef:
        """The agentq tool (hidden from agents) that resumes ``graph`` (compiled
        with this saver) once a waiting node's tasks are done
        (:meth:`GraphStep.wait`); register it on the runtimes whose workers should
        run it (:meth:`serve` does). In a tools folder, declare it with ``@tool``
        and :func:`resume_waiting` instead."""

        def handler(ctx: ToolContext, args: ResumeArgs) -> dict[str, Any]:
            return resume_waiting(self.rt, graph, args)

        return ToolDef(
            name=name, handler=handler, args_model=ResumeArgs, result_model=None, queue=queue,
            description="resumes a LangGraph thread whose node's agentq tasks are done "
            "(not offered to agents)", visible=False,
        )  # fmt: skip

    def start_or_carry_on(
        self, graph: Any, config: RunnableConfig, input: Any, *, durability: str = "sync"
    ) -> Any:
        """What a user's process runs for a thread it may have run before: start it
        with ``input``, carry it on from its last checkpoint, or leave it to the
        worker that carries it on; returns ``graph.invoke``'s result, or None if
        nothing ran (:func:`~agentq.adapters.langgraph_starts.start_or_carry_on`,
        which says what ``durability`` changes)."""
        return start_or_carry_on(self.rt, graph, config, input, durability=durability)

    async def astart_or_carry_on(
        self, graph: Any, config: RunnableConfig, input: Any, *, durability: str = "sync"
    ) -> Any:
        """:meth:`start_or_carry_on` for an asyncio program (``ainvoke``)."""
        return await astart_or_carry_on(self.rt, graph, config, input, durability=durability)

    # -- reading ----------------------------------------------------------------

    def _dump(self, value: Any) -> dict[str, str]:
        kind, data = self.serde.dumps_typed(value)
        return {"t": kind, "b": base64.b64encode(data).decode("ascii")}

    def _load(self, typed: Mapping[str, str]) -> Any:
        return self.serde.loads_typed((typed["t"], base64.b64decode(typed["b"])))

    def _pending_writes(
        self, thread_id: str, ns: str, checkpoint_id: str
    ) -> list[tuple[str, str, Any]]:
        prefix = checkpoint_key(thread_id, ns, checkpoint_id) + SEP
        rows = [rec for _, rec in scan(self.rt.backend, WRITES, prefix)]
        rows.sort(key=lambda r: writes_sort_key(r["task_path"], r["task_id"], r["idx"]))
        return [(r["task_id"], r["channel"], self._load(r["value"])) for r in rows]

    def _tuple(self, rec: Mapping[str, Any], metadata: Any = None) -> CheckpointTuple:
        thread_id, ns, cid = rec["thread_id"], rec["checkpoint_ns"], rec["checkpoint_id"]
        parent = rec.get("parent_checkpoint_id")
        return CheckpointTuple(
            config=config_of(thread_id, ns, cid),
            checkpoint=self._load(rec["checkpoint"]),
            metadata=metadata if metadata is not None else self._load(rec["metadata"]),
            parent_config=config_of(thread_id, ns, parent) if parent else None,
            pending_writes=self._pending_writes(thread_id, ns, cid),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the
        thread's newest in ``config``'s namespace; None if there is none."""
        thread_id = thread_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            rec = self.rt.backend.get_record(
                CHECKPOINTS, checkpoint_key(thread_id, ns, checkpoint_id)
            )
        else:
            newest = self.rt.backend.list_records(
                CHECKPOINTS, namespace_prefix(thread_id, ns), 1, descending=True
            )
            rec = newest[0][1] if newest else None
        return None if rec is None else self._tuple(rec)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (per namespace): of ``config``'s thread (and
        namespace, if it names one; of every thread without ``config``), only
        ``config``'s ``checkpoint_id`` if it names one, those older than
        ``before``'s, those whose metadata holds every item of ``filter``; at
        most ``limit``."""
        configurable = (config or {}).get("configurable") or {}
        if config is None or configurable.get("thread_id") in (None, ""):
            prefix = ""
        elif "checkpoint_ns" in configurable:
            prefix = namespace_prefix(thread_of(config), str(configurable["checkpoint_ns"]))
        else:
            prefix = thread_prefix(thread_of(config))
        only = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        after = ""
        if before_id and prefix.count(SEP) == 2:  # one namespace: a key range
            after = prefix + key_part(before_id)
        if limit is not None and limit <= 0:
            return
        count = 0
        for _, rec in scan(self.rt.backend, CHECKPOINTS, prefix, after=after, descending=True):
            cid = rec["checkpoint_id"]
            if only and cid != only:
                continue
            if before_id and cid >= before_id:
                continue
            metadata = self._load(rec["metadata"])
            if filter and not all(metadata.get(k) == v for k, v in filter.items()):
                continue
            yield self._tuple(rec, metadata)
            count += 1
            if limit is not None and count >= limit:
                return

    # -- writing ----------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` (its channel values inline), its parent being
        ``config``'s ``checkpoint_id``; returns the config that names it."""
        thread_id = thread_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        stored = (thread_id, ns, str(checkpoint["id"]))
        try:
            self._store(config, checkpoint, metadata, thread_id, ns)
        except BaseException:
            self._stored.ended(stored, stored=False)  # its nodes' work gives up at once
            raise
        self._stored.ended(stored, stored=True)
        return config_of(thread_id, ns, checkpoint["id"])

    def _store(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        thread_id: str,
        ns: str,
    ) -> None:
        full = get_checkpoint_metadata(config, metadata)
        run_id = full.get("run_id")
        rec = {
            "thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": config["configurable"].get("checkpoint_id"),
            "run_id": str(run_id) if run_id is not None else None,
            "checkpoint": self._dump(checkpoint), "metadata": self._dump(full),
        }  # fmt: skip
        key = checkpoint_key(thread_id, ns, checkpoint["id"])
        # A node's staged work that its writes did not store commits with this
        # checkpoint, which holds the node's effects, or neither does.
        parent_id = config["configurable"].get("checkpoint_id")
        parent = (thread_id, ns, str(parent_id))
        unsaved = self._work.take_unsaved(parent) if parent_id else {}

        def store(tx: Transaction) -> None:
            check_resume(tx, thread_id)
            for work in unsaved.values():
                self._do_staged(tx, work)
            tx.put_record(CHECKPOINTS, key, rec)

        try:
            self.rt.backend.transact(store)
        except BaseException:
            for task_id, work in unsaved.items():
                self._work.writes_started(parent, task_id)
                self._work.writes_ended(parent, task_id, work)
            raise

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes to ``config``'s checkpoint, and do in the same
        transaction the agentq work the task's node staged (:meth:`step`), unless
        the node failed (its error is stored; its staged work is dropped)."""
        thread_id = thread_of(config)
        ns = str(config["configurable"].get("checkpoint_ns", ""))
        checkpoint_id = str(config["configurable"]["checkpoint_id"])
        rows = []
        for position, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, position)
            rows.append((write_key(thread_id, ns, checkpoint_id, task_id, idx), idx, {
                "task_id": task_id, "task_path": task_path, "channel": channel, "idx": idx,
                "value": self._dump(value),
            }))  # fmt: skip
        staged = self._take_staged(thread_id, task_id)
        if any(channel == ERROR for channel, _ in writes):
            staged = []

        def store(tx: Transaction) -> None:
            check_resume(tx, thread_id)
            if staged:
                self._do_staged(tx, staged)
            for key, idx, rec in rows:
                if idx >= 0:
                    tx.insert_record(WRITES, key, rec)
                else:
                    tx.put_record(WRITES, key, rec)

        if not staged:
            self.rt.backend.transact(store)
            return
        parent = (thread_id, ns, checkpoint_id)
        self._work.writes_started(parent, task_id)
        unsaved = staged
        try:
            # Not before the checkpoint they belong to (durability="async"):
            # marked in flight meanwhile, so the next step's put waits for them.
            key = checkpoint_key(thread_id, ns, checkpoint_id)
            self._stored.wait_for(
                parent, lambda: self.rt.backend.get_record(CHECKPOINTS, key) is not None,
                self.checkpoint_wait,
            )  # fmt: skip
            self.rt.backend.transact(store)
            unsaved = []
        finally:
            self._work.writes_ended(parent, task_id, unsaved)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of ``thread_id``, in every namespace
        (a batch per transaction: a put racing it may survive)."""
        delete_thread(self.rt.backend, thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints whose metadata names one of ``run_ids``, with
        their writes (LangGraph's caveat for ``DeltaChannel`` threads applies)."""
        delete_for_runs(self.rt.backend, run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread, in every namespace, to
        another thread id (a batch per transaction)."""
        copy_thread(self.rt.backend, source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint (with its
        writes) of each thread and delete the others; ``delete``: delete the
        threads. Checkpoints hold their channel values whole, so the newest one
        needs no other, except for LangGraph's beta ``DeltaChannel`` (see
        ``BaseCheckpointSaver.prune``)."""
        prune_threads(self.rt.backend, thread_ids, strategy=strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Zero-padded versions, so they also sort as text (as LangGraph's own savers')."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        return f"{current_v + 1:032}.{0:016}"
