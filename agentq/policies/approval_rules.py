"""Approval rules (``[[approvals]]``): who approves, their levels, reminders and deadlines."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from agentq.policies.base import Strict as _Strict
from agentq.policies.base import parse_duration

_MAX_LEVELS = 10
_MAX_REMINDERS = 10


def approver_names(v: tuple[str, ...]) -> tuple[str, ...]:
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
        return approver_names(v)


class ApprovalRule(_Strict):
    """A tool call needs a human when ``args[field] > above`` (or always, if no field)."""

    tool: str
    """The tool whose calls this rule covers."""
    field: str | None = None
    """The argument compared with ``above``; unset: every call needs approval. A
    call without this argument needs approval (the rule fails closed). It must be
    one of the tool's arguments: a rule on another name is refused at load."""
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
    self_approval: bool = False
    """Whether the principal that enqueued a call may approve or reject it itself;
    unset: never (four eyes), whatever its scopes. An approval that edits the
    arguments is judged under this rule too if they fall under it: the requester
    may not edit its own call into a rule without it. A call enqueued as ``local``
    (a Python caller without ``by=``) has no known enqueuer, so the rule does not
    apply to it."""

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
        return approver_names(v)

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


