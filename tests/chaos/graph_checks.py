"""What the LangGraph threads of a chaos run (``--frameworks langgraph``) must
show, from the threads' checkpoints, the ledger, the scripted model's answers
and the payments API's books: as strict as the core runs' (:mod:`run_checks`).

* no thread lost: every thread started has checkpoints (``lost``);
* none stuck: once the run settled, every thread ended, or waits on the refund
  a human rejected (its continuation cancelled), or stopped at a refund or a
  continuation dead-lettered after its workers were killed ``max_deliveries``
  times (the poison-message guard: an end, as a core run's failure; resumed by
  hand with ``invoke(None)``): ``stuck``; no user's
  process (a starter) failed but by being killed or meeting the database down;
* each refund the model asked for is one task: never two tasks for one call of
  a turn (``enqueued_twice``: what a node that enqueued on its own, apart from
  its step's commit, would make when run again after a crash);
* every refund charged at most once (``charged_twice``), exactly once if its
  task succeeded, never if it did not; a thread that ended made every call of
  its plan, each succeeded and charged once, and its answer came after them;
* the window where a worker resuming a graph dies after the waiting node's
  writes and before the graph waits again or ends was hit (``resumed_kills``);
* a committed step is never asked of the model again: the core runs' check
  (:func:`tests.chaos.run_checks.check_requests`) over the threads' requests
  (``X-AgentQ-Run``: the thread; ``X-AgentQ-Turn``: the turn), the kills of the
  starters counted with the workers'.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from agentq import Runtime
from agentq.demo_server import DemoAPI
from agentq.ledger import TaskInfo, TaskStatus
from tests.chaos.graphs import StartedGraph, ended, graph_of, thread_config
from tests.chaos.run_checks import RunsReport, check_requests, died_of_crashes
from tests.chaos.runs import Answered

#: The error of a task dead-lettered after its workers died too often.
DEAD_LETTERED = "times without completing"

__all__ = ["GraphsReport", "check_graph_refunds", "check_graphs"]


@dataclass
class GraphsReport(RunsReport):
    """Counts of the LangGraph threads (``runs``: threads started)."""

    starts: int = 0  # starter processes started (a thread's first, and restarts)
    enqueued_twice: int = 0
    refunds: int = 0
    resumed_kills: int = 0  # workers killed while the model answered a graph they resumed

    def summary(self) -> str:
        return (
            f"threads={self.runs} outcomes={self.outcomes} starts={self.starts} "
            f"refunds={self.refunds} charges={self.charges} resumed_kills={self.resumed_kills} "
            f"model_answers={self.model_answers} "
            f"errors={self.model_errors} repeated={self.requests_repeated} "
            f"{self.repeats_explained} asked_again={self.asked_again} "
            f"out_of_order={self.out_of_order} lost={self.lost} stuck={self.stuck} "
            f"enqueued_twice={self.enqueued_twice} charged_twice={self.charged_twice} "
            f"approved={self.approved} rejected={self.rejected}"
        )


def check_graph_refunds(
    r: GraphsReport,
    thread: str,
    plan: list[list[float]],
    ended: bool,
    tasks: dict[str, list[TaskInfo]],
    charges: Counter[str],
    problems: list[str],
) -> None:
    """One thread's refunds (``tasks`` by order id, the order ids of its plan
    being ``<tag>-t<turn>-c<position>``): one task per call, charged once if it
    succeeded and never otherwise; all of them done and charged once if the
    thread ``ended``."""
    tag = thread.rsplit(":", 1)[-1]
    for turn, amounts in enumerate(plan, 1):
        for i in range(len(amounts)):
            order = f"{tag}-t{turn}-c{i}"
            found = tasks.get(order, [])
            if len(found) > 1:
                r.enqueued_twice += 1
                problems.append(f"{thread}: call {order} enqueued {len(found)} times")
            if ended and (len(found) != 1 or found[0].status is not TaskStatus.SUCCEEDED):
                problems.append(f"{thread} ended, yet call {order} made "
                                f"{[t.status.value for t in found]}")  # fmt: skip
            for task in found:
                n = charges.get(task.task_id, 0)
                r.refunds += 1
                r.charges += n
                r.charged_twice += n > 1
                if task.status is TaskStatus.SUCCEEDED and n != 1:
                    problems.append(f"{thread}: refund {task.task_id} succeeded, charged {n}")
                elif task.status is not TaskStatus.SUCCEEDED and n and not died_of_crashes(task):
                    problems.append(f"{thread}: refund {task.task_id} {task.status.value}, "
                                    f"yet charged {n}")  # fmt: skip
                if not task.done:
                    problems.append(f"{thread}: refund {task.task_id} is {task.status.value}")


def check_graphs(
    rt: Runtime,
    api: DemoAPI,
    started: Sequence[StartedGraph],
    answers: Sequence[Answered],
    *,
    kills: Sequence[tuple[float, int]],
    freezes: Sequence[tuple[int, float, float]],
    outages: Sequence[tuple[float, float]],
    not_ended: Sequence[str],
    starter_failures: Sequence[str],
    resumed_kills: int,
    problems: list[str],
) -> GraphsReport:
    r = GraphsReport(runs=len(started), stuck=len(not_ended))
    r.starts = sum(g.starts for g in started)
    r.approved = sum(g.approved for g in started)
    r.rejected = sum(g.rejected for g in started)
    problems += [f"LangGraph starter failed: {f}" for f in starter_failures[:5]]
    graph = graph_of(rt)
    tasks: dict[str, list[TaskInfo]] = defaultdict(list)
    for t in rt.tasks(tool="execute_refund"):
        order = str(t.args.get("order_id", ""))
        if order.startswith("lg"):
            tasks[order].append(t)
    from tests.chaos.graph_tools.chaos_graph import RESUME_TOOL

    continuations: dict[str, list[TaskInfo]] = defaultdict(list)
    for t in rt.tasks(tool=RESUME_TOOL):
        continuations[str(t.args.get("thread_id"))].append(t)
    charges = api.charges_per_key("/refunds")
    outcomes: Counter[str] = Counter()
    for g in started:
        state = graph.get_state(thread_config(g.thread_id))
        if not state.values:
            r.lost += 1
            problems.append(f"{g.thread_id}: no checkpoint")
            continue
        done = ended(state)
        outcomes["ended" if done else g.final or "open"] += 1
        if g.thread_id in not_ended:
            mine = [t for o, ts in tasks.items() if o.startswith(g.tag + "-") for t in ts]
            mine += continuations.get(g.thread_id, [])
            if any(DEAD_LETTERED in (t.error or "") for t in mine):
                outcomes["dead_lettered"] += 1  # an end, as the core runs' (see module docs)
                outcomes["open"] -= 1
                r.stuck -= 1
                continue
            problems.append(f"{g.thread_id} never ended: next {state.next}, "
                            f"{len(state.interrupts)} interrupt(s), tasks "
                            f"{[(t.tool, t.status.value) for t in mine]}")  # fmt: skip
        check_graph_refunds(r, g.thread_id, g.plan, done, tasks, charges, problems)
        roles = [m["role"] for m in state.values["messages"]]
        calls = sum(len(t) for t in g.plan)
        if done and (roles.count("tool"), roles.count("assistant")) != (calls, len(g.plan) + 1):
            problems.append(f"{g.thread_id} ended with messages {roles}, its plan {g.plan}")
    r.outcomes = dict(sorted((k, n) for k, n in outcomes.items() if n))
    r.resumed_kills = resumed_kills
    if outcomes["ended"] and not resumed_kills:
        problems.append("no worker was killed while the model answered a graph it resumed")
    if r.charged_twice:
        problems.append(f"{r.charged_twice} LangGraph refund(s) charged more than once")
    check_requests(r, {g.thread_id for g in started}, answers, kills, freezes, outages, problems)
    return r
