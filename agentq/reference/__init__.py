"""The generated pages of ``docs/reference/``: one source for each, the code.

``docs/reference/policies.md`` documents the policy files from
:class:`agentq.policies.Policy`, ``docs/reference/config.md`` documents
``agentq.toml`` from :class:`agentq.config.Config`: every key, its type, limits,
default and meaning (the field's attribute docstring). ``docs/reference/cli.md``
documents every command and option from the ``agentq`` argument parser, and
``docs/reference/http.md`` (with ``openapi.json`` beside it) every route of the
HTTP API from the OpenAPI document ``agentq serve`` serves for the refund bot.
A key, an option or a route added to the code appears after one command, and a
test fails until it is run::

    python -m agentq.reference          # rewrite docs/reference/*.md
    python -m agentq.reference --check  # exit 1 if they are out of date

Each page has its module: :mod:`agentq.reference.toml_files` (policies, config),
:mod:`agentq.reference.cli_page`, :mod:`agentq.reference.http_pages` (HTTP API,
OpenAPI document); :mod:`agentq.reference.markdown` is what they share.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from agentq.reference.cli_page import render_cli
from agentq.reference.http_pages import render_http, render_openapi
from agentq.reference.toml_files import render_config, render_policies

__all__ = [
    "REFERENCES", "main", "render_cli", "render_config", "render_http", "render_openapi",
    "render_policies",
]  # fmt: skip

#: Each generated file, relative to the repository, and what renders it.
REFERENCES = {
    "docs/reference/policies.md": render_policies,
    "docs/reference/config.md": render_config,
    "docs/reference/cli.md": render_cli,
    "docs/reference/http.md": render_http,
    "docs/reference/openapi.json": render_openapi,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Write (or with ``--check``, compare) the generated references."""
    parser = argparse.ArgumentParser(prog="python -m agentq.reference", description=__doc__)
    parser.add_argument("--root", default=".", help="the repository (default: here)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    stale = []
    for relative, render in REFERENCES.items():
        path = Path(args.root) / relative
        text = render()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(relative)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for relative in stale:
        print(f"{'out of date' if args.check else 'wrote'}: {relative}")
    return 1 if args.check and stale else 0
