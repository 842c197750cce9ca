"""Times and durations as the console shows them (issue 28 item 16): one short
phrase, relative to the page's clock, the full UTC time kept for hover."""

from __future__ import annotations

from datetime import timedelta

from tests.console._need import need_ui

need_ui()

from agentq import FakeClock  # noqa: E402
from agentq.console import panels, timefmt  # noqa: E402

NOW = FakeClock().now()


def test_spans_read_in_the_unit_that_fits() -> None:
    cases = {0.0004: "0 ms", 0.85: "850 ms", 3.3: "3.3 s", 12.3: "12 s", 245: "4 min 5 s",
             240: "4 min", 3 * 3600 + 125: "3 h 2 min",
             2 * 86400 + 4 * 3600 + 59: "2 d 4 h"}  # fmt: skip
    assert {s: timefmt.span(s) for s in cases} == cases
    assert timefmt.span(None) == "-" and timefmt.span(-5) == "0 ms"


def test_moments_are_told_relative_to_now_in_one_short_phrase() -> None:
    def ago(seconds: float) -> str:
        return timefmt.ago(NOW - timedelta(seconds=seconds), NOW)

    assert [ago(0.2), ago(45), ago(245), ago(3 * 3600 + 125), ago(-7200)] == [
        "just now", "45 s ago", "4 min ago", "3 h ago", "in 2 h",
    ]  # fmt: skip
    assert timefmt.ago(NOW.isoformat(), NOW) == "just now"  # records keep ISO text
    assert timefmt.ago(None, NOW) == timefmt.ago("not a time", NOW) == "-"
    assert timefmt.stamp(NOW) == NOW.strftime("%Y-%m-%d %H:%M:%S UTC")


def test_long_ids_keep_their_kind_and_their_tail() -> None:
    assert panels.short_id("tsk_0647498db68e0064dcc261b05ea14f97") == "tsk_…61b05ea14f97"
    assert panels.short_id("apr_short") == "apr_short"
    assert panels.short_id("stray-1") == "stray-1"
