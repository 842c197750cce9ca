"""Every ```python block of the README and of docs/ runs as written.

Each block runs in its own Python process, in a fresh folder made by ``agentq
new`` (the refund bot's ``tools/`` and ``policies/``, an ``agentq.toml``: what a
pip user has), and must exit 0, twice in a row in the same folder (a snippet a
reader runs again must not fail on what its first run left, such as a row with
the same key). The line just before a block may say more:

* ``<!-- file: tools/sms.py -->``: the block (any language) is that file of the
  project; it is written into the folder of every later block of the same
  document (a Python file is also run once, on its own);
* ``<!-- tested as written: tests/x/test_y.py -->``: the block needs what that
  test sets up (a server, a token) and that test runs it; the file must exist;
* ``<!-- not-run: reason -->``: the block cannot run on its own, and why. That
  should be rare.

The tutorial (``docs/tutorial/``) is one story: its pages run in their order
(``index.md``, then by name) in **one empty folder**, as a reader follows them.
Each ``file:`` block is written when it comes (a later one replaces an earlier
one of the same path), each ``python`` block runs once, and each ``sh`` block
runs in bash, line by line as typed, with ``agentq`` on the PATH; each must
exit 0. The folder's state (the database) carries from one step to the next.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentq.demo.scaffold import new_project

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL_DIR = ROOT / "docs" / "tutorial"
TUTORIAL = sorted(TUTORIAL_DIR.glob("*.md"), key=lambda p: (p.name != "index.md", p.name))
DOCUMENTS = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").rglob("*.md") if TUTORIAL_DIR not in p.parents),
]
_FENCE = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*(not-run|file|tested as written):\s*(\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    document: Path
    line: int
    language: str
    code: str
    skip_reason: str | None = None
    path: str | None = None  # the project file this block is
    files: tuple[tuple[str, str], ...] = ()  # project files of earlier blocks

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Snippet]:
    """Every fenced block of the document, in order, with its marker."""
    text = document.read_text(encoding="utf-8")
    found: list[Snippet] = []
    files: list[tuple[str, str]] = []
    for match in _FENCE.finditer(text):
        language, code = match.group(1), match.group(2)
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.search(before)
        kind, value = marker.groups() if marker else (None, None)
        line = text.count("\n", 0, match.start()) + 1
        skip = value if kind == "not-run" else None
        if kind == "tested as written":
            skip = f"run by {value}" if (ROOT / str(value)).is_file() else None
        found.append(
            Snippet(
                document, line, language, code, skip_reason=skip,
                path=value if kind == "file" else None, files=tuple(files),
            )
        )  # fmt: skip
        if kind == "file" and value is not None:
            files.append((value, code))
    return found


def snippets(document: Path) -> list[Snippet]:
    """The document's Python blocks and project files, each with the files before it."""
    return [s for s in blocks(document) if s.language == "python"]


ALL = [s for doc in DOCUMENTS for s in snippets(doc)]


def test_the_readme_has_python_snippets_to_run() -> None:
    assert [s for s in ALL if s.document.name == "README.md" and s.skip_reason is None]


@pytest.mark.parametrize("snippet", ALL, ids=[s.name for s in ALL])
def test_snippet_runs_as_written(snippet: Snippet, tmp_path: Path) -> None:
    if snippet.skip_reason is not None:
        pytest.skip(f"marked not-run: {snippet.skip_reason}")
    new_project(tmp_path)
    for path, code in snippet.files:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(code, encoding="utf-8")
    env = _env()  # as in an activated virtual environment: `agentq` is on the PATH
    before = _contents(tmp_path)
    for run in ("first", "second"):
        proc = subprocess.run(
            [sys.executable, "-c", snippet.code], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert proc.returncode == 0, f"{snippet.name} failed its {run} run:\n{proc.stderr[-4000:]}"
        if _contents(tmp_path) == before:
            break  # it left nothing behind (an in-memory database): a second run is the same


def test_the_tutorial_is_there_to_run() -> None:
    steps = [s for page in TUTORIAL for s in blocks(page)]
    assert TUTORIAL[0].name == "index.md" and len(TUTORIAL) >= 7
    assert len([s for s in steps if s.language == "python" and not s.path]) >= 5


@pytest.mark.slow
def test_the_tutorial_runs_in_order_in_one_empty_folder(tmp_path: Path) -> None:
    env = _env()
    ran = 0
    for page in TUTORIAL:
        for block in blocks(page):
            if block.path is not None:
                (tmp_path / block.path).parent.mkdir(parents=True, exist_ok=True)
                (tmp_path / block.path).write_text(block.code, encoding="utf-8")
                continue
            if block.skip_reason is not None or block.language not in ("python", "sh"):
                continue
            argv = ([sys.executable, "-c", block.code] if block.language == "python"
                    else ["bash", "-e", "-c", block.code])  # fmt: skip
            proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=180)  # fmt: skip
            assert proc.returncode == 0, (
                f"{block.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            )
            ran += 1
    assert ran >= 8


def _env() -> dict[str, str]:
    """The environment of a reader's shell: agentq on the PATH, no AGENTQ_ settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTQ_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _contents(folder: Path) -> set[str]:
    """The files in ``folder``, but Python's byte-code caches."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}
