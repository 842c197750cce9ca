"""Policies: what an agent may do, enforced by the executor.

Policies are TOML files in a directory (``policies/`` by default), validated by
pydantic. Several files are merged; a tool configured twice is an error. Example::

    [defaults]
    max_attempts = 5
    backoff_initial = "1s"
    backoff_max = "5m"

    [tools.execute_refund]
    allowed_hosts = ["127.0.0.1", "payments.example.com"]
    rate_limit_per_second = 20     # shared by every worker on the database
    rate_limit_burst = 20          # default: one second's calls, at least 1
    max_retry_after = "1h"         # longer Retry-After: an ordinary failure

    [roles]
    finance = ["carol", "dave"]

    [[approvals]]
    tool = "execute_refund"
    field = "amount"
    above = 100
    approvers = ["alice", "bob"]   # unset: anyone may decide
    escalate_after = "72h"
    remind = ["24h", "1h"]         # before each deadline
    escalate_to = ["finance"]      # the next level of approvers
    on_timeout = "reject"          # at the last level's deadline

    [schedules.nightly_report]     # a periodic run (agentq.schedules)
    cron = "0 2 * * *"
    args = { scope = "all" }

The agent supplies only a tool name and arguments; every limit here is read
by the runtime from these files, never from the arguments.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentq import tomlfiles
from agentq.errors import ConfigError
from agentq.keylimit_rules import check_key_limit
from agentq.retention import RetentionValue, parse_retention
from agentq.retry import DEFAULT_MAX_RETRY_AFTER, RetryPolicy
from agentq.schedules import MAX_CATCH_UP, Rule, check_cron, check_name, check_timezone

__all__ = [
    "ApprovalRule",
    "EscalationLevel",
    "Policy",
    "ScheduleRule",
    "ToolPolicy",
    "format_duration",
    "load_policies",
    "parse_duration",
]

#: The longest duration a policy may set: longer ones are "never" in practice,
#: and ``now + duration`` must still be a datetime.
MAX_DURATION = timedelta(days=3650)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}

#: Rate limits from one call per ~11.6 days to a million per second: slower rates
#: would put a tool's next free time (and the retry times it gives tasks) beyond
#: what a datetime can hold; faster ones are no limit at all.
MIN_RATE_PER_SECOND = 1e-6
MAX_RATE_PER_SECOND = 1e6
#: The largest ``max_retry_after`` a policy may set.
MAX_RETRY_AFTER_LIMIT = timedelta(days=365)


def parse_duration(value: object) -> timedelta:
    """``"72h"``, ``"30m"``, ``"1.5s"``, ``"250ms"``, ``"2d"`` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError(f"invalid duration {value!r}: use e.g. '72h', '30m', '10s' or seconds")
    if seconds < 0:
        raise ValueError(f"duration {value!r} must not be negative")
    if not math.isfinite(seconds) or seconds > MAX_DURATION.total_seconds():
        raise ValueError(f"duration {value!r} is too long (at most {MAX_DURATION.days}d)")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """A duration as a policy writes it: ``"72h"``, ``"14d"``, ``"30m"``, ``"1.5s"``."""
    seconds = value.total_seconds()
    if seconds >= 7 * 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g}d"
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"


def _retry_after_cap(value: object) -> timedelta:
    """A ``max_retry_after`` value: a positive duration of at most a year."""
    try:
        cap = parse_duration(value)
    except OverflowError as exc:
        raise ValueError(f"duration {value!r} is too large") from exc
    if cap <= timedelta(0) or cap > MAX_RETRY_AFTER_LIMIT:
        raise ValueError(f"max_retry_after {value!r} must be more than 0 and at most 365d")
    return cap


class _Strict(BaseModel):
    # Attribute docstrings are the field descriptions docs/reference/policies.md
    # is generated from (python -m agentq.reference).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


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
    """Hosts the tool's ``ctx.http`` client may call (``*.example.com`` matches
    subdomains). A tool without a policy may call no host at all."""
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

    @field_validator("timeout", mode="before")
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
            if not re.fullmatch(r"(\*\.)?[A-Za-z0-9.\-\[\]:]+", host):
                raise ValueError(f"invalid host pattern {host!r}")
        return tuple(h.lower() for h in v)


_UNCONFIGURED = ToolPolicy()


