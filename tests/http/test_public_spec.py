"""Issue 28, item 9: the OpenAPI document and a /docs page describe no data, so
a client generator or a new user reads them without a token; ``--private-spec``
hides them again; ``agentq openapi`` prints the document offline. Every other
endpoint still needs a token."""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentq import Runtime
from agentq.cli import main
from tests.http.conftest import ROOT, TOKENS, LiveServer, write_policies, write_tokens


def _serve(runtime: Runtime, tmp_path: Path, **options: Any) -> LiveServer:
    from agentq.server import TokenAuth, create_app

    auth = TokenAuth.from_file(write_tokens(tmp_path / "tokens.toml"))
    return LiveServer(create_app(runtime, auth=auth, **options)).start()


def test_the_spec_and_the_docs_page_need_no_token(server: LiveServer) -> None:
    with server.client(None) as anon, server.client("reader-token") as reader:
        spec = anon.get("/openapi.json")
        assert spec.status_code == 200
        assert spec.json() == reader.get("/openapi.json").json()
        assert "/v1/tools/execute_refund/actions" in spec.json()["paths"]
        page = anon.get("/docs")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert 'href="/openapi.json"' in page.text
        for path in spec.json()["paths"]:  # every operation is on the page
            assert path in page.text


def test_every_data_endpoint_still_answers_401_without_a_token(server: LiveServer) -> None:
    with server.client(None) as anon, server.client("admin-token") as admin:
        spec = admin.get("/openapi.json").json()
        seen = 0
        for path, operations in spec["paths"].items():
            concrete = re.sub(r"\{[^}]+\}", "tsk_0", path)
            for method in operations:
                answer = anon.request(method.upper(), concrete, json={})
                assert answer.status_code == 401, (method, path, answer.text)
                seen += 1
        assert seen >= 8  # tools, tasks, approvals: the whole API was tried


def test_private_spec_hides_the_spec_and_the_docs_behind_a_token(
    runtime: Runtime, tmp_path: Path
) -> None:
    live = _serve(runtime, tmp_path, private_spec=True)
    try:
        with live.client(None) as anon, live.client("reader-token") as reader:
            for path in ("/openapi.json", "/docs"):
                assert anon.get(path).status_code == 401
                assert reader.get(path).status_code == 200
    finally:
        live.stop()


def test_agentq_serve_private_spec(tmp_path: Path, db_url: str) -> None:
    """The switch on the real command: the spec is a 401 without a token."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    agentq = str(Path(sys.executable).parent / "agentq")
    with subprocess.Popen(
        [agentq, "serve", "--tokens", str(tokens), "--port", "0", "--private-spec",
         "--db", db_url, "--tools", str(ROOT / "tools"),
         "--policies", str(write_policies(tmp_path / "policies"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    ) as proc:  # fmt: skip
        try:
            assert proc.stderr is not None
            lines: queue.Queue[str] = queue.Queue()
            threading.Thread(target=lambda: lines.put(proc.stderr.readline()), daemon=True).start()
            line = lines.get(timeout=60)  # "serving on URL" once bound, or "" if it ended
            assert "serving on http://" in line, line
            url = line.split("serving on ", 1)[1].strip()
            assert httpx.get(f"{url}/openapi.json", timeout=30).status_code == 401
            reader = next(t for t, (_, scopes) in TOKENS.items() if scopes == {"read"})
            ok = httpx.get(f"{url}/openapi.json", timeout=30,
                           headers={"Authorization": f"Bearer {reader}"})  # fmt: skip
            assert ok.status_code == 200 and "paths" in ok.json()
        finally:
            proc.terminate()
            proc.wait(30)


def test_agentq_openapi_prints_the_served_spec_without_a_database(
    server: LiveServer, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTQ_DB", "postgresql://nobody@127.0.0.1:1/none")  # never reached
    policies = tmp_path / "policies"  # the server fixture's policies
    before = set(os.listdir(tmp_path))
    assert main(["openapi", "--tools", str(ROOT / "tools"), "--policies", str(policies)]) == 0
    printed = json.loads(capsys.readouterr().out)
    with server.client("reader-token") as reader:
        assert printed == reader.get("/openapi.json").json()
    assert set(os.listdir(tmp_path)) == before  # no agentq.db made
