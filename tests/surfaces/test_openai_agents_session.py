"""AgentQSession: the OpenAI Agents SDK's Session protocol on agentq's records,
on SQLite, PostgreSQL and Spanner (the emulator, behind the queue stand-in).
The SDK ships no tests; these are the behaviours its SQLiteSession tests check
(basic operations, limits, pop, clear, isolation, settings, a runner with a
session), then agentq's own: one transaction per operation, items staged in a
caller's transaction, other processes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tests.surfaces._extras import require

require("agents", "openai-agents")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from agentq import Runtime, ToolContext, tool
from agentq.adapters.openai_agents_session import ITEMS, AgentQSession
from agentq.scripted_model import ScriptedModel
from agentq.scripted_replies import ModelRequest, Reply

set_tracing_disabled(True)  # no trace export: the tests reach no network


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


@pytest.fixture(params=["sqlite", "postgresql", "spanner"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One implementation over the backend contract: every backend runs it."""
    if request.param == "postgresql":
        return str(request.getfixturevalue("postgres_url"))
    if request.param == "spanner":
        if not os.environ.get("SPANNER_EMULATOR_BINARY") and not os.environ.get("CI"):
            pytest.skip("no Spanner emulator (SPANNER_EMULATOR_BINARY)")
        return str(request.getfixturevalue("emulator_database_factory")(False).url)
    return f"sqlite:///{tmp_path / 'sessions.db'}"


class Note(BaseModel):
    text: str


@tool(queue="notes")
def note(ctx: ToolContext, args: Note) -> None:
    """A tool, so that a runtime on a fresh Spanner database creates agentq's schema."""


@pytest.fixture
def rt(db_url: str) -> Iterator[Runtime]:
    with Runtime(db_url, tools=[note]) as runtime:
        yield runtime


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    return {"role": "assistant", "content": text}


def test_it_is_the_sdks_session(rt: Runtime) -> None:
    session = AgentQSession(rt, "s")
    assert isinstance(session, Session)
    assert session.session_id == "s"


def test_items_come_back_in_order_as_they_were_added(rt: Runtime) -> None:
    session = AgentQSession(rt, "basic")
    items: list[Any] = [
        user("Hello"), assistant("Hi there!"),
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]  # fmt: skip

    async def go() -> list[Any]:
        await session.add_items(items[:2])
        await session.add_items(items[2:])
        await session.add_items([])  # nothing
        return await session.get_items()

    assert run(go()) == items


def test_get_items_with_a_limit_gives_the_latest_in_order(rt: Runtime) -> None:
    session = AgentQSession(rt, "limits")

    async def go() -> dict[str, Any]:
        await session.add_items([user(f"m{i}") for i in range(5)])
        return {
            "2": await session.get_items(limit=2),
            "0": await session.get_items(limit=0),
            "10": await session.get_items(limit=10),
            "all": await session.get_items(),
        }

    got = run(go())
    assert [i["content"] for i in got["2"]] == ["m3", "m4"]
    assert got["0"] == []
    assert [i["content"] for i in got["10"]] == [f"m{i}" for i in range(5)]
    assert got["all"] == got["10"]


def test_session_settings_limit_is_the_default_and_an_explicit_limit_wins(rt: Runtime) -> None:
    session = AgentQSession(rt, "settings", session_settings=SessionSettings(limit=2))

    async def go() -> tuple[list[Any], list[Any]]:
        await session.add_items([user(f"m{i}") for i in range(4)])
        return await session.get_items(), await session.get_items(limit=3)

    default, explicit = run(go())
    assert [i["content"] for i in default] == ["m2", "m3"]
    assert [i["content"] for i in explicit] == ["m1", "m2", "m3"]


def test_pop_item_removes_and_returns_the_latest(rt: Runtime) -> None:
    session = AgentQSession(rt, "pop")

    async def go() -> list[Any]:
        out: list[Any] = [await session.pop_item()]  # empty: None
        await session.add_items([user("a"), assistant("b")])
        out.append(await session.pop_item())
        out.append(await session.get_items())
        await session.add_items([assistant("c")])  # numbered after the pop
        out.append(await session.get_items())
        out.append(await session.pop_item())
        out.append(await session.pop_item())
        out.append(await session.pop_item())
        out.append(await session.get_items())
        return out

    (empty, popped, after, added, c, a, none, last) = run(go())
    assert empty is None and popped == assistant("b")
    assert after == [user("a")]
    assert added == [user("a"), assistant("c")]
    assert (c, a, none, last) == (assistant("c"), user("a"), None, [])


