"""Skills: /skills lists them (marking loaded ones), /skill NAME loads one."""

from __future__ import annotations

from panager.agent.commands.base import CommandContext, CommandReply, command
from panager.agent.turns.threads import thread_values, update_thread
from panager.services.skills import MAX_SKILL_BYTES, SkillError, SkillLibrary

DISABLED = "Skills are turned off in this instance (skills: false in the config)."


def _library(ctx: CommandContext) -> SkillLibrary:
    return ctx.deps.runtime.skills


@command("skills", "/skills", "list the available skills")
async def skills_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Installed skills, with ✓ for those loaded into this conversation."""
    library = _library(ctx)
    if not library.enabled:
        return CommandReply(DISABLED, ok=False)
    skills = library.list()
    if not skills:
        return (
            "No skills installed. The operator adds them as skills/<name>/SKILL.md "
            "under PANAGER_HOME."
        )
    loaded = set((await thread_values(ctx.assistant, ctx.user)).get("loaded_skills") or [])
    lines = ["Skills (✓ = loaded; load one with /skill NAME):"]
    for s in skills:
        mark = "✓" if s.name in loaded else " "
        lines.append(f"  {mark} {s.name}" + (f" — {s.description}" if s.description else ""))
    return "\n".join(lines)


@command("skill", "/skill NAME", "load a skill into this conversation")
async def skill_command(ctx: CommandContext, args: str) -> CommandReply | str:
    """Add a skill to the conversation (≤ 4 KB; refused names and duplicates are reported)."""
    library = _library(ctx)
    if not library.enabled:
        return CommandReply(DISABLED, ok=False)
    name = args.strip()
    if not name:
        return CommandReply("Which skill? /skills lists them.", ok=False)
    try:
        skill = library.read(name)
    except SkillError as exc:
        available = ", ".join(s.name for s in library.list()) or "none installed"
        return CommandReply(f"{exc} Available: {available}.", ok=False)
    loaded = list((await thread_values(ctx.assistant, ctx.user)).get("loaded_skills") or [])
    if name in loaded:
        return f"Skill {name} is already loaded; skipped."
    await update_thread(ctx.assistant, ctx.user, {"loaded_skills": [*loaded, name]})
    if skill.truncated:
        return (
            f"Loaded skill {name}, but it is {skill.size / 1024:.1f} KB: only the first "
            f"{MAX_SKILL_BYTES // 1024} KB were loaded."
        )
    return f"Loaded skill {name} ({skill.size:,} bytes) into this conversation."
