"""The runtime's core: construction over one database, and the tool registry.

:class:`RuntimeCore` owns what every other concern of the facade builds on: the
backend, clock, tools, policy, settings and HTTP transport a
:class:`~agentq.runtime.Runtime` is made with; which tools exist and which only the
runtime may send; the one transaction every decision runs in; and closing.
The other parts (:mod:`.decisions`, :mod:`.reading`, :mod:`.dead_letter_queue`,
:mod:`.operations`) are mixins over it, combined by ``Runtime``.
"""

from __future__ import annotations

import difflib
import threading
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agentq import catalog
from agentq.agents import Agent
from agentq.backends import Backend, Transaction, open_backend
from agentq.clock import Clock
from agentq.decision import Decision
from agentq.envelope import MAX_ENVELOPE_BYTES
from agentq.errors import ConfigError, SharedTransactionError, UnknownTool
from agentq.faults import FaultPoints
from agentq.lifecycle.payloads import DEFAULT_INLINE_BYTES
from agentq.lifecycle.retention import RetentionSetting, retention_setting
from agentq.policies import Policy, load_policies
from agentq.queue_set import add_builtin_tools, queue_specs
from agentq.retention import DEFAULT_RETENTION
from agentq.telemetry import Telemetry
from agentq.tools import ToolDef, ToolRegistry
from agentq.tools.registry import unknown_tool

if TYPE_CHECKING:
    import httpx

    from agentq.runtime import Runtime

T = TypeVar("T")


def _registry(tools: str | Path | Iterable[Any] | None, reload: bool) -> ToolRegistry:
    """The registry of ``Runtime(tools=...)``: folders and decorated functions."""
    registry = ToolRegistry()
    if tools is None:
        return registry
    if isinstance(tools, str | Path) or callable(tools):
        items: list[Any] = [tools]
    elif isinstance(tools, Iterable):
        items = list(tools)
    else:
        raise ConfigError(
            f"tools must be a folder, a ToolRegistry or functions decorated with @agentq.tool, "
            f"not {type(tools).__name__}"
        )
    for t in items:
        if isinstance(t, str | Path):
            registry.load_dir(t, reload=reload)
        elif getattr(t, "__agentq_agent__", False) is True and not isinstance(t, type):
            registry.add_agent(t)
        else:
            registry.add(t)
    return registry


def _refusal(url: str) -> str:
    """Why a backend without shared transactions refuses ``Runtime.decision``."""
    if url.startswith("sqlite"):
        return (
            "Runtime.decision(connection) needs a postgresql:// runtime: the SQLite "
            "backend commits only through its own single writer connection (group "
            "commit, and in-process wake-ups that follow its commits), so a transaction "
            "on another sqlite3.Connection could neither share its commit nor wake its "
            "workers, and would hold the file's write lock against it; use "
            "rt.transact(fn) with tx.execute(...) for the application's SQL"
        )
    return (
        f"Runtime.decision(connection) needs a postgresql:// runtime; {url.split(':', 1)[0]} "
        "commits only in transactions of its own: use rt.transact(fn)"
    )


class _BoundDecision(Decision):
    """A :class:`Decision` on the application's transaction: each operation runs in
    a savepoint of it (the transaction's ``atomic()``), so one that raises part way
    leaves nothing behind, and the application may go on and commit the rest."""

    tx: Any  # the backend's bound transaction, with atomic()

    def submit(self, *args: Any, **kw: Any) -> Any:
        with self.tx.atomic():
            return super().submit(*args, **kw)

    def cancel(self, *args: Any, **kw: Any) -> Any:
        with self.tx.atomic():
            return super().cancel(*args, **kw)

    def approve(self, *args: Any, **kw: Any) -> Any:
        with self.tx.atomic():
            return super().approve(*args, **kw)

    def reject(self, *args: Any, **kw: Any) -> Any:
        with self.tx.atomic():
            return super().reject(*args, **kw)

    def request_approval(self, *args: Any, **kw: Any) -> Any:
        with self.tx.atomic():
            return super().request_approval(*args, **kw)


