"""``agentq new DIR``: a project folder to start from, the refund bot's.

A pip user has no checkout to copy the example project from: this writes the
refund bot's ``tools/`` and ``policies/`` (the copy shipped with agentq, see
:mod:`agentq.demo.project`), an ``agentq.toml`` that names them and the
database, a ``.gitignore`` for the files agentq makes beside a SQLite
database, and a ``README.md`` of next steps. The README's snippets run from
that folder as they do from a checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentq.demo.project import demo_project
from agentq.errors import ConfigError

__all__ = ["NEXT_STEPS", "new_project"]

#: The documentation site's tutorial (the ``Documentation`` URL of the package's
#: metadata, ``tutorial/``), which a new project's README points at.
TUTORIAL_URL = "https://agentq-runtime.github.io/agentq/tutorial/"

#: The first commands to run in a new project, as its README and ``agentq new`` say.
NEXT_STEPS = (
    ("agentq demo --keep", "the refund bot end to end; keeps its database, agentq.db"),
    ("agentq ui --insecure-local", "look at it in the console (http://127.0.0.1:8765/console/)"),
    ("agentq tasks", "or in the terminal: tasks, approvals, inspect"),
)

_CONFIG = """\
# agentq's defaults for the commands run in this folder (agentq worker, enqueue,
# tasks, ui...). Paths are relative to this file; --db and $AGENTQ_DB win over db.
[agentq]
db = "sqlite:///agentq.db"
tools = "tools"
policies = "policies"

# Handed to the tools as ctx.settings. The refund bot's tools call these APIs:
# set them before `agentq worker` runs a refund (without payments_url the first
# one is dead-lettered; worker and enqueue warn). The policy
# (policies/refunds.toml) lists the hosts each tool may reach.
[settings]
# payments_url = "https://payments.example.com"        # execute_refund POSTs /refunds here
# notifications_url = "https://notify.example.com"     # approval requests and escalations
# shipping_url = "https://shipping.example.com"        # request_shipping
# orders_table = "orders"                              # execute_refund marks the order refunded
"""

_GITIGNORE = """\
# The database agentq makes here, and the files it keeps beside it.
*.db
*.db-wal
*.db-shm
*.db-bell
*.db-agentq.lock
__pycache__/
"""

_README = """\
# {name}

An agentq project: the refund bot's tools (`tools/`) and policy (`policies/`),
made by `agentq new`. `agentq.toml` tells the `agentq` command where they are
and which database to use (`agentq.db` here).

## Next steps

```sh
{steps}
```

Then make it yours:

* `tools/*.py`: each `@tool` is a task type; its arguments are a pydantic
  model, checked before anything commits.
* `policies/refunds.toml`: approvals (refunds above 100 wait for a human),
  retries, rate limits and the hosts each tool may call.
* `agentq.toml`: the database URL and the `[settings]` your tools read (the
  payments API's URL).

Run it for real:

1. Point the tools at your APIs: in `agentq.toml`'s `[settings]`, set
   `payments_url` (where `execute_refund` POSTs `/refunds`) and
   `notifications_url` (approval requests and escalations; `shipping_url` if
   you ship), and list their hosts in `allowed_hosts` of
   `policies/refunds.toml` (only `127.0.0.1` and `localhost` are allowed now).
   Without `payments_url` a refund is dead-lettered ("setting 'payments_url'
   is not configured"); `agentq worker` and `agentq enqueue` warn when a
   setting a tool needs is unset.
2. `agentq init` creates the queues and records the tools.
3. `agentq worker` serves them.
4. `agentq enqueue execute_refund --args '{{"order_id": "o-1", "amount": 30}}'`
   sends one call.

Every command has `--help`.

New to agentq? The tutorial builds this refund bot step by step, from an empty
folder: {tutorial}
"""


def new_project(directory: str | Path) -> list[Path]:
    """Write the refund-bot project into ``directory`` (made if missing; it must
    hold none of the files this writes). Returns the files written."""
    target = Path(directory)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target} exists and is not a folder")
    # lexists: a dangling symlink is there too (exists() follows it and says no).
    clashes = [name for name in ("tools", "policies", "agentq.toml", "README.md", ".gitignore")
               if os.path.lexists(target / name)]  # fmt: skip
    if clashes:
        raise ConfigError(
            f"{target} already has {', '.join(clashes)}: agentq new writes a project into "
            "a new or empty folder and overwrites nothing"
        )
    source = demo_project()
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for folder, pattern in ((source.tools, "*.py"), (source.policies, "*.toml")):
        into = target / folder.name
        try:
            into.mkdir()  # never follows a link: one there is EEXIST
        except FileExistsError:
            raise _exists(into) from None
        for file in sorted(folder.glob(pattern)):
            _create(into / file.name, file.read_bytes())
            written.append(into / file.name)
    steps = "\n".join(f"{command:<28}# {why}" for command, why in NEXT_STEPS)
    for name, text in (
        ("agentq.toml", _CONFIG),
        (".gitignore", _GITIGNORE),
        ("README.md", _README.format(name=target.resolve().name, steps=steps,
                                     tutorial=TUTORIAL_URL)),
    ):
        _create(target / name, text.encode("utf-8"))
        written.append(target / name)
    return written


#: A new file only, and never through a symlink (issue 40 item 11: a dangling
#: link named README.md made agentq new write wherever it pointed).
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def _create(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, which must not exist (not even as a link)."""
    try:
        fd = os.open(path, _NEW_FILE, 0o666)
    except FileExistsError:
        raise _exists(path) from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _exists(path: Path) -> ConfigError:
    what = "a symlink" if path.is_symlink() else "there"
    return ConfigError(
        f"{path} is {what} already: agentq new writes a project into a new or empty "
        "folder and overwrites nothing (nor writes through a link)"
    )
