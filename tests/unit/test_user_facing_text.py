"""What users read names only what they can look up.

Earlier text cited a design document and numbered "seeds" (background
material of the project's authors) that are not in the repository: every
docstring, comment, example, tool, policy, README and docs page, and the CLI's
help must do without them, and every relative link in the README and docs/
must lead to a file that exists.
"""

from __future__ import annotations

import argparse
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
