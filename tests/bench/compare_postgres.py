"""Compare agentq on PostgreSQL with procrastinate, pgqueuer and DBOS, side by side
on one server, beside raw one-row commits and a bare-SQL worker with agentq's
guarantees (the floors).

Not part of the test run (``tests/acceptance/test_compare_postgres.py`` runs it
once with tiny numbers). One command prints the whole table (markdown) and
then one JSON object, from the project's virtual environment::

    python tests/bench/compare_postgres.py --server postgresql://USER@HOST:PORT/postgres \\
        --rounds 3 --tasks 5000

``--server`` (or ``AGENTQ_BENCH_POSTGRES_URL``) names a server and a role that
may ``CREATE DATABASE``: every system gets a fresh database each round, dropped
after it. Measure on a cluster of your own with durable commits (``fsync=on``,
``synchronous_commit=on``, the defaults; the table's header shows them) and
nothing else running. The peers are installed at pinned versions
(``procrastinate==3.10.0``, ``pgqueuer[asyncpg]==1.6.0``, ``dbos==3.4.0``; see
``_pg_peers.py`` for how each is run) into virtual environments of their own
under ``--venvs`` (kept there for the next run; default: a temporary directory),
never into the project's; ``--peers`` picks some of them.

A round runs every system once, in an order that rotates from round to round
(so none always runs first, on a cooler machine), each against a fresh database:

* **enqueue/s** -- ``--tasks`` tasks enqueued one per commit by one caller
  (agentq: a ``transact`` that enqueues one task);
* **processed/s** -- then ``--workers`` worker processes drain them: tasks/s
  from the first handler start to the last (process start-up is not counted);
  a no-op handler; every task finished by the system's own account (agentq:
  result in the ledger, committed with the ack);
* **latency** -- one idle worker process: ms from an enqueue's return (its
  commit) to its handler's start, ``--latency-samples`` times, 20 ms apart;
* ``bare`` (a floor, not a peer: never the "fastest peer"): the same three
  figures for bare SQL with agentq's guarantees through psycopg, two statements
  a batch (``_pg_peers.py``); the table gives agentq's processed/s over it;
* agentq only, beside raw commits: **decisions/s** (a transaction that inserts an
  application row and enqueues a task) from 1 caller and from ``--callers``
  threads, against ``raw`` (``INSERT`` one row, ``COMMIT``) from 1 caller and
  from ``--callers`` clients.

Rates are medians over the rounds with min and max; a ratio is the median of the
within-round ratios (the machine's speed moves between rounds, less within
one); latency percentiles pool every round's samples. The targets of issue 30
are checked in the table's last column, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from _pg_peers import FLOORS, PEERS, Peer

from agentq.bench.latency import latency_summary

ENV = "AGENTQ_BENCH_POSTGRES_URL"


def options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument(
        "--server",
        default=os.environ.get(ENV),
        help=f"postgresql:// URL of a role with CREATEDB (default: ${ENV})",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--latency-samples", type=int, default=50)
    parser.add_argument(
        "--decisions",
        type=int,
        default=1000,
        help="decisions per caller count and round (and as many raw commits)",
    )
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="comma-separated, of: " + ", ".join(PEERS) + " ('' for none)",
    )
    parser.add_argument("--venvs", help="keep the peers' virtual environments here")
    parser.add_argument("--json", help="also write the JSON here")
    args = parser.parse_args(argv)
    if not args.server:
        parser.error(f"--server (or ${ENV}) is required: a PostgreSQL role with CREATEDB")
    args.peer_names = [p for p in args.peers.split(",") if p]
    unknown = set(args.peer_names) - set(PEERS)
    if unknown:
        parser.error(f"unknown peer(s) {sorted(unknown)}: known are {', '.join(PEERS)}")
    if args.rounds < 1 or args.tasks < 2 or args.latency_samples < 1:
        parser.error("--rounds >= 1, --tasks >= 2 and --latency-samples >= 1")
    return args


# -- databases and environments ------------------------------------------------


class Server:
    """Fresh databases on the server, dropped after use."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self._admin = psycopg.connect(url, autocommit=True)
        self._count = 0

    def settings(self) -> dict[str, str]:
        names = (
            "server_version",
            "fsync",
            "synchronous_commit",
            "wal_sync_method",
            "commit_delay",
            "max_connections",
        )
        row = self._admin.execute(
            "SELECT " + ", ".join(f"current_setting('{n}')" for n in names)
        ).fetchone()
        return dict(zip(names, row or (), strict=True))

    def database(self, system: str) -> Database:
        self._count += 1
        return Database(self, f"aqcmp_{os.getpid()}_{self._count}_{system}")

    def run(self, sql: str) -> None:
        self._admin.execute(sql)

    def url_of(self, name: str) -> str:
        return urlunsplit(urlsplit(self.url)._replace(path=f"/{name}"))


