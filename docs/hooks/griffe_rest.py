"""A Griffe extension: agentq's docstrings, written in reST roles, read as Markdown.

agentq's docstrings name other objects the Sphinx way (``:class:`Runtime```,
``:meth:`~agentq.Runtime.approve```) and end a paragraph with ``::`` before an
indented example. mkdocstrings renders docstrings as Markdown, where a role
would show as written; this turns each role into a code span naming the object
as a reader would write it (``~`` keeps the last part only, as in Sphinx) and
each ``::`` into ``:``, before the docstring is rendered. The docstrings stay
as they are for ``help()`` and editors.

Loaded by ``mkdocs.yml`` (the mkdocstrings handler's ``extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"(\S)::[ \t]*$", re.M)


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    target = target.strip()
    if tilde:
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def markdown(text: str) -> str:
    """``text`` with its reST roles as code spans and its ``::`` as ``:``."""
    return _LITERAL.sub(r"\1:", _ROLE.sub(_role, text))


class RestRoles(griffe.Extension):
    """Rewrite every docstring once, as its object is loaded."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
