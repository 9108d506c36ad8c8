"""Runtime commands: /usage, /model, /debug, /compact."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from langchain_core.messages import RemoveMessage
from langchain_core.messages.utils import count_tokens_approximately

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.graph.effects.budget import TokenBudget
from panager.agent.graph.effects.summary import summary_tainted
from panager.agent.graph.effects.windows import window_for
from panager.agent.models import current_model
from panager.agent.turns.threads import thread_values, update_thread
from panager.endpoints import model_endpoints
from panager.services.usage import ModelUsage, UsageReport

MODEL_NAME_RE = re.compile(r"^[\w.:/@+-]{1,100}$")
RESET_WORDS = {"default", "reset", "none"}


def _usage_lines(title: str, rows: list[ModelUsage]) -> list[str]:
    total = UsageReport.total(rows)
    lines = [f"{title}: {total:,} tokens"]
    lines += [
        f"  {r.model}: {r.prompt:,} prompt + {r.completion:,} completion ({r.calls:,} calls)"
        for r in rows
    ]
    return lines


@command("usage", "/usage", "tokens used today, this month and in total, per model")
async def usage_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show the user's token usage per model."""
    usage = ctx.deps.usage
    report = await usage.report(ctx.user)
    lines = _usage_lines(f"Today ({usage.today():%Y-%m-%d}, UTC)", report.today)
    lines += _usage_lines("This month", report.month)
    lines += _usage_lines("All time", report.all_time)
    budget = ctx.deps.config.daily_token_budget
    if budget:
        used = UsageReport.total(report.today)
        lines.append(f"Daily budget: {used:,} of {budget:,} tokens ({100 * used // budget}%).")
    return "\n".join(lines)


def allowed_models(ctx: CommandContext) -> list[str]:
    """Models non-admins may pick, by name: `allowed_models`, else the default endpoint."""
    return model_endpoints(ctx.deps.settings).pickable(admin=False)


def _current_model(ctx: CommandContext) -> str:
    """The model the caller's turns use now (a stored choice no longer permitted is not;
    a model id stored before endpoints had names is shown as the endpoint serving it)."""
    return current_model(ctx.deps, ctx.user)


@command("model", "/model [name|default]", "show or choose your chat model")
async def model_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Show the user's model, or set a per-user override (`default` clears it)."""
    endpoints = model_endpoints(ctx.deps.settings)
    if not args:
        name = _current_model(ctx)
        origin = "your choice" if name != endpoints.default else "the instance default"
        endpoint = endpoints.resolve(name)
        window = window_for(endpoint.model if endpoint else name)
        size = f"; context window {window.tokens:,} tokens, {window.source}"
        admin = await ctx.deps.access.is_admin(ctx.user.id)
        choices = ", ".join(endpoints.pickable(admin))
        return (f"Model: {name} ({origin}{size}). Models you can choose: {choices}. "
                "Change it with /model NAME.")
    if args.lower() in RESET_WORDS:
        await ctx.deps.users.set_model(ctx.user.id, None)
        return f"Back to the instance default model, {endpoints.default}."
    if not MODEL_NAME_RE.match(args):
        return CommandReply(
            "That does not look like a model name (letters, digits and . : / @ + - _ only).",
            ok=False,
        )
    allowed = allowed_models(ctx)
    if not await ctx.deps.access.is_admin(ctx.user.id) and endpoints.canonical(args) not in allowed:
        return CommandReply(
            f"{args} is not available here. Models you can choose: {', '.join(allowed)} "
            "(the operator sets allowed_models in the config).",
            ok=False,
        )
    args = endpoints.canonical(args) or args
    await ctx.deps.users.set_model(ctx.user.id, args)
    return f"Model set to {args} for your conversations. If it does not exist, /model default."


def _window_line(ctx: CommandContext, configured: int | None) -> str:
    """The context window the user's model is given, and where that number came from."""
    if ctx.deps.config.context_window == 0:
        return "context window: compaction off (context_window: 0)"
    if ctx.deps.config.context_window:
        return f"context window: {configured:,} tokens (config context_window)"
    window = window_for(_current_model(ctx))
    return f"context window: {window.tokens:,} tokens ({window.source})"


