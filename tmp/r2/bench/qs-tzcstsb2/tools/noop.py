
import time
from pydantic import BaseModel
from agentq import ToolContext, tool

class NoopArgs(BaseModel):
    n: int = 0
    pad: str = ""

class NoopResult(BaseModel):
    started: float

@tool(queue="bench")
def noop(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_b")
def idle_b(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())

@tool(queue="bench_c")
def idle_c(ctx: ToolContext, args: NoopArgs) -> NoopResult:
    return NoopResult(started=time.time())
