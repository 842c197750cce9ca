"""On a machine with only the database URL, ``agentq ui``, ``serve``, ``mcp`` and
``enqueue`` run from the tool catalog ``agentq init`` recorded (schemas, policy,
approval rules): from a folder without ``tools/``, as an operator's console or a
front end would. Only what runs tool code (``serve --worker``) still needs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from agentq.demo.scaffold import new_project
from tests.processes import interrupt

pytestmark = pytest.mark.slow
AGENTQ = [sys.executable, "-m", "agentq.cli"]


@pytest.fixture
def recorded(tmp_path: Path) -> str:
    """A database whose catalog `agentq init` recorded in the project's folder."""
    new_project(tmp_path / "project")
    done = subprocess.run([*AGENTQ, "init"], cwd=tmp_path / "project", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return f"sqlite:///{tmp_path / 'project' / 'agentq.db'}"


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A folder with no tools/, policies/ or agentq.toml."""
    folder = tmp_path / "operator"
    folder.mkdir()
    return folder


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AGENTQ, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60, env=_env())  # fmt: skip


@contextmanager
def _serving(cwd: Path, *args: str, ready: str) -> Iterator[str]:
    """Run a server command; yield the URL it prints in its ready line."""
    proc = subprocess.Popen([*AGENTQ, *args, "--port", "0"], cwd=cwd, text=True, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    assert proc.stdout is not None
    try:
        seen = []
        for line in proc.stdout:
            seen.append(line)
            found = re.search(ready + r" (http://127\.0\.0\.1:\d+\S*)", line)
            if found:
                yield found.group(1)
                break
        else:
            raise AssertionError("".join(seen))
    finally:
        interrupt(proc)


def test_enqueue_validates_against_the_recorded_catalog(recorded: str, elsewhere: Path) -> None:
    held = _run(elsewhere, "enqueue", "execute_refund", "--db", recorded,
                "--args", '{"order_id": "A-1", "amount": 500}')  # fmt: skip
    assert held.returncode == 0, held.stderr
    assert "awaiting_approval" in held.stdout  # the recorded policy's approval rule
    assert "no tools/ folder here: using the tools" in held.stderr
    typo = _run(elsewhere, "enqueue", "execute_refund", "--db", recorded,
                "--args", '{"order_id": "A-2", "amount": 5, "curency": "EUR"}')  # fmt: skip
    assert typo.returncode == 2
    assert "unknown argument 'curency' (did you mean 'currency'?)" in typo.stderr
    # No database at all: an error, not a new empty file.
    missing = _run(elsewhere, "enqueue", "execute_refund", "--args", "{}")
    assert missing.returncode == 2 and "no database at" in missing.stderr
    assert not (elsewhere / "agentq.db").exists()


def test_serve_offers_the_recorded_tools_and_refuses_only_a_worker(
    recorded: str, elsewhere: Path
) -> None:
    with _serving(elsewhere, "serve", "--insecure-local", "--db", recorded,
                  ready="serving on") as url, httpx.Client(base_url=url) as http:  # fmt: skip
        spec = http.get("/openapi.json").json()
        assert "/v1/tools/execute_refund/actions" in spec["paths"]
        body = spec["components"]["schemas"]["ExecuteRefundAction"]
        args = body["properties"]["args"]
        assert set(args["properties"]) == {"order_id", "amount", "currency", "reason"}
        assert args["additionalProperties"] is False
        typo = http.post("/v1/tools/execute_refund/actions",
                         json={"args": {"order_id": "A-3", "amount": 5, "curency": "EUR"}})
        assert typo.status_code == 422
        assert typo.json()["errors"][0]["pointer"] == "/args/curency"
        made = http.post("/v1/tools/execute_refund/actions",
                         json={"args": {"order_id": "A-3", "amount": 500}})  # fmt: skip
        assert made.status_code == 202, made.text
        assert made.json()["status"] == "awaiting_approval"
    worker = _run(elsewhere, "serve", "--insecure-local", "--port", "0", "--worker", "2",
                  "--db", recorded)  # fmt: skip
    assert worker.returncode == 2
    assert "no tools/ folder" in worker.stderr and "Traceback" not in worker.stderr


def test_ui_runs_on_the_database_alone(recorded: str, elsewhere: Path) -> None:
    with _serving(elsewhere, "ui", "--insecure-local", "--db", recorded,
                  ready="agentq console on") as url, httpx.Client(
        base_url=url, follow_redirects=True
    ) as web:  # fmt: skip
        nonce = re.search(r'name="nonce" value="([^"]+)"', web.get("login").text)
        if nonce:  # a sign-in form: --insecure-local takes any token
            web.post("login", data={"nonce": nonce.group(1), "next": "/console/tasks",
                                    "token": "any-token-will-do"})  # fmt: skip
        tasks = web.get("tasks")
        assert tasks.status_code == 200, tasks.text[:500]


def test_mcp_lists_the_recorded_tools(recorded: str, elsewhere: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agentq.cli", "mcp", "--db", recorded, "--wait", "0"],
        env=_env(), cwd=str(elsewhere),
    )  # fmt: skip

    async def names_and_call() -> tuple[list[str], str]:
        async with Client(params) as client:
            tools = await client.list_tools()
            held = await client.call_tool("execute_refund", {"order_id": "M-1", "amount": 900})
            return [t.name for t in tools.tools], json.dumps(held.structured_content)

    names, held = anyio.run(names_and_call)
    assert "execute_refund" in names and "request_approval" not in names
    assert "input_required" in held
