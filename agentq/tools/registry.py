"""The tools a runtime knows, by name (:class:`ToolRegistry`): registered from
decorated functions or imported from a tools folder (:mod:`agentq.toolfiles`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentq.errors import ConfigError, UnknownTool
from agentq.toolfiles import load_tool_modules
from agentq.tools.definition import ToolDef, attached

__all__ = ["ToolRegistry", "unknown_tool"]


def unknown_tool(name: str, known: Iterable[str], what: str = "known") -> str:
    """The message for a tool ``name`` that is none of ``known``, with the closest."""
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"unknown tool {name!r}{hint}; {what}: {', '.join(names) or 'none'}"


def _is_agent(value: object) -> bool:
    """Whether a tools module's value is a durable agent (an instance, not the class)."""
    return getattr(value, "__agentq_agent__", False) is True and not isinstance(value, type)


class ToolRegistry:
    """The tools a runtime knows, by name."""

    def __init__(self, tools: Iterable[ToolDef] = ()) -> None:
        self._tools: dict[str, ToolDef] = {}
        #: Durable agents (:class:`agentq.agents.Agent`) found in a tools folder,
        #: by name; the runtime registers their turn tools.
        self.agents: dict[str, Any] = {}
        for t in tools:
            self.add(t)

    def add(self, definition: ToolDef | Callable[..., Any]) -> ToolDef:
        """Register a :class:`ToolDef` or a function decorated with :func:`agentq.tool`."""
        if not isinstance(definition, ToolDef):
            found = attached(definition)
            if found is None:
                raise ConfigError(f"{definition!r} is not decorated with @agentq.tool")
            definition = found
        existing = self._tools.get(definition.name)
        if existing is not None and existing.handler is not definition.handler:
            raise ConfigError(f"tool {definition.name!r} is defined twice")
        self._tools[definition.name] = definition
        return definition

    def load_dir(self, path: str | Path, *, reload: bool = False) -> list[ToolDef]:
        """Import the tools folder ``path`` and register its tools: every ``*.py``
        directly in it whose name does not start with ``_`` (those are helpers).

        The folder's code is imported again when a file in it changed since it
        was last loaded in this process, or when ``reload`` is true (see
        :mod:`agentq.toolfiles`)."""
        found: list[ToolDef] = []
        for module in load_tool_modules(path, reload=reload):
            for value in vars(module).values():
                definition = attached(value)
                if definition is not None and value is definition.handler:
                    found.append(self.add(definition))
                elif _is_agent(value):
                    self.add_agent(value)
        return found

    def add_agent(self, agent: Any) -> None:
        """Register a durable agent (an :class:`agentq.agents.Agent`) by its name."""
        existing = self.agents.get(agent.name)
        if existing is not None and existing is not agent:
            raise ConfigError(f"agent {agent.name!r} is defined twice")
        self.agents[agent.name] = agent

    def get(self, name: str) -> ToolDef:
        """The tool called ``name`` (UnknownTool lists the known ones)."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownTool(unknown_tool(name, self._tools)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Any:
        return iter(self._tools.values())

    def names(self) -> list[str]:
        """Sorted tool names."""
        return sorted(self._tools)

    def queues(self) -> set[str]:
        """Every queue a registered tool uses."""
        return {t.queue for t in self._tools.values()}

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style function schemas of every tool."""
        return [self._tools[n].schema() for n in self.names()]
