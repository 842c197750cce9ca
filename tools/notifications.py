"""Approval notifications: ask approvers, and escalate when nobody answers."""

from __future__ import annotations

from pydantic import BaseModel

from agentq import ApprovalNotice, PermanentError, ToolContext, tool
from agentq.http import checked


class Notified(BaseModel):
    notification_id: str


def _post(ctx: ToolContext, path: str, notice: ApprovalNotice) -> Notified:
    base = ctx.settings.get("notifications_url")
    if not base:
        raise PermanentError("setting 'notifications_url' is not configured")
    response = checked(
        ctx.http.post(f"{base}{path}", json=notice.model_dump()), "notifications API"
    )
    return Notified(notification_id=response.json()["notification_id"])


@tool(queue="notifications", max_attempts=10, settings="notifications_url")
def request_approval(ctx: ToolContext, args: ApprovalNotice) -> Notified:
    """Tell the approvers that an action waits for their decision."""
    return _post(ctx, "/notifications", args)


@tool(queue="notifications", max_attempts=10, settings="notifications_url")
def escalate(ctx: ToolContext, args: ApprovalNotice) -> Notified:
    """Escalate an approval nobody decided in time to the on-call manager."""
    return _post(ctx, "/escalations", args)
