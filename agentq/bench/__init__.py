"""``agentq bench``: throughput and latency on fresh databases, beside the disk's floor.

Every figure is a median over ``repeats`` interleaved rounds with min and max,
because these machines are noisy; ratios between figures are taken within a
round. The modules, one concern each:

=======================  ==========================================================
:mod:`.queue_layer`      raw SQLite commits (the floor); the queue layer alone
:mod:`.decisions`        decisions, enqueues, enqueue-action calls; 1 and N callers
:mod:`.end_to_end`       tasks/s of 1 and N worker processes, one worker serving
                         every queue, and by argument size
:mod:`.latency`          enqueue-to-handler-start latency; idle worker CPU
:mod:`.env`              fresh databases, the no-op tools, worker processes
:mod:`.runner`           :func:`run_bench`: the rounds, medians and ratios
:mod:`.report`           :func:`format_table`
=======================  ==========================================================
"""

from __future__ import annotations

from agentq.bench.report import format_table
from agentq.bench.runner import run_bench

__all__ = ["format_table", "run_bench"]
