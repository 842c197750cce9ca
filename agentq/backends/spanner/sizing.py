"""Spanner queue limits a worker's configuration can be checked against.

From Google's "Spanner queues overview", Limitations (mirrored in
apstndb/spanner-docs-mirror, ``docs/.../spanner/docs/queues/queues-overview.md``)
and Google's "Using Spanner queues": at most 1000 active receive
queries with the same arguments per queue; a quota of 2000 concurrent receive
TVFs per project and region; 100 queues per instance of one node or more (20 per
200 processing units); RECEIVE durations of about 20 minutes, not extremely
short ones. Plain Python.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = [
    "MAX_QUEUES_PER_INSTANCE",
    "MAX_RECEIVES_PER_PROJECT_REGION",
    "MAX_RECEIVES_PER_QUEUE",
    "PROCESSES_ENV",
    "sizing_warnings",
]

MAX_RECEIVES_PER_QUEUE = 1000
MAX_RECEIVES_PER_PROJECT_REGION = 2000  # a quota: can be raised on request
MAX_QUEUES_PER_INSTANCE = 100  # instances of >= 1 node; 20 per 200 processing units
#: Below this a RECEIVE is "extremely short" for the purpose of a warning.
SHORT_RECEIVE_SECONDS = 60.0
#: How many worker processes of this configuration the deployment runs (a hint).
PROCESSES_ENV = "AGENTQ_WORKER_PROCESSES"


def sizing_warnings(
    queues: Sequence[str],
    receive_duration: float,
    processes: int | None = None,
) -> list[str]:
    """What in this worker's configuration exceeds a documented Spanner limit.

    Each process holds one RECEIVE per queue it serves. ``processes`` (default:
    ``$AGENTQ_WORKER_PROCESSES``) is how many such processes run against the
    database; without it only per-process limits are checked.
    """
    if processes is None:
        text = os.environ.get(PROCESSES_ENV, "")
        processes = int(text) if text.isdigit() and int(text) > 0 else None
    out = []
    if len(queues) > MAX_QUEUES_PER_INSTANCE:
        out.append(
            f"{len(queues)} queues: a Spanner instance of one node or more holds at most "
            f"{MAX_QUEUES_PER_INSTANCE} (20 per 200 processing units)"
        )
    if receive_duration < SHORT_RECEIVE_SECONDS:
        out.append(
            f"receive_duration={receive_duration:g} s: Spanner's documents advise long "
            "RECEIVE calls (about 20 minutes) and warn against extremely short ones"
        )
    if processes is not None:
        if processes > MAX_RECEIVES_PER_QUEUE:
            out.append(
                f"{processes} worker processes hold {processes} receives on each queue: "
                f"Spanner allows {MAX_RECEIVES_PER_QUEUE} active receives per queue; use "
                "fewer processes with more handlers (--concurrency)"
            )
        total = processes * len(queues)
        if total > MAX_RECEIVES_PER_PROJECT_REGION:
            out.append(
                f"{processes} processes x {len(queues)} queues = {total} concurrent receives: "
                f"the default quota is {MAX_RECEIVES_PER_PROJECT_REGION} per project and "
                "region; split the queues across worker pools (--queue) or request more"
            )
    return out
