"""schemathesis against the served OpenAPI document: every check, 0 failures.

Plain schemathesis: no hooks, run from the repository's folder, whose
``schemathesis.toml`` only accepts statuses the document declares for the
operation (checked below), where no schema can say which request gets them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq import Runtime
from tests.http.conftest import LiveServer, write_tokens

# The fuzz is a step of .ci/run of its own (ci_step); the settings check below is not.
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture
def fuzzed_server(runtime: Runtime, tmp_path: Path) -> Iterator[LiveServer]:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    # Short waits and streams: the fuzzer sends Prefer: wait=N and opens streams.
    app = create_app(runtime, auth=auth, max_wait=1, stream_seconds=1)
    live = LiveServer(app).start()
    yield live
    live.stop()


@pytest.mark.slow
@pytest.mark.ci_step
def test_schemathesis_finds_no_failure(fuzzed_server: LiveServer, tmp_path: Path) -> None:
    exe = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("schemathesis is not installed (the dev extra installs it)")
        pytest.skip("schemathesis is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEMATHESIS_")}
    examples = os.environ.get("AGENTQ_SCHEMATHESIS_MAX_EXAMPLES", "40")
    proc = subprocess.run(
        [exe, "run",
         f"{fuzzed_server.url}/openapi.json", "--checks", "all",
         "-H", "Authorization: Bearer admin-token", "--max-examples", examples, "--seed", "1",
         "--no-color", "--generation-database", "none", "--workers", "1",
         "--request-timeout", "20", "--report-dir", str(tmp_path / "report")],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    summary = re.findall(r"^.*(?:passed|failed|Test cases|Operations).*$", out, re.MULTILINE)
    print("\n".join(summary))
    (tmp_path.parent / "schemathesis-output.txt").write_text(out)
    assert proc.returncode == 0, out[-6000:]
    assert "No issues found" in out or " 0 failures" in out or "failed" not in out, out[-3000:]


def test_the_schemathesis_settings_accept_only_statuses_the_spec_declares(
    runtime: Runtime,
) -> None:
    """``schemathesis.toml`` may not paper over a status the document does not
    declare for each operation it applies to (nor name operations that are gone)."""
    import tomllib

    from agentq.server.auth import InsecureLocal
    from agentq.server.state import ServerState

    spec = ServerState(runtime, InsecureLocal()).openapi()
    operations = {op["operationId"]: op for path in spec["paths"].values() for op in path.values()}
    settings = tomllib.loads((ROOT / "schemathesis.toml").read_text(encoding="utf-8"))
    assert settings.keys() == {"operations"}  # nothing global: per operation only
    for entry in settings["operations"]:
        matched = [op for name, op in operations.items()
                   if re.search(entry["include-operation-id-regex"], name)]  # fmt: skip
        assert matched, entry
        for check in entry["checks"].values():
            for status in check["expected-statuses"]:
                if status[1:] == "xx" or status in ("401", "403", "404", "406", "409", "429"):
                    continue  # schemathesis's defaults
                for op in matched:
                    assert status in op["responses"], (op["operationId"], status)
