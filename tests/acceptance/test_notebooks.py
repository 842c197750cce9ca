"""Notebooks are executed top to bottom and what they show is checked: a failing cell,
a missing inline plot, a missing HTML view or missing key text fails the test.

They are committed with their outputs (so they read well on a code host): the stored
files are checked for outputs too, and for imports a user could write (public modules
only, no path tricks to find a tools folder).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


class Shows:
    """What a notebook's outputs must contain."""

    def __init__(self, *text: str, images: int = 1, html: tuple[str, ...] = ()) -> None:
        self.text, self.images, self.html = text, images, html


EXPECTED = {
    "quickstart.ipynb": Shows(
        "handled 3 task(s) in 2 clock jump(s)", "flaky_greet", "succeeded",
        html=("task(s)</p>", "<caption>task ", "depth"),
    ),
    "approvals.ipynb": Shows(
        "escalated", "refunds charged: 2 - charged twice: 0", "escalations sent: 1",
        html=("approval(s)</p>", "<caption>approval ", "checked the order"),
    ),
    "chaos.ipynb": Shows(
        "SIGKILLed worker", "'task ids charged twice': 0", "'succeeded': 60", images=2,
        html=("5 task(s)</p>",),
    ),
    "benchmark.ipynb": Shows("plotted 11 throughput figures", "tasks_per_s_multi_queue", images=2),
}
#: Modules a notebook may import from agentq: the documented ones.
PUBLIC = {"agentq", "agentq.testing", "agentq.bench"}


def _outputs(nb: Any) -> list[Any]:
    return [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]


def _check_outputs(name: str, nb: Any) -> None:
    outputs = _outputs(nb)
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, [(e.get("ename"), e.get("evalue")) for e in errors]
    data = [o.get("data", {}) for o in outputs]
    text = "".join(str(o.get("text", "")) + str(d.get("text/plain", "")) for o, d in
                   zip(outputs, data, strict=True))  # fmt: skip
    html = "".join(str(d.get("text/html", "")) for d in data)
    expected = EXPECTED[name]
    for wanted in expected.text:
        assert wanted in text, f"{name}: {wanted!r} not in its output"
    for wanted in expected.html:
        assert wanted in html, f"{name}: {wanted!r} not in its HTML output"
    images = sum("image/png" in d for d in data)
    assert images >= expected.images, f"{name}: {images} inline image(s)"
    assert "<script" not in html


def test_every_notebook_has_expectations() -> None:
    assert {p.name for p in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_notebook_has_its_outputs_and_public_imports_only(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    _check_outputs(path.name, nb)
    assert path.stat().st_size < 150_000, "keep the stored notebook small (modest plots)"
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(
            line for line in cell.source.splitlines() if not line.lstrip().startswith("%")
        )
        assert "cwd().parent" not in source and "demo_server" not in source
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for module in names:
                if module.split(".")[0] == "agentq":
                    assert module in PUBLIC, f"{path.name} imports private {module}"


@pytest.mark.slow
@pytest.mark.timeout(400)  # the chaos notebook runs about 30 s, its own bound is 90 s
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_and_shows(path: Path, tmp_path: Path) -> None:
    """Run in a folder of the test's own, its temporary files there too: a run
    leaves nothing behind and the tracked file unchanged (issue 39, 2.12: the
    chaos and benchmark notebooks left their temporary folders)."""
    stored = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # the stored outputs must not satisfy the checks below
    temp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    temp.mkdir()
    cwd.mkdir()
    NotebookClient(
        nb,
        timeout=150,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
    ).execute(env={**os.environ, "TMPDIR": str(temp)})
    _check_outputs(path.name, nb)
    assert path.read_bytes() == stored
    assert sorted(p.name for p in cwd.iterdir()) == []
    left = sorted(p.name for p in temp.iterdir() if p.name.startswith(("agentq-", "tmp")))
    assert left == [], f"{path.name} left {left} in its temporary folder"


def test_stored_outputs_carry_no_local_paths() -> None:
    # A stored output must not leak this machine's temp folders or home directory.
    for path in NOTEBOOKS:
        text = path.read_text()
        assert not re.search(r"/home/|/root/", text), path.name


def test_the_docs_say_how_to_run_a_notebook_with_what_the_dev_extra_installs() -> None:
    """The command the testing guide gives must exist after `pip install -e '.[dev]'`:
    nbclient (a dev dependency) installs `jupyter execute`; nbconvert is not one."""
    import shutil
    import sys

    readme = (ROOT / "docs" / "how-to" / "testing.md").read_text(encoding="utf-8")
    assert "jupyter execute --inplace\nnotebooks/" in readme
    assert "nbconvert" not in readme
    assert shutil.which("jupyter-execute", path=str(Path(sys.executable).parent))
