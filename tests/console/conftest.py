"""A console over a real SQLite file, served by uvicorn on loopback.

Users: ``alice`` reads her own tasks and approves, ``root`` is an admin,
``viewer`` operates (sees every task), ``olga`` operates and approves, ``agent``
reads and enqueues its own, ``carol`` only approves. Tools: ``pay`` needs a
human above 100, ``flaky`` fails for good when told to (its task goes to the
dead-letter queue), ``shaky`` fails every attempt (3) with a transient error,
``crunch`` runs for the seconds it is told, on the fake clock.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from pydantic import BaseModel

from agentq import (
    ApprovalNotice,
    FakeClock,
    PermanentError,
    Runtime,
    TaskStatus,
    ToolContext,
    tool,
)
from agentq.policies import ApprovalRule, Defaults, Policy

if TYPE_CHECKING:
    from agentq.console import Console
    from agentq.server.auth import TokenAuth

# The ui extra is imported inside the fixtures: each test module says it needs
# it (tests/console/_need.py), so without it they skip with the reason.

TOKENS = {
    "alice": "alice-token-0123456789abcdef",
    "root": "root-token-0123456789abcdef",
    "viewer": "viewer-token-0123456789abcdef",
    "agent": "agent-token-0123456789abcdef",
    "carol": "carol-token-0123456789abcdef",
    "olga": "olga-token-0123456789abcdef",
}
# The viewer watches the whole queue: since tasks have owners, that is the
# ``operate`` scope (``read`` alone shows a principal its own tasks, as the
# agent's does).
SCOPES = {
    "alice": {"read", "approve"},
    "root": {"admin"},
    "viewer": {"operate"},
    "agent": {"read", "enqueue"},
    "carol": {"approve"},
    # A person who runs the queue and approves: sees everyone's tasks and decides.
    "olga": {"operate", "approve"},
}


class PayArgs(BaseModel):
    ref: str
    amount: float


@tool(queue="work")
def pay(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    return {"paid": args.amount, "ref": args.ref}


@tool(queue="work")
def flaky(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    url = "https://svc:hunter2@bank.example/v1?api_key=k3y"
    raise PermanentError(f"refused by {url} for {args.ref}")


@tool(queue="work", max_attempts=3)
def shaky(ctx: ToolContext, args: PayArgs) -> dict[str, Any]:
    raise ConnectionError(f"bank.example timed out for {args.ref}")


class CrunchArgs(BaseModel):
    ref: str
    seconds: float


@tool(queue="work")
def crunch(ctx: ToolContext, args: CrunchArgs) -> dict[str, Any]:
    """Takes ``seconds`` of the test's fake clock (a run time the charts can show)."""
    if isinstance(ctx.clock, FakeClock):
        ctx.clock.advance(args.seconds)
    return {"ref": args.ref}


@tool(queue="notices")
def notify(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    return {}


@tool(queue="notices")
def page(ctx: ToolContext, args: ApprovalNotice) -> dict[str, Any]:
    return {}


POLICY = Policy(
    defaults=Defaults(notify_tool="notify", escalation_tool="page"),
    approvals=(ApprovalRule(tool="pay", field="amount", above=100),),
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock) -> Iterator[Runtime]:
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'console.db'}",
        tools=[pay, flaky, shaky, crunch, notify, page],
        policies=POLICY,
        clock=clock,
    )
    yield runtime
    runtime.close()


def authenticator() -> TokenAuth:
    """The HTTP API's token authentication, which the console shares."""
    from agentq.server.auth import Principal, Scope, TokenAuth

    return TokenAuth.from_tokens(
        {TOKENS[n]: Principal(n, frozenset(Scope(s) for s in SCOPES[n])) for n in TOKENS}
    )


@dataclass
class Served:
    """A console served on loopback."""

    url: str  # ends with /console
    console: Console
    rt: Runtime

    @contextmanager
    def client(self, user: str | None = None) -> Iterator[httpx.Client]:
        """An HTTP client, signed in through the login form as ``user`` if given."""
        with httpx.Client(base_url=self.url, timeout=20.0, follow_redirects=False) as client:
            if user is not None:
                assert login(client, TOKENS[user]).status_code == 303
            yield client


def login(client: httpx.Client, token: str) -> httpx.Response:
    form = client.get("/login")
    assert form.status_code == 200
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    return client.post("/login", data={"nonce": nonce[1], "token": token, "next": ""})


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert found is not None, "no CSRF token on the page"
    return found[1]


@pytest.fixture
def serve(rt: Runtime) -> Iterator[Callable[..., Served]]:
    """Start a console server (``serve(read_only=True)`` for a read-only one;
    ``serve(api=True)``: the HTTP API's app with the console mounted)."""
    started: list[tuple[Any, threading.Thread]] = []

    def start(**options: Any) -> Served:
        import uvicorn

        from agentq.console import Console
        from agentq.console.app import create_app

        options.setdefault("refresh_seconds", 0.2)
        options.setdefault("stream_seconds", 30.0)
        api = options.pop("api", False)
        auth = options.pop("auth", None) or authenticator()
        console = Console(rt, auth=auth, **options)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(console, api=api), log_level="warning", timeout_graceful_shutdown=2,
            access_log=False,
        )  # fmt: skip
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.append((server, thread))
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline, "the console server did not start in 30 s"
            assert thread.is_alive(), "the console server thread died"
            time.sleep(0.02)
        return Served(f"http://127.0.0.1:{port}/console", console, rt)

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(timeout=15)
        assert not thread.is_alive(), "the console server did not stop in 15 s"


# -- a world to look at ------------------------------------------------------------


def pending(rt: Runtime, ref: str = "r-1", amount: float = 500) -> str:
    """A payment waiting for a human; its approval id."""
    task = rt.enqueue_action("pay", {"ref": ref, "amount": amount})
    assert task.status == TaskStatus.AWAITING_APPROVAL
    assert task.approval_id is not None
    return task.approval_id


def dead(rt: Runtime, ref: str = "d-1") -> str:
    """A task in the dead-letter queue (with a secret in its error); its id."""
    task = rt.enqueue_action("flaky", {"ref": ref, "amount": 5})
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    return task.task_id


def retried_to_death(rt: Runtime, ref: str = "s-1") -> str:
    """A task that failed all its three attempts (retried twice, then dead); its id."""
    task = rt.enqueue_action("shaky", {"ref": ref, "amount": 7})
    for _ in range(3):
        rt.worker().drain()
        rt.clock.advance(600)  # type: ignore[attr-defined]  # past the retry backoff
    assert rt.task(task.task_id).status == TaskStatus.DEAD
    return task.task_id
