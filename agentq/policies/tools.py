"""Per-tool policy settings (``[defaults]`` and ``[tools.NAME]``)."""

from __future__ import annotations

from datetime import timedelta

from pydantic import Field, field_validator, model_validator

from agentq.keylimit_rules import check_key_limit
from agentq.policies.base import (
    MAX_RATE_PER_SECOND,
    MIN_RATE_PER_SECOND,
    parse_duration,
)
from agentq.policies.base import Strict as _Strict
from agentq.policies.base import retry_after_cap as _retry_after_cap
from agentq.policies.hosts import parse_host_entry
from agentq.retention import RetentionValue, parse_retention
from agentq.retry import DEFAULT_MAX_RETRY_AFTER


class Defaults(_Strict):
    """Defaults for every tool."""

    max_attempts: int = Field(default=5, ge=1, le=1000)
    """Attempts a task gets before it is dead-lettered, unless the tool's policy or
    its ``@tool(max_attempts=...)`` says otherwise."""
    backoff_initial: timedelta = timedelta(seconds=1)
    """Delay before the first retry; it doubles (with jitter) for each failure."""
    backoff_max: timedelta = timedelta(minutes=5)
    """The longest delay between two retries."""
    escalate_after: timedelta = timedelta(hours=72)
    """How long an approval may wait for a human before it escalates."""
    escalation_tool: str = "escalate"
    """The tool an escalation runs. If no tool of this name exists, the approval is
    marked escalated and nobody is told."""
    notify_tool: str | None = "request_approval"
    """The tool that announces a new approval request to the approvers. If no tool
    of this name exists (or it is unset), nobody is told: approvals are then only
    seen by asking (``Runtime.approvals()``)."""
    max_retry_after: timedelta = timedelta(seconds=DEFAULT_MAX_RETRY_AFTER)
    """The longest ``Retry-After`` honoured (at most 365d); a longer one counts as
    an ordinary failure."""
    worker_alert_tool: str | None = "worker_down"
    """The tool run once when a worker's heartbeat times out (it stopped without a
    clean shutdown). If no tool of this name exists (or it is unset), the timeout is
    still reported: ``agentq workers``, the ``agentq.worker.heartbeat_timeouts``
    metric and a warning in the log."""

    @field_validator("backoff_initial", "backoff_max", "escalate_after", mode="before")
    @classmethod
    def _duration(cls, v: object) -> timedelta:
        return parse_duration(v)

    @field_validator("max_retry_after", mode="before")
    @classmethod
    def _cap(cls, v: object) -> timedelta:
        return _retry_after_cap(v)


class ToolPolicy(_Strict):
    """Limits for one tool."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts the tool's ``ctx.http`` client may call: names (``*.example.com``
    matches subdomains), addresses and networks (``10.0.0.0/8``), each with
    ``:port`` if only one port. A name is reached only at public addresses unless
    an address, a network or ``localhost`` entry names the non-public one
    (:mod:`agentq.policies.hosts`). A tool without a policy may call no host at all."""
    rate_limit_per_second: float | None = Field(
        default=None, ge=MIN_RATE_PER_SECOND, le=MAX_RATE_PER_SECOND, allow_inf_nan=False
    )
    """Calls per second, shared by every worker on the database (0.1: one call
    every 10 s); unset: unlimited."""
    rate_limit_burst: int | None = Field(default=None, ge=1, le=1_000_000, strict=True)
    """Calls allowed at once; default: one second's calls, at least 1."""
    max_retry_after: timedelta | None = None
    """This tool's cap on ``Retry-After``; default: ``[defaults] max_retry_after``."""
    max_attempts: int | None = Field(default=None, ge=1, le=1000)
    """Attempts before dead-lettering; wins over the tool's declaration and the
    defaults."""
    timeout: timedelta | None = None
    """How long one call of the handler may run before it is given up as a
    ``TimeoutError`` failure (the external call may still complete)."""
    requires_approval: bool = False
    """Every call of this tool needs a human's approval."""
    require_idempotency_key: bool = False
    """The HTTP API refuses (400) an action of this tool sent without an
    ``Idempotency-Key``."""
    batch_window: timedelta | None = None
    """New tasks' delivery time is rounded up to the end of a window this long
    (temporal batching: the tasks of a window are ready, and leased, together);
    wins over ``@tool(batch_window=...)``."""
    batch_offset_field: str | None = None
    """The argument whose stable hash spreads entities across the window (whole
    seconds below it); unset: every task of a window lands on its end."""
    max_batch: int | None = Field(default=None, ge=1, le=10_000)
    """The most tasks one call of a batch handler (``@tool(batch=True)``) gets;
    wins over ``@tool(max_batch=...)``."""
    retention: RetentionValue | None = None
    """How long this tool's finished tasks (with their approvals, idempotency keys
    and audit entries) are kept before workers delete them, e.g. ``"1h"`` or
    ``"30d"``; ``"off"``: kept forever. Default: the runtime's retention
    (``[agentq] retention`` in ``agentq.toml``, else 7 days)."""

    @field_validator("retention", mode="before")
    @classmethod
    def _retention(cls, v: object) -> RetentionValue | None:
        return None if v is None else parse_retention(v, parse_duration)
    concurrency_key: str | None = Field(default=None, strict=True)
    """The argument whose value is limited by ``max_in_flight`` (e.g.
    ``"merchant_id"``); a call without it counts under one shared value."""
    max_in_flight: int | None = Field(default=None, strict=True)
    """How many tasks of this tool with the same ``concurrency_key`` value may run
    at once, across every worker on the database (1 to 1000); the others wait,
    ``queued`` and not counted as failures, for a slot. A slot is freed when its
    task stops running (any outcome, timeout or cancel), and one lease (10 s)
    after its worker died."""

    @model_validator(mode="after")
    def _key_limit(self) -> ToolPolicy:
        check_key_limit(self.concurrency_key, self.max_in_flight)  # agentq.keylimit_rules
        return self

    @field_validator("timeout", "batch_window", mode="before")
    @classmethod
    def _duration(cls, v: object) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("max_retry_after", mode="before")
    @classmethod
    def _cap(cls, v: object) -> timedelta | None:
        return None if v is None else _retry_after_cap(v)

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for host in v:
            parse_host_entry(host)  # a ValueError naming the entry
        return tuple(h.strip().lower() for h in v)


#: The settings of a tool no policy file names.
UNCONFIGURED = ToolPolicy()


