"""The refund bot over HTTP: an agent enqueues and long-polls, a human approves.

A real uvicorn server on 127.0.0.1 serves the API (``agentq serve`` does the
same from the command line); a worker runs in this process; everything talks
HTTP through httpx, with bearer tokens.

On PostgreSQL, by the URL alone: ``AGENTQ_DB=postgresql://user@host/db python
examples/http_api.py`` (an empty database).
"""

# expect: retried: 200, same task: True
# expect: small refund: succeeded
# expect: large refund after approval by alice: succeeded
# expect: refunds charged: 2

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path

import httpx
import uvicorn

from agentq import Runtime
from agentq.server import Principal, Scope, TokenAuth, create_app
from agentq.testing import LoopbackAPI

ROOT = Path(__file__).resolve().parents[1]


def serve(app: object) -> tuple[str, uvicorn.Server]:
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    for _ in range(3000):  # at most 30 s
        if server.started:
            break
        threading.Event().wait(0.01)
    else:
        raise RuntimeError("the server did not start")
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def main() -> None:
    with LoopbackAPI() as payments, tempfile.TemporaryDirectory() as tmp:
        rt = Runtime(os.environ.get("AGENTQ_DB") or f"sqlite:///{tmp}/agentq.db",
                     tools=ROOT / "tools",
                     policies=ROOT / "policies",
                     settings={"payments_url": payments.url})  # fmt: skip
        auth = TokenAuth.from_tokens({
            "agent-secret": Principal("refund-agent", frozenset({Scope.ENQUEUE, Scope.READ})),
            "alice-secret": Principal("alice", frozenset({Scope.APPROVE, Scope.READ})),
        })  # fmt: skip
        url, server = serve(create_app(rt, auth=auth))
        stop = threading.Event()
        worker = threading.Thread(target=rt.worker().run, args=(stop,))
        worker.start()
        agent = httpx.Client(base_url=url, headers={"Authorization": "Bearer agent-secret"})
        alice = httpx.Client(base_url=url, headers={"Authorization": "Bearer alice-secret"})

        # The agent enqueues a refund; its retry (same Idempotency-Key) is the same task.
        small = {"args": {"order_id": "A-1", "amount": 30}}
        first = agent.post("/v1/tools/execute_refund/actions", json=small,
                           headers={"Idempotency-Key": "A-1-refund"})
        retry = agent.post("/v1/tools/execute_refund/actions", json=small,
                           headers={"Idempotency-Key": "A-1-refund"})  # fmt: skip
        same = retry.json()["task_id"] == first.json()["task_id"]
        print(f"enqueued: {first.status_code}; retried: {retry.status_code}, same task: {same}")
        done = agent.get(first.headers["location"], headers={"Prefer": "wait=20"}).json()
        print("small refund:", done["status"])

        # A large refund waits for a human; alice approves what she was shown (If-Match).
        large = agent.post("/v1/tools/execute_refund/actions",
                           json={"args": {"order_id": "A-2", "amount": 450}}).json()
        print("large refund:", large["status"])
        pending = alice.get("/v1/approvals", params={"status": "pending"}).json()["approvals"]
        shown = alice.get(f"/v1/approvals/{pending[0]['approval_id']}")
        alice.post(f"/v1/approvals/{pending[0]['approval_id']}:approve",
                   headers={"If-Match": shown.headers["etag"]}, json={"note": "checked"})
        done = agent.get(f"/v1/tasks/{large['task_id']}", headers={"Prefer": "wait=20"}).json()
        approval = alice.get(f"/v1/approvals/{pending[0]['approval_id']}").json()
        print(f"large refund after approval by {approval['decided_by']}:", done["status"])

        print("refunds charged:", len(payments.applied()))
        stop.set()
        worker.join(30)
        server.should_exit = True
        agent.close()
        alice.close()
        rt.close()


if __name__ == "__main__":
    main()
