"""Agent framework adapters: each framework's tools, backed by agentq tasks.

:mod:`agentq.adapters.openai_agents` (``agentq-runtime[openai-agents]``),
:mod:`agentq.adapters.pydantic_ai` (``agentq-runtime[pydantic-ai]``) and
:mod:`agentq.adapters.langchain` (``agentq-runtime[langchain]``) each import their
framework only when imported themselves; :mod:`agentq.adapters.calls` holds
what they share (idempotency keys of a call, waiting for its task).

:mod:`agentq.adapters.pydantic_ai_durable` is the other way in: a Pydantic AI
agent declared as a durable agentq agent, whose turns and tool calls are tasks
(:mod:`agentq.adapters.pydantic_ai_messages` turns its conversation into
Pydantic AI messages and back);
:mod:`agentq.adapters.openai_agents_durable` does the same for an OpenAI Agents
SDK agent, and :mod:`agentq.adapters.openai_agents_session` and
:mod:`agentq.adapters.openai_agents_state` keep the SDK's sessions and
interrupted runs in agentq's database. :mod:`agentq.adapters.durable_turns`
holds what the durable adapters share.

:mod:`agentq.adapters.langgraph_checkpoint` (``agentq-runtime[langchain]``) is
a LangGraph checkpointer on agentq's backends, whose nodes' agentq tasks commit
with the nodes' writes (:mod:`agentq.adapters.langgraph_steps`); its records are
:mod:`agentq.adapters.langgraph_records`'.
"""
