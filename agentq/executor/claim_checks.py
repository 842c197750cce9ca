"""What every claim checks, on either path: approvals, unknown tools, the in-flight record.

:class:`ClaimChecks` holds a worker's claim settings and the checks both the
fast path (:class:`~agentq.executor.admission.Admission`) and the careful path
(:class:`~agentq.executor.careful_claims.CarefulClaims`) make: whether a call
still needs an approved approval (read from policy and the approval record,
never from the task), what a task for a tool this worker does not know becomes
(left for a worker that knows it, then dead-lettered), and the
:class:`~agentq.executor.inflight.Inflight` a claim hands on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agentq.approvals import ApprovalStatus
from agentq.backends import Message
from agentq.decision import Decision
from agentq.executor.holds import Holds
from agentq.executor.inflight import Inflight
from agentq.executor.keyslots import KeySlots
from agentq.executor.running import tool_timeout
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import tasks as lifecycle
from agentq.lifecycle.approvals import approved_args
from agentq.policies import format_duration
from agentq.tools import ToolDef

if TYPE_CHECKING:
    from agentq.runtime import Runtime

__all__ = ["BUILTIN_TOOLS", "DEFAULT_UNKNOWN_TOOL_GRACE", "ClaimChecks"]

log = logging.getLogger("agentq.worker")

#: Statuses in which a task has no delivery to run: a message for it is stale.
_NOT_RUNNABLE = TERMINAL | {TaskStatus.AWAITING_APPROVAL}

#: How long a task for a tool this worker does not know is left for a worker
#: that knows it (a rolling deploy) before it is dead-lettered.
DEFAULT_UNKNOWN_TOOL_GRACE = timedelta(hours=24)
_UNKNOWN_TOOL_FIRST_DELAY = timedelta(seconds=1)
_UNKNOWN_TOOL_MAX_DELAY = timedelta(minutes=5)

#: The runtime's own timers, run without a tool handler.
BUILTIN_TOOLS = lifecycle.BUILTIN_TIMERS


class ClaimChecks:
    """A worker's claim settings and the checks every claim makes."""

    def __init__(
        self,
        runtime: Runtime,
        holds: Holds,
        count: Callable[[str], None],
        *,
        max_deliveries: int,
        unknown_tool_grace: timedelta = DEFAULT_UNKNOWN_TOOL_GRACE,
    ) -> None:
        self.runtime = runtime
        self.holds = holds
        self.max_deliveries = max_deliveries
        self.unknown_tool_grace = unknown_tool_grace
        self._unknown_logged: set[str] = set()
        self._count = count
        self.key_slots = KeySlots(runtime)

    def _unknown_tool(
        self, tx: Decision, rec: dict[str, Any], key: Sequence[Any], deliveries: int
    ) -> str:
        """A task for a tool this worker does not know. During a rolling deploy a
        newer worker may know it, so it is left for one: sent again after a delay
        that grows with the time it has waited (1 s, doubling, at most 5 min), not
        counted as a failure. Only after ``unknown_tool_grace`` is it dead-lettered,
        saying why. Returns the stats label."""
        rt, now, tool = self.runtime, tx.now, str(rec["tool"])
        since_text = rec.get("unknown_tool_since")
        since = datetime.fromisoformat(since_text) if since_text else now
        waited = now - since
        grace = format_duration(self.unknown_tool_grace)
        if waited >= self.unknown_tool_grace:
            known = ", ".join(rt.tools.names()) or "none"
            lifecycle.dead_letter(
                rt, tx.tx, rec,
                f"unknown tool {tool!r}: no worker that knows it took this task within "
                f"{grace} (this worker knows: {known}); deploy a worker with this tool, "
                "then replay the task", ack_key=key,
            )  # fmt: skip
            return "dead"
        if tool not in self._unknown_logged:
            self._unknown_logged.add(tool)
            log.warning(
                "tool %r is not known to this worker: its tasks are left for a worker that "
                "knows it (dead-lettered after %s)", tool, grace,
            )  # fmt: skip
        delay = min(max(waited, _UNKNOWN_TOOL_FIRST_DELAY), _UNKNOWN_TOOL_MAX_DELAY)
        lifecycle.defer(
            rt, tx.tx, rec, now + delay, deliveries=deliveries, ack_key=key,
            changes={"unknown_tool_since": lifecycle.iso(since)},
        )  # fmt: skip
        return "unknown_tool"

    def _make_inflight(
        self, msg: Message, rec: dict[str, Any], definition: ToolDef | None
    ) -> Inflight:
        return Inflight(
            queue=msg.queue,
            key=tuple(msg.key),
            token=msg.lease_token,
            lease_expiry=msg.lease_expiry,
            record=rec,
            definition=definition,
            timeout=tool_timeout(self.runtime, definition),
        )

    def _needs_approval(
        self, rec: dict[str, Any], definition: ToolDef, args: dict[str, Any] | None
    ) -> bool:
        """``args``: the task's out-of-band arguments (None: they are in ``rec``)."""
        if rec.get("kind", "action") != "action":
            return False
        call_args = rec["args"] if args is None else args
        rule = self.runtime.policy.approval_rule(definition.name, call_args)
        return rule is not None or definition.requires_approval

    def _policy_violation(
        self, tx: Decision, rec: dict[str, Any], definition: ToolDef, args: dict[str, Any] | None
    ) -> str | None:
        """The executor's own check: approval rules are read from policy and the
        approval record, never from the task's arguments or envelope."""
        if not self._needs_approval(rec, definition, args):
            return None
        approval_id = rec.get("approval_id")
        approval = tx.tx.get_record(Tables.APPROVALS, approval_id) if approval_id else None
        if (
            approval is None
            or approval["status"] != ApprovalStatus.APPROVED
            or approval["task_id"] != rec["task_id"]
            or approved_args(approval) != (rec["args"] if args is None else args)
        ):
            return (
                f"policy: tool {definition.name!r} with these arguments needs an approved "
                "approval, and this task has none"
            )
        return None
