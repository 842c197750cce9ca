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

    [agents.refund_agent]          # a durable agent's budget per run
    max_turns = 10
    max_cost = 2.0                 # in the currency of [prices]

    [prices."gpt-4.1-mini"]        # per million tokens
    prompt = 0.40
    completion = 1.60

    [owners.support-bot]           # what one owner's runs may use per day
    max_tokens_per_day = 1_000_000

The agent supplies only a tool name and arguments; every limit here is read
by the runtime from these files, never from the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import PrivateAttr, ValidationError, field_validator

from agentq import tomlfiles
from agentq.errors import ConfigError
from agentq.policies.approval_rules import ApprovalRule, EscalationLevel, approver_names
from agentq.policies.base import MAX_DURATION, format_duration, parse_duration
from agentq.policies.base import Strict as _Strict
from agentq.policies.run_budgets import AgentBudget, ModelPrice, OwnerBudget
from agentq.policies.schedule_rules import ScheduleRule
from agentq.policies.tools import UNCONFIGURED, Defaults, ToolPolicy
from agentq.retry import RetryPolicy
from agentq.schedules import check_name

__all__ = [
    "MAX_DURATION",
    "AgentBudget",
    "ApprovalRule",
    "EscalationLevel",
    "ModelPrice",
    "OwnerBudget",
    "Policy",
    "ScheduleRule",
    "ToolPolicy",
    "format_duration",
    "load_policies",
    "parse_duration",
]

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
    agents: dict[str, AgentBudget] = {}
    """Durable agents' budgets per run, one table per agent, named after it."""
    prices: dict[str, ModelPrice] = {}
    """Models' prices per million tokens, one table per model name: runs count their cost."""
    owners: dict[str, OwnerBudget] = {}
    """What one owner's durable runs may use together per day, one table per owner."""
    # The file each approval rule came from (load_policies), for errors found once
    # the tools are known; empty for a policy built in code or read from the catalog.
    _rule_files: tuple[str, ...] = PrivateAttr(default=())

    def rule_origin(self, index: int) -> str:
        """Where approval rule ``index`` was written: ``policy file PATH``, or
        ``policy`` when that is not known."""
        if index < len(self._rule_files):
            return f"policy file {self._rule_files[index]}"
        return "policy"

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
        return {role: approver_names(members) for role, members in v.items()}

    def for_tool(self, tool: str) -> ToolPolicy:
        """The tool's limits (an unconfigured tool may call no host)."""
        return self.tools.get(tool, UNCONFIGURED)

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
        policy = Policy.model_validate(merged)
    except ValidationError as exc:

        def locate(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
            for n in (2, 1):
                if loc[:n] in origin:
                    file, local = origin[loc[:n]]
                    return f"policy file {file}", local + loc[n:]
            return f"policy in {', '.join(map(str, files))}", loc

        raise ConfigError(tomlfiles.validation_problems(exc, locate, Policy)) from exc
    policy._rule_files = tuple(
        str(origin[("approvals", i)][0]) for i in range(len(merged["approvals"]))
    )
    return policy


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

