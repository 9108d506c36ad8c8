"""Profile tools: the user's time zone and their standing profile (SPEC §2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal
from zoneinfo import ZoneInfo, available_timezones

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    CallView,
    Lookup,
    ToolClass,
    looks_up,
    shown_block,
    shown_text,
    tool,
)
from panager.errors import ToolError
from panager.services.profile import MAX_PROFILE_CHARS, ProfileInputError
from panager.services.users import User


def profile_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """Tools that change the user's own settings."""

    @tool(classify=ORDINARY)
    async def set_timezone(timezone: str) -> dict:
        """Set the user's time zone (IANA name, e.g. 'Europe/Berlin') when they say where
        they live or that times are off."""
        zone = validate_zone_name(timezone)
        await deps.users.set_timezone(user.id, zone)
        now = deps.clock.now().astimezone(ZoneInfo(zone))
        return {"ok": True, "timezone": zone, "local_time": now.strftime("%a %Y-%m-%d %H:%M")}

    tools: list[BaseTool] = [set_timezone]
    profiles = deps.profiles
    if profiles is None:
        return tools

    @tool(classify=profile_class, describe=describe_profile)
    async def profile_update(
        section: Literal["about", "people", "preferences", "instructions"], text: str
    ) -> dict:
        """Replace one section of the user's short profile, shown to you in every message.

        Sections: about (who they are), people (who matters to them), preferences,
        instructions (how they want you to work). Write the whole new section text; use
        it for lasting facts the user wants you to always know."""
        try:
            profile = await profiles.update(user.id, section, text)
        except ProfileInputError as exc:
            raise ToolError(str(exc)) from None
        return {
            "ok": True, "section": section, "text": profile.sections.get(section, ""),
            "profile_chars": profile.size, "cap": MAX_PROFILE_CHARS,
        }

    async def describe_now(args: Mapping[str, Any]) -> str:
        section = str(args.get("section", ""))
        now = (await profiles.get(user.id)).sections.get(section, "")
        return "\n".join([
            f"Replace your profile's {shown_text(section)} section (shown in every message); "
            "now it reads:", shown_block(now) if now else "(empty)", "and would read:",
            shown_block(str(args.get("text", ""))),
        ])

    looks_up(profile_update, Lookup(
        describe_now, lambda a: f"profile section {shown_text(str(a.get('section', '')))}",
        "the database"))
    tools.append(profile_update)
    return tools


def profile_class(args: Mapping[str, Any], view: CallView) -> ToolClass:
    """The profile is in every prompt and followed: a tainted call may not write it alone."""
    return CONSEQUENTIAL if view.tainted else ORDINARY


def describe_profile(args: Mapping[str, Any]) -> str:
    """The change a confirmation question shows."""
    section = str(args.get("section", ""))
    text = shown_block(str(args.get("text", "")))
    return f"Replace your profile's {shown_text(section)} section with:\n{text}"


def validate_zone_name(name: str) -> str:
    """A valid IANA zone name (case-insensitive match) or ToolError with what is valid."""
    cleaned = (name or "").strip()
    try:
        ZoneInfo(cleaned)
        if (cleaned and "/" in cleaned) or cleaned == "UTC":
            return cleaned
    except (ValueError, KeyError, OSError):
        pass
    lookup = {z.lower(): z for z in available_timezones()}
    if cleaned.lower() in lookup:
        return lookup[cleaned.lower()]
    raise ToolError(
        f"Unknown time zone {cleaned!r}. Use an IANA name like 'Europe/Berlin', "
        "'America/New_York' or 'Asia/Seoul'."
    )
