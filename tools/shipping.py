"""Shipping: ask the warehouse to ship an order's items to an address."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agentq import PermanentError, ToolContext, tool
from agentq.http import checked


class ShipArgs(BaseModel):
    order_id: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    address: str = Field(min_length=5, max_length=500)
    items: list[str] = Field(min_length=1, max_length=100)


class Shipment(BaseModel):
    shipment_id: str
    status: str


@tool(queue="shipping", max_attempts=8, settings="shipping_url")
def request_shipping(ctx: ToolContext, args: ShipArgs) -> Shipment:
    """Request shipment of an order's items to an address."""
    base = ctx.settings.get("shipping_url")
    if not base:
        raise PermanentError("setting 'shipping_url' is not configured")
    data = checked(
        ctx.http.post(f"{base}/shipments", json=args.model_dump()), "shipping API"
    ).json()
    return Shipment(shipment_id=data["shipment_id"], status=data["status"])
