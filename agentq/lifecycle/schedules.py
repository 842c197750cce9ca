"""Periodic schedules' runs: seeded at worker start, continued by each run's end.

A schedule has one record in the ``schedules`` table (its rule, arguments, last
and next run) and **exactly one pending run**: a task whose message is due at the
schedule's next slot (:mod:`agentq.schedules`). The pattern of the Spanner
documents ("the receiver acknowledges the message and sends a new one, scheduled
for the next interval"), on agentq's tasks:

* the transaction that **finishes** a run (succeeded, dead, cancelled — any final
  event, from :func:`agentq.lifecycle.tasks.finish` and the others) acks its
  message and, through :func:`run_finished`, sends the next run, for the slot
  after the finished run's nominal time (no drift). A failing run follows its
  tool's retry policy like any task; only its final event moves the schedule on,
  so a run that dies still schedules the next one: a schedule never stops by
  itself, and runs of one schedule never overlap;
* a run's task id is fixed by the schedule, its generation and its slot
  (``sch_<name>_g<generation>_<slot>``): two workers that would send the same run
  send the same queue key, and the second send fails instead of duplicating it.
  The schedule record, read in the transaction, is the other guard: only the run
  it names as pending may move it on;
* :func:`sync` (every worker at start, in one transaction) seeds a new schedule's
  first run at its next slot, and does nothing when the recorded schedule is the
  declared one (idempotent: many workers may start at once). A **changed**
  schedule (rule, tool, arguments or ``catch_up``) gets a new generation: its
  pending run is cancelled if it has not started, and the first run of the new
  rule is sent; a run already in progress finishes, and its end plans the next
  run with the new rule. A schedule no longer declared (or ``enabled = false``)
  is **removed** the same way (its record stays, marked ``removed`` or
  ``disabled``, for ``agentq schedules``) — but only by a worker that knows the
  schedule's tool: during a rolling deploy, a worker of the other release
  re-declares it when it starts.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentq.backends import Transaction
from agentq.errors import ConfigError, InvalidArguments
from agentq.ledger import TERMINAL, Tables, TaskStatus
from agentq.lifecycle import tasks
from agentq.lifecycle.states import Event
from agentq.policies import Policy, format_duration
from agentq.schedules import Rule, plan_next
from agentq.tools import ToolRegistry

__all__ = [
    "ACTIVE",
    "DISABLED",
    "REMOVED",
    "Declared",
    "declared",
    "describe",
    "run_finished",
    "run_id",
    "sync",
]

log = logging.getLogger("agentq.schedules")

ACTIVE = "active"
REMOVED = "removed"
DISABLED = "disabled"


@dataclass(frozen=True)
class Declared:
    """A schedule as code and policy declare it: what :func:`sync` records."""

    name: str
    tool: str
    queue: str
    args: dict[str, Any]
    rule: Rule
    catch_up: int
    source: str  # "code" (@tool(every=...)) or "policy" ([schedules.NAME])

    def fingerprint(self) -> str:
        """What makes two declarations the same schedule (any change: a new generation)."""
        data = {"tool": self.tool, "queue": self.queue, "args": self.args,
                "rule": self.rule.as_record(), "catch_up": self.catch_up}  # fmt: skip
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def declared(tools: ToolRegistry, policy: Policy) -> tuple[dict[str, Declared], set[str]]:
    """The schedules declared by ``@tool(every=/cron=)`` and ``[schedules.NAME]``
    (which replaces a tool's own schedule of the same name), and the names a policy
    disables. A schedule of an unknown tool, arguments its tool refuses, or a call
    that would need a human's approval (a periodic run has nobody to ask) raises
    :class:`ConfigError` naming the schedule."""
    found: dict[str, Declared] = {}
    for t in tools:
        if t.periodic is not None:
            found[t.name] = Declared(t.name, t.name, t.queue, t.enqueueable_args({}),
                                     t.periodic.rule, t.periodic.catch_up, "code")  # fmt: skip
    disabled: set[str] = set()
    for name, entry in policy.schedules.items():
        if not entry.enabled:
            found.pop(name, None)
            disabled.add(name)
            continue
        tool_name = entry.tool or name
        if tool_name not in tools:
            known = ", ".join(tools.names()) or "none"
            raise ConfigError(f"schedule {name!r}: unknown tool {tool_name!r} (known: {known})")
        definition = tools.get(tool_name)
        try:
            args = definition.enqueueable_args(entry.args)
        except InvalidArguments as exc:
            raise ConfigError(f"schedule {name!r}: {exc}") from exc
        found[name] = Declared(name, tool_name, definition.queue, args, entry.rule(),
                               entry.catch_up, "policy")  # fmt: skip
    for d in found.values():
        if policy.approval_rule(d.tool, d.args) is not None or tools.get(d.tool).requires_approval:
            raise ConfigError(
                f"schedule {d.name!r}: calls of tool {d.tool!r} with these arguments need a "
                "human's approval, and a periodic run has nobody to ask"
            )
    return found, disabled


def describe(rule: Mapping[str, Any]) -> str:
    """A recorded rule as one phrase: ``every 1h``, ``cron 0 9 * * MON (Europe/Paris)``."""
    if rule.get("every") is not None:
        return f"every {format_duration(timedelta(seconds=float(rule['every'])))}"
    zone = rule.get("timezone", "UTC")
    return f"cron {rule.get('cron')}" + ("" if zone == "UTC" else f" ({zone})")


def run_id(name: str, generation: int, nominal: datetime) -> str:
    """The task id of a schedule's run for the slot ``nominal``."""
    stamp = nominal.strftime("%Y%m%dT%H%M%S")
    if nominal.microsecond:
        stamp += f".{nominal.microsecond:06d}"
    return f"sch_{name}_g{generation}_{stamp}Z"


def sync(
    env: tasks.Env,
    tx: Transaction,
    schedules: Mapping[str, Declared],
    disabled: Collection[str],
    recorded: Iterable[str],
    known_tools: Collection[str],
) -> list[str]:
    """Make the records match the declarations (module docstring); ``recorded`` are
    the names in the table when the caller listed it. Returns what changed, one
    line per schedule."""
    changes: list[str] = []
    for d in schedules.values():
        rec = tx.get_record(Tables.SCHEDULES, d.name)
        if rec is not None and rec.get("status") == ACTIVE and rec.get("fingerprint") == (
            d.fingerprint()
        ):
            continue
        changes.append(_start(env, tx, d, rec))
    for name in sorted(set(recorded) - set(schedules)):
        rec = tx.get_record(Tables.SCHEDULES, name)
        if rec is None or rec.get("status") != ACTIVE or rec.get("tool") not in known_tools:
            continue
        status = DISABLED if name in disabled else REMOVED
        _detach(env, tx, rec, status)
        changes.append(f"schedule {name!r} {status}")
    return changes


def run_finished(env: tasks.Env, tx: Transaction, run: Mapping[str, Any]) -> None:
    """In the transaction that finishes ``run`` (a schedule's run): record it and
    send the schedule's next run, unless the schedule no longer names this run as
    pending (it was changed, removed, or this is a replayed old run)."""
    info = run["schedule"]
    sched = tx.get_record(Tables.SCHEDULES, str(info["name"]))
    if sched is None or sched.get("status") != ACTIVE:
        return
    if sched.get("pending_task_id") != run["task_id"]:
        return
    nominal = datetime.fromisoformat(str(info["nominal"]))
    now = tx.now
    done = {
        **sched, "pending_task_id": None, "next_at": None, "last_task_id": run["task_id"],
        "last_at": info["nominal"], "last_status": run["status"],
        "last_finished_at": tasks.iso(now), "runs": int(sched.get("runs", 0)) + 1,
        "updated_at": tasks.iso(now),
    }  # fmt: skip
    try:
        nxt, skipped = plan_next(
            Rule.from_record(sched["rule"]), nominal, now, int(sched.get("catch_up", 0))
        )
    except Exception as exc:  # a record this version cannot read: never fail the run
        log.error("schedule %r stopped: its rule cannot be read (%s)", info["name"], exc)
        tx.put_record(Tables.SCHEDULES, str(info["name"]), {**done, "status": f"error: {exc}"})
        return
    if skipped:
        log.warning("schedule %r: %d overdue run(s) skipped; next at %s",
                    info["name"], skipped, nxt.isoformat())  # fmt: skip
    done["missed"] = int(sched.get("missed", 0)) + skipped
    tx.put_record(Tables.SCHEDULES, str(info["name"]), _send_run(env, tx, done, nxt))


# -- internals ----------------------------------------------------------------------


def _start(env: tasks.Env, tx: Transaction, d: Declared, rec: dict[str, Any] | None) -> str:
    """Record ``d`` as a new generation and send its first run (unless a run of the
    previous generation is in progress: its end sends the next one)."""
    now = tx.now
    running = _detach(env, tx, rec, ACTIVE) if rec is not None else None
    kept = rec or {"runs": 0, "missed": 0, "created_at": tasks.iso(now)}
    new = {
        **kept, "name": d.name, "tool": d.tool, "queue": d.queue, "args": d.args,
        "rule": d.rule.as_record(), "catch_up": d.catch_up, "source": d.source,
        "fingerprint": d.fingerprint(), "generation": int(kept.get("generation", 0)) + 1,
        "status": ACTIVE, "pending_task_id": running, "next_at": None,
        "updated_at": tasks.iso(now),
    }  # fmt: skip
    if running is None:
        new = _send_run(env, tx, new, d.rule.next_after(now))
    tx.put_record(Tables.SCHEDULES, d.name, new)
    verb = "seeded" if rec is None else "changed"
    return f"schedule {d.name!r} {verb}: {describe(new['rule'])}, next run at {new['next_at']}"


def _detach(env: tasks.Env, tx: Transaction, rec: dict[str, Any], status: str) -> str | None:
    """Let go of the schedule's pending run: cancelled if it has not started yet;
    returns its id if it is in progress (running or retrying), else None. The
    record is written first, without the run, so the cancel's own final event
    (:func:`run_finished`) does not send a next run."""
    pending = rec.get("pending_task_id")
    tx.put_record(Tables.SCHEDULES, str(rec["name"]), {
        **rec, "status": status, "pending_task_id": None, "next_at": None,
        "updated_at": tasks.iso(tx.now),
    })  # fmt: skip
    run = tx.get_record(Tables.TASKS, str(pending)) if pending else None
    if run is None or run["status"] in TERMINAL:
        return None
    first = int(run["attempt"]) == 1 and not run.get("checkpoint")
    if run["status"] == TaskStatus.QUEUED and first:  # not started yet
        tasks.cancel(env, tx, str(pending), reason=f"its schedule was {_verb(status)}")
        return None
    return str(pending)


def _verb(status: str) -> str:
    return "changed" if status == ACTIVE else status


def _send_run(
    env: tasks.Env, tx: Transaction, sched: dict[str, Any], nominal: datetime
) -> dict[str, Any]:
    """Send the run of ``sched`` for the slot ``nominal`` (due then: at once if it is
    overdue and caught up); returns the record naming it as pending."""
    name, generation = str(sched["name"]), int(sched["generation"])
    task_id = run_id(name, generation, nominal)
    if tx.get_record(Tables.TASKS, task_id) is None:
        tasks.create(
            env, tx, tool=str(sched["tool"]), queue=str(sched["queue"]), args=dict(sched["args"]),
            kind="action", event=Event.SCHEDULE, deliver=nominal, task_id=task_id,
            extra={"schedule": {"name": name, "generation": generation,
                                "nominal": tasks.iso(nominal)}},
        )  # fmt: skip
    return {**sched, "pending_task_id": task_id, "next_at": tasks.iso(nominal)}
