"""An agent definition: :class:`Agent`, the model it asks and the tools it may call.

An agent is declared once, in code every worker loads (a tools folder, or
``Runtime(..., agents=[...])``). Its turns run as tasks of an internal tool
named ``agent_turn_<name>``: retries with backoff, ``Retry-After``, leases,
rate limits and the dead-letter queue are the task machinery's, and a policy's
``[tools.agent_turn_<name>]`` section configures them like any tool's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pydantic import BaseModel, ConfigDict

from agentq.agents.model import ChatModel
from agentq.errors import ConfigError

__all__ = ["TURN_TOOL_PREFIX", "Agent", "TurnArgs", "turn_tool_name"]

#: Every agent's turn tool is named this and the agent's name.
TURN_TOOL_PREFIX: Final = "agent_turn_"

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,62}")


def turn_tool_name(agent: str) -> str:
    """The internal tool whose tasks are ``agent``'s turns."""
    return TURN_TOOL_PREFIX + agent


class TurnArgs(BaseModel):
    """A turn task's arguments: which run, which turn."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(extra="forbid", defer_build=True)

    run_id: str
    turn: int


@dataclass(frozen=True)
class Agent:
    """A model, its instructions, and the agentq tools it may call.

    ``tools``: the names of the tools the model is offered (None: every visible
    tool the runtime knows); a call of any other is refused and the model is
    told so. ``max_turns`` and ``max_tokens`` are the run's budget (a run over
    it ends ``failed`` with the reason, its pending tasks cancelled). ``queue``
    is where its turns wait for a worker; ``timeout`` bounds one model request
    and ``max_attempts`` how often a failing turn is tried before the run fails.
    """

    name: str
    model: ChatModel
    instructions: str = ""
    tools: Sequence[str] | None = None
    max_turns: int | None = 20
    max_tokens: int | None = None
    queue: str = "agent_turns"
    timeout: float = 120.0
    max_attempts: int = 5
    #: Marks an agent among a tools module's values (agentq.tools.registry finds it).
    __agentq_agent__: bool = field(default=True, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"invalid agent name {self.name!r}: a letter, then letters, digits or _"
            )
        for label, value in (("max_turns", self.max_turns), ("max_tokens", self.max_tokens)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):  # fmt: skip
                raise ConfigError(f"agent {self.name!r}: {label} must be a positive integer")
        if isinstance(self.tools, str):
            raise ConfigError(f"agent {self.name!r}: tools is a list of tool names")
        if not 1 <= self.max_attempts <= 100:
            raise ConfigError(f"agent {self.name!r}: max_attempts must be from 1 to 100")

    @property
    def turn_tool(self) -> str:
        """The internal tool whose tasks are this agent's turns."""
        return turn_tool_name(self.name)

    def budget(self) -> dict[str, Any]:
        """The run budget recorded with each new run."""
        return {"max_turns": self.max_turns, "max_tokens": self.max_tokens}
