"""The web console: tasks, an approvals inbox, dead letters and live queue figures.

Needs the ``ui`` extra (``pip install 'agentq[ui]'``: Starlette, Jinja2,
uvicorn). ``agentq ui`` serves it on loopback; :func:`mount_console` adds it
to any Starlette app (the HTTP API's)::

    console = Console(runtime, authenticate=TokenAuthenticator({token: Principal("alice", ...)}))
    mount_console(app, console)            # pages under /console

* :mod:`~agentq.console.auth` — tokens, sessions, CSRF tokens, scopes;
* :mod:`~agentq.console.app` — the mount, rendering and security headers;
* :mod:`~agentq.console.pages` — the pages and the live figures' event stream;
* :mod:`~agentq.console.actions` — approve, reject, cancel, replay, delete;
* :mod:`~agentq.console.views` — what each page shows, redacted;
* :mod:`~agentq.console.serve` — running it with uvicorn.
"""

from agentq.console.app import Console, create_app, mount_console
from agentq.console.auth import Principal, SessionStore, TokenAuthenticator

__all__ = [
    "Console",
    "Principal",
    "SessionStore",
    "TokenAuthenticator",
    "create_app",
    "mount_console",
]
