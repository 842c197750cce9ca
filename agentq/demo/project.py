"""Where ``agentq demo`` finds its own tools and policy: never in the user's folder.

The refund bot's tools and policy have one source: the repository's top-level
``tools/`` and ``policies/`` folders, the example project users copy. A built
wheel carries a copy of them as package data under ``agentq/demo/project/``
(``setup.py`` copies them at build time), so a plain ``pip install`` has them.
An editable install of a source checkout has no such copy and reads the
checkout's folders, which are the same files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agentq.errors import ConfigError

__all__ = ["DemoProject", "demo_project", "find_project_dir", "project_dirs"]

#: The installed copy, written by the build (see ``setup.py``).
SHIPPED = Path(__file__).resolve().parent / "project"
#: A source checkout's root: ``agentq/demo/project.py`` -> the repository.
CHECKOUT = Path(__file__).resolve().parents[2]
#: A file the refund bot's tools folder must hold, to tell it from any ``tools/``.
_MARKER = "refunds.py"


@dataclass(frozen=True)
class DemoProject:
    """The refund bot's tools folder and policies folder."""

    tools: Path
    policies: Path


def demo_project() -> DemoProject:
    """The refund bot shipped with agentq: the package's copy, else the source
    checkout's. The current directory is never consulted."""
    checkout = [CHECKOUT] if (CHECKOUT / "pyproject.toml").is_file() else []
    for root in (SHIPPED, *checkout):
        tools, policies = root / "tools", root / "policies"
        if (tools / _MARKER).is_file() and any(policies.glob("*.toml")):
            return DemoProject(tools=tools, policies=policies)
    raise ConfigError(
        f"the demo's refund-bot project is not installed (looked in {SHIPPED} and "
        f"{CHECKOUT}): reinstall agentq, or pass --tools and --policies"
    )


def find_project_dir(name: str, given: str | None) -> Path:
    """``tools/`` or ``policies/``: as given, else in the current directory, else
    beside the agentq package (a source checkout)."""
    candidates = [Path(given)] if given else [Path.cwd() / name, Path(__file__).parents[2] / name]
    for path in candidates:
        if path.is_dir():
            return path
    raise ConfigError(
        f"cannot find the {name}/ folder (looked in {', '.join(str(c) for c in candidates)}); "
        f"run from the project directory or pass --{name} PATH"
    )


def project_dirs(tools: str | None, policies: str | None) -> tuple[Path, Path]:
    """Folders given explicitly, else the demo's own (never the current folder's)."""
    if tools and policies:
        return find_project_dir("tools", tools), find_project_dir("policies", policies)
    own = demo_project()
    return (
        find_project_dir("tools", tools) if tools else own.tools,
        find_project_dir("policies", policies) if policies else own.policies,
    )
