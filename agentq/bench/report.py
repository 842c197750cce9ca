"""The bench's result as a text table."""

from __future__ import annotations

from typing import Any

__all__ = ["format_table"]


def format_table(result: dict[str, Any]) -> str:
    """The result as a text table: throughput beside the raw floor, the target
    ratios, latency and idle CPU."""
    s = result["settings"]
    load = s.get("load_average")
    pg = s.get("postgresql")
    engine = (
        f"PostgreSQL {pg['server_version']} (fsync={pg['fsync']}, "
        f"synchronous_commit={pg['synchronous_commit']})"
        if pg
        else f"synchronous={s['durability'].upper()}, SQLite {s['sqlite']}"
    )
    lines = [
        f"agentq bench: {s['tasks']} tasks, {s['workers']} workers x {s['concurrency']} handlers, "
        f"batch {s['batch']}, payload {s['payload_bytes']} B, {engine}, "
        f"{s['repeats']} repeats, Python {s['python']}, {s['cpus']} CPUs"
        + (f", load average {load[0]:.1f}" if load else ""),
        "",
        f"{'measure':<38}{'median':>12}{'min':>12}{'max':>12}{'x raw':>9}",
    ]
    for name, v in result["throughput"].items():
        frac = result["fraction_of_raw"].get(name)
        lines.append(
            f"{name:<38}{v['median']:>12,.0f}{v['min']:>12,.0f}{v['max']:>12,.0f}"
            f"{'' if frac is None else f'{frac:>9.2f}'}"
        )
    ratios = result.get("ratios") or {}
    if ratios:
        lines.append("")
        lines.append(f"{'ratio (median of per-round ratios)':<38}{'':>12}")
        for name, value in ratios.items():
            lines.append(f"{name:<38}{value:>12.2f}")
    lines.append("")
    lines.append(f"{'enqueue -> handler start':<38}{'p50 ms':>12}{'p99 ms':>12}{'max ms':>12}")
    for where, v in result["latency_ms"].items():
        if v:
            lines.append(f"{where:<38}{v['p50']:>12.2f}{v['p99']:>12.2f}{v['max']:>12.2f}")
    runs = result.get("durable_runs") or {}
    if runs:
        lines.append("")
        lines.append(f"{'durable agent runs (instant model)':<38}{'median':>12}{'min':>12}{'max':>12}")
        for name, v in runs.items():
            lines.append(f"{name:<38}{v['median']:>12,.2f}{v['min']:>12,.2f}{v['max']:>12,.2f}")
    lines.append("")
    lines.append(f"idle worker CPU: {result['idle_worker_cpu_percent']:.2f}%")
    return "\n".join(lines)
