"""A durable agent run as its record says: :class:`RunInfo`, its turns and calls.

A run is one conversation of an agent with a model, carried forward by workers
one *turn* at a time (:mod:`agentq.lifecycle.runs` owns its states; the turn's
model call is :mod:`agentq.agents`'). Everything here is what a reader sees: the
Python API returns it, the HTTP API serves it, the console and the CLI show it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agentq.statuses import RunStatus

__all__ = ["RUN_TERMINAL", "CallInfo", "RunInfo", "RunStatus", "TurnInfo", "Usage"]


#: Statuses after which nothing happens to a run unless a user writes to it again.
RUN_TERMINAL = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED})


class Usage(BaseModel):
    """Tokens a model reported (a turn's, or a run's total)."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    #: What the tokens cost by the policy's ``[prices]`` (None: no price known).
    cost: float | None = None


class CallInfo(BaseModel):
    """One tool call of a turn, in the order the model gave them.

    ``task_id`` is the agentq task that runs it (its idempotency key is the run
    id, the turn and ``position``, never the provider's ``call_id``); a *local*
    call ran inside the turn's own transaction and has its ``result`` here. A
    call the runtime refused (unknown tool, invalid arguments, not one of the
    agent's tools) has ``error`` and no task: the model is told, not obeyed."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    position: int
    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    call_id: str = ""
    task_id: str | None = None
    local: bool = False
    result: Any = None
    error: str | None = None


class TurnInfo(BaseModel):
    """One committed model turn: what was asked, what came back, what it cost."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    number: int
    task_id: str
    #: How many of the run's messages the model was sent (the request is the
    #: agent's instructions and ``messages[:messages_sent]``).
    messages_sent: int
    content: str | None = None
    calls: list[CallInfo] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    latency_ms: float | None = None
    model: str | None = None


class RunInfo(BaseModel):
    """A durable agent run as its record says."""

    # Its schema is built on first use: a worker never needs it (start-up cost).
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)

    run_id: str
    agent: str
    owner: str
    input: str
    status: RunStatus
    #: The turn the run is at: the one queued or running, or the last committed.
    turn: int
    turns: list[TurnInfo] = Field(default_factory=list)
    #: The conversation in OpenAI chat format (user, assistant, tool messages).
    messages: list[dict[str, Any]] = Field(default_factory=list)
    #: Tasks of the last turn not finished yet.
    pending: list[str] = Field(default_factory=list)
    output: str | None = None
    error: str | None = None
    usage: Usage = Field(default_factory=Usage)
    idempotency_key: str | None = None
    created_at: datetime
    updated_at: datetime
    #: The task of the queued or running turn, if any.
    turn_task_id: str | None = None

    @property
    def done(self) -> bool:
        """Whether the run is succeeded, failed or cancelled."""
        return self.status in RUN_TERMINAL

    @property
    def idle(self) -> bool:
        """Whether no worker has anything to do for it until someone acts: it is
        done, or it waits for a human's approval."""
        return self.done or self.status is RunStatus.AWAITING_APPROVAL

    def _repr_html_(self) -> str:
        from agentq.notebook.html import run_html

        return run_html(self)
