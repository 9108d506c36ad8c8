"""The graph's `tools` node: the open calls of the last reply, run concurrently.

Tool calls of one model reply run concurrently with `asyncio.gather`; every call gets
exactly one result, errors included. A call that needs a linked account also ends the
turn with a reply carrying the link (`GraphConfig.on_auth_required`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from pydantic import ValidationError

from panager.agent.graph.config import GraphConfig
from panager.agent.graph.confirm import unanswered_calls
from panager.agent.graph.confirm_node import UNPARSED_CALLS, described_for
from panager.agent.graph.history import truncate_text
from panager.agent.graph.recorders import redact
from panager.agent.graph.state import AgentState, TurnContext, emit_event
from panager.agent.graph.taint import CALL_TAINTED, marked
from panager.agent.graph.tool import CURRENT_CALL, clean_args
from panager.errors import AuthRequired, ToolError

log = logging.getLogger(__name__)

UNPARSED_ARGS = (
    "The arguments of this call were not valid JSON, so it did not run. Call it again with "
    "the arguments as one JSON object."
)


def _result_content(value: Any, limit: int) -> str:  # Any: whatever a tool returned
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    return truncate_text(text, limit)


def _error_message(call: ToolCall, text: str) -> ToolMessage:
    return ToolMessage(
        content=json.dumps({"error": text}, ensure_ascii=False),
        tool_call_id=call["id"],
        name=call.get("name"),
        status="error",
    )


def _validation_text(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
        parts.append(f"{where}: {err.get('msg')}")
    return "Invalid arguments — " + "; ".join(parts)


class ToolsNode:
    """Runs the last reply's open calls, over one `GraphConfig` (result limit, auth hook)."""

    def __init__(self, config: GraphConfig) -> None:
        self.config = config

    async def __call__(self, state: AgentState, runtime: Runtime[TurnContext]) -> dict:
        """Run the last reply's calls concurrently (those the confirm node left open); one
        result per call, in order."""
        ctx = runtime.context
        reply, open_calls = unanswered_calls(state["messages"])
        assert reply is not None  # route_after_agent/confirm: an AI reply with open calls
        by_name = {t.name: t for t in (*ctx.unlisted_tools, *ctx.tools)}
        unparsed = reply.additional_kwargs.get(UNPARSED_CALLS) or {}
        tainted = CALL_TAINTED.set(marked(reply))  # copied into every gathered call
        keys: dict[str, str] = described_for(state, reply).get("keys") or {}
        try:
            outcomes = await asyncio.gather(
                *(self._run_call(ctx, by_name, c, c["id"] in unparsed, keys.get(str(c["id"])))
                  for c in open_calls)
            )
        finally:
            CALL_TAINTED.reset(tainted)
        messages: list[AnyMessage] = [msg for msg, _ in outcomes]
        auth = next((a for _, a in outcomes if a is not None), None)
        if auth is not None:
            messages.append(await self._auth_reply(ctx, auth))
            link_reply = messages[-1]
            await emit_event(
                ctx, "message_end", iteration=state.get("model_calls", 0), id=link_reply.id,
                tool_calls=[], calls=[], usage={}, text=link_reply.text,
            )
        await emit_event(ctx, "turn_end", iteration=state.get("model_calls", 0))
        return {"messages": messages}

    async def _run_call(
        self,
        ctx: TurnContext,
        by_name: dict[str, BaseTool],
        call: ToolCall,
        unparsed: bool = False,
        key: str | None = None,
    ) -> tuple[ToolMessage, AuthRequired | None]:
        await emit_event(ctx, "tool_start", name=call["name"], args=call.get("args"), id=call["id"])
        auth = None
        message: ToolMessage | AuthRequired
        if unparsed:
            message = _error_message(call, UNPARSED_ARGS)
        else:
            message = await self._execute(by_name, call, key)
        if isinstance(message, AuthRequired):
            auth, message = (
                message,
                _error_message(
                    call,
                    f"{message.provider} not linked; the user got a link to connect it.",
                ),
            )
        await emit_event(
            ctx,
            "tool_end",
            name=call["name"],
            id=call["id"],
            status=message.status,
            result=message.content,
        )
        return message, auth

    async def _execute(
        self, by_name: dict[str, BaseTool], call: ToolCall, key: str | None = None
    ) -> ToolMessage | AuthRequired:
        tool = by_name.get(call["name"])
        if tool is None:
            valid = ", ".join(sorted(by_name)) or "none"
            return _error_message(call, f"Unknown tool {call['name']!r}. Valid tools: {valid}.")
        if not isinstance(call.get("args"), dict):
            return _error_message(call, "Arguments must be a JSON object.")
        running = CURRENT_CALL.set(key or str(call["id"]))
        try:
            value = await tool.ainvoke(clean_args(call["args"]))
        except AuthRequired as exc:
            return exc
        except ToolError as exc:
            return _error_message(call, str(exc))
        except ValidationError as exc:
            return _error_message(call, _validation_text(exc))
        except Exception as exc:
            log.exception("tool %s failed", call["name"])
            return _error_message(
                call,
                f"The tool failed unexpectedly ({type(exc).__name__}). Try again or tell the user.",
            )
        finally:
            CURRENT_CALL.reset(running)
        content = _result_content(value, self.config.limits.max_tool_result_chars)
        return ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])

    async def _auth_reply(self, ctx: TurnContext, auth: AuthRequired) -> AIMessage:
        link = auth.link
        if self.config.on_auth_required is not None:
            link = await self.config.on_auth_required(ctx, auth) or link
        # The live link (a usable OAuth state) reaches the user through the turn's result;
        # what is stored (checkpoint, /save, recording) carries a redacted form.
        stored = redact(link)
        if stored != link:
            ctx.extra.setdefault("live_links", {})[stored] = link
        text = (
            f"{auth.message} Connect it here: {stored}\n"
            "I'll finish your request once it's linked."
        )
        return AIMessage(
            content=text,
            additional_kwargs={
                "panager_link": {"url": stored, "label": f"Connect {auth.provider}"}
            },
        )
