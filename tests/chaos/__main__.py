"""``python -m tests.chaos --minutes N [--backend sqlite|postgresql|spanner]``: a
longer chaos run, from the project root.

``--backend postgresql`` makes a throwaway cluster (PostgreSQL 15's binaries,
``$PGBIN`` or Debian's; as root the server runs as ``postgres``), restarts it
twice during the run (``pg_ctl stop -m fast``, then ``-m immediate``) and runs
``agentq serve`` fed by an HTTP producer; ``--backend spanner`` starts the Cloud
Spanner emulator (``$SPANNER_EMULATOR_BINARY`` or Debian's) behind the queue
stand-in. ``--runs`` adds durable agent runs beside the refunds: an agent of
the workers' tools folder asking a scripted model on loopback, its workers
SIGKILLed also while the model answers (:mod:`tests.chaos.runs`).
``--frameworks langgraph,openai-agents`` adds the frameworks' agents, asking
the same model: LangGraph threads over ``AgentQSaver`` whose user processes
are SIGKILLed and started again, and OpenAI Agents SDK runs made durable with
``durable_agent`` (:mod:`tests.chaos.frameworks`). Exit status 0 only when
every check held.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from tests.chaos.appsql import BACKENDS
from tests.chaos.controller import ChaosConfig, run_chaos
from tests.chaos.frameworks import FRAMEWORKS, parse_frameworks
from tests.spanner_emulator.choices import SEED_VARIABLE

#: Per backend: worker processes, the seconds a worker lives before a random kill
#: may pick it, the agent's pause between actions, the most refunds waiting in
#: the queue before the agent decides new ones, and the least bound on settling.
#: The emulator runs one read-write transaction at a time, so a task takes
#: seconds there: a worker must live long enough to finish some, or every task is
#: leased and stranded again and again, and its redelivery backoff grows with
#: each expiry (the stand-in doubles it, up to 10 minutes: hence the settling).
_DEFAULTS = {
    "sqlite": (3, 0.3, 0.02, 60, 60.0),
    "postgresql": (3, 0.3, 0.02, 60, 60.0),
    "spanner": (3, 3.0, 0.25, 15, 600.0),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=1.0, help="length of the kill phase")
    parser.add_argument("--workers", type=int, help="worker processes (default: 3)")
    parser.add_argument(
        "--kill-interval",
        default="0.2,0.6",
        metavar="MIN,MAX",
        help="seconds between random kills, drawn uniformly (default 0.2,0.6)",
    )
    parser.add_argument("--min-life", type=float,
                        help="seconds a worker lives before a random kill may pick it "
                             "(default: 0.3; spanner 3)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--backend", choices=BACKENDS, default="sqlite")
    parser.add_argument(
        "--restarts", default=None,
        help="database server restarts, comma-separated pg_ctl stop modes "
             "(postgresql only; default fast,immediate; 'none' for none)",
    )  # fmt: skip
    parser.add_argument("--down-seconds", type=float, default=3.0,
                        help="how long the server stays down at each restart")  # fmt: skip
    parser.add_argument(
        "--no-http", action="store_true",
        help="no agentq serve and HTTP producer (default: on with postgresql)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", nargs="?", const=-1, type=int, default=0, metavar="N",
        help="durable agent runs beside the refunds, at most N under way "
             "(default 12; spanner 3): see tests/chaos/runs.py",
    )  # fmt: skip
    parser.add_argument(
        "--frameworks", default="", metavar="NAMES",
        help="the frameworks' agents beside the refunds, comma-separated: "
             f"{','.join(FRAMEWORKS)} (see tests/chaos/frameworks.py)",
    )  # fmt: skip
    parser.add_argument("--framework-runs", type=int, default=6, metavar="N",
                        help="at most N runs (threads) of each framework under way")  # fmt: skip
    parser.add_argument("--workdir", help="keep the database here (default: a temporary dir)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ns = parser.parse_args(argv)
    seconds = ns.minutes * 60
    postgres = ns.backend == "postgresql"
    restarts = ns.restarts if ns.restarts is not None else "fast,immediate" if postgres else ""
    modes = tuple(m for m in restarts.split(",") if m and m != "none")
    if modes and not postgres:
        parser.error("--restarts needs --backend postgresql")
    if set(modes) - {"smart", "fast", "immediate"}:
        parser.error(f"--restarts: modes are smart, fast, immediate; got {restarts!r}")
    try:
        frameworks = parse_frameworks(ns.frameworks)
    except ValueError as exc:
        parser.error(f"--frameworks: {exc}")
    workers, min_life, pace, backlog, settle = _DEFAULTS[ns.backend]
    try:
        low, high = (float(x) for x in ns.kill_interval.split(","))
    except ValueError:
        parser.error(f"--kill-interval: two numbers MIN,MAX, got {ns.kill_interval!r}")
    config = ChaosConfig(
        min_kill_seconds=seconds, max_kill_seconds=seconds, target_kills=0,
        settle_seconds=max(settle, seconds / 4), workers=ns.workers or workers,
        min_life=min_life if ns.min_life is None else ns.min_life, pace=pace,
        max_backlog=backlog, seed=ns.seed, kill_interval=(low, high),
        freezes=max(1, int(ns.minutes * 4)), backend=ns.backend, restarts=modes,
        http=postgres and not ns.no_http, down_seconds=ns.down_seconds,
        runs=(3 if ns.backend == "spanner" else 12) if ns.runs == -1 else ns.runs,
        frameworks=frameworks, framework_runs=ns.framework_runs,
    )  # fmt: skip
    if ns.backend == "spanner":
        # The stand-in's draws (batch shapes, backoff) follow --seed unless the
        # environment already names a seed: one command repeats a run.
        os.environ.setdefault(SEED_VARIABLE, str(ns.seed))
        print(f"stand-in seed {os.environ[SEED_VARIABLE]} ({SEED_VARIABLE})", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="agentq-chaos-") as tmp:
        workdir = Path(ns.workdir or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        report = run_chaos(workdir, config, log=lambda m: print(m, file=sys.stderr))
    print(report.to_json() if ns.json else report.summary())
    for problem in report.problems:
        print(f"PROBLEM: {problem}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