def test_clear_session_empties_it_and_it_starts_again(rt: Runtime) -> None:
    session = AgentQSession(rt, "clear")

    async def go() -> tuple[list[Any], Any, list[Any]]:
        await session.add_items([user("a"), user("b")])
        await session.clear_session()
        cleared = await session.get_items()
        popped = await session.pop_item()
        await session.clear_session()  # clearing an empty session is fine
        await session.add_items([user("c")])
        return cleared, popped, await session.get_items()

    assert run(go()) == ([], None, [user("c")])
    assert rt.backend.list_records(ITEMS, "clear:") and len(rt.backend.list_records(ITEMS)) == 1


def test_sessions_are_independent_whatever_their_ids_hold(rt: Runtime) -> None:
    ids = ["a", "a:000000000000", "a:", "ü 会话 / 🙂"]
    sessions = [AgentQSession(rt, sid) for sid in ids]

    async def go() -> list[list[Any]]:
        for sid, session in zip(ids, sessions, strict=True):
            await session.add_items([user(f"for {sid}")])
        await sessions[0].clear_session()
        return [await s.get_items() for s in sessions]

    got = run(go())
    assert got[0] == []
    assert got[1:] == [[user(f"for {sid}")] for sid in ids[1:]]


def test_items_keep_unicode_and_nested_json(rt: Runtime) -> None:
    session = AgentQSession(rt, "json")
    item = {"role": "user", "content": [{"type": "input_text", "text": "héllo 🙂 \"quoted\"\n"}]}
    run(session.add_items([item]))  # type: ignore[list-item]
    assert run(session.get_items()) == [item]


def test_another_runtime_on_the_database_sees_the_same_conversation(
    rt: Runtime, db_url: str
) -> None:
    run(AgentQSession(rt, "shared").add_items([user("from process 1")]))
    with Runtime(db_url, tools=[note]) as other:
        session = AgentQSession(other, "shared")
        run(session.add_items([assistant("from process 2")]))
    assert run(AgentQSession(rt, "shared").get_items()) == [
        user("from process 1"), assistant("from process 2"),
    ]  # fmt: skip


def test_concurrent_adds_lose_nothing_and_keep_each_batch_together(rt: Runtime) -> None:
    session = AgentQSession(rt, "concurrent")

    async def go() -> list[Any]:
        batches = [[user(f"{n}-a"), user(f"{n}-b")] for n in range(8)]
        await asyncio.gather(*(session.add_items(b) for b in batches))
        return await session.get_items()

    got = [i["content"] for i in run(go())]
    assert sorted(got) == sorted(f"{n}-{x}" for n in range(8) for x in "ab")
    for n in range(8):
        assert got.index(f"{n}-b") == got.index(f"{n}-a") + 1


def test_items_staged_in_a_decision_commit_with_it_or_not_at_all(rt: Runtime) -> None:
    session = AgentQSession(rt, "staged")

    def fails(tx: Any) -> None:
        session.stage(tx, [user("never")])
        raise RuntimeError("the decision fails")

    with pytest.raises(RuntimeError):
        rt.transact(fails)
    assert run(session.get_items()) == []
    rt.transact(lambda tx: session.stage(tx, [user("kept")]))
    assert run(session.get_items()) == [user("kept")]


def test_a_runner_carries_the_conversation_across_runs(rt: Runtime) -> None:
    """The SDK's runner reads the session before each run and adds the run's items
    after it: the second run's request holds the first run's conversation."""
    seen: list[list[str]] = []

    def answer(request: ModelRequest) -> Reply:
        seen.append([str(m.get("content")) for m in request.messages])
        return Reply.text(f"answer {len(seen)}")

    with ScriptedModel(answer) as llm:
        session = AgentQSession(rt, "ticket-1")
        config = RunConfig(tracing_disabled=True)

        async def go() -> tuple[str, str]:
            client = AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
            model = OpenAIChatCompletionsModel("scripted", openai_client=client)
            agent = Agent(name="support", instructions="Be brief.", model=model)
            async with client:
                return await both(agent)

        async def both(agent: Agent[Any]) -> tuple[str, str]:
            first = await Runner.run(agent, "What city is the Golden Gate in?", session=session,
                                     run_config=config)  # fmt: skip
            second = await Runner.run(agent, "What state is it in?", session=session,
                                      run_config=config)  # fmt: skip
            return first.final_output, second.final_output

        assert run(go()) == ("answer 1", "answer 2")
    assert seen[1] == ["Be brief.", "What city is the Golden Gate in?", "answer 1",
                       "What state is it in?"]  # fmt: skip
    items = run(session.get_items())
    assert [i.get("role") for i in items] == ["user", "assistant", "user", "assistant"]
