"""What durable agent runs may spend (``[agents.NAME]``, ``[prices.MODEL]``, ``[owners.NAME]``).

A run's budget is its agent's (``Agent(max_turns=..., max_tokens=...)``) unless
a policy sets it: the deployment, not the code, has the last word. A cost is
counted only for a model with a price; an owner's daily budget adds up every
run the owner started (the day is UTC's, as the database's clock reads it). A
run over any of them ends ``failed``, the reason naming the budget, its pending
tasks and timers cancelled in the same transaction.
"""

from __future__ import annotations

from pydantic import Field

from agentq.policies.base import Strict

__all__ = ["AgentBudget", "ModelPrice", "OwnerBudget"]


class AgentBudget(Strict):
    """One agent's budget per run (``[agents.refund_agent]``)."""

    max_turns: int | None = Field(default=None, ge=1, le=100_000)
    """Most model turns a run may take."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens (prompt and completion, every turn) a run may use."""
    max_cost: float | None = Field(default=None, gt=0)
    """Most a run may cost, in the currency of ``[prices]`` (needs its model's price)."""


class ModelPrice(Strict):
    """A model's price per million tokens (``[prices."gpt-4.1-mini"]``), named as the
    endpoint names the model in its answers (or as the agent asks for it)."""

    prompt: float = Field(ge=0)
    """Price of a million prompt tokens."""
    completion: float = Field(ge=0)
    """Price of a million completion tokens."""


class OwnerBudget(Strict):
    """What one owner's runs may use together per UTC day (``[owners.support-bot]``)."""

    max_tokens_per_day: int | None = Field(default=None, ge=1)
    """Most tokens the owner's runs may use in a day."""
    max_cost_per_day: float | None = Field(default=None, gt=0)
    """Most the owner's runs may cost in a day (models with a price only)."""
