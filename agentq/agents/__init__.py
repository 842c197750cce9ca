"""Durable agent runs: an agent's model turns as leased tasks (see ``docs/how-to/agents.md``).

* :class:`Agent` — a model, its instructions, the tools it may call, its budget;
* :class:`OpenAICompatibleModel` — any chat-completions endpoint over httpx;
* :mod:`.turn` — one turn: ask the model, commit its answer and calls with the ack.

A run's states and joins are :mod:`agentq.lifecycle.runs`'.
"""

from agentq.agents.agent import TURN_TOOL_PREFIX, Agent, TurnArgs, turn_tool_name
from agentq.agents.model import ChatModel, ModelAnswer, OpenAICompatibleModel, ToolCall
from agentq.agents.turn import turn_tool

__all__ = [
    "TURN_TOOL_PREFIX",
    "Agent",
    "ChatModel",
    "ModelAnswer",
    "OpenAICompatibleModel",
    "ToolCall",
    "TurnArgs",
    "turn_tool",
    "turn_tool_name",
]
