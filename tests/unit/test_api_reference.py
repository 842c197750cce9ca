"""The API reference documents every public name (docs/reference/).

``docs/reference/api.md`` lists each name of ``agentq.__all__`` as a
mkdocstrings directive (``::: agentq.NAME``), grouped by hand; this fails when a
name is added to ``__all__`` and not to the page, or left on the page after it
left ``__all__``. The modules documented whole (``agentq.testing``,
``agentq.agents``, the adapters) are checked here to have their page; the built
site's test (tests/acceptance/test_docs_site.py) checks that every one of their
public names was rendered.
"""

from __future__ import annotations

import re
from pathlib import Path

import agentq

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference"
_DIRECTIVE = re.compile(r"^::: ([\w.]+)\s*$", re.M)

#: Modules whose reference is their whole public surface, and the page it is on.
MODULE_PAGES = {
    "agentq.testing": "testing.md",
    "agentq.agents": "agents.md",
    "agentq.adapters.pydantic_ai": "adapters.md",
    "agentq.adapters.pydantic_ai_durable": "adapters.md",
    "agentq.adapters.pydantic_ai_messages": "adapters.md",
    "agentq.adapters.openai_agents": "adapters.md",
    "agentq.adapters.langchain": "adapters.md",
    "agentq.adapters.calls": "adapters.md",
    "agentq.adapters.durable_turns": "adapters.md",
    "agentq.adapters.openai_agents_durable": "adapters.md",
    "agentq.adapters.openai_agents_session": "adapters.md",
    "agentq.adapters.openai_agents_state": "adapters.md",
    "agentq.adapters.langgraph_checkpoint": "adapters.md",
    "agentq.adapters.langgraph_steps": "adapters.md",
    "agentq.adapters.langgraph_starts": "adapters.md",
    "agentq.adapters.langgraph_records": "adapters.md",
    "agentq.adapters.langgraph_threaded": "adapters.md",
    "agentq.adapters.langgraph_stored": "adapters.md",
}


def _directives(page: str) -> list[str]:
    return _DIRECTIVE.findall((REFERENCE / page).read_text(encoding="utf-8"))


def test_every_name_in_agentq_all_is_on_the_api_page_once() -> None:
    documented = [name.removeprefix("agentq.") for name in _directives("api.md")]
    assert sorted(documented) == sorted(agentq.__all__)


def test_each_public_module_has_its_reference_page() -> None:
    missing = [module for module, page in MODULE_PAGES.items() if module not in _directives(page)]
    assert missing == []


def test_every_adapter_module_is_in_the_reference() -> None:
    adapters = sorted(
        f"agentq.adapters.{p.stem}"
        for p in (ROOT / "agentq" / "adapters").glob("*.py")
        if not p.name.startswith("_")
    )
    assert [m for m in adapters if m not in MODULE_PAGES] == []
