"""Every identifier check matches the whole text (issue 40, item 4).

``re.match`` with a pattern ending in ``$`` also accepts the text followed by
one newline: ``schema=nl%0A`` made a PostgreSQL schema ``"nl\\n"``, and a queue,
a tool, a schedule, a Spanner namespace or database role could end in one.
No server needed: each check refuses the name with a trailing newline and
accepts it without."""

from __future__ import annotations

import argparse
from urllib.parse import quote

import pytest
from pydantic import BaseModel

from agentq import ToolContext
from agentq.backends.spanner.config import parse_url as spanner_url
from agentq.cli.tasks import _cursor
from agentq.errors import AgentQError
from agentq.schedules import check_name
from agentq.spec import QueueSpec, validate_identifier
from agentq.tools.decorator import tool

SPANNER = "spanner://projects/p/instances/i/databases/d"


def _postgres_schema(schema: str) -> str:
    pytest.importorskip("psycopg", reason="postgres: psycopg is not installed")
    from agentq.backends.postgres.config import parse_url

    return parse_url(f"postgresql://u@h/db?schema={quote(schema)}").schema


class Args(BaseModel):
    n: int = 0


def handler(ctx: ToolContext, args: Args) -> None:
    pass


def _tool_name(name: str) -> str:
    tool(name=name)(handler)
    return name


CHECKS = {
    "postgres schema": _postgres_schema,
    "queue name": lambda name: validate_identifier(name, "queue name"),
    "queue spec": lambda name: QueueSpec.simple(name).name,
    "tool name": _tool_name,
    "schedule name": check_name,
    "spanner namespace": lambda name: spanner_url(f"{SPANNER}?namespace={quote(name)}").namespace,
    "spanner database_role": lambda name: (
        spanner_url(f"{SPANNER}?database_role={quote(name)}").database_role
    ),
}


@pytest.mark.parametrize("what", sorted(CHECKS))
def test_a_trailing_newline_is_refused(what: str) -> None:
    check = CHECKS[what]
    assert check("nl") == "nl"
    with pytest.raises(AgentQError):
        check("nl\n")


def test_a_page_cursor_with_a_trailing_newline_is_refused() -> None:
    assert _cursor("tsk_abc") == "tsk_abc"
    with pytest.raises(argparse.ArgumentTypeError):
        _cursor("tsk_abc\n")
