"""A plain (non-editable) install: ``agentq demo`` brings its own project.

Builds a wheel of this checkout, installs it into a fresh virtual environment
(its dependencies come from the package index pip is configured with), and
runs ``agentq demo`` from an empty folder and from a folder that has its own
``tools/``, ``policies/`` and ``agentq.toml``, none of which it may read; and
the README's quickstart line, ``agentq new bot && cd bot && agentq demo --keep
&& agentq ui --insecure-local``, as written, up to a page of the console.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# Building a wheel and installing it with its dependencies into a fresh venv
# takes a minute or more on a loaded machine: the first test pays for it.
# One xdist group: both tests use the module's wheel and venv, which pytest-xdist
# would otherwise build once in each worker process that runs one of them.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.xdist_group("packaging")]


#: What a checkout holds beside its source (virtual environments, caches, builds).
_NOT_SOURCE = (".git", ".venv", ".ci-venv", "build", "*.egg-info", "__pycache__",
               ".*_cache", "tests")  # fmt: skip


def _run(cmd: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTQ_DB")}
    return subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


# Session-scoped: a module's fixture is torn down whenever its worker runs another
# module's test in between (the random order does), and the wheel was built 3 times.
@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin/`` of a fresh venv with agentq installed from a wheel."""
    base = tmp_path_factory.mktemp("plain-install")
    wheels = base / "wheels"
    # Verbose: the build backend's warnings are shown only so.
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(wheels)]
    # Built from a copy: setuptools builds in the source tree's build/, so two builds
    # of one checkout at once (another test session, a developer's pip install)
    # collide there ("File exists: build/bdist.../agentq_runtime-0.1.0.dist-info").
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*_NOT_SOURCE))
    built = _run([*pip_wheel, str(source)], base, 300)
    assert built.returncode == 0, built.stderr[-3000:]
    # A deprecation in the packaging metadata is a build that fails on a known day
    # (setuptools: "`project.license` as a TOML table is deprecated ... By
    # 2027-Feb-18, you need to update your project").
    deprecated = [line.strip() for line in (built.stdout + built.stderr).splitlines()
                  if "DeprecationWarning" in line]  # fmt: skip
    assert not deprecated, deprecated
    # The package index's "agentq" is someone else's: the distribution is agentq-runtime.
    (wheel,) = wheels.glob("agentq_runtime-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    assert "\nName: agentq-runtime\n" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert "agentq/demo/project/tools/refunds.py" in names
    assert "agentq/demo/project/policies/refunds.toml" in names
    # Generic top-level names are never installed as packages.
    assert not [n for n in names if n.startswith(("tools/", "policies/"))]
    env_dir = base / "venv"
    # No pip of its own (ensurepip installs and byte-compiles pip, seconds of CPU):
    # this interpreter's pip installs into the venv (``--python``), a real install of
    # the wheel and its dependencies all the same. No byte-compiling either: what the
    # tests import is compiled on first import, not every module of every dependency.
    venv.EnvBuilder(with_pip=False).create(env_dir)
    # With the ui extra, as the README's quickstart installs it (agentq ui needs it).
    pip = _run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"),
         "install", "--quiet", "--no-compile", f"{wheel}[ui]"],
        base, 600,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stderr[-3000:]
    return env_dir / "bin"


def _demo(bin_dir: Path, cwd: Path) -> dict[str, object]:
    proc = _run([str(bin_dir / "agentq"), "demo", "--json", "--requests", "12"], cwd, 180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary: dict[str, object] = json.loads(proc.stdout)
    return summary


def test_demo_runs_from_an_empty_folder_after_a_plain_install(
    installed: Path, tmp_path: Path
) -> None:
    summary = _demo(installed, tmp_path)
    assert summary["ok"] is True, summary["checks"]
    assert summary["crashed_task_completed_once"] is True
    assert list(tmp_path.iterdir()) == []  # the demo's database lives in its own temp folder


def test_the_installed_command_knows_its_version_and_the_import_package_is_agentq(
    installed: Path, tmp_path: Path
) -> None:
    version = _run([str(installed / "agentq"), "--version"], tmp_path, 60)
    assert version.returncode == 0, version.stderr
    # Read from agentq-runtime's metadata: under the old lookup by "agentq" it was "unknown".
    assert version.stdout.strip() == f"agentq {PROJECT['version']}"
    helped = _run([str(installed / "agentq"), "--help"], tmp_path, 60)
    assert helped.returncode == 0 and "agentq-runtime[http]" in helped.stdout, helped.stderr
    probe = "import agentq, importlib.metadata as m; print(m.version('agentq-runtime'))"
    imported = _run([str(installed / "python"), "-c", probe], tmp_path, 60)
    assert imported.stdout.strip() == PROJECT["version"], imported.stderr


def test_demo_ignores_the_folders_own_project(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "mine.py").write_text('raise SystemExit("user tools were loaded")\n')
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "mine.toml").write_text('[[approvals]]\ntool = "not_a_tool"\n')
    (tmp_path / "agentq.toml").write_text(
        '[agentq]\ntools = "tools"\npolicies = "policies"\n[settings]\norders_table = "nope"\n'
    )
    summary = _demo(installed, tmp_path)
    assert summary["ok"] is True, summary["checks"]
    assert summary["crashed_task_completed_once"] is True


def _quickstart_line() -> str:
    """The README's quickstart command line (the one starting ``agentq new``)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    (line,) = [ln for ln in readme.splitlines() if ln.startswith("agentq new ")]
    return line


def test_the_readmes_quickstart_runs_after_a_plain_install(installed: Path, tmp_path: Path) -> None:
    """``agentq new bot && cd bot && agentq demo --keep && agentq ui --insecure-local``:
    each command as the README writes it (the console on any free port, ``--port 0``,
    since tests run side by side), then the console shows the demo's tasks."""
    import re

    import httpx

    from tests.processes import interrupt

    steps = [s.split() for s in _quickstart_line().split(" && ")]
    assert [s[:2] for s in steps] == [
        ["agentq", "new"], ["cd", "bot"], ["agentq", "demo"], ["agentq", "ui"],
    ], steps  # fmt: skip
    cwd = tmp_path
    for step in steps[:-1]:
        if step[0] == "cd":
            cwd = cwd / step[1]
            continue
        done = _run([str(installed / "agentq"), *step[1:]], cwd, 180)
        assert done.returncode == 0, f"{step}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        if step[1] == "demo":
            assert "RESULT: all checks passed" in done.stdout
            assert "agentq ui --insecure-local" in done.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGENTQ_DB")}
    ui = subprocess.Popen(
        [str(installed / "agentq"), *steps[-1][1:], "--port", "0"], cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    try:
        assert ui.stdout is not None
        first = ui.stdout.readline()
        url = re.search(r"on (http://127\.0\.0\.1:\d+/console/)", first)
        assert url, first + (ui.stdout.read() if ui.poll() is not None else "")
        with httpx.Client(base_url=url.group(1), follow_redirects=True, timeout=30) as web:
            login = web.get("login").text
            nonce = re.search(r'name="nonce" value="([^"]+)"', login)
            if nonce:  # --insecure-local takes any token
                web.post("login", data={"nonce": nonce.group(1), "next": "/console/tasks",
                                        "token": "any-token-will-do"})  # fmt: skip
            page = web.get("tasks")
        assert page.status_code == 200, page.text[:2000]
        assert "execute_refund" in page.text and re.search(r"tsk_[0-9a-f]{8}", page.text)
    finally:
        interrupt(ui)
