"""The suite's ``xdist_group`` marks take effect under the README's command.

The packaging tests share one wheel and the browser tests one Chromium only when
each group runs in one worker process; pytest 9.2 silently stopped that with
pytest-xdist 3.8 (pytest-xdist issue 1386) and the wheel was built three times.
"""

from __future__ import annotations

import os

import pytest


@pytest.mark.xdist_group("guard")
def test_an_xdist_group_reaches_the_scheduler(request: pytest.FixtureRequest) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("not run by pytest-xdist")
    if request.config.getvalue("dist") != "loadgroup" and not request.config.getvalue(
        "loadgroup"
    ):
        pytest.skip("not --dist loadgroup")
    # loadgroup schedules by the "@group" suffix it gives the node id.
    assert request.node.nodeid.endswith("@guard"), request.node.nodeid
