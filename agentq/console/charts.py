"""The overview's throughput and latency chart, drawn on the server as SVG.

Tasks that finished within the window (the last hour by minute, or the last
day by half hour) are counted per bucket, succeeded and failed apart
(throughput), with the median and 95th percentile of their last attempt's run
time (latency). :func:`chart` returns the geometry; the template draws it with
plain SVG elements (no script, no style attribute: the console's CSP allows
neither inline), each bar and point with a ``<title>`` to read on hover.

The figures come from the per-minute tallies that each completion adds in its
own transaction (:mod:`agentq.lifecycle.tallies`), never from the ledger: the
read costs the window's minutes, not its tasks. Only the tasks the principal
may see (its own, unless it sees everyone's), and never the runtime's own
(timers, notices). The percentiles are read from a histogram of log-spaced
buckets (eight a decade): each is its bucket's middle, within about 15 % of
the run time it stands for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agentq.backends import Backend
from agentq.console.timefmt import span
from agentq.lifecycle import tallies

__all__ = ["WINDOWS", "Bucket", "Chart", "buckets", "chart"]

#: The windows a chart can show: name -> (length, bucket width).
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=1)),
    "24h": (timedelta(hours=24), timedelta(minutes=30)),
}

# The drawing area, in SVG user units (the SVG scales to its box).
WIDTH, HEIGHT = 560.0, 170.0
LEFT, RIGHT, TOP, BOTTOM = 44.0, 8.0, 10.0, 22.0


@dataclass
class Bucket:
    """One slot of the window: its start, tasks that ended in it, and their run
    times as a histogram (:mod:`agentq.lifecycle.tallies` bucket -> count)."""

    start: datetime
    succeeded: int = 0
    failed: int = 0
    run_times: dict[int, int] = field(default_factory=dict)

    @property
    def done(self) -> int:
        """Tasks that ended in it."""
        return self.succeeded + self.failed

    def percentile(self, p: int) -> float | None:
        """The ``p``-th percentile of its run times, to its histogram bucket's
        resolution (None without any)."""
        return tallies.percentile(self.run_times, p)


def buckets(
    backend: Backend, now: datetime, window: str = "1h", owner: str | None = None
) -> list[Bucket]:
    """The window's buckets, oldest first, filled from the tallies of finished
    action tasks (succeeded, or dead): ``owner``'s only, or everyone's (None)."""
    length, width = WINDOWS[window]
    count = int(length / width)
    # Buckets on round times (whole minutes, half hours), the last one holding now.
    step = width.total_seconds()
    end = now + timedelta(seconds=step - now.timestamp() % step)
    start = end - length
    out = [Bucket(start + width * i) for i in range(count)]
    first, minutes = tallies.minute_of(start), int(step // 60)
    for t in backend.read_tallies(first, first + count * minutes, width=minutes, owner=owner):
        bucket = out[min(count - 1, max(0, (t.minute - first) // minutes))]
        if t.outcome == "dead":
            bucket.failed += t.count
        else:
            bucket.succeeded += t.count
        if t.bucket >= 0:
            bucket.run_times[t.bucket] = bucket.run_times.get(t.bucket, 0) + t.count
    return out


@dataclass(frozen=True)
class Bar:
    """A rectangle of the throughput chart, with its hover text."""

    x: float
    y: float
    w: float
    h: float
    cls: str
    title: str


@dataclass(frozen=True)
class Tick:
    """An axis label at a position."""

    at: float
    label: str


@dataclass(frozen=True)
class Chart:
    """Both charts' geometry: throughput bars, latency lines and points, axes."""

    width: float
    height: float
    left: float
    bottom: float
    bars: list[Bar]
    count_ticks: list[Tick]
    latency_lines: dict[str, str]  # "p50"/"p95" -> SVG polyline points
    latency_points: list[tuple[float, float, str, str]]  # x, y, cls, title
    latency_ticks: list[Tick]
    time_ticks: list[Tick]
    total_done: int
    total_failed: int


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top`` (1, 2, 2.5 or 5 times a power of ten)."""
    if top <= 0:
        return 1.0
    scale = 10.0 ** math.floor(math.log10(top))
    return next(step * scale for step in (1, 2, 2.5, 5, 10) if step * scale >= top)


def chart(rows: list[Bucket], window: str = "1h") -> Chart:
    """The geometry of the throughput and latency charts of ``rows``."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(1, len(rows))
    base = TOP + plot_h
    count_top = _nice(max((b.done for b in rows), default=0))
    bars: list[Bar] = []
    for i, b in enumerate(rows):
        x = LEFT + i * slot + slot * 0.1
        stamp = b.start.strftime("%H:%M")
        ok_h = plot_h * b.succeeded / count_top
        bad_h = plot_h * b.failed / count_top
        if b.succeeded:
            bars.append(Bar(x, base - ok_h, slot * 0.8, ok_h, "ok",
                            f"{stamp} UTC: {b.succeeded} succeeded"))  # fmt: skip
        if b.failed:
            bars.append(Bar(x, base - ok_h - bad_h, slot * 0.8, bad_h, "bad",
                            f"{stamp} UTC: {b.failed} failed"))  # fmt: skip
    p = {name: [b.percentile(n) for b in rows] for name, n in (("p50", 50), ("p95", 95))}
    latency_top = _nice(max((v for vs in p.values() for v in vs if v is not None), default=0))
    lines: dict[str, str] = {}
    points: list[tuple[float, float, str, str]] = []
    for name, values in p.items():
        coords = []
        for i, v in enumerate(values):
            if v is None:
                continue
            x = LEFT + (i + 0.5) * slot
            y = base - plot_h * v / latency_top
            coords.append(f"{x:.1f},{y:.1f}")
            points.append((x, y, name, f"{rows[i].start:%H:%M} UTC: {name} run time {span(v)}"))
        lines[name] = " ".join(coords)
    every = max(1, len(rows) // 6)
    time_ticks = [
        Tick(LEFT + i * slot, b.start.strftime("%H:%M"))
        for i, b in enumerate(rows)
        if i % every == 0
    ]
    return Chart(
        width=WIDTH, height=HEIGHT, left=LEFT, bottom=base, bars=bars,
        count_ticks=[  # counts are whole: no tick at 2.5 tasks
            Tick(base - plot_h * f, f"{count_top * f:g}")
            for f in (0, 0.5, 1)
            if (count_top * f).is_integer()
        ],
        latency_lines=lines, latency_points=points,
        latency_ticks=[Tick(base - plot_h * f, span(latency_top * f)) for f in (0.5, 1)],
        time_ticks=time_ticks,
        total_done=sum(b.done for b in rows), total_failed=sum(b.failed for b in rows),
    )  # fmt: skip
