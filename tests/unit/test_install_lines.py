"""The install lines of the README and the docs work today (issue 39, 2.6):
``agentq-runtime`` is not on the package index before its first release, so
``pip install 'agentq-runtime[ui]'`` failed for every new user. Each ``pip
install`` there installs agentq from a checkout or a built wheel, and the
README says the index name is reserved for the first release."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: ``pip install`` and its arguments, up to the end of the inline code, a comment
#: or the next command.
_PIP = re.compile(r"pip install((?:[ \t]+(?:'[^']*'|\"[^\"]*\"|[^\s`'\"#&;|)]+))+)")
_WORD = re.compile(r"'[^']*'|\"[^\"]*\"|\S+")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _targets(arguments: str) -> list[str]:
    """The install targets, as written (quotes kept)."""
    out, skip = [], False
    for word in _WORD.findall(arguments):
        if skip:
            skip = False
        elif word in ("-r", "-c", "--find-links", "-f", "--index-url", "-i"):
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def _bad(target: str) -> str | None:
    """Why ``target`` does not install agentq as a new user can, or None."""
    bare = target.strip("'\"")
    name = re.split(r"[\[<>=!~ ]", bare, maxsplit=1)[0].lower().replace("_", "-")
    if name == "agentq-runtime":
        return "from the package index, where agentq-runtime is not yet"
    if "*" in target and target[0] in "'\"":
        return "a quoted glob: the shell does not expand it and pip does not either"
    return None


def _install_lines() -> list[tuple[str, str]]:
    """Each ``pip install`` of the README and the docs: in fenced blocks line by
    line, in inline code across the line breaks of the prose."""
    found = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        where = str(doc.relative_to(ROOT))
        for block in _FENCE.findall(text):
            found += [(where, m.group(0)) for line in block.splitlines()
                      for m in _PIP.finditer(line)]  # fmt: skip
        for span in re.findall(r"`([^`]+)`", _FENCE.sub("", text)):
            found += [(where, m.group(0)) for m in _PIP.finditer(" ".join(span.split()))]
    return found


def _refused(line: str) -> bool:
    return any(_bad(target) for target in _targets(line.removeprefix("pip install")))


def test_the_pattern_tells_the_forms_apart() -> None:
    bad = ["pip install 'agentq-runtime[ui]'", "pip install agentq-runtime",
           "pip install -U 'agentq_runtime[http]'", "pip install 'dist/agentq_runtime-*.whl[ui]'"]
    good = ["pip install '.[ui]'", "pip install -e '.[dev,all]'",
            "pip install '/path/to/agentq[ui]'", "pip install build",
            "pip install 'dist/agentq_runtime-0.1.0-py3-none-any.whl[ui]'",
            "pip install /tmp/agentq_runtime-*.whl"]  # fmt: skip
    assert [t for t in bad if not _refused(t)] == []
    assert [t for t in good if _refused(t)] == []


def test_every_install_line_installs_from_a_checkout_or_a_wheel() -> None:
    lines = _install_lines()
    assert len(lines) > 10, lines  # the pattern finds them
    bad = [f"{where}: {line} ({why})" for where, line in lines
           for why in map(_bad, _targets(line.removeprefix("pip install"))) if why]  # fmt: skip
    assert bad == []


def test_the_readme_leads_with_a_checkout_and_says_the_index_name_waits() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(line for where, line in _install_lines() if where == "README.md")
    target = _targets(first.removeprefix("pip install"))[0].strip("'\"")
    assert target.startswith((".", "/", "dist/")), first
    assert "reserved for the first release" in " ".join(readme.split())
