"""What the durable runs of a chaos run (``--runs``) must show, from the runs'
records, the scripted model's answers and the payments API's books.

* no run lost: every run started is in the database, and starting one again with
  its idempotency key returned it (``lost``);
* none stuck: once the run settled (every approval decided), every run ended
  (``stuck``); a run the user cancelled ended ``cancelled``; none ``failed`` but
  for a turn dead-lettered after its workers died ``max_deliveries`` times;
* each run's committed turns are 1, 2, ... with no gap or repeat, and a
  succeeded run committed its plan's turns, each with its plan's calls;
* a committed turn is never asked again: every 200 answer for a (run, turn) but
  the last went to a worker that was killed or frozen (or to a database that
  restarted) before the turn was asked again, and no turn is asked after a
  later turn of its run was (but by a worker frozen past its lease, which may
  send a stale request when it wakes): ``asked_again`` counts the others, and
  ``requests_repeated`` (the answers of a turn beyond its first) is bounded by
  the kills;
* every tool call ran at most once: at most one charge per task id, exactly one
  per succeeded call, none for a rejected one (``charged_twice``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from itertools import pairwise

from agentq import Runtime
from agentq.demo_server import DemoAPI
from agentq.errors import RunNotFound
from agentq.ledger import TaskInfo, TaskStatus
from agentq.run_info import RunInfo, RunStatus
from tests.chaos.runs import Answered, StartedRun

__all__ = ["RunsReport", "check_requests", "check_runs", "died_of_crashes"]

#: How long before the model read a request its worker's kill may have come (s).
_PID_SLACK = 1.0


@dataclass
class RunsReport:
    """Counts of the runs of a chaos run; problems go to the chaos report's."""

    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    restarted_by_key: int = 0
    cancelled_by_user: int = 0
    approved: int = 0
    rejected: int = 0
    turns_committed: int = 0
    tool_calls: int = 0
    model_requests: int = 0
    model_answers: int = 0  # 200s
    model_errors: dict[str, int] = field(default_factory=dict)  # scripted 429s and 500s
    requests_repeated: int = 0  # 200 answers of a turn beyond its first
    repeats_explained: dict[str, int] = field(default_factory=dict)  # by kill, freeze, restart
    asked_again: int = 0  # repeats nothing explains: a committed turn asked again
    out_of_order: int = 0  # a turn asked after a later turn (not by a frozen worker)
    lost: int = 0
    stuck: int = 0
    charged_twice: int = 0
    charges: int = 0
    failed_reasons: list[str] = field(default_factory=list)  # the first few

    def summary(self) -> str:
        return (
            f"runs={self.runs} outcomes={self.outcomes} turns={self.turns_committed} "
            f"calls={self.tool_calls} model_answers={self.model_answers} "
            f"errors={self.model_errors} repeated={self.requests_repeated} "
            f"{self.repeats_explained} asked_again={self.asked_again} "
            f"out_of_order={self.out_of_order} lost={self.lost} stuck={self.stuck} "
            f"charged_twice={self.charged_twice} restarted_by_key={self.restarted_by_key} "
            f"cancelled={self.cancelled_by_user} approved={self.approved} "
            f"rejected={self.rejected}"
        )


def died_of_crashes(task: TaskInfo) -> bool:
    """Dead because every delivery's worker died before completing it (the
    ``max_attempts``-th kill): the runtime cannot know whether an attempt's
    effect applied, so such a task may have been charged (once: the payments
    API dedupes by the task's key) and still reads as dead; the core checks
    accept it too."""
    return task.status is TaskStatus.DEAD and "times without completing" in (task.error or "")


def _overlaps(a: float, b: float, lo: float, hi: float) -> bool:
    return lo <= b and a <= hi


