"""The web console: tasks, an approvals inbox, dead letters, schedules, live queue
and worker figures, a throughput and latency chart (docs/how-to/console.md).

Needs the ``ui`` extra (``pip install 'agentq-runtime[ui]'``: the HTTP API's Starlette
and uvicorn, Jinja2). ``agentq ui`` serves it on loopback. It authenticates
with the HTTP API's tokens (:mod:`agentq.server.auth`), and mounts into its app::

    from agentq.server import Principal, Scope, TokenAuth, create_app

    auth = TokenAuth.from_tokens({token: Principal("alice", frozenset({Scope.APPROVE}))})
    console = Console(runtime, auth=auth)
    app = create_app(runtime, auth=auth, mounts=[console_mount(console)])  # /console/

* :mod:`~agentq.console.sessions` — browser sessions and their CSRF tokens;
* :mod:`~agentq.console.app` — the mount, rendering and security headers;
* :mod:`~agentq.console.pages` — the pages and the live figures' event stream;
* :mod:`~agentq.console.actions` — approve, reject, cancel, replay, delete;
* :mod:`~agentq.console.bulk` — replay or delete many dead letters at once;
* :mod:`~agentq.console.login_links` — one-time sign-in links, ``--insecure-local``;
* :mod:`~agentq.console.views` — what each page shows, redacted;
* :mod:`~agentq.console.panels` — attempt timelines, timers, workers, run times;
* :mod:`~agentq.console.charts` — the overview's throughput and latency chart;
* :mod:`~agentq.console.timefmt` — relative times and durations;
* :mod:`~agentq.console.serve` — running it with uvicorn.
"""

from agentq.console.app import Console, console_mount, create_app, mount_console
from agentq.console.sessions import SessionStore

__all__ = ["Console", "SessionStore", "console_mount", "create_app", "mount_console"]