class ScheduleRule(_Strict):
    """A periodic run of a tool (see :mod:`agentq.schedules`); it replaces a
    schedule of the same name declared in code (``@tool(every=...)``)."""

    tool: str | None = None
    """The tool each run calls; default: the schedule's name."""
    every: timedelta | None = None
    """Run at every multiple of this interval since the Unix epoch (``"1h"``: at the
    top of each hour, UTC); at least 1s. Give ``every`` or ``cron``."""
    cron: str | None = None
    """Run at the times of this five-field cron expression (``"0 9 * * MON"``)."""
    timezone: str = "UTC"
    """The time zone ``cron`` is read in (an IANA name: ``"Europe/Paris"``)."""
    args: dict[str, Any] = {}
    """The arguments of every run, validated by the tool's argument model."""
    catch_up: int = Field(default=0, ge=0, le=MAX_CATCH_UP)
    """After downtime, how many overdue runs are run (the latest ones, oldest
    first); 0: skip them and go on at the next future time."""
    enabled: bool = True
    """``false`` stops the schedule (its pending run is cancelled) and needs no
    ``every`` or ``cron``: it turns off a schedule declared in code."""

    @field_validator("every", mode="before")
    @classmethod
    def _every(cls, v: object) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        return None if v is None else check_cron(v)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        return check_timezone(v)

    def rule(self) -> Rule:
        """The slots of this schedule (:class:`ConfigError` if it has no valid rule)."""
        return Rule(every=self.every, cron=self.cron, timezone=self.timezone)


#: Bounds that keep one approval's timers few.
_MAX_LEVELS = 10
_MAX_REMINDERS = 10


def _approver_names(v: tuple[str, ...]) -> tuple[str, ...]:
    for name in v:
        if not name.strip() or len(name) > 200:
            raise ValueError(f"approver {name!r}: a non-empty name of at most 200 characters")
    return tuple(n.strip() for n in v)


