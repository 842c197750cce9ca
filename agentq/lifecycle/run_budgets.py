"""What a durable run may spend, checked in the transaction that counts it.

A run's own budget (``max_turns``, ``max_tokens``, ``max_cost``) is in its
record, fixed when it starts (:func:`run_budget`: the policy's
``[agents.NAME]`` over the agent's code). An owner's daily budget
(``[owners.NAME]``) is a counter record per owner and UTC day, added to by
every turn's commit in the same transaction as the turn (two turns of one
owner committing at once are serialized by the database, as every record
write is). A turn that finds its owner over budget before it asks the model
asks nothing (:func:`owner_over_budget`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentq.backends import Transaction
from agentq.ledger import Tables
from agentq.policies import Policy

__all__ = [
    "count_owner_usage",
    "over_run_budget",
    "owner_day_key",
    "owner_limits",
    "owner_over_budget",
    "run_budget",
    "turn_cost",
]


def run_budget(policy: Policy, agent: str, coded: Mapping[str, Any]) -> dict[str, Any]:
    """A new run's budget: the agent's code's, each limit the policy sets over it."""
    budget = {k: v for k, v in coded.items() if v is not None}
    configured = policy.agents.get(agent)
    if configured is not None:
        budget.update(configured.model_dump(exclude_none=True))
    return budget


def turn_cost(policy: Policy, model: str | None, usage: Mapping[str, int]) -> float | None:
    """A turn's cost by the policy's price of ``model`` (None: no price known)."""
    price = policy.prices.get(model) if model else None
    if price is None:
        return None
    prompt, completion = int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))
    return round((prompt * price.prompt + completion * price.completion) / 1_000_000, 9)


def over_run_budget(rec: Mapping[str, Any]) -> str | None:
    """Why the run is over its own token or cost budget, or None."""
    budget = rec.get("budget") or {}
    usage = rec.get("usage") or {}
    max_tokens, used = budget.get("max_tokens"), int(usage.get("total_tokens", 0))
    if max_tokens is not None and used > int(max_tokens):
        return f"token budget exceeded: {used} tokens used, the budget is {max_tokens}"
    max_cost, cost = budget.get("max_cost"), float(usage.get("cost") or 0.0)
    if max_cost is not None and cost > float(max_cost):
        return f"cost budget exceeded: {cost:.4f} spent, the budget is {float(max_cost):.4f}"
    return None


def owner_limits(policy: Policy, owner: str) -> dict[str, Any] | None:
    """The owner's daily limits, if the policy sets any."""
    configured = policy.owners.get(owner)
    limits = configured.model_dump(exclude_none=True) if configured is not None else {}
    return limits or None


def owner_day_key(owner: str, now: datetime) -> str:
    """The key of an owner's usage record for the UTC day of ``now``."""
    return f"{len(owner)}:{owner}:{now.date().isoformat()}"


def owner_over_budget(used: Mapping[str, Any] | None, limits: Mapping[str, Any]) -> str | None:
    """Why an owner's day (``used``: its usage record) is over ``limits``, or None."""
    used = used or {}
    tokens, cost = int(used.get("total_tokens", 0)), float(used.get("cost") or 0.0)
    max_tokens = limits.get("max_tokens_per_day")
    if max_tokens is not None and tokens > int(max_tokens):
        return (f"owner's daily token budget exceeded: {tokens} used today, "
                f"the budget is {max_tokens}")  # fmt: skip
    max_cost = limits.get("max_cost_per_day")
    if max_cost is not None and cost > float(max_cost):
        return (f"owner's daily cost budget exceeded: {cost:.4f} spent today, "
                f"the budget is {float(max_cost):.4f}")  # fmt: skip
    return None


def count_owner_usage(
    tx: Transaction, owner: str, usage: Mapping[str, Any], limits: Mapping[str, Any]
) -> str | None:
    """Add a turn's usage to its owner's day, in the turn's transaction; returns
    why the owner is now over its daily budget, or None."""
    key = owner_day_key(owner, tx.now)
    day = tx.get_record(Tables.RUN_USAGE, key)
    day = day or {"owner": owner, "day": tx.now.date().isoformat()}
    tokens = int(day.get("total_tokens", 0)) + int(usage.get("total_tokens", 0))
    cost = float(day.get("cost") or 0.0) + float(usage.get("cost") or 0.0)
    day = {**day, "total_tokens": tokens, "cost": cost}
    tx.put_record(Tables.RUN_USAGE, key, day)
    return owner_over_budget(day, limits)
