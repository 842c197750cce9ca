"""Retention's settings and results: how long each tool's finished tasks are
kept (:class:`RetentionRules`, from a runtime's setting and its policy) and what
a prune deleted (:class:`PruneCounts`). The pruning itself is
:mod:`agentq.lifecycle.retention`'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import timedelta

from agentq.errors import ConfigError
from agentq.policies import Policy, parse_duration
from agentq.retention import OFF, RetentionValue, parse_retention

__all__ = [
    "PruneCounts",
    "RetentionRules",
    "RetentionSetting",
    "policy_rules",
    "retention_setting",
]


@dataclass
class PruneCounts:
    """Records deleted (or, in a dry run, that would be)."""

    tasks: int = 0
    approvals: int = 0
    idempotency_keys: int = 0
    audit_entries: int = 0
    #: Out-of-band arguments (deleted with their task).
    payloads: int = 0
    #: Dedupe keys whose task is gone.
    dedupe_keys: int = 0
    #: Per-key slot records that held nothing for longer than the retention.
    key_slots: int = 0
    #: Records of workers not heard from for longer than the retention.
    worker_records: int = 0
    #: Finished durable agent runs older than the runtime's retention.
    runs: int = 0
    #: Owners' daily usage records of durable runs, of days past the retention.
    run_usage: int = 0

    def add(self, other: PruneCounts) -> None:
        """Add ``other``'s counts to these."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def as_dict(self) -> dict[str, int]:
        """Each kind's count, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def total(self) -> int:
        """All records counted."""
        return sum(self.as_dict().values())


@dataclass(frozen=True)
class RetentionRules:
    """How long finished tasks are kept: ``default`` for every tool, ``tools``
    for those configured otherwise; ``None`` keeps them forever."""

    default: timedelta | None
    tools: Mapping[str, timedelta | None] = field(default_factory=dict)

    def for_tool(self, tool: str) -> timedelta | None:
        """The retention of ``tool``'s finished tasks (``None``: kept)."""
        return self.tools.get(tool, self.default)

    @property
    def shortest(self) -> timedelta | None:
        """The shortest retention of any tool (``None``: every tool keeps all)."""
        found = [r for r in (self.default, *self.tools.values()) if r is not None]
        return min(found) if found else None


#: What ``Runtime(retention=...)`` takes: a duration (``timedelta``, seconds,
#: ``"7d"``), or ``"off"`` / ``None`` to keep finished tasks forever.
RetentionSetting = RetentionValue | float | str | None


def retention_setting(value: RetentionSetting, what: str = "retention") -> timedelta | None:
    """``value`` as a duration, or ``None`` for "off" (:class:`ConfigError` if
    it is neither; zero is refused: see :mod:`agentq.retention`)."""
    if value is None:
        return None
    try:
        parsed = parse_retention(value, parse_duration)
    except ValueError as exc:
        raise ConfigError(f"{what}: {exc}") from exc
    return None if parsed == OFF else parsed


def policy_rules(default: timedelta | None, policy: Policy) -> RetentionRules:
    """The rules of a runtime's ``default`` retention and its policy's per-tool
    ``retention`` keys."""
    tools = {
        name: None if p.retention == OFF else p.retention
        for name, p in policy.tools.items()
        if p.retention is not None
    }
    return RetentionRules(default, tools)
