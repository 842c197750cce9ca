"""AgentQSaver, the LangGraph checkpointer on agentq's backends: LangGraph's own
conformance suite (langgraph-checkpoint-conformance), a real StateGraph resumed
by a second runtime over the same database, and a node's agentq tasks
committing with its writes, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.surfaces._extras import require

require("langgraph", "langchain")
conformance = require("langgraph.checkpoint.conformance", "langchain")

from agentq import Runtime
from agentq.adapters.langgraph_checkpoint import AgentQSaver


def test_langgraphs_own_conformance_suite_passes(rt: Runtime) -> None:
    """Every capability the suite finds AgentQSaver implementing passes, and the
    base ones (put, put_writes, get_tuple, list, delete_thread) are all there."""

    @conformance.checkpointer_test(name="AgentQSaver")
    async def saver() -> AsyncIterator[AgentQSaver]:
        yield AgentQSaver(rt)

    report = asyncio.run(conformance.validate(saver))
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base(), report.results
