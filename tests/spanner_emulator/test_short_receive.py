"""``drain()`` and the heartbeat monitor on the emulator send only the RECEIVE
durations the documents show (issue 29, defect 2).

The stand-in takes a RECEIVE duration only in the documents' form (whole
minutes, ``'20m'``) and refuses ``'0s'`` unless the test asked for it with
``receive_short=0s`` in the URL, as a user of a real instance where it works
would. Before, every ``drain()`` sent ``'0s'``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from pydantic import BaseModel

from agentq import FakeClock, Runtime, ToolContext, tool

from .fixtures import EmulatorDatabase

_done: list[int] = []


class Step(BaseModel):
    n: int


@tool(queue="steps")
def step(ctx: ToolContext, args: Step) -> None:
    """Records that it ran."""
    _done.append(args.n)


@pytest.mark.parametrize("receive_short", [None, "0s"])
def test_drain_receives_in_the_documents_form_or_the_one_asked_for(
    emulator_database_factory: Callable[[bool], EmulatorDatabase], receive_short: str | None
) -> None:
    db = emulator_database_factory(False)
    clock = FakeClock()
    db.use_clock(clock)
    url = db.url if receive_short is None else db.url_with(receive_short=receive_short)
    _done.clear()
    rt = Runtime(url, tools=[step], clock=clock)
    try:
        rt.transact(lambda tx: [tx.enqueue("step", {"n": n}) for n in range(3)])
        assert rt.worker(concurrency=2).drain() == 3
        assert sorted(_done) == [0, 1, 2]
    finally:
        rt.close()
    durations = db.env.interposer.receive_durations(db.database_id)
    assert durations
    if receive_short is None:
        assert all(re.fullmatch(r"[1-9]\d*m", d) for d in durations), durations
    else:
        assert set(durations) == {"0s"}


def test_the_stand_in_refuses_0s_unless_asked_for_it(
    emulator_database_factory: Callable[[bool], EmulatorDatabase],
) -> None:
    from google.api_core import exceptions as gexc

    db = emulator_database_factory(False)
    rt = Runtime(db.url, tools=[step], clock=FakeClock())
    try:
        rt.transact(lambda tx: tx.enqueue("step", {"n": 1}))
        database = rt.backend.database  # type: ignore[attr-defined]  # through the stand-in
        with database.snapshot() as snap:
            sql = "SELECT * FROM RECEIVE_steps(max_duration=>'0s', max_batch_size=>1)"
            with pytest.raises(gexc.InvalidArgument, match="documents' form"):
                list(snap.execute_sql(sql))
    finally:
        rt.close()