class Database:
    """``with server.database(name) as url:`` a fresh database's URL."""

    def __init__(self, server: Server, name: str) -> None:
        self.server, self.name = server, name

    def __enter__(self) -> str:
        self.server.run(f'CREATE DATABASE "{self.name}"')
        return self.server.url_of(self.name)

    def __exit__(self, *exc: object) -> None:
        self.server.run(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def peer_python(peer: Peer, venvs: Path) -> Path:
    """The peer's own virtual environment (made and filled once); its Python."""
    venv = venvs / peer.name
    python = venv / "bin" / "python"
    stamp = venv / "requirements.txt"
    wanted = "\n".join(peer.requirements)
    if not (python.exists() and stamp.exists() and stamp.read_text() == wanted):
        print(f"installing {', '.join(peer.requirements)} into {venv} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *peer.requirements],
                       check=True)  # fmt: skip
        stamp.write_text(wanted)
    return python


# -- one round of each system ------------------------------------------------------


def peer_round(peer: Peer, python: Path, url: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run(
            [str(python), "-c", peer.program, tmp, url, str(args.tasks), str(args.workers),
             str(args.concurrency), str(args.batch), str(args.latency_samples)],
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{peer.name} failed:\n{done.stderr[-4000:]}")
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return got


def agentq_round(url: str, args: argparse.Namespace) -> dict[str, Any]:
    from agentq.bench.decisions import decisions, in_threads
    from agentq.bench.end_to_end import drain
    from agentq.bench.env import BenchEnv
    from agentq.bench.latency import latency
    from agentq.bench.queue_layer import raw_commits

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def env(name: str) -> BenchEnv:
            return BenchEnv(root, "full", name, url)

        with env("cmp") as e:
            rt = e.runtime()
            try:
                out["enqueue_per_s"] = in_threads(
                    1, args.tasks, lambda i: rt.transact(lambda tx: tx.enqueue("noop", {"n": i}))
                )
                out["tasks_per_s"] = drain(e, rt, args.tasks, args.workers, args.concurrency,
                                           args.batch)  # fmt: skip
            finally:
                rt.close()
        with env("lat") as e:
            out["latency_ms"] = latency(e, args.latency_samples, False)
        n, c = args.decisions, args.callers
        with env("raw") as e:
            out["raw_per_s"] = raw_commits(e, n, "full")
        with env("dec") as e:
            out["decisions_per_s"] = decisions(e, n, "")
        with env("rawn") as e:
            out[f"raw_per_s_{c}_callers"] = raw_commits(e, n, "full", c)
        with env("decn") as e:
            out[f"decisions_per_s_{c}_callers"] = decisions(e, n, "", c)
    return out


# -- the summary ---------------------------------------------------------------------


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(tops: list[float], bottoms: list[float]) -> float:
    return round(statistics.median(a / b for a, b in zip(tops, bottoms, strict=True)), 2)


def summarise(rounds: list[dict[str, dict[str, Any]]], args: argparse.Namespace,
              settings: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    systems = ["agentq", *args.peer_names]
    c = args.callers

    def series(system: str, figure: str) -> list[float]:
        return [float(r[system][figure]) for r in rounds]

    out: dict[str, Any] = {
        "settings": {
            "tasks": args.tasks,
            "workers": args.workers,
            "concurrency": args.concurrency,
            "batch": args.batch,
            "rounds": len(rounds),
            "latency_samples": args.latency_samples,
            "decisions": args.decisions,
            "callers": c,
            "cpus": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "postgresql": settings,
            "peers": {p: list(PEERS[p].requirements) for p in args.peer_names},
        },
        "systems": {},
        "targets": {},
    }
    for s in systems:
        out["systems"][s] = {
            "tasks_per_s": summary(series(s, "tasks_per_s")),
            "enqueue_per_s": summary(series(s, "enqueue_per_s")),
            "latency_ms": latency_summary([ms for r in rounds for ms in r[s]["latency_ms"]]),
        }
    for figure in ("raw_per_s", "decisions_per_s", f"raw_per_s_{c}_callers",
                   f"decisions_per_s_{c}_callers"):  # fmt: skip
        out["systems"]["agentq"][figure] = summary(series("agentq", figure))

    peers = [p for p in args.peer_names if p not in FLOORS]

    def best_peer(figure: str) -> list[float]:
        return [max(float(r[p][figure]) for p in peers) for r in rounds]

    t = out["targets"]
    if "bare" in args.peer_names:
        t["processed_over_floor"] = ratio(series("agentq", "tasks_per_s"),
                                          series("bare", "tasks_per_s"))  # fmt: skip
    if peers:
        t["processed_over_fastest_peer"] = ratio(series("agentq", "tasks_per_s"),
                                                 best_peer("tasks_per_s"))  # fmt: skip
        t["enqueue_over_fastest_peer"] = ratio(series("agentq", "enqueue_per_s"),
                                               best_peer("enqueue_per_s"))  # fmt: skip
    t["decisions_1_caller_over_raw"] = ratio(series("agentq", "decisions_per_s"),
                                             series("agentq", "raw_per_s"))  # fmt: skip
    t[f"decisions_{c}_callers_over_raw"] = ratio(
        series("agentq", f"decisions_per_s_{c}_callers"), series("agentq", "raw_per_s")
    )
    t[f"decisions_{c}_callers_over_raw_{c}_callers"] = ratio(
        series("agentq", f"decisions_per_s_{c}_callers"),
        series("agentq", f"raw_per_s_{c}_callers"))  # fmt: skip
    return out


def _rate(v: dict[str, float]) -> str:
    return f"{v['median']:,.0f} ({v['min']:,.0f}-{v['max']:,.0f})"


def markdown(result: dict[str, Any]) -> str:
    s = result["settings"]
    pg = s["postgresql"]
    systems = list(result["systems"])
    t = result["targets"]
    c = s["callers"]
    a = result["systems"]["agentq"]
    head = (
        f"PostgreSQL {pg['server_version'].split()[0]} (fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']}, wal_sync_method={pg['wal_sync_method']}), "
        f"{s['tasks']} no-op tasks, {s['workers']} worker processes, {s['rounds']} rounds "
        f"(median, min-max), {s['cpus']} CPUs, load average {s['load_average'][0]:.1f}"
    )
    lines = [head, "", "| figure | " + " | ".join(systems) + " | target |",
             "| --- |" + " ---: |" * len(systems) + " --- |"]  # fmt: skip

    def row(name: str, cells: list[str], target: str) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {target} |")

    def check(value: float | None, goal: float) -> str:
        if value is None:
            return "no peer"
        return f"{value:.2f}x ({'met' if value >= goal else 'missed'}, goal >= {goal:g}x)"

    sy = result["systems"]
    row(
        f"processed/s, {s['workers']} workers",
        [_rate(sy[x]["tasks_per_s"]) for x in systems],
        # Issue 38's target: at least the fastest peer's rate (the floor row's
        # 0.8x of bare SQL is its moonshot).
        check(t.get("processed_over_fastest_peer"), 1) + " of the fastest peer",
    )
    if "processed_over_floor" in t:
        row(
            "processed/s over the bare-SQL floor",
            ["" for _ in systems],
            check(t["processed_over_floor"], 0.8) + " of bare SQL with agentq's guarantees",
        )
    row(
        "enqueue/s, 1 caller, one per commit",
        [_rate(sy[x]["enqueue_per_s"]) for x in systems],
        check(t.get("enqueue_over_fastest_peer"), 1) + " of the fastest peer",
    )
    blank = [""] * (len(systems) - 1)
    row(
        "decisions/s, 1 caller",
        [_rate(a["decisions_per_s"]), *blank],
        check(t["decisions_1_caller_over_raw"], 0.7) + " of raw, 1 caller",
    )
    row(
        f"decisions/s, {c} callers",
        [_rate(a[f"decisions_per_s_{c}_callers"]), *blank],
        check(t[f"decisions_{c}_callers_over_raw"], 1.5) + " of raw, 1 caller",
    )
    row("raw 1-row commits/s, 1 caller", [_rate(a["raw_per_s"]), *blank], "the floor")
    row(
        f"raw 1-row commits/s, {c} callers",
        [_rate(a[f"raw_per_s_{c}_callers"]), *blank],
        f"decisions {c} callers: {t[f'decisions_{c}_callers_over_raw_{c}_callers']:.2f}x of it",
    )

    def lat(x: str) -> str:
        v = sy[x]["latency_ms"]
        return f"{v['p50']:.1f} / {v['p99']:.1f}"

    p = sy["agentq"]["latency_ms"]
    row(
        "enqueue -> start p50 / p99 ms, idle worker",
        [lat(x) for x in systems],
        f"p50 {'met' if p['p50'] <= 5 else 'missed'} (<= 5), "
        f"p99 {'met' if p['p99'] <= 20 else 'missed'} (<= 20)",
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = options(argv)
    server = Server(args.server)
    settings = server.settings()
    with tempfile.TemporaryDirectory() as tmp:
        venvs = Path(args.venvs) if args.venvs else Path(tmp)
        venvs.mkdir(parents=True, exist_ok=True)
        pythons = {p: peer_python(PEERS[p], venvs) for p in args.peer_names}
        systems: list[tuple[str, Callable[[str], dict[str, Any]]]] = [
            ("agentq", lambda url: agentq_round(url, args)),
            *[(p, lambda url, p=p: peer_round(PEERS[p], pythons[p], url, args))
              for p in args.peer_names],
        ]  # fmt: skip
        rounds: list[dict[str, dict[str, Any]]] = []
        for r in range(args.rounds):
            shift = r % len(systems)
            got: dict[str, dict[str, Any]] = {}
            for name, run in systems[shift:] + systems[:shift]:
                began = time.monotonic()
                with server.database(name) as url:
                    got[name] = run(url)
                g = got[name]
                print(f"round {r + 1}/{args.rounds} {name}: processed {g['tasks_per_s']:,.0f}/s, "
                      f"enqueue {g['enqueue_per_s']:,.0f}/s ({time.monotonic() - began:.0f} s)",
                      flush=True)  # fmt: skip
            rounds.append(got)
    result = summarise(rounds, args, settings)
    result["rounds"] = [
        {name: {**got, "latency_ms": latency_summary(got["latency_ms"])}
         for name, got in r.items()}
        for r in rounds
    ]  # fmt: skip
    print()
    print(markdown(result))
    print()
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
