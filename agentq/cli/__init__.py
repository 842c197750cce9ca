"""The ``agentq`` command line.

``agentq worker`` serves tasks; ``enqueue``, ``task``, ``tasks`` and
``cancel`` work on tasks; ``approvals``, ``approve`` and ``reject`` on
approvals; ``inspect`` and ``workers`` show health; ``dlq list|replay|delete``
manages dead letters; ``demo`` runs the refund bot; ``bench`` measures.

Every error agentq raises is printed as ``agentq: error: ...`` (no traceback
unless ``--debug``; exit statuses in :mod:`agentq.cli.exits`), and everything
printed, errors included, has URL credentials redacted (:mod:`agentq.redact`).

Layout: :mod:`agentq.cli.main` builds the parser and runs a command;
:mod:`agentq.cli.common` holds what commands share (argument types, the
runtime arguments, finding the project); each other module owns a group of
subcommands and exposes ``register(subparsers) -> None``. A new surface (an
HTTP server, an MCP adapter, a console) adds its own ``register`` in its own
module, importing heavy dependencies only inside the handler, and one import
plus one call in :func:`agentq.cli.main.build_parser`.
"""

from __future__ import annotations

from agentq.cli.exits import EXIT_INTERRUPTED

try:
    from agentq.cli.main import build_parser, main
except KeyboardInterrupt:  # Ctrl-C while the command's modules import: no traceback
    raise SystemExit(EXIT_INTERRUPTED) from None

__all__ = ["build_parser", "main"]
