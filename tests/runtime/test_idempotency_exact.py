"""An idempotency key answers the same with the fast JSON codec as before: the
same call (integers beyond 64 bits, non-ASCII text, floats, keys in any order)
finds its task, another call is a conflict. Keys recorded before digests were
stored compare with the task's arguments as read back from the ledger, so
that read must give them exactly (orjson alone reads 2**70 as a float): on
every backend, each of which decodes its records with agentq.jsontext."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from agentq import FakeClock, IdempotencyConflict, Runtime, ToolContext, tool
from agentq.idempotency import args_digest
from agentq.ledger import Tables


class CallArgs(BaseModel):
    n: int
    x: float
    note: str


@tool(queue="work")
def call(ctx: ToolContext, args: CallArgs) -> dict[str, Any]:
    return {}


ARGS = {"n": 2**70 + 1, "x": 0.1, "note": "café ✓ 😀"}


@pytest.fixture
def rt(backend_url: str, clock: FakeClock) -> Iterator[Runtime]:
    with Runtime(backend_url, tools=[call], clock=clock) as r:
        yield r


def _answers(rt: Runtime, key: str) -> None:
    first = rt.enqueue_action("call", ARGS, idempotency_key=key)
    again = rt.enqueue_action("call", dict(reversed(list(ARGS.items()))), idempotency_key=key)
    assert again.task_id == first.task_id
    assert rt.task(first.task_id).args == ARGS
    for other in ({**ARGS, "n": 2**70 + 2}, {**ARGS, "x": 0.1000000000000001},
                  {**ARGS, "note": "cafe ✓ 😀"}):  # fmt: skip
        with pytest.raises(IdempotencyConflict, match=f"belongs to task '{first.task_id}'"):
            rt.enqueue_action("call", other, idempotency_key=key)


def test_same_call_same_task_other_call_conflict(rt: Runtime) -> None:
    _answers(rt, "k-1")


def test_key_recorded_before_digests_compares_the_exact_arguments(rt: Runtime) -> None:
    first = rt.enqueue_action("call", ARGS, idempotency_key="k-old")

    def forget_digests(tx: Any) -> None:
        rec = tx.tx.get_record(Tables.IDEMPOTENCY, "k-old")
        tx.tx.put_record(Tables.IDEMPOTENCY, "k-old", {"task_id": rec["task_id"], "tool": "call"})

    rt.transact(forget_digests)
    assert rt.enqueue_action("call", ARGS, idempotency_key="k-old").task_id == first.task_id
    with pytest.raises(IdempotencyConflict, match="created with other arguments"):
        rt.enqueue_action("call", {**ARGS, "n": 2**70 + 2}, idempotency_key="k-old")


def test_digests_of_awkward_arguments_are_unchanged() -> None:
    # Digests stored with keys before the codec changed must still match.
    assert args_digest("call", ARGS) == DIGEST_ARGS
    nan = {"v": float("nan"), "big": -(2**80), "tiny": 5e-324, "e": 1e16}
    assert args_digest("call", nan) == DIGEST_NAN


DIGEST_ARGS = "dc71e8c3e323c00b2ae0ee5f9c8cc1308d28b7364aee6fb4362c1ecfa5fa92cc"
DIGEST_NAN = "07fd2861f4dacafa17b8d4c912045fc54b1b7e57f8b0c07a017a749e3a7e25ae"
