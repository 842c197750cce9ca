"""How fast one client address can guess bearer tokens over real HTTP.

Not part of the test run (it measures, on the real clock). Usage, from the
project's virtual environment:

    python tests/bench/token_guessing.py --seconds 60 --repeats 3

Serves the HTTP API (uvicorn on 127.0.0.1, one real token in its tokens file)
and sends wrong tokens from one address as fast as ``--connections`` keep-alive
connections (one thread each) allow, for ``--seconds``. Reports per run how
many requests were sent, how many tokens the server actually *checked*
(answered 401: a guess) and how many it refused unchecked (429: locked out),
and the checked guesses per second; the median and range over ``--repeats``
runs. Run it on a tree without the back-off
to see the rate it replaced.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _serve(app: Any) -> tuple[str, Any, threading.Thread]:
    import uvicorn

    sock = socket.socket()
    # Accepted sockets inherit it: without, every answer waits ~40 ms (Nagle and
    # delayed ACKs), which would understate the rate an attacker gets.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread


def one_run(seconds: float, connections: int) -> dict[str, float]:
    import httpx

    from agentq import Runtime
    from agentq.server import TokenAuth, create_app
    from agentq.server.auth import hash_token

    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.toml"
        tokens.write_text(f'[[tokens]]\nname = "bot"\nscopes = ["read"]\n'
                          f'sha256 = "{hash_token("the-real-token-0123456789")}"\n')  # fmt: skip
        rt = Runtime(f"sqlite:///{tmp}/guess.db")
        url, server, thread = _serve(create_app(rt, auth=TokenAuth.from_file(tokens)))
        counts = {"sent": 0, "checked": 0, "refused": 0}
        lock = threading.Lock()
        end = time.monotonic() + seconds

        def guess(n: int) -> None:
            with httpx.Client(base_url=url, timeout=30) as client:
                i = 0
                while time.monotonic() < end:
                    i += 1
                    r = client.get("/v1/tasks", headers={"Authorization": f"Bearer g{n}-{i}"})
                    label = {401: "checked", 429: "refused"}.get(r.status_code)
                    with lock:
                        counts["sent"] += 1
                        if label:
                            counts[label] += 1

        try:
            threads = [threading.Thread(target=guess, args=(n,)) for n in range(connections)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            server.should_exit = True
            thread.join(10)
            rt.close()
    return {**counts, "checked_per_second": counts["checked"] / seconds,
            "sent_per_second": counts["sent"] / seconds}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="length of one run")
    parser.add_argument("--repeats", type=int, default=3, help="runs (median and range)")
    parser.add_argument("--connections", type=int, default=4, help="parallel connections")
    args = parser.parse_args()
    runs = [one_run(args.seconds, args.connections) for _ in range(args.repeats)]
    rates = [r["checked_per_second"] for r in runs]
    print(json.dumps({
        "runs": runs,
        "checked_per_second": {"median": statistics.median(rates), "min": min(rates),
                               "max": max(rates)},
    }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