def check_runs(
    rt: Runtime,
    api: DemoAPI,
    started: Sequence[StartedRun],
    answers: Sequence[Answered],
    *,
    kills: Sequence[tuple[float, int]],  # (monotonic, pid)
    freezes: Sequence[tuple[int, float, float]],  # (pid, from, to)
    outages: Sequence[tuple[float, float]],  # (server stopped, back), monotonic
    dedup_mismatches: Sequence[str],
    not_ended: Sequence[str],
    problems: list[str],
) -> RunsReport:
    r = RunsReport(runs=len(started))
    r.restarted_by_key = sum(s.restarted for s in started)
    r.cancelled_by_user = sum(s.cancelled for s in started)
    r.approved = sum(s.approved for s in started)
    r.rejected = sum(s.rejected for s in started)
    r.stuck = len(not_ended)
    infos: dict[str, RunInfo] = {}
    for s in started:
        try:
            infos[s.run_id] = rt.run(s.run_id)
        except RunNotFound:
            r.lost += 1
    r.lost += len(dedup_mismatches)
    if r.lost:
        problems.append(f"{r.lost} run(s) lost: {list(dedup_mismatches)[:3]} "
                        f"{[s.run_id for s in started if s.run_id not in infos][:3]}")  # fmt: skip
    if r.stuck:
        detail = [f"{i}: {infos[i].status.value}, turn {infos[i].turn}"
                  for i in not_ended[:5] if i in infos]  # fmt: skip
        problems.append(f"{r.stuck} run(s) never ended: {detail}")
    r.outcomes = dict(sorted(Counter(i.status.value for i in infos.values()).items()))
    failed = [i for i in infos.values() if i.status is RunStatus.FAILED]
    r.failed_reasons = sorted({(i.error or "")[:200] for i in failed})[:5]
    # A turn whose workers were killed max_deliveries times in a row is dead-lettered
    # (the poison-message guard) and its run fails, with that reason: an end, not
    # a loss. Any other failure is a finding.
    odd = [i for i in failed if "times without completing" not in (i.error or "")]
    if odd:
        problems.append(f"{len(odd)} run(s) failed: {sorted({i.error for i in odd})[:5]}")

    charges = api.charges_per_key("/refunds")
    by_id = {s.run_id: s for s in started}
    for run_id, info in infos.items():
        s = by_id[run_id]
        where = f"run {run_id} ({s.tag}, {info.status.value})"
        numbers = [t.number for t in info.turns]
        r.turns_committed += len(numbers)
        if numbers != list(range(1, len(numbers) + 1)):
            problems.append(f"{where}: committed turns {numbers} are not 1, 2, ...")
        if s.cancelled and info.status is not RunStatus.CANCELLED:
            problems.append(f"{where}: cancel_run returned, yet the run is not cancelled")
        if info.status is RunStatus.SUCCEEDED:
            planned = [len(t) for t in s.plan] + [0]
            made = [len(t.calls) for t in info.turns]
            if made != planned:
                problems.append(f"{where}: calls per turn {made}, the plan's {planned}")
        for turn in info.turns:
            for call in turn.calls:
                r.tool_calls += 1
                if call.error:
                    problems.append(f"{where}: turn {turn.number} call refused: {call.error}")
                    continue
                if call.task_id is None:
                    continue
                n = charges.get(call.task_id, 0)
                task = rt.task(call.task_id)
                if n > 1:
                    r.charged_twice += 1
                if task.status is TaskStatus.SUCCEEDED and n != 1:
                    problems.append(f"{where}: call {call.task_id} succeeded with {n} charge(s)")
                if task.status is not TaskStatus.SUCCEEDED and info.status is not \
                        RunStatus.CANCELLED and n and not died_of_crashes(task):  # fmt: skip
                    problems.append(f"{where}: call {call.task_id} {task.status.value}, yet "
                                    f"charged {n} time(s)")  # fmt: skip
                if not task.done:
                    problems.append(f"{where}: call {call.task_id} is {task.status.value}")
    r.charges = sum(charges.get(c.task_id or "", 0) for i in infos.values()
                    for t in i.turns for c in t.calls)  # fmt: skip
    if r.charged_twice:
        problems.append(f"{r.charged_twice} run call(s) charged more than once")
    check_requests(r, infos, answers, kills, freezes, outages, problems)
    return r


