"""The ``agentq`` command line.

``agentq demo`` runs the refund bot end to end; ``agentq worker`` serves
tasks; ``agentq inspect`` shows queue health; ``agentq dlq list|replay|delete`` manages
dead letters; ``agentq tasks`` lists the ledger; ``agentq bench`` measures.

Every error agentq raises is printed as ``agentq: error: ...`` (exit status 2,
no traceback), and everything printed, errors included, has URL credentials
redacted (:mod:`agentq.redact`).

Layout: :mod:`agentq.cli.main` builds the parser and runs a command;
:mod:`agentq.cli.common` holds what commands share (argument types, the
runtime arguments, finding the project); each other module owns a group of
subcommands and exposes ``register(subparsers) -> None``. A new surface (an
HTTP server, an MCP adapter, a console) adds its own ``register`` in its own
module, importing heavy dependencies only inside the handler, and one import
plus one call in :func:`agentq.cli.main.build_parser`.
"""

from __future__ import annotations

from agentq.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
