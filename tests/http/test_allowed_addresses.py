"""Where an allowed name may lead (issue 27, item 15), tried as an attacker
would: real HTTP receivers on loopback, a worker in this process, and a DNS
that answers what the attacker wants for names under ``partner.test`` (the
resolver is replaced for those names only; every connection is real).

An agent picks its webhook's ``callback_url`` and a handler's URLs come from
untrusted arguments: a name on the allow-list whose DNS the attacker controls
would otherwise carry requests to loopback, private or link-local addresses
(a metadata service, a database). The allow-list can also name ports.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Policy, Runtime, TaskStatus, ToolContext, tool
from agentq.errors import InvalidArguments

pytestmark = pytest.mark.attack

SECRET = "whsec_" + "c2VjcmV0LXNlY3JldC1zZWNyZXQ="


class Receiver:
    """An HTTP server on one loopback address that records what reached it."""

    def __init__(self, address: str = "127.0.0.1", port: int = 0) -> None:
        self.hits: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                receiver.hits.append(f"{self.command} {self.path}")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


Answers = dict[str, list[str]]


@pytest.fixture
def dns(monkeypatch: pytest.MonkeyPatch) -> Answers:
    """The attacker's DNS: ``answers[name]`` is the list of addresses given, one
    per lookup (the last one again when it runs out); other names as usual."""
    answers: Answers = {}
    lookups: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.endswith(".partner.test"):
            lookups.append(name)
            queue = answers[name]
            address = queue.pop(0) if len(queue) > 1 else queue[0]
            return real(address, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    answers["lookups"] = lookups
    return answers


class Url(BaseModel):
    url: str


@tool(queue="work")
def noop(ctx: ToolContext, args: Url) -> dict[str, Any]:
    return {}


@tool(queue="work")
def fetch(ctx: ToolContext, args: Url) -> dict[str, Any]:
    return {"status": ctx.http.get(args.url).status_code}


def runtime(tmp_path: Path, hosts: list[str], webhook_hosts: list[str]) -> Runtime:
    policy = Policy.model_validate({"tools": {
        "fetch": {"allowed_hosts": hosts, "max_attempts": 1},
        "agentq_webhook": {"allowed_hosts": webhook_hosts, "max_attempts": 1},
    }})  # fmt: skip
    return Runtime(f"sqlite:///{tmp_path / 'a.db'}", tools=[noop, fetch], policies=policy,
                   clock=FakeClock(), settings={"webhook_secret": SECRET})  # fmt: skip


def webhook_of(rt: Runtime) -> Any:
    """The one webhook task (the test enqueues one task with a callback)."""
    [hook] = [t for t in rt.tasks() if t.tool == "agentq_webhook"]
    return hook


Make = Callable[[list[str], list[str]], Runtime]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Make]:
    made: list[Runtime] = []

    def build(hosts: list[str], webhook_hosts: list[str]) -> Runtime:
        home = tmp_path / str(len(made))
        home.mkdir()
        rt = runtime(home, hosts, webhook_hosts)
        made.append(rt)
        return rt

    yield build
    for rt in made:
        rt.close()


def test_a_webhook_to_an_allowed_name_that_resolves_to_loopback_is_refused(
    make: Make, receiver: Receiver, dns: Answers
) -> None:
    dns["hooks.partner.test"] = ["127.0.0.1"]
    rt = make([], ["hooks.partner.test"])
    task = rt.enqueue_action("noop", {"url": "-"},
                             callback_url=f"http://hooks.partner.test:{receiver.port}/hook")
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    hook = webhook_of(rt)
    assert receiver.hits == [], "the webhook reached a loopback service through an allowed name"
    assert hook.status == TaskStatus.DEAD
    assert "127.0.0.1" in (hook.error or "") and "allowed_hosts" in (hook.error or "")


def test_an_explicit_address_allows_it(make: Make, receiver: Receiver, dns: Answers) -> None:
    dns["hooks.partner.test"] = ["127.0.0.1"]
    rt = make([], ["hooks.partner.test", "127.0.0.1"])  # the list says so: explicit
    task = rt.enqueue_action("noop", {"url": "-"},
                             callback_url=f"http://hooks.partner.test:{receiver.port}/hook")
    rt.worker().drain()
    assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert webhook_of(rt).status == TaskStatus.SUCCEEDED
    assert receiver.hits == ["POST /hook"]


def test_the_shipped_loopback_entries_keep_working(make: Make, receiver: Receiver) -> None:
    rt = make(["127.0.0.1", "localhost"], ["127.0.0.1", "localhost"])
    for host in ("127.0.0.1", "localhost"):
        url = f"http://{host}:{receiver.port}/x"
        task = rt.enqueue_action("fetch", {"url": url}, callback_url=url)
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED, rt.task(task.task_id).error
    assert sorted(receiver.hits) == ["GET /x", "GET /x", "POST /x", "POST /x"]


def test_the_allow_list_can_name_ports(make: Make, receiver: Receiver) -> None:
    rt = make([f"127.0.0.1:{receiver.port}"], ["localhost:1"])
    with pytest.raises(InvalidArguments, match="not allowed for webhooks"):
        rt.enqueue_action("noop", {"url": "-"},
                          callback_url=f"http://localhost:{receiver.port}/hook")  # fmt: skip
    ok = rt.enqueue_action("fetch", {"url": f"http://127.0.0.1:{receiver.port}/x"})
    other = rt.enqueue_action("fetch", {"url": f"http://127.0.0.1:{receiver.port + 1}/x"})
    rt.worker().drain()
    assert rt.task(ok.task_id).status == TaskStatus.SUCCEEDED
    refused = rt.task(other.task_id)
    assert refused.status == TaskStatus.DEAD and "may not call host" in (refused.error or "")
    assert receiver.hits == ["GET /x"]


def test_a_handler_cannot_reach_a_private_address_through_an_allowed_name(
    make: Make, receiver: Receiver, dns: Answers
) -> None:
    dns["api.partner.test"] = ["127.0.0.1"]
    rt = make(["api.partner.test"], [])
    task = rt.enqueue_action("fetch", {"url": f"http://api.partner.test:{receiver.port}/admin"})
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert receiver.hits == [], "ctx.http reached a loopback service through an allowed name"
    assert info.status == TaskStatus.DEAD and "127.0.0.1" in (info.error or "")
    rt2 = make(["api.partner.test", "127.0.0.0/8"], [])  # a network entry: explicit
    task = rt2.enqueue_action("fetch", {"url": f"http://api.partner.test:{receiver.port}/ok"})
    rt2.worker().drain()
    assert rt2.task(task.task_id).status == TaskStatus.SUCCEEDED
    assert receiver.hits == ["GET /ok"]


def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_connected(
    make: Make, dns: Answers
) -> None:
    """DNS rebinding: the first answer is an allowed address, the next ones the
    internal service. A check that resolves and then lets the connection resolve
    again would connect to the second."""
    allowed = Receiver("127.0.0.2")
    try:
        internal = Receiver("127.0.0.1", allowed.port)
    except OSError:
        allowed.close()
        pytest.skip("the port of 127.0.0.2 is taken on 127.0.0.1")
    try:
        dns["api.partner.test"] = ["127.0.0.2", "127.0.0.1"]
        rt = make(["api.partner.test", "127.0.0.2"], [])
        task = rt.enqueue_action("fetch", {"url": f"http://api.partner.test:{allowed.port}/"})
        rt.worker().drain()
        assert rt.task(task.task_id).status == TaskStatus.SUCCEEDED
        assert allowed.hits == ["GET /"] and internal.hits == []
        assert dns["lookups"] == ["api.partner.test"]  # one lookup for one connection
    finally:
        allowed.close()
        internal.close()


def test_a_bad_host_entry_is_refused_naming_it() -> None:
    from pydantic import ValidationError

    for entry in ("exa mple.com", "host:99999", "[::1", "10.0.0.0/33", "a:b:c"):
        with pytest.raises(ValidationError, match="invalid host pattern"):
            Policy.model_validate({"tools": {"fetch": {"allowed_hosts": [entry]}}})


@pytest.mark.parametrize("address", [
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254, the cloud's metadata service
    "2002:a9fe:a9fe::1",  # 6to4
    "::a9fe:a9fe",  # IPv4-compatible
    "::ffff:0:a9fe:a9fe",  # SIIT
    "64:ff9b:1::a9fe:a9fe",  # NAT64, local use
])  # fmt: skip
def test_an_allowed_name_that_resolves_to_an_ipv6_form_of_the_metadata_service_is_refused(
    make: Make, dns: Answers, address: str
) -> None:
    """Issue 40 item 15: the guard judged these IPv6 addresses as public, and a
    NAT64 gateway would have carried the request to 169.254.169.254."""
    import httpx

    from agentq.errors import PolicyViolation
    from agentq.http_guard import GuardedTransport

    with (
        httpx.Client(transport=GuardedTransport(), timeout=2) as client,
        pytest.raises(PolicyViolation, match="not a public address"),
    ):
        client.get(f"http://[{address}]/latest/meta-data/")
    dns["meta.partner.test"] = [address]
    rt = make(["meta.partner.test"], [])
    task = rt.enqueue_action("fetch", {"url": "http://meta.partner.test/latest/meta-data/"})
    rt.worker().drain()
    info = rt.task(task.task_id)
    assert info.status == TaskStatus.DEAD
    assert "not a public address" in (info.error or ""), info.error
