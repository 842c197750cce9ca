"""An unknown argument name is refused, not dropped (issue 28, item 5).

``{"order_id": "X-1", "amount": 50, "curency": "EUR"}`` used to be queued as a
USD refund: pydantic ignores keys a model does not declare. Every path that makes
a new task from an agent's arguments goes through one check
(:func:`agentq.tools.arguments.validate_args` with ``refuse_unknown``); a tool
opts in to extra keys with its model's ``ConfigDict(extra="allow")`` (kept) or
``extra="ignore"`` (dropped).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from agentq import FakeClock, InvalidArguments, Runtime, ToolContext, ToolRegistry, tool
from agentq.demo_server import DemoAPI
from tests.runtime.conftest import settings_for

ROOT = Path(__file__).resolve().parents[2]
TYPO = {"order_id": "X-1", "amount": 50, "curency": "EUR"}


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock, api: DemoAPI) -> Iterator[Runtime]:
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'agentq.db'}", tools=ROOT / "tools",
        policies=ROOT / "policies", clock=clock, settings=settings_for(api),
    )  # fmt: skip
    yield runtime
    runtime.close()


def _refused(exc: pytest.ExceptionInfo[InvalidArguments]) -> None:
    text = str(exc.value)
    assert "execute_refund" in text and "'curency'" in text
    assert "did you mean 'currency'" in text
    assert "order_id, amount, currency, reason" in text  # the fields it takes


def test_enqueue_action_refuses_a_misspelled_argument(rt: Runtime) -> None:
    with pytest.raises(InvalidArguments) as exc:
        rt.enqueue_action("execute_refund", TYPO)
    _refused(exc)
    assert rt.tasks() == []


def test_submit_and_tx_enqueue_refuse_it_too(rt: Runtime) -> None:
    with pytest.raises(InvalidArguments) as exc:
        rt.submit("execute_refund", TYPO)
    _refused(exc)
    with pytest.raises(InvalidArguments) as exc:
        rt.transact(lambda tx: tx.enqueue("execute_refund", TYPO))
    _refused(exc)
    assert rt.tasks() == []


def test_the_correctly_spelled_call_is_queued_as_asked(rt: Runtime) -> None:
    task = rt.enqueue_action("execute_refund", {"order_id": "X-1", "amount": 50, "currency": "EUR"})
    assert task.args["currency"] == "EUR"


def test_a_producer_from_the_catalog_refuses_it(rt: Runtime, tmp_path: Path,
                                                clock: FakeClock) -> None:  # fmt: skip
    rt.record_tools()
    producer = Runtime(f"sqlite:///{tmp_path / 'agentq.db'}", clock=clock)
    try:
        with pytest.raises(InvalidArguments) as exc:
            producer.enqueue_action("execute_refund", TYPO)
        _refused(exc)
    finally:
        producer.close()


def test_the_advertised_schema_says_no_other_properties(rt: Runtime) -> None:
    (schema,) = [s for s in rt.tool_schemas() if s["function"]["name"] == "execute_refund"]
    assert schema["function"]["parameters"]["additionalProperties"] is False


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str


class Item(BaseModel):
    sku: str


class Closed(BaseModel):
    items: list[Item]


def _registry() -> ToolRegistry:
    @tool()
    def open_tool(ctx: ToolContext, args: Open) -> None:
        return None

    @tool()
    def lenient_tool(ctx: ToolContext, args: Lenient) -> None:
        return None

    @tool()
    def closed_tool(ctx: ToolContext, args: Closed) -> None:
        return None

    return ToolRegistry([open_tool, lenient_tool, closed_tool])


def test_a_tool_opts_in_to_extra_keys_with_its_model_config() -> None:
    tools = _registry()
    assert tools.get("open_tool").enqueueable_args({"name": "a", "tag": 1}) == {
        "name": "a", "tag": 1,
    }  # fmt: skip
    assert tools.get("lenient_tool").enqueueable_args({"name": "a", "tag": 1}) == {"name": "a"}
    assert "additionalProperties" not in tools.get("lenient_tool").schema()["function"][
        "parameters"
    ]


def test_unknown_keys_of_nested_objects_are_refused_with_their_path() -> None:
    with pytest.raises(InvalidArguments, match=r"items\.0\.skew: unknown argument"):
        _registry().get("closed_tool").enqueueable_args({"items": [{"sku": "a", "skew": 1}]})


def test_a_queued_task_still_runs_when_its_tool_dropped_a_field() -> None:
    """The check guards new tasks only: stored arguments of a task queued before a
    deploy that removed a field are read as before (validate_args without refusing)."""
    definition = _registry().get("closed_tool")
    model = definition.validate_args({"items": [], "gone": 1})
    assert model.model_dump() == {"items": []}


def test_the_cli_refuses_it_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentq.cli import main

    db = f"sqlite:///{tmp_path / 'cli.db'}"
    project = ["--tools", str(ROOT / "tools"), "--policies", str(ROOT / "policies")]
    status = main(["enqueue", "execute_refund", "--args", json.dumps(TYPO), "--db", db, *project])
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("agentq: error: ") and "did you mean 'currency'" in err
    with Runtime(db, tools=ROOT / "tools", policies=ROOT / "policies") as rt:
        assert rt.tasks() == []
