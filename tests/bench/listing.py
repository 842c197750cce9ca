"""Listing reads what it shows (issue 27 item 12): the time of ``GET
/v1/tasks?limit=10`` at 1,000 and at 100,000 tasks.

Not part of the test run. Usage, from the project's virtual environment:

    python tests/bench/listing.py --small 1000 --large 100000 --requests 21 --rounds 3

Two SQLite ledgers are filled (``--small`` and ``--large`` tasks of another
principal, then 20 of the agent's own, the newest), each is served by its own
``agentq serve --tokens`` process, and each round times ``--requests`` requests
of every kind against both servers, alternating between them (a shared
machine's speed moves). Kinds:

* ``admin``: an admin's newest page (sees everyone's tasks);
* ``agent``: a ``read`` + ``enqueue`` token's newest page (its own tasks only,
  behind every other principal's in key order);
* ``status_queued``: an admin's page of queued tasks (every task matches);
* ``status_dead``: an admin's page of dead tasks (none match: the query scans
  the ledger in the database, past rows that do not match).

Prints per kind the median milliseconds at each size (min-max over the
rounds' medians) and the median (and range) of the rounds' ratios large/small.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
OWN = 20
TOKENS = {"admin-bench-token-0123456789": ("ops", ["admin"]),
          "agent-bench-token-0123456789": ("agent", ["enqueue", "read"])}  # fmt: skip
KINDS = {
    "admin": ("admin-bench-token-0123456789", {}),
    "agent": ("agent-bench-token-0123456789", {}),
    "status_queued": ("admin-bench-token-0123456789", {"status": "queued"}),
    "status_dead": ("admin-bench-token-0123456789", {"status": "dead"}),
}


def _fill(db: Path, others: int) -> None:
    from agentq import Runtime

    rt = Runtime(f"sqlite:///{db}", tools=ROOT / "tools", policies=ROOT / "policies")
    try:
        for first in range(0, others, 1000):
            rt.transact(lambda tx, f=first: [
                tx.enqueue("execute_refund", {"order_id": f"x{f + i}", "amount": 5}, by="other")
                for i in range(min(1000, others - f))])  # fmt: skip
        rt.transact(lambda tx: [
            tx.enqueue("execute_refund", {"order_id": f"mine{i}", "amount": 5}, by="agent")
            for i in range(OWN)])  # fmt: skip
    finally:
        rt.close()


def _tokens(path: Path) -> Path:
    from agentq.server.auth import hash_token

    entries = [f'[[tokens]]\nname = "{name}"\nscopes = {json.dumps(scopes)}\n'
               f'sha256 = "{hash_token(token)}"\n' for token, (name, scopes) in TOKENS.items()]
    path.write_text("\n".join(entries))
    return path


def _serve(folder: Path, db: Path, tokens: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentq.cli", "serve", "--tokens", str(tokens), "--port", "0",
         "--db", f"sqlite:///{db}", "--tools", str(ROOT / "tools"),
         "--policies", str(ROOT / "policies")],
        cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        found = re.search(r"(http://127\.0\.0\.1:\d+)", line)
        if found:
            return proc, found.group(1)
        if not line and proc.poll() is not None:
            break
    raise RuntimeError("agentq serve did not start")


def _timed(client: httpx.Client, token: str, params: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    answer = client.get("/v1/tasks", params={"limit": "10", **params},
                        headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    took = time.perf_counter() - start
    answer.raise_for_status()
    return took * 1000, len(answer.json()["tasks"])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=21)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentq-listing-") as tmp:
        folder = Path(tmp)
        tokens = _tokens(folder / "tokens.toml")
        sizes = {"small": args.small, "large": args.large}
        servers: dict[str, tuple[subprocess.Popen[str], str]] = {}
        try:
            for name, count in sizes.items():
                start = time.perf_counter()
                _fill(folder / f"{name}.db", count)
                print(f"filled {name}: {count + OWN} tasks in {time.perf_counter() - start:.0f} s",
                      file=sys.stderr, flush=True)  # fmt: skip
                servers[name] = _serve(folder, folder / f"{name}.db", tokens)
            medians: dict[str, dict[str, list[float]]] = {k: {"small": [], "large": []}
                                                          for k in KINDS}  # fmt: skip
            shown: dict[str, dict[str, int]] = {k: {} for k in KINDS}
            clients = {name: httpx.Client(base_url=url, timeout=120)
                       for name, (_, url) in servers.items()}  # fmt: skip
            for _ in range(args.rounds):
                for kind, (token, params) in KINDS.items():
                    times: dict[str, list[float]] = {"small": [], "large": []}
                    for i in range(args.requests):
                        # Alternating which goes first, too.
                        for name in ("small", "large") if i % 2 else ("large", "small"):
                            took, count = _timed(clients[name], token, params)
                            times[name].append(took)
                            shown[kind][name] = count
                    for name in times:
                        medians[kind][name].append(statistics.median(times[name]))
            for client in clients.values():
                client.close()
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(30)
    report: dict[str, Any] = {"tasks": {n: c + OWN for n, c in sizes.items()},
                              "requests": args.requests, "rounds": args.rounds}  # fmt: skip
    for kind, by_size in medians.items():
        small, large = statistics.median(by_size["small"]), statistics.median(by_size["large"])
        # Each round's ratio of its two medians (the machine's speed moves between rounds).
        ratios = [lg / sm for sm, lg in zip(by_size["small"], by_size["large"], strict=True)]
        report[kind] = {
            "small_ms": round(small, 2), "small_range": [round(min(by_size["small"]), 2),
                                                         round(max(by_size["small"]), 2)],
            "large_ms": round(large, 2), "large_range": [round(min(by_size["large"]), 2),
                                                         round(max(by_size["large"]), 2)],
            "ratio_median": round(statistics.median(ratios), 2),
            "ratio_range": [round(min(ratios), 2), round(max(ratios), 2)],
            "tasks_shown": shown[kind],
        }  # fmt: skip
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
