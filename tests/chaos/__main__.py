"""``python -m tests.chaos --minutes N``: a longer chaos run, from the project root."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from tests.chaos.controller import ChaosConfig, run_chaos


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=1.0, help="length of the kill phase")
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", help="keep the database here (default: a temporary dir)")
    parser.add_argument("--json", action="store_true", help="print the whole report as JSON")
    ns = parser.parse_args(argv)
    seconds = ns.minutes * 60
    config = ChaosConfig(
        min_kill_seconds=seconds, max_kill_seconds=seconds, target_kills=0,
        settle_seconds=max(60.0, seconds / 4), workers=ns.workers, seed=ns.seed,
        freezes=max(1, int(ns.minutes * 4)),
    )  # fmt: skip
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
