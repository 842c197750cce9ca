"""The ``agentq`` command's exit statuses.

====  ==============================================================
0     done
1     done in part, or the outcome is negative: entries skipped, a
      waited-for task ended dead or cancelled, the demo's checks failed
2     usage, configuration or database error (``agentq: error: ...``)
3     not found: no such task, approval, run or dead-letter entry
4     ``--wait`` ran out before the task finished
5     refused by the lifecycle: the task, approval or run is in a state
      that does not allow it (already decided, already finished)
130   interrupted (Ctrl-C)
141   standard output was closed by its reader (``agentq tasks | head``):
      nothing printed, as a program killed by SIGPIPE (128 + 13)
====  ==============================================================
"""

from __future__ import annotations

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_NEGATIVE",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STDOUT_CLOSED",
    "EXIT_TIMEOUT",
    "interrupted",
]

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_ERROR = 2
EXIT_NOT_FOUND = 3
EXIT_TIMEOUT = 4
EXIT_REFUSED = 5
EXIT_INTERRUPTED = 130
EXIT_STDOUT_CLOSED = 141


def interrupted() -> int:
    """:data:`EXIT_INTERRUPTED`, for a Ctrl-C the command caught and reported.

    CPython (3.11 at least) marks a ``KeyboardInterrupt`` that passed through
    an ``exec`` of source text as unhandled even once it is caught, and then
    ``python -m agentq.cli`` exits by SIGINT (status -2, no message) instead of
    130. Ctrl-C lands in one whenever it interrupts an import that builds a
    dataclass. The next ``exec`` of source text clears the mark."""
    exec("None")  # a constant: see above
    return EXIT_INTERRUPTED
