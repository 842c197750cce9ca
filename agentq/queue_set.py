"""Every queue a runtime uses: one list for ``agentq init`` and ``--print-ddl``.

A runtime adds built-in tools to the ones its folders define (the webhook
delivery tool, each durable agent's turn tool) and keeps two queues of its own
(approval escalations, workers' heartbeats). ``agentq init`` creates what the
runtime opens; ``agentq init --print-ddl`` prints DDL without opening one: both
take the queues from here, so a schema a DBA applies from the printed DDL is
the schema ``init`` makes (the webhook queue was once missing from it).
"""

from __future__ import annotations

from agentq import webhooks
from agentq.agents import turn_tool
from agentq.envelope import task_queue_spec
from agentq.lifecycle.heartbeats import heartbeat_queue_spec
from agentq.lifecycle.tasks import ESCALATION_QUEUE
from agentq.spec import QueueSpec
from agentq.tools import ToolRegistry

__all__ = ["add_builtin_tools", "queue_specs"]


def add_builtin_tools(registry: ToolRegistry) -> None:
    """Add the tools every runtime has to ``registry``: webhook delivery, and the
    turn tool of each durable agent it holds."""
    if webhooks.WEBHOOK_TOOL not in registry:
        registry.add(webhooks.deliver_webhook)  # every worker can send webhooks
    for agent in registry.agents.values():
        registry.add(turn_tool(agent))


def queue_specs(registry: ToolRegistry) -> list[QueueSpec]:
    """The specs of every queue a runtime over ``registry`` (its built-in tools
    added) creates: its tools' queues, escalations, then heartbeats."""
    specs = [task_queue_spec(q) for q in sorted(registry.queues() | {ESCALATION_QUEUE})]
    specs.append(heartbeat_queue_spec())
    return specs
