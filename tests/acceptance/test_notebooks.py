"""Notebooks are executed top to bottom; a failing cell fails the test."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXPECTED = {
    "refund_bot.ipynb": ["escalated", "succeeded"],
    "benchmark.ipynb": ["plotted 9 throughput figures", "raw_commits_per_s"],
}


def test_every_notebook_has_expectations() -> None:
    assert {p.name for p in NOTEBOOKS} == set(EXPECTED)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT / "notebooks")}},
    ).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(
        str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs
    )
    for expected in EXPECTED[path.name]:
        assert expected in text
