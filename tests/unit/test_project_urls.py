"""The package's metadata and a new project's README point into the documentation site."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from agentq.demo.scaffold import TUTORIAL_URL, new_project

ROOT = Path(__file__).resolve().parents[2]


def _urls() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    urls: dict[str, str] = project["urls"]
    return urls


def test_the_metadata_names_the_documentation_the_source_and_the_changelog() -> None:
    urls = _urls()
    assert {"Documentation", "Source", "Changelog"} <= set(urls)
    assert urls["Changelog"].startswith(urls["Source"]) and urls["Changelog"].endswith(
        "CHANGELOG.md"
    )
    # The site's own address is the one the metadata gives (mkdocs.yml's site_url).
    site = re.search(r"^site_url: (\S+)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert site and site[1] == urls["Documentation"]


def test_a_new_projects_readme_points_at_the_tutorial(tmp_path: Path) -> None:
    assert _urls()["Documentation"] + "tutorial/" == TUTORIAL_URL
    assert (ROOT / "docs" / "tutorial" / "index.md").is_file()
    new_project(tmp_path / "bot")
    assert TUTORIAL_URL in (tmp_path / "bot" / "README.md").read_text(encoding="utf-8")