class RuntimeCore:
    """The state of a runtime over one database and its tool registry (see
    :class:`~agentq.runtime.Runtime`, which combines this with the other concerns)."""

    def __init__(
        self,
        db: str | Backend = "sqlite:///agentq.db",
        *,
        tools: str | Path | ToolRegistry | Iterable[Any] | None = None,
        policies: str | Path | Policy | None = None,
        clock: Clock | None = None,
        settings: Mapping[str, Any] | None = None,
        http_transport: httpx.BaseTransport | None = None,
        reload: bool = False,
        args_inline_bytes: int = DEFAULT_INLINE_BYTES,
        retention: RetentionSetting = DEFAULT_RETENTION,
        agents: Iterable[Agent] = (),
        **backend_options: Any,
    ) -> None:
        # Checked before anything is opened: a bad value is a ConfigError, nothing else.
        #: How long finished tasks are kept (None: forever); a tool's policy may say
        #: otherwise. See :mod:`agentq.lifecycle.retention`.
        self.retention: timedelta | None = retention_setting(retention)
        if (
            not isinstance(args_inline_bytes, int)
            or isinstance(args_inline_bytes, bool)
            or not 0 <= args_inline_bytes <= MAX_ENVELOPE_BYTES
        ):
            raise ConfigError(
                f"args_inline_bytes must be a whole number of bytes from 0 to "
                f"{MAX_ENVELOPE_BYTES}, not {args_inline_bytes!r}"
            )
        #: Encoded arguments larger than this are stored out of band
        #: (:mod:`agentq.lifecycle.payloads`).
        self.args_inline_bytes = args_inline_bytes
        if isinstance(db, str):
            self.backend: Backend = open_backend(db, clock=clock, **backend_options)
            self._owns_backend = True
        else:
            self.backend = db
            self._owns_backend = False
        self.clock: Clock = self.backend.clock
        # Without tools, calls are checked against the tool catalog that runtimes
        # with tools record in the database (agentq.catalog): no handler code needed.
        self.from_catalog = tools is None
        if isinstance(tools, ToolRegistry):
            self.tools = tools
        else:
            self.tools = _registry(tools, reload)
        for agent in agents:
            self.tools.add_agent(agent)
        # Webhook delivery, and each agent's turn tool (its turns are its tasks).
        add_builtin_tools(self.tools)
        #: Durable agents by name (:mod:`agentq.agents`): ``agents=`` and those
        #: found in the tools folders.
        self.agents: dict[str, Agent] = dict(self.tools.agents)
        self._policy_given = policies is not None
        if isinstance(policies, Policy):
            self.policy = policies
        elif policies is not None or not self.from_catalog:
            self.policy = load_policies(policies)
        else:
            self.policy = catalog.read_policy(self.backend) or Policy()
        self._check_policy()
        self.settings: dict[str, Any] = dict(settings or {})
        self.faults = FaultPoints()
        self.telemetry = Telemetry()
        # The default transport is made when a tool first calls out: making one
        # loads the CA certificates (a quarter of a second for the first of a
        # process, 50 ms for each later one), which a runtime that only decides,
        # reads or serves a CLI command never needs.
        self._http_transport = http_transport
        self._http_transport_lock = threading.Lock()
        for spec in queue_specs(self.tools):  # the tools', escalations, heartbeats
            self.backend.create_queue(spec)
        self._internal = self._internal_tools()

    @property
    def http_transport(self) -> httpx.BaseTransport:
        """The transport under every tool's ``ctx.http`` client (the runtime's
        connection pools): the one given, or a
        :class:`~agentq.http_guard.GuardedTransport` made on first use, which
        connects only to the addresses the tool's ``allowed_hosts`` allow."""
        with self._http_transport_lock:
            if self._http_transport is None:
                # Here, not at every process start (see above).
                from agentq.http_guard import GuardedTransport

                self._http_transport = GuardedTransport()
            return self._http_transport

    @property
    def _facade(self) -> Runtime:
        """This object as the :class:`~agentq.runtime.Runtime` it is part of (what
        decisions, the lifecycle and workers are handed)."""
        return cast("Runtime", self)

    def record_tools(self) -> None:
        """Record this runtime's tools (and its policy, if it was given one) in the
        database's tool catalog, for producers without the tools' code. ``agentq
        init`` does, and every worker when it starts; nothing is written if the
        records are as they were."""
        if self.tools.names():
            catalog.record(self.backend, self.tools, self.policy if self._policy_given else None)

    def _check_policy(self) -> None:
        named = set(self.policy.tools) | {rule.tool for rule in self.policy.approvals}
        known = set(self.tools.names())
        if named - known and self.from_catalog:
            known |= set(catalog.read_tools(self.backend).names())
        hint = (
            " (this runtime has no tools and the database's tool catalog does not list "
            "it: run `agentq init` with the tools, or start a worker)"
            if self.from_catalog
            else ""
        )
        # A misspelt [tools.NAME] would otherwise leave the real tool unconfigured
        # (no allowed hosts, default limits) without a word.
        unknown = sorted(name for name in self.policy.tools if name not in known)
        if unknown:
            listed = ", ".join(sorted(t.name for t in self.tools if not t.internal)) or "none"
            raise ConfigError(
                f"policy configures unknown tool(s) {', '.join(map(repr, unknown))} "
                f"in [tools.…] (known tools: {listed}){hint}"
            )
        for rule in self.policy.approvals:
            if rule.tool not in known:
                raise ConfigError(f"approval rule for unknown tool {rule.tool!r}{hint}")
        self._check_rule_fields()

    def _check_rule_fields(self) -> None:
        """A rule on a field its tool does not take would never find it and fail
        closed: every call would wait for a human. Refused, with the closest field."""
        recorded: ToolRegistry | None = None
        for index, rule in enumerate(self.policy.approvals):
            if rule.field is None:
                continue
            if rule.tool in self.tools:
                definition: ToolDef = self.tools.get(rule.tool)
            else:
                recorded = recorded or catalog.read_tools(self.backend)
                if rule.tool not in recorded:
                    continue
                definition = recorded.get(rule.tool)
            schema = definition.args_json_schema()
            fields = list(schema.get("properties", {}))
            if rule.field in fields or schema.get("additionalProperties") is True:
                continue
            close = difflib.get_close_matches(rule.field, fields, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"{self.policy.rule_origin(index)}: approval rule for tool {rule.tool!r}: "
                f"field {rule.field!r} is not one of its arguments{hint}; it takes: "
                f"{', '.join(fields) or 'none'}"
            )

    def _internal_tools(self) -> frozenset[str]:
        """Tools only the runtime may send: declared internal, or named by a policy
        as the notification or escalation tool (they carry approval notices, and an
        agent that could send them could spoof one)."""
        defaults = self.policy.defaults
        named = {defaults.notify_tool, defaults.escalation_tool, defaults.worker_alert_tool}
        for rule in self.policy.approvals:
            named |= {rule.notify_tool, rule.escalation_tool}
        declared = {t.name for t in self.tools if t.internal}
        return frozenset(n for n in named | declared if n)

    def find_tool(self, tx: Transaction, name: str) -> ToolDef | None:
        """The tool called ``name``: loaded, else (a runtime without tools) as the
        database's tool catalog records it, read in ``tx``; None if unknown."""
        if name in self.tools:
            return self.tools.get(name)
        return catalog.read_tool(tx, name) if self.from_catalog else None

    def enqueueable_tool(self, tx: Transaction, name: str) -> ToolDef:
        """The tool called ``name`` for a new task (:class:`UnknownTool` if none)."""
        found = self.find_tool(tx, name)
        if found is not None:
            return found
        # Named among the tools a caller may enqueue: internal ones never are.
        names = [t.name for t in self.known_tools()
                 if not t.internal and not self.is_internal(t.name)]  # fmt: skip
        text = unknown_tool(name, names, "tools you may enqueue")
        if self.from_catalog:
            text += (
                " (this runtime has no tools and the database's tool catalog does not list "
                "it: `agentq init` with the tools records them, as every worker does at start)"
            )
        raise UnknownTool(text)

    def known_tools(self) -> ToolRegistry:
        """The tools this runtime describes and enqueues: its own, or (a runtime made
        without tools) those the database's tool catalog records, read now. What
        the HTTP API, MCP and the console offer on a machine without the tools' code."""
        return catalog.read_tools(self.backend) if self.from_catalog else self.tools

    def is_internal(self, tool: str) -> bool:
        """Whether ``tool`` is sent only by the runtime (never by an agent)."""
        return tool in self._internal or tool.startswith("_")

    def tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of the tools an agent may call (internal
        tools and tools declared ``visible=False`` are left out)."""
        known = self.known_tools()
        return [
            t.schema() for t in sorted(known, key=lambda t: t.name)
            if t.visible and not t.internal and not self.is_internal(t.name)
        ]  # fmt: skip

    def transact(self, fn: Callable[[Decision], T], *, durable: bool = True) -> T:
        """Run ``fn(tx)`` in one transaction: application SQL and task operations
        commit together or not at all. ``fn`` may be re-run on a transient abort,
        so it must not have outside effects. On SQLite it may run on the thread
        of a concurrent transaction it shares a commit with, in its caller's
        :mod:`contextvars` context."""
        return self.backend.transact(lambda tx: fn(Decision(self._facade, tx)), durable=durable)

    def decision(self, connection: Any) -> Decision:
        """A :class:`Decision` in the application's own transaction on ``connection``
        (River's ``InsertTx``): a psycopg 3 ``Connection`` or ``Cursor``, or an
        SQLAlchemy 2 ``Session`` or ``Connection``, to this runtime's PostgreSQL
        database. The application commits or rolls back; the decision's tasks,
        approvals and wake-ups exist if and only if that commit succeeds. Unlike
        :meth:`transact` nothing is re-run on a conflict, and the transaction runs
        at the application's isolation level (docs/how-to/postgres.md says when that
        matters). Use one decision per transaction. Other backends refuse it with
        :class:`~agentq.errors.SharedTransactionError`."""
        bind = getattr(self.backend, "bind_transaction", None)
        if bind is None:
            raise SharedTransactionError(_refusal(self.backend.url))
        return _BoundDecision(self._facade, bind(connection))

    def close(self) -> None:
        """Close the backend (if this runtime opened it) and the HTTP transport."""
        with self._http_transport_lock:
            transport = self._http_transport
        if transport is not None:
            transport.close()
        if self._owns_backend:
            self.backend.close()
