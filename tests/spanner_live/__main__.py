"""``python -m tests.spanner_live``: the conformance suite, the runtime tests and
the live questions against a real Spanner instance, or the emulator.

Against a real Enterprise (or Enterprise Plus) instance, with Application
Default Credentials (``gcloud auth application-default login`` once, or
``GOOGLE_APPLICATION_CREDENTIALS``)::

    python -m tests.spanner_live --project P --instance I [--keep] [-k EXPR]

It makes fresh databases (both dialects, one per pytest worker) through the
admin API, runs ``tests/conformance``, ``tests/runtime`` and
``tests/spanner_live`` in their live kinds (each test with names of its own in
the database, dropped when it ends), drops the databases (``--keep`` keeps
them, and prints their names), prints what each live question observed, and
what the run cost in processing units x minutes of the instance.

In CI the same command runs against the Cloud Spanner emulator and the queue
stand-in (``--emulator``): the same provisioning, the same tests. See
``tests/spanner_live/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.spanner_live.harness import LIVE_VARIABLE
from tests.spanner_live.provision import Target, new_run_id

ROOT = Path(__file__).resolve().parents[2]
SUITES = ["tests/conformance", "tests/runtime", "tests/spanner_live"]
DIALECTS = {"googlesql": False, "postgresql": True}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.spanner_live",
        description="Run agentq's Spanner suites against a real instance (or --emulator).",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--instance", help="a Spanner instance of the Enterprise edition")
    where.add_argument(
        "--emulator", action="store_true", help="the Cloud Spanner emulator and the queue stand-in"
    )
    p.add_argument("--project", help="the instance's Google Cloud project")
    p.add_argument("--keep", action="store_true", help="keep the databases (for debugging)")
    p.add_argument(
        "--dialect", choices=["googlesql", "postgresql", "both"], default="both",
        help="which dialects (default both)",
    )  # fmt: skip
    p.add_argument(
        "--workers", type=int, default=None,
        help="pytest processes, each with its own databases (default 2; 1 on a real instance, "
        "where schema changes are the slow part)",
    )  # fmt: skip
    p.add_argument("-k", dest="keyword", default=None, help="only tests matching this expression")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.instance and not args.project:
        print("spanner-live: error: --instance needs --project", file=sys.stderr)
        return 2
    started = time.monotonic()
    stack: list[Any] = []
    try:
        target = _emulator(stack) if args.emulator else Target(args.project, args.instance)
        instance = target.describe()
        if not args.emulator and "ENTERPRISE" not in instance.edition.upper():
            print(
                f"spanner-live: error: instance {args.instance} is of the {instance.edition} "
                "edition; Spanner queues need Enterprise or Enterprise Plus",
                file=sys.stderr,
            )
            return 2
        workers = args.workers or (2 if args.emulator else 1)
        dialects = list(DIALECTS) if args.dialect == "both" else [args.dialect]
        run = new_run_id()
        print(f"spanner-live: run {run}: creating {workers * len(dialects)} database(s) ...")
        databases = {
            d: [
                target.create_database(f"aq-{run}-{d[:2]}-{i}", DIALECTS[d])
                for i in range(workers)
            ]
            for d in dialects
        }
        rc = _pytest(run, databases, workers, args, emulator=args.emulator)
        minutes = (time.monotonic() - started) / 60
        if args.keep:
            print(f"spanner-live: kept databases {', '.join(target.created)} (drop them yourself)")
        else:
            failed = target.drop_created()
            for line in failed:
                print(f"spanner-live: could not drop {line}", file=sys.stderr)
            print(f"spanner-live: dropped the run's databases{' (some failed)' if failed else ''}")
        if args.emulator:
            print(f"spanner-live: emulator run, {minutes:.1f} minutes (no charge)")
        else:
            print("spanner-live: cost: " + instance.cost_line(minutes))
        return rc
    finally:
        for stop in reversed(stack):
            stop()


def _emulator(stack: list[Any]) -> Target:
    """The emulator and the stand-in in front of it, in this process."""
    from datetime import timedelta as _td

    from google.cloud.spanner_v1.database_sessions_manager import DatabaseSessionsManager

    from tests.spanner_emulator.emulator import INSTANCE, PROJECT, Emulator, find_emulator
    from tests.spanner_emulator.fixtures import RW_SESSIONS
    from tests.spanner_emulator.interposer import Interposer

    binary = find_emulator()
    if binary is None:
        raise SystemExit(
            "spanner-live: error: the Cloud Spanner emulator is not installed (Debian package "
            "google-cloud-cli-spanner-emulator; or set SPANNER_EMULATOR_BINARY)"
        )
    DatabaseSessionsManager._MAINTENANCE_THREAD_POLLING_INTERVAL = _td(milliseconds=50)
    # The stand-in's own client runs leasing transactions side by side: regular
    # sessions for them (see tests/spanner_emulator/fixtures.py, RW_SESSIONS).
    os.environ[RW_SESSIONS[0]] = RW_SESSIONS[1]
    emulator = Emulator(binary)
    emulator.start()
    stack.append(emulator.stop)
    interposer = Interposer(emulator.endpoint, emulator.client())
    stack.append(interposer.stop)
    return Target(PROJECT, INSTANCE, endpoint=interposer.endpoint)


def _pytest(
    run: str, databases: dict[str, list[str]], workers: int, args: Any, *, emulator: bool
) -> int:
    with tempfile.TemporaryDirectory(prefix="spanner-live-") as tmp:
        answers = Path(tmp) / "answers.jsonl"
        env = dict(os.environ)
        env[LIVE_VARIABLE] = json.dumps(
            {"run": run, "databases": databases, "answers": str(answers), "emulator": emulator}
        )
        if emulator:
            # Emulator 1.5.x runs one read/write transaction per multiplexed session
            # at a time (see tests/spanner_emulator/fixtures.py); a real instance
            # runs them side by side, and the live questions report which it used.
            env["GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW"] = "false"
        else:
            env.pop("GOOGLE_CLOUD_SPANNER_MULTIPLEXED_SESSIONS_FOR_RW", None)
        keyword = "spanner-live" if args.keyword is None else f"spanner-live and ({args.keyword})"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SUITES,
                   "-k", keyword]  # fmt: skip
        command += ["-n", str(workers), "--dist", "load"] if workers > 1 else ["-p", "no:xdist"]
        print("spanner-live: " + " ".join(command[1:]), flush=True)
        rc = subprocess.call(command, cwd=ROOT, env=env)
        _print_answers(answers)
        return rc


def _print_answers(path: Path) -> None:
    if not path.exists():
        print("spanner-live: no live question was answered")
        return
    by_question: dict[str, dict[str, Any]] = defaultdict(dict)
    for line in path.read_text().splitlines():
        item = json.loads(line)
        by_question[item["question"]][item["dialect"]] = item["answer"]
    print("spanner-live: what this instance answered (tests/spanner_live/test_questions_*.py):")
    for question in sorted(by_question):
        for dialect, answer in sorted(by_question[question].items()):
            print(f"  {question} [{dialect}]: {json.dumps(answer, default=str)}")


if __name__ == "__main__":
    sys.exit(main())
