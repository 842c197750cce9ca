"""Tools: named handlers with pydantic argument and result models.

A tool module lives in a tools directory (``tools/`` by default), which the
loader (:mod:`agentq.toolfiles`) imports as a private package, so helpers beside
the tools import relatively (``from ._common import post``); a runtime built after
an edit gets the new code. In a notebook, pass decorated functions instead
(``Runtime(tools=[execute_refund])``)::

    from pydantic import BaseModel
    from agentq import ToolContext, tool

    class RefundArgs(BaseModel):
        order_id: str
        amount: float

    class RefundResult(BaseModel):
        refund_id: str

    @tool(queue="payments", max_attempts=6)
    def execute_refund(ctx: ToolContext, args: RefundArgs) -> RefundResult:
        ...

The argument and result models come from the handler's annotations. The
argument model's JSON schema is what an agent framework shows the model
(:meth:`ToolRegistry.schemas`).

The package's parts: :mod:`~agentq.tools.definition` (:class:`ToolDef`),
:mod:`~agentq.tools.arguments` (validating and encoding an agent's untrusted
arguments), :mod:`~agentq.tools.decorator` (:func:`tool`) and
:mod:`~agentq.tools.registry` (:class:`ToolRegistry`).
"""

from __future__ import annotations

from agentq.tools.decorator import tool
from agentq.tools.definition import DEFAULT_MAX_BATCH, MAX_BATCH_LIMIT, ToolDef
from agentq.tools.registry import ToolRegistry

__all__ = ["DEFAULT_MAX_BATCH", "MAX_BATCH_LIMIT", "ToolDef", "ToolRegistry", "tool"]
