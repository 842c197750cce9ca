"""What users read names only what they can look up.

Earlier text cited a design document and numbered "seeds" (background
material of the project's authors) that are not in the repository: every
docstring, comment, example, tool, policy, README and docs page, and the CLI's
help must do without them, and every relative link in the README and docs/
must lead to a file that exists.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from agentq.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
JARGON = re.compile(r"\bseeds?\s+\d{3}\b|\bseeds/|\bDESIGN\.md\b", re.I)
READ_BY_USERS = ["agentq/**/*.py", "tools/*.py", "policies/*.toml", "examples/*.py",
                 "notebooks/*.ipynb", "README.md", "CHANGELOG.md", "docs/**/*.md"]  # fmt: skip
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _files() -> list[Path]:
    return sorted({p for pattern in READ_BY_USERS for p in ROOT.glob(pattern)})


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += _help_texts(sub)
    return texts


def test_no_file_users_read_cites_seeds_or_the_design_document() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _files()
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if JARGON.search(line)
    ]
    assert found == []


def test_the_cli_help_cites_no_seeds() -> None:
    texts = _help_texts(build_parser())
    assert len(texts) > 3
    assert [t for t in texts if JARGON.search(t)] == []


def test_relative_links_in_the_readme_and_docs_lead_somewhere() -> None:
    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target in _LINK.findall(doc.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


# The package index's ``agentq`` is someone else's project: every hint that installs
# agentq names its distribution, ``agentq-runtime``. Built from pieces so that this
# file does not match itself.
_OURS = "agentq"
_FOREIGN_INSTALL = re.compile(
    r"install\s+(?:--?\S+\s+)*['\"]?" + _OURS + r"\[|(?<![\w./-])" + _OURS + r"\[[a-z][a-z,-]*\]"
)
_SCANNED = {".py", ".md", ".toml", ".ipynb", ".txt", ".cfg", ".html", ".yml", ".yaml", ".in"}
_SKIPPED_DIRS = {".git", ".venv", "venv", "build", "dist", "__pycache__", "node_modules", "output"}


def _tree() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        here = Path(folder)
        # Not into virtual environments inside the checkout (.ci/run makes
        # .ci-venv there): 14,000 other projects' files were scanned in CI's clone.
        dirs[:] = [
            d for d in dirs
            if d not in _SKIPPED_DIRS and not d.endswith(".egg-info")
            and not (here / d / "pyvenv.cfg").exists()
        ]  # fmt: skip
        for name in files:
            path = here / name
            if path.suffix in _SCANNED or path.relative_to(ROOT).parts[0] == ".ci":
                found.append(path)
    return found


def test_the_pattern_catches_each_form_of_the_foreign_install() -> None:
    bad = ["pip install " + _OURS + "[ui]", "pip install '" + _OURS + "[http]'",
           'pip install "' + _OURS + '[mcp]"', "pip install -U '" + _OURS + "[metrics]'",
           "(``" + _OURS + "[notebook]``)", '"' + _OURS + '[spanner,http]"']  # fmt: skip
    good = ["pip install 'agentq-runtime[ui]'", "agentq-runtime[http]", "pip install -e '.[ui]'",
            "modules['agentq']", "pip install agentq-runtime"]  # fmt: skip
    assert [t for t in bad if not _FOREIGN_INSTALL.search(t)] == []
    assert [t for t in good if _FOREIGN_INSTALL.search(t)] == []


def test_every_install_hint_names_the_agentq_runtime_distribution() -> None:
    files = _tree()
    assert ROOT / "pyproject.toml" in files and ROOT / "README.md" in files
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _FOREIGN_INSTALL.search(line)
    ]
    assert found == []


def test_the_cli_help_names_the_agentq_runtime_distribution() -> None:
    texts = _help_texts(build_parser())
    assert [t for t in texts if _FOREIGN_INSTALL.search(t)] == []
    assert any("agentq-runtime[http]" in t for t in texts)