class EscalationLevel(_Strict):
    """One level an approval escalates to: who may decide then, and how long it waits."""

    approvers: tuple[str, ...] = Field(min_length=1)
    """Who may decide from this level on (names or roles), besides the earlier levels'."""
    after: timedelta | None = None
    """How long this level waits; default: the rule's ``escalate_after``."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: object) -> object:
        return {"approvers": [v]} if isinstance(v, str) else v

    @field_validator("after", mode="before")
    @classmethod
    def _duration(cls, v: object) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("approvers")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _approver_names(v)


class ApprovalRule(_Strict):
    """A tool call needs a human when ``args[field] > above`` (or always, if no field)."""

    tool: str
    """The tool whose calls this rule covers."""
    field: str | None = None
    """The argument compared with ``above``; unset: every call needs approval. A
    call without this argument needs approval (the rule fails closed)."""
    above: float | None = None
    """Calls whose ``field`` is above this number (compared exactly, as decimals)
    need approval; anything that is not a finite number does too."""
    escalate_after: timedelta | None = None
    """This rule's escalation delay; default: ``[defaults] escalate_after``."""
    escalation_tool: str | None = None
    """This rule's escalation tool; default: ``[defaults] escalation_tool``."""
    notify_tool: str | None = None
    """This rule's notification tool; default: ``[defaults] notify_tool``."""
    expire_after: timedelta | None = None
    """Undecided this long after the request, the approval expires and its call is
    cancelled (never run), whatever level it reached; unset: no overall deadline."""
    name: str | None = Field(default=None, min_length=1, max_length=100)
    """What errors and reasons call this rule; default: ``approvals[N]`` (its place)."""
    approvers: tuple[str, ...] = ()
    """Who may decide (names, or roles of ``[roles]``); unset: anyone who names
    themselves. Each escalation level adds its approvers to these."""
    escalate_to: tuple[EscalationLevel, ...] = ()
    """Levels the approval escalates through when a level's deadline passes
    undecided: each a role or name (``"finance"``) or a table
    ``{approvers = [...], after = "24h"}``."""
    on_timeout: Literal["escalate", "reject", "expire"] = "escalate"
    """What the last level's deadline does: ``escalate`` (mark it escalated and
    keep waiting; a rule with ``escalate_to`` waits at its last level), ``reject``
    (status ``auto_rejected``) or ``expire`` (status ``expired``); the call never
    runs after either."""
    remind: tuple[timedelta, ...] = ()
    """Reminders before each level's deadline (``["24h", "1h"]``), sent through
    the notification tool; one whose time has already passed is skipped."""

    @field_validator("escalate_after", "expire_after", mode="before")
    @classmethod
    def _duration(cls, v: object) -> timedelta | None:
        return None if v is None else parse_duration(v)

    @field_validator("remind", mode="before")
    @classmethod
    def _reminders(cls, v: object) -> tuple[timedelta, ...]:
        items = v if isinstance(v, list | tuple) else [v]
        out = sorted({parse_duration(item) for item in items}, reverse=True)
        if len(out) > _MAX_REMINDERS or any(r <= timedelta(0) for r in out):
            raise ValueError(f"remind: at most {_MAX_REMINDERS} durations, each more than 0")
        return tuple(out)

    @field_validator("approvers")
    @classmethod
    def _names(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return _approver_names(v)

    @model_validator(mode="after")
    def _levels(self) -> ApprovalRule:
        if len(self.escalate_to) > _MAX_LEVELS:
            raise ValueError(f"escalate_to: at most {_MAX_LEVELS} levels")
        return self

    def applies(self, args: Mapping[str, Any]) -> bool:
        """Whether these (already validated) arguments need approval."""
        if self.field is None:
            return True
        value = args.get(self.field)
        if value is None:
            return True  # a rule on a missing field fails closed
        if self.above is None:
            return True
        if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
            return True  # not a number: fail closed
        try:
            # Exact: 100.0000001 > 100 even where float rounding would say equal.
            number = Decimal(str(value))
            return not number.is_finite() or number > Decimal(str(self.above))
        except ArithmeticError:
            return True


class Policy(_Strict):
    """All policies in force: defaults, per-tool limits and approval rules."""

    defaults: Defaults = Defaults()
    """Settings for every tool."""
    tools: dict[str, ToolPolicy] = {}
    """One table per tool, named after it."""
    approvals: tuple[ApprovalRule, ...] = ()
    """Which calls need a human: the first rule that applies decides."""
    schedules: dict[str, ScheduleRule] = {}
    """Periodic runs, one table per schedule, named after it (letters, digits, ``_``)."""

    @field_validator("schedules")
    @classmethod
    def _schedules(cls, v: dict[str, ScheduleRule]) -> dict[str, ScheduleRule]:
        for name, rule in v.items():
            try:
                check_name(name)
                if rule.enabled:
                    rule.rule()
            except ConfigError as exc:
                raise ValueError(f"schedule {name!r}: {exc}") from None
        return v

    roles: dict[str, tuple[str, ...]] = {}
    """Approver roles: ``finance = ["carol", "dave"]``; a rule's ``approvers`` may
    name a role, and then its members (never the role's name itself) may decide."""

    @field_validator("roles")
    @classmethod
    def _roles(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return {role: _approver_names(members) for role, members in v.items()}

    def for_tool(self, tool: str) -> ToolPolicy:
        """The tool's limits (an unconfigured tool may call no host)."""
        return self.tools.get(tool, _UNCONFIGURED)

    def retry_policy(self, tool: str, tool_max_attempts: int | None = None) -> RetryPolicy:
        """Retry settings: tool policy, then the tool's declaration, then defaults."""
        configured = self.for_tool(tool).max_attempts
        return RetryPolicy(
            max_attempts=configured or tool_max_attempts or self.defaults.max_attempts,
            initial=self.defaults.backoff_initial.total_seconds(),
            max_delay=self.defaults.backoff_max.total_seconds(),
        )

    def rate_limit(self, tool: str) -> tuple[float, int] | None:
        """The tool's ``(calls per second, burst)``, or ``None`` if unlimited. The
        burst defaults to one second's calls (at least one)."""
        configured = self.for_tool(tool)
        rate = configured.rate_limit_per_second
        if rate is None:
            return None
        return rate, configured.rate_limit_burst or max(1, int(rate))

    def max_retry_after(self, tool: str) -> float:
        """The longest ``Retry-After`` (seconds) honoured for this tool."""
        cap = self.for_tool(tool).max_retry_after or self.defaults.max_retry_after
        return cap.total_seconds()

    def approval_rule(self, tool: str, args: Mapping[str, Any]) -> ApprovalRule | None:
        """The rule that makes this call need a human, if any."""
        for rule in self.approvals:
            if rule.tool == tool and rule.applies(args):
                return rule
        if self.for_tool(tool).requires_approval:
            return ApprovalRule(tool=tool)
        return None

    def rule_label(self, rule: ApprovalRule) -> str:
        """How errors name a rule: its ``name``, else its place (``approvals[N]``)."""
        if rule.name:
            return rule.name
        for i, known in enumerate(self.approvals):
            if known is rule:
                return f"approvals[{i}]"
        return f"requires_approval of tool {rule.tool!r}"

    def members(self, approvers: tuple[str, ...]) -> frozenset[str]:
        """The people ``approvers`` names: a role's members, or the name itself."""
        out: set[str] = set()
        for name in approvers:
            out |= set(self.roles[name]) if name in self.roles else {name}
        return frozenset(out)

    def escalation_delay(self, rule: ApprovalRule | None) -> timedelta:
        """How long an approval may wait before it escalates."""
        if rule is not None and rule.escalate_after is not None:
            return rule.escalate_after
        return self.defaults.escalate_after


def load_policies(path: str | Path | None) -> Policy:
    """Load and merge every ``*.toml`` policy file in a directory (or one file).

    ``None`` gives the default policy (no approvals, no hosts allowed). Any
    problem is a :class:`ConfigError` naming the file, the field and the value.
    """
    if path is None:
        return Policy()
    root = Path(path)
    if root.is_dir():
        files = sorted(root.glob("*.toml"))
    elif root.is_file():
        files = [root]
    else:
        raise ConfigError(f"policy path {str(root)!r} does not exist")
    merged: dict[str, Any] = {"tools": {}, "approvals": []}
    # Where each merged section came from (file, its location there), so that a
    # validation error names the file and the field as the user wrote them.
    origin: dict[tuple[int | str, ...], tuple[Path, tuple[int | str, ...]]] = {}
    for file in files:
        _merge(file, tomlfiles.read_toml(file, "policy file"), merged, origin)
    try:
        return Policy.model_validate(merged)
    except ValidationError as exc:

        def locate(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
            for n in (2, 1):
                if loc[:n] in origin:
                    file, local = origin[loc[:n]]
                    return f"policy file {file}", local + loc[n:]
            return f"policy in {', '.join(map(str, files))}", loc

        raise ConfigError(tomlfiles.validation_problems(exc, locate)) from exc


def _merge(
    file: Path,
    data: dict[str, Any],
    merged: dict[str, Any],
    origin: dict[tuple[int | str, ...], tuple[Path, tuple[int | str, ...]]],
) -> None:
    """Add one file's sections to ``merged``, refusing duplicates and wrong shapes."""
    where = f"policy file {file}"
    unknown = set(data) - {"defaults", "tools", "approvals", "schedules", "roles"}
    if unknown:
        raise ConfigError(
            f"{where}: unknown section(s) {sorted(unknown)} "
            "(known: defaults, tools, approvals, schedules, roles)"
        )
    shapes = (("defaults", dict, "a [defaults] table"),
              ("tools", dict, "[tools.NAME] tables"),
              ("approvals", list, "an array of [[approvals]] tables"),
              ("schedules", dict, "[schedules.NAME] tables"),
              ("roles", dict, "a [roles] table"))  # fmt: skip
    for name, kind, expected in shapes:
        if name in data and not isinstance(data[name], kind):
            raise ConfigError(f"{where}: {name} = {data[name]!r}: must be {expected}")
    if "defaults" in data:
        if "defaults" in merged:
            raise ConfigError(f"{where}: [defaults] is already set in {origin[('defaults',)][0]}")
        merged["defaults"] = data["defaults"]
        origin[("defaults",)] = (file, ("defaults",))
    for section, what in (("tools", "tool"), ("schedules", "schedule")):
        for name, settings in data.get(section, {}).items():
            into = merged.setdefault(section, {})
            if name in into:
                raise ConfigError(f"{where}: {what} {name!r} is configured twice "
                                  f"(also in {origin[(section, name)][0]})")  # fmt: skip
            into[name] = settings
            origin[(section, name)] = (file, (section, name))
    for role, members in data.get("roles", {}).items():
        if role in merged.setdefault("roles", {}):
            raise ConfigError(f"{where}: role {role!r} is defined twice")
        merged["roles"][role] = members
        origin[("roles", role)] = (file, ("roles", role))
    for i, rule in enumerate(data.get("approvals", [])):
        origin[("approvals", len(merged["approvals"]))] = (file, ("approvals", i))
        merged["approvals"].append(rule)
