from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentq import FakeClock, Runtime
from agentq.demo_server import DemoAPI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def api() -> Iterator[DemoAPI]:
    with DemoAPI() as server:
        yield server


def settings_for(api: DemoAPI) -> dict[str, str]:
    return {"payments_url": api.url, "notifications_url": api.url, "shipping_url": api.url}


@pytest.fixture
def rt(tmp_path: Path, clock: FakeClock, api: DemoAPI) -> Iterator[Runtime]:
    runtime = Runtime(
        f"sqlite:///{tmp_path / 'agentq.db'}",
        tools=ROOT / "tools",
        policies=ROOT / "policies",
        clock=clock,
        settings=settings_for(api),
    )
    yield runtime
    runtime.close()
