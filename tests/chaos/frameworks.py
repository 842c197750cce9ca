"""The frameworks' agents in a chaos run (``--frameworks langgraph,openai-agents``).

* ``openai-agents``: runs of an OpenAI Agents SDK agent made durable with
  ``durable_agent`` (:mod:`tests.chaos.sdk_tools.chaos_sdk_agent`), driven and
  checked exactly as the core agent's runs (:class:`tests.chaos.runs.RunDriver`,
  :func:`tests.chaos.run_checks.check_runs`);
* ``langgraph``: threads of a LangGraph graph over ``AgentQSaver``, started by
  user processes that are killed and started again
  (:mod:`tests.chaos.graphs`), checked by :mod:`tests.chaos.graph_checks`.

The workers load each framework's tools folder (``FRAMEWORKS_VARIABLE``, read
by :func:`tests.chaos.workers.serve`); the scripted model's hook kills the
starters it answers as it kills workers.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agentq import Runtime
from agentq.demo_server import DemoAPI
from tests.chaos.runs import ModelSide, RunDriver
from tests.chaos.workers import FRAMEWORK_TOOLS, FRAMEWORKS_VARIABLE, Supervisor

__all__ = ["FRAMEWORKS", "Frameworks", "parse_frameworks"]

FRAMEWORKS = tuple(FRAMEWORK_TOOLS)


def parse_frameworks(text: str) -> tuple[str, ...]:
    """``langgraph,openai-agents`` as a tuple; ValueError names an unknown one."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in FRAMEWORK_TOOLS]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}: choose from {', '.join(FRAMEWORKS)}")
    return names


def announce(names: Sequence[str]) -> list[Path]:
    """Tell the workers to be forked which frameworks to load; their tools folders."""
    os.environ[FRAMEWORKS_VARIABLE] = ",".join(names)
    return [FRAMEWORK_TOOLS[n][0] for n in names]


class Frameworks:
    """The drivers of the frameworks' agents, and their checks."""

    def __init__(
        self, names: Sequence[str], rt: Runtime, *, seed: int, max_active: int,
        supervisor: Supervisor, model_side: ModelSide, worker_url: str, api_url: str,
        kind: str, model_url: str, logs: Path,
    ) -> None:  # fmt: skip
        self.rt = rt
        self.sdk: RunDriver | None = None
        self.graphs: Any = None
        if "openai-agents" in names:
            self.sdk = RunDriver(rt, random.Random(seed + 5), max_active=max_active,
                                 agent="chaos_sdk_runs", prefix="sdk")  # fmt: skip
        if "langgraph" in names:
            from tests.chaos.graphs import GraphDriver

            logs.mkdir(parents=True, exist_ok=True)
            self.graphs = GraphDriver(
                rt, random.Random(seed + 6), supervisor,
                (worker_url, api_url, kind, model_url, str(logs)), max_active=max_active,
            )  # fmt: skip
            model_side.killers.append(self.graphs.kill_pid)
            model_side.wanted.append(self.graphs.wanted)

    def step(self, *, may_start: bool) -> None:
        if self.sdk is not None:
            self.sdk.step(may_start=may_start)
        if self.graphs is not None:
            self.graphs.step(may_start=may_start)

    def settle(self, bound: float, log: Callable[[str], None]) -> dict[str, list[str]]:
        left: dict[str, list[str]] = {}
        if self.sdk is not None:
            left["openai-agents"] = self.sdk.settle(bound, log)
        if self.graphs is not None:
            left["langgraph"] = self.graphs.settle(bound, log)
        return left

    def charged_task_ids(self) -> set[str]:
        """The refunds the frameworks' agents made (charges the core check allows)."""
        ids: set[str] = set()
        if self.sdk is not None:
            ids |= {c.task_id for s in self.sdk.started.values()
                    for t in self.rt.run(s.run_id).turns for c in t.calls if c.task_id}  # fmt: skip
        if self.graphs is not None:
            ids |= {t.task_id for t in self.rt.tasks(tool="execute_refund")
                    if str(t.args.get("order_id", "")).startswith("lg")}  # fmt: skip
        return ids

    def check(
        self, api: DemoAPI, answers: Sequence[Any], not_ended: dict[str, list[str]], *,
        kills: Sequence[tuple[float, int]], freezes: Sequence[tuple[int, float, float]],
        outages: Sequence[tuple[float, float]], problems: list[str],
    ) -> dict[str, Any]:  # fmt: skip
        """Each framework's report; its problems are prefixed with its name."""
        from tests.chaos.run_checks import check_runs

        reports: dict[str, Any] = {}
        if self.sdk is not None:
            mine: list[str] = []
            reports["openai-agents"] = check_runs(
                self.rt, api, list(self.sdk.started.values()), answers, kills=kills,
                freezes=freezes, outages=outages, dedup_mismatches=self.sdk.dedup_mismatches,
                not_ended=not_ended["openai-agents"], problems=mine,
            )  # fmt: skip
            problems += [f"openai-agents: {p}" for p in mine]
        if self.graphs is not None:
            from tests.chaos.graph_checks import check_graphs

            mine = []
            reports["langgraph"] = check_graphs(
                self.rt, api, list(self.graphs.started.values()), answers, kills=kills,
                freezes=freezes, outages=outages, not_ended=not_ended["langgraph"],
                starter_failures=self.graphs.starter_failures,
                resumed_kills=self.graphs.resumed_kills_wanted - self.graphs.resumed_kills,
                problems=mine,
            )  # fmt: skip
            problems += [f"langgraph: {p}" for p in mine]
        return reports

    def retries(self) -> int:
        return sum(d.retries for d in (self.sdk, self.graphs) if d is not None)
