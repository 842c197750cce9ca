"""The documentation site builds, and what points into it leads somewhere.

The site is built once (both tests in one xdist group), as ``.ci/run`` builds it
(``mkdocs build --strict``, into a temporary folder), and then:

* every relative link of the README (the landing page on the repository and on
  the package index) names a page the site has, and its ``#anchor`` an id on
  that page: the README links to ``docs/X.md``, which the site serves as
  ``X/index.html``;
* every public name of ``agentq``, ``agentq.testing``, ``agentq.agents`` and
  the adapters has its entry (an element with its dotted name as id) in the
  rendered API reference: a name mkdocstrings skipped would not.

Needs the ``docs`` extra (part of ``all``); without it the tests skip, and fail
when ``CI`` is set.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# One xdist group: both tests read the one site the module builds (mkdocs, seconds
# of CPU), which pytest-xdist would otherwise build in each worker that runs one.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("docs_site")]
ROOT = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"\]\(([^)\s]+)\)")
PUBLIC_MODULES = ["agentq", "agentq.testing", "agentq.agents", "agentq.adapters.pydantic_ai",
                  "agentq.adapters.pydantic_ai_durable", "agentq.adapters.pydantic_ai_messages",
                  "agentq.adapters.openai_agents", "agentq.adapters.openai_agents_durable",
                  "agentq.adapters.openai_agents_session", "agentq.adapters.openai_agents_state",
                  "agentq.adapters.durable_turns", "agentq.adapters.langchain",
                  "agentq.adapters.calls"]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import mkdocstrings  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("the docs extra is not installed: pip install -e '.[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    return out


def _page(site: Path, target: str) -> Path:
    """The built file of a ``docs/``-relative Markdown page (directory URLs)."""
    stem = target.removesuffix(".md")
    if stem == "index" or stem.endswith("/index"):
        return site / f"{stem}.html"
    return site / stem / "index.html"


def test_every_readme_link_resolves_in_the_built_site(site: Path) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [t for t in _LINK.findall(readme) if "://" not in t]
    assert links, "the README links into the site"
    broken = []
    for target in links:
        path, _, anchor = target.partition("#")
        if not path.startswith("docs/") or not path.endswith(".md"):
            broken.append(f"{target}: not a page of the site (docs/*.md)")
            continue
        page = _page(site, path.removeprefix("docs/"))
        if not page.is_file():
            broken.append(f"{target}: no {page.relative_to(site)}")
        elif anchor and f'id="{anchor}"' not in page.read_text(encoding="utf-8"):
            broken.append(f"{target}: no #{anchor} on {page.relative_to(site)}")
    assert broken == []


def test_every_public_name_is_rendered_in_the_api_reference(site: Path) -> None:
    html = "".join(p.read_text(encoding="utf-8") for p in (site / "reference").rglob("*.html"))
    missing = []
    for name in PUBLIC_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError as missing_extra:  # an adapter's framework is an extra
            if os.environ.get("CI"):
                raise
            pytest.skip(f"{name}: {missing_extra}")
        missing += [f"{name}.{n}" for n in module.__all__ if f'id="{name}.{n}"' not in html]
    assert missing == []
