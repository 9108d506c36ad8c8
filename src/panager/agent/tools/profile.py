"""Profile tools: the user's time zone."""

from __future__ import annotations

from zoneinfo import ZoneInfo, available_timezones

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.tools.base import ORDINARY, tool
from panager.errors import ToolError
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

    return [set_timezone]


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