def check_requests(
    r: RunsReport,
    infos: Collection[str],
    answers: Sequence[Answered],
    kills: Sequence[tuple[float, int]],
    freezes: Sequence[tuple[int, float, float]],
    outages: Sequence[tuple[float, float]],
    problems: list[str],
) -> None:
    """The model's answers to the runs (or threads) ``infos`` names: no committed
    turn asked again, none out of order, repeats bounded by the disruptions."""
    ours = [a for a in answers if a.run_id in infos]
    r.model_requests = len(ours)
    r.model_answers = sum(a.status == 200 for a in ours)
    r.model_errors = dict(sorted(Counter(str(a.status) for a in ours if a.status != 200).items()))
    # A pid names one process at a time only: a long run forks more processes
    # than the kernel has pids (pid_max is often 32768; every PostgreSQL
    # connection is a server process too), so a pid's kills are kept in order.
    kills_of: dict[int, list[float]] = defaultdict(list)
    for t, pid in sorted(kills):
        kills_of[pid].append(t)

    def killed_between(pid: int | None, lo: float, hi: float) -> float | None:
        """When ``pid`` was killed from ``lo`` to ``hi`` (the first time), or None."""
        return next((t for t in kills_of.get(pid or 0, ()) if lo <= t <= hi), None)

    def why_wasted(a: Answered, until: float) -> str | None:
        """What kept answer ``a`` from committing before its turn was asked again."""
        # Killed after it asked and before the turn was asked again, the worker
        # never committed this answer (the model may even read a request a
        # worker sent just before it died after the kill: the answer then goes
        # nowhere). A kill of its pid before it asked was of an earlier process
        # that had the pid (the slack: the model stamps a request when it reads
        # it, a moment after it was sent).
        if killed_between(a.pid, a.asked_at - _PID_SLACK, until) is not None:
            return "kill"
        if any(pid == a.pid and _overlaps(lo, hi, a.asked_at, until) for pid, lo, hi in freezes):
            return "freeze"
        if any(_overlaps(lo, hi, a.asked_at, until) for lo, hi in outages):
            return "restart"
        return None

    per_run: dict[str, list[Answered]] = defaultdict(list)
    for a in sorted(ours, key=lambda a: a.at):
        per_run[str(a.run_id)].append(a)
    explained: Counter[str] = Counter()
    for run_id, asked in per_run.items():
        latest = 0
        for a in asked:
            if a.turn < latest and not any(
                pid == a.pid and lo <= a.at for pid, lo, _hi in freezes
            ):
                r.out_of_order += 1
                problems.append(f"run {run_id}: turn {a.turn} asked (status {a.status}, worker "
                                f"{a.pid}) after turn {latest} was")  # fmt: skip
            latest = max(latest, a.turn)
        by_turn: dict[int, list[Answered]] = defaultdict(list)
        for a in asked:
            if a.status == 200:
                by_turn[a.turn].append(a)
        for turn, oks in by_turn.items():
            r.requests_repeated += len(oks) - 1
            for a, again in pairwise(oks):
                why = why_wasted(a, again.at)
                if why is not None:
                    explained[why] += 1
                    continue
                r.asked_again += 1
                problems.append(
                    f"run {run_id}: turn {turn} asked again at +{again.at - a.at:.2f} s "
                    f"(worker {again.pid}) after worker {a.pid} got its answer, and nothing "
                    f"killed, froze or stopped that worker or the database in between "
                    f"(worker {a.pid} answered at {a.at}; its pid's kills: "
                    f"{kills_of.get(a.pid or 0, [])})"
                )
    r.repeats_explained = dict(sorted(explained.items()))
    disruptions = len(kills) + len(freezes) + len(outages)
    if r.requests_repeated > disruptions:
        problems.append(f"{r.requests_repeated} model requests repeated, more than the "
                        f"{disruptions} kills, freezes and restarts")  # fmt: skip
