"""Refund tools for the refund bot: execute a refund through the payments API."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentq import PermanentError, ToolContext, tool
from agentq.http import checked


class RefundArgs(BaseModel):
    """Refund part or all of an order."""

    order_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="the order to refund")
    amount: float = Field(gt=0, le=1_000_000, description="amount in the order's currency")
    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$")
    reason: str = Field(default="", max_length=500)


class RefundResult(BaseModel):
    refund_id: str
    status: str
    amount: float


@tool(queue="payments", max_attempts=6, timeout=60, settings="payments_url")
def execute_refund(ctx: ToolContext, args: RefundArgs) -> RefundResult:
    """Refund money to the customer of an order. Large refunds need a human's approval."""
    base = ctx.settings.get("payments_url")
    if not base:
        raise PermanentError("setting 'payments_url' is not configured")
    data = checked(ctx.http.post(f"{base}/refunds", json=args.model_dump()), "payments API").json()
    result = RefundResult(refund_id=data["refund_id"], status=data["status"], amount=args.amount)
    if ctx.settings.get("orders_table"):
        # The order's state changes in the same transaction as the result and the ack.
        ctx.on_commit(
            lambda tx: tx.execute(
                "UPDATE orders SET state = 'refunded', refund_id = ? WHERE id = ?",
                (result.refund_id, args.order_id),
            )
        )
    return result
