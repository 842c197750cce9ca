"""The public surface is exactly ``agentq.__all__``."""

from __future__ import annotations

import inspect
import threading

import pytest

import agentq
from agentq import FakeClock


def test_all_matches_public_names() -> None:
    public = {
        n for n, v in vars(agentq).items() if not n.startswith("_") and not inspect.ismodule(v)
    }
    # Names imported on first use are public before they are in vars(agentq).
    lazy = set(agentq._LAZY)
    assert set(agentq.__all__) == public | lazy
    assert lazy <= set(dir(agentq))


def test_every_public_name_is_documented() -> None:
    for name in agentq.__all__:
        obj = getattr(agentq, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"{name} has no docstring"


def test_fake_clock_advance_wakes_sleepers_in_order() -> None:
    clock = FakeClock()
    woke: list[str] = []
    threads = [
        threading.Thread(target=lambda d=d: (clock.sleep(d), woke.append(f"{d}")))
        for d in (5.0, 1.0)
    ]
    for t in threads:
        t.start()
    clock.wait_for_sleepers(2)
    clock.advance(1)
    threads[1].join(5)
    assert woke == ["1.0"]
    clock.advance(4)
    threads[0].join(5)
    assert woke == ["1.0", "5.0"]
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_fake_clock_wait_returns_early_on_event() -> None:
    clock = FakeClock()
    event = threading.Event()
    threading.Timer(0.01, event.set).start()
    assert clock.wait(event, 3600) is True
    assert clock.sleepers == 0
