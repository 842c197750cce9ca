"""Loopback ports for servers a test starts in another process.

The suite runs in parallel processes (pytest-xdist), so a port picked by binding
port 0 and closing the socket may be taken by another process's server before the
test's server binds it. :func:`held_port` keeps the port bound (with
``SO_REUSEADDR``, never listening) for the whole ``with`` block: no other process
gets it from the kernel, while the test's server, which binds with
``SO_REUSEADDR`` too (uvicorn and asyncio do), may listen on it, and listen again
after a restart.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_port() -> Iterator[int]:
    """A free loopback port, held for this process until the block ends."""
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", 0))
        yield int(holder.getsockname()[1])
