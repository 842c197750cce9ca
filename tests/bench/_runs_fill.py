"""The durable runs of ``listing.py``'s runs kinds: a few runs of a rare agent,
then many of another, written through the backend as this version writes them."""

from __future__ import annotations


def fill_runs(url: str, others: int, own: int) -> None:
    """``own`` runs of rare_agent's (the oldest), then ``others`` of
    support_agent's, all succeeded, written through the backend (its columns
    as this version writes them)."""
    from agentq.backends import open_backend
    from agentq.ids import new_run_id

    talk = [{"role": "user", "content": "Where is my order?"},
            {"role": "assistant", "content": "It ships tomorrow. " * 10}]  # fmt: skip
    b = open_backend(url)
    try:
        for first in range(0, own + others, 1000):
            b.transact(lambda tx, f=first: [tx.put_record("runs", run_id, {
                "run_id": run_id, "agent": "rare_agent" if f + i < own else "support_agent",
                "owner": "ops", "input": talk[0]["content"], "status": "succeeded", "turn": 1,
                "messages": talk, "output": talk[1]["content"],
                "created_at": "2026-01-01T00:00:00+00:00",
                "updated_at": "2026-01-01T00:00:00+00:00"})
                for i in range(min(1000, own + others - f))
                for run_id in [new_run_id(b.clock.now())]])  # fmt: skip
    finally:
        b.close()