def _compactions_line(values: dict, zone: Any) -> str:
    """How many summarising calls this conversation made, and when the latest ran."""
    count = int(values.get("compactions") or 0)
    if not count:
        return "compactions: none"
    line = f"compactions: {count} (summarising model calls, counted in usage)"
    try:
        last = datetime.fromisoformat(str(values.get("last_compaction")))
    except ValueError:
        return line
    return line + f"; last {last.astimezone(zone):%Y-%m-%d %H:%M:%S}"


@command("debug", "/debug", "snapshot of the conversation state")
async def debug_command(ctx: CommandContext, args: str) -> str:
    """Message count, token estimate, summary, loaded skills, usage and recent actions."""
    values = await thread_values(ctx.assistant, ctx.user)
    messages = values.get("messages", [])
    summary = values.get("summary") or ""
    runtime = ctx.deps.runtime
    lines = [
        f"model: {_current_model(ctx)}",
        f"messages: {len(messages)} (≈ {count_tokens_approximately(messages):,} tokens)",
        "summary: " + (f"{len(summary):,} chars — {summary[:300]}" if summary else "none"),
        _compactions_line(values, ctx.user.zone),
        "loaded skills: " + (", ".join(values.get("loaded_skills") or []) or "none"),
    ]
    lines.append(_window_line(ctx, runtime.context_window))
    lines.append("effects: " + (", ".join(e.name for e in runtime.effects) or "none"))
    today = (await ctx.deps.usage.report(ctx.user)).today
    per_model = ", ".join(f"{r.model} {r.total:,}" for r in today) or "none"
    lines.append(f"usage today: {UsageReport.total(today):,} tokens ({per_model})")
    actions = runtime.activity.recent(ctx.user.id)
    lines.append("recent actions:" if actions else "recent actions: none")
    zone = ctx.user.zone
    lines += [f"  {a.at.astimezone(zone):%H:%M:%S} {a.text}" for a in actions[-10:]]
    return "\n".join(lines)


async def _over_budget(ctx: CommandContext) -> str | None:
    """The token_budget effect's refusal for the caller, when it is configured and spent."""
    for effect in ctx.deps.runtime.effects:
        if isinstance(effect, TokenBudget):
            return await effect.refusal(ctx.user)
    return None


@command("compact", "/compact", "summarise older messages now to free context")
async def compact_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Run compaction on demand: summarise and remove all but the recent messages.

    The summary is a model call, so it is refused like a turn once the daily budget is used."""
    refused = await _over_budget(ctx)
    if refused is not None:
        return CommandReply(refused, ok=False)
    values = await thread_values(ctx.assistant, ctx.user)
    messages = values.get("messages", [])
    assistant = ctx.assistant
    model = assistant.model_for(ctx.user)
    name = _current_model(ctx)
    compactor = ctx.deps.runtime.compactor
    result = await compactor.compact(
        ctx.user, model, name, messages, values.get("summary"),
        keep_tokens=compactor.on_demand_keep(name), budget=compactor.usable_window(name),
    )
    if result is None or not result.removed:
        return "Nothing to compact yet: the conversation is short."
    removals = [RemoveMessage(id=m.id) for m in result.removed if m.id]  # stored: all have ids
    update = {
        "messages": [*removals, *result.shortened],
        **compactor.stats_patch(values, result),
        "summary_tainted": summary_tainted(values, result.removed),
    }
    if not await update_thread(assistant, ctx.user, update, unless_asking=True):
        return "A question from me is still open; answer it first, then /compact."
    kept = len(messages) - len(result.removed)
    how = "deterministic digest (the summariser failed)" if result.fallback else "summary"
    saved = f"; saved {len(result.memories)} memories" if result.memories else ""
    return (
        f"Compacted: removed {len(result.removed)} older messages, kept {kept}; "
        f"{how} of {len(result.summary):,} chars{saved}."
    )
