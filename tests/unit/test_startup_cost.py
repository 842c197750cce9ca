"""What starting agentq costs: every CLI command, worker, demo and notebook
that opens a runtime pays it.

Before, ``import agentq`` also imported httpx, tenacity, jsonschema and croniter
(about 0.4 s together; each is needed only on a rarer path: a tool's HTTP call
or a BUSY retry, a catalog's validation, a cron schedule), and every
``Runtime`` made an ``httpx.HTTPTransport`` (loading the CA certificates: 0.25 s
for the first of a process, 50 ms for each later one) that only a tool calling
out uses. ``agentq tasks`` went from 1.51 s to 0.72 s (medians of 9 runs,
interleaved with the earlier code). Then the executor (``agentq.Worker`` is
imported on first use) and asyncio (imported by the async forms that use it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime

DEFERRED = ("tenacity", "jsonschema", "croniter", "httpx", "asyncio", "agentq.executor")


@pytest.mark.parametrize("module", ["agentq", "agentq.cli"])
def test_importing_agentq_leaves_the_rarely_needed_libraries_unimported(module: str) -> None:
    code = f"import sys, {module}\nprint(' '.join(m for m in {DEFERRED!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.split() == []


def test_the_lazily_imported_names_are_there_when_asked() -> None:
    import agentq
    from agentq.executor import Worker, WorkerStats

    assert agentq.Worker is Worker and agentq.WorkerStats is WorkerStats
    assert {"Worker", "WorkerStats"} <= set(agentq.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Workers'"):
        agentq.Workers  # noqa: B018


def test_enqueueing_with_a_callback_url_imports_no_http_client(tmp_path: Path) -> None:
    # The host check runs inside the decision's transaction: importing httpx there
    # would hold the write lock a quarter of a second.
    (tmp_path / "policies.toml").write_text(
        '[tools.agentq_webhook]\nallowed_hosts = ["hooks.example.com"]\n'
    )
    _write_ping_tool(tmp_path)
    code = (
        "import sys\n"
        "from agentq import Runtime\n"
        f"rt = Runtime('sqlite:///{tmp_path / 'a.db'}', tools={str(tmp_path / 'tools')!r},\n"
        f"             policies={str(tmp_path / 'policies.toml')!r})\n"
        "t = rt.enqueue_action('ping', {}, callback_url='https://hooks.example.com/done')\n"
        "rt.close()\n"
        "print(t.status, 'httpx' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["queued", "False"]


class _CountingTransport(httpx.MockTransport):
    made: list[_CountingTransport] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(lambda request: httpx.Response(204))
        self.closed = False
        self.made.append(self)

    def close(self) -> None:
        self.closed = True


def test_a_runtime_makes_its_http_transport_when_first_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import agentq.http_guard

    _CountingTransport.made = []
    # The runtime's own transport: the guarded one (issue 27, item 15).
    monkeypatch.setattr(agentq.http_guard, "GuardedTransport", _CountingTransport)
    rt = Runtime(f"sqlite:///{tmp_path / 'a.db'}")
    rt.transact(lambda tx: tx.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
    assert _CountingTransport.made == []  # deciding and reading need none
    transport = rt.http_transport
    assert rt.http_transport is transport  # one pool per runtime
    assert _CountingTransport.made == [transport]
    rt.close()
    assert _CountingTransport.made[0].closed


def test_a_runtime_closes_a_given_transport_and_makes_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _CountingTransport.made = []
    given = _CountingTransport()
    monkeypatch.setattr(httpx, "HTTPTransport", _CountingTransport)
    rt = Runtime(f"sqlite:///{tmp_path / 'a.db'}", http_transport=given)
    assert rt.http_transport is given
    rt.close()
    assert given.closed and _CountingTransport.made == [given]


def test_a_runtime_that_never_called_out_closes_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _CountingTransport.made = []
    monkeypatch.setattr(httpx, "HTTPTransport", _CountingTransport)
    Runtime(f"sqlite:///{tmp_path / 'a.db'}").close()
    assert _CountingTransport.made == []  # closing made none just to close it


#: What ``agentq --version`` and ``agentq --help`` must not import (issue 39,
#: item 2.11: they took 1.1 s importing the whole runtime; now about 0.25 s).
NOT_FOR_HELP = ("pydantic", "agentq.runtime", "agentq.backends", "agentq.ledger",
                "agentq.approvals", "agentq.policies", "agentq.agents")  # fmt: skip


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_import_none_of_the_runtime(flag: str) -> None:
    code = (
        "import sys\nfrom agentq.cli import main\n"
        f"try:\n    main([{flag!r}])\nexcept SystemExit:\n    pass\n"
        f"print('imported:', *(m for m in {NOT_FOR_HELP!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert done.stdout.splitlines()[-1].split() == ["imported:"], done.stdout[-500:]


#: What ``agentq worker`` must not import before its first lease when its tools
#: are synchronous and no OpenTelemetry provider is installed (issue 38, item 3:
#: asyncio and OpenTelemetry were about 25 ms of every worker's start-up).
NOT_FOR_A_WORKER = ("opentelemetry", "asyncio", "ssl", "httpx", "tenacity", "jsonschema",
                    "croniter", "agentq.console", "agentq.server.app")  # fmt: skip


def test_a_worker_starts_without_what_it_does_not_use(tmp_path: Path) -> None:
    # Also counted: the source files read (pydantic's attribute docstrings, ~40 ms,
    # read while the settings models were built: only docs/reference needs them)
    # and version look-ups (the distribution's metadata, for --version only).
    _write_ping_tool(tmp_path)
    code = (
        "import importlib.metadata, inspect, sys\n"
        "calls = []\n"
        "def counted(name, real):\n"
        "    def wrapper(*a, **k):\n"
        "        calls.append(name)\n"
        "        return real(*a, **k)\n"
        "    return wrapper\n"
        "inspect.findsource = counted('findsource', inspect.findsource)\n"
        "importlib.metadata.version = counted('version', importlib.metadata.version)\n"
        "from agentq.cli import main\n"
        f"status = main(['worker', '--db', 'sqlite:///{tmp_path / 'a.db'}',\n"
        f"               '--tools', {str(tmp_path / 'tools')!r}, '--once'])\n"
        f"print('imported:', *(m for m in {NOT_FOR_A_WORKER!r} if m in sys.modules))\n"
        "print('called:', *sorted(set(calls)), status)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_PYTHON_")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-2:] == ["imported:", "called: 0"], done.stdout + done.stderr


def test_a_provider_named_by_the_environment_is_still_looked_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # OpenTelemetry loads the provider OTEL_PYTHON_TRACER_PROVIDER names on its
    # first look-up, with nothing imported beforehand: that must still be asked.
    from agentq import telemetry

    monkeypatch.delitem(sys.modules, "opentelemetry", raising=False)
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.delenv("OTEL_PYTHON_METER_PROVIDER", raising=False)
    assert not telemetry._installable()
    monkeypatch.setenv("OTEL_PYTHON_METER_PROVIDER", "sdk_meter_provider")
    assert telemetry._installable()


def _write_ping_tool(folder: Path) -> None:
    """A tools folder with one no-op tool, ``ping`` on queue ``q``."""
    (folder / "tools").mkdir()
    (folder / "tools" / "t.py").write_text(
        "from pydantic import BaseModel\n"
        "from agentq import ToolContext, tool\n"
        "class Args(BaseModel):\n"
        "    n: int = 0\n"
        "@tool(queue='q')\n"
        "def ping(ctx: ToolContext, args: Args) -> None:\n"
        "    return None\n"
    )
