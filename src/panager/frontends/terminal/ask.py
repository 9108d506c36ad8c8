"""`panager ask`: one turn for the local user, streamed to stdout or returned as JSON.

Plain mode writes the answer's pieces as they arrive (plain text, no escape
sequences) and the link, if any, on its own line. A turn that stops to ask
(an action chosen while reading outside content) is answered "deny" — nobody
is there to say yes — unless `--yes` approves every such action. `--json` prints one object
when the turn is over: the answer, whether it succeeded, the tool calls with
their status, the token usage of the turn and the link.
"""

from __future__ import annotations

import json
import sys

from panager.agent.commands import CommandContext, dispatch, is_command
from panager.agent.graph.confirm import APPROVE, DENY
from panager.agent.graph.events import Event
from panager.app import App
from panager.config import Settings
from panager.frontends.terminal.live import PlainAnswer

USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


class TurnLog:
    """Collects a turn's tool calls and token usage from its events."""

    def __init__(self, user_id: int) -> None:
        self.user_id = user_id
        self.tool_calls: dict[str, dict] = {}
        self.usage = dict.fromkeys(USAGE_KEYS, 0)

    def on_event(self, event: Event) -> None:
        """Note tool starts/ends and add up usage."""
        if event.user_id != self.user_id:
            return
        data = event.data
        if event.type == "tool_start":
            self.tool_calls[data.get("id") or str(len(self.tool_calls))] = {
                "name": data.get("name"),
                "args": data.get("args"),
                "status": "running",
            }
        elif event.type == "tool_end" and data.get("id") in self.tool_calls:
            self.tool_calls[data["id"]]["status"] = data.get("status") or "success"
        elif event.type == "message_end":
            for key in USAGE_KEYS:
                self.usage[key] += int((data.get("usage") or {}).get(key) or 0)


def _follow(view: PlainAnswer, user_id: int):
    def on_event(event: Event) -> None:
        if event.user_id != user_id:
            return
        if event.type == "message_delta":
            view.delta(event.data.get("text", ""))
        elif event.type == "message_reset":
            view.reset(event.data.get("restarted_on"))

    return on_event


DECLINED_NOTE = "(declined: nobody could approve it here; `panager ask --yes` approves)"
MAX_QUESTIONS = 10  # one turn may ask again after an answer; this bounds the loop


async def ask_once(
    settings: Settings, text: str, *, as_json: bool = False, yes: bool = False
) -> bool:
    """One turn (or command) for the local user; prints the answer; returns success.

    A question the turn asks is answered at once: deny, or approve with `yes`."""
    app = await App.start(settings)
    try:
        user = await app.local_user()
        if is_command(text):
            ctx = CommandContext(user=user, assistant=app.assistant, front_end="terminal")
            reply = await dispatch(ctx, text)
            _print_result(reply.text, reply.ok, reply.link, None, as_json)
            return reply.ok
        turn = TurnLog(user.id)
        app.emitter.subscribe(turn.on_event)
        view = PlainAnswer()
        if not as_json:
            app.emitter.subscribe(_follow(view, user.id))
        result = await app.assistant.run_turn(user, text)
        for _ in range(MAX_QUESTIONS):
            question = result.question
            if question is None:
                break
            if not as_json:
                view.finish(result.text)
                print("(approved with --yes)" if yes else DECLINED_NOTE, flush=True)
                view = PlainAnswer()
            verdict = APPROVE if yes else DENY
            decisions = {call.id: verdict for call in question.calls}
            result = await app.assistant.answer(user, question.key, decisions)
        if as_json:
            _print_result(result.text, result.ok, result.link, turn, as_json)
        else:
            view.finish(result.text)
            _print_result(None, result.ok, result.link, None, False)
        return result.ok
    finally:
        await app.stop()


def _print_result(text, ok, link, turn: TurnLog | None, as_json: bool) -> None:
    if as_json:
        body = {
            "answer": text,
            "ok": ok,
            "tool_calls": list(turn.tool_calls.values()) if turn else [],
            "usage": turn.usage if turn else dict.fromkeys(USAGE_KEYS, 0),
            "link": link,
        }
        sys.stdout.write(json.dumps(body, ensure_ascii=False, default=str) + "\n")
        return
    if text is not None:
        print(text)
    if link:
        print(f"{link.get('label', 'Link')}: {link['url']}")
