"""Task tools (SPEC §2), written once against the provider contract's `Tasks`.

The person's task account is the first connected one that can (Google's
default list today); a task id names its account (an unqualified id is
Google's). Listings and changed tasks are the server's text: framed as
outside content. Questions about a change or deletion show the task as held
now. Offering (and `google_load`) is shared with the calendar tools
(calendar.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.tools import BaseTool

from panager.agent.deps import AgentDeps
from panager.agent.graph.tool import (
    CONSEQUENTIAL,
    ORDINARY,
    Lookup,
    looks_up,
    shown_text,
    tool,
)
from panager.agent.tools.provided import (
    accounts_of,
    compact,
    day_of,
    describe_change,
    limited,
    local,
    lookup_source,
    new_values,
    own_id,
    parse_time,
    short,
    source_of,
    thing,
    title_text,
)
from panager.errors import ToolError
from panager.framing import frame
from panager.services.accounts.provider import Capability, NewTask, Provider, Task, TaskChange
from panager.services.users import User


def task_change(
    title: str | None, notes: str | None, due: str | None, completed: bool | None, zone: Any
) -> TaskChange:
    """What task_update changes; an empty due clears the due date."""
    change = TaskChange(
        title=title_text(title) if title is not None else None,
        notes=limited(notes, "notes"),
        due=day_of(parse_time(due, zone, "due"), zone) if due else None,
        clear_due=due is not None and not due,
        completed=completed,
    )
    if not change:
        raise ToolError("Nothing to change: give title, notes, due or completed.")
    return change


def task_view(task: Task, zone: Any) -> dict:
    """The compact form of a task the model reads."""
    return compact(
        {
            "id": task.id,
            "title": task.title or "(no title)",
            "due": task.due.isoformat() if task.due else None,
            "notes": short(task.notes),
            "done": task.done,
            "completed_at": local(task.completed_at, zone) if task.completed_at else None,
            "parent": task.parent,
        }
    )


def task_tools(deps: AgentDeps, user: User) -> list[BaseTool]:
    """The four task tools for `user`."""
    zone = user.zone

    async def task_account(
        task_id: str = "", capability: Capability = Capability.TASKS_WRITE
    ) -> tuple[Provider, Any, str]:
        accounts = accounts_of(deps)
        provider, _, tasks = await accounts.tasks_for(user.id, task_id, capability)
        return provider, tasks, own_id(task_id, accounts.names)

    @tool(classify=ORDINARY)
    async def task_list(show_completed: bool = False) -> str:
        """List the user's tasks with their ids (open ones unless show_completed)."""
        provider, tasks, _ = await task_account(capability=Capability.TASKS_READ)
        found = await tasks.tasks(show_completed)
        result: dict[str, Any] = {"count": len(found.tasks),
                                  "tasks": [task_view(t, zone) for t in found.tasks]}
        if found.truncated:
            result["truncated"] = f"only the first {len(found.tasks)} tasks are shown"
        return frame(source_of([provider], "Tasks"), result)

    @tool(classify=ORDINARY)
    async def task_create(title: str, due: str | None = None, notes: str | None = None) -> dict:
        """Add a task; due is an ISO 8601 date."""
        when = day_of(parse_time(due, zone, "due"), zone) if due else None
        task = NewTask(title_text(title), when, limited(notes, "notes") or None)
        _, tasks, _ = await task_account()
        return {"ok": True, "task": task_view(await tasks.create(task), zone)}

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Change the task", "task_id"))
    async def task_update(
        task_id: str,
        title: str | None = None,
        notes: str | None = None,
        due: str | None = None,
        completed: bool | None = None,
    ) -> str:
        """Change a task by task_id (due '' clears the date)."""
        change = task_change(title, notes, due, completed, zone)
        provider, tasks, ident = await task_account(task_id)
        made = await tasks.update(ident, change)
        return frame(source_of([provider], "Tasks"), {"ok": True, "task": task_view(made, zone)})

    @tool(classify=CONSEQUENTIAL, describe=describe_change("Delete the task", "task_id"))
    async def task_delete(task_id: str) -> dict:
        """Delete a task by its task_id."""
        _, tasks, ident = await task_account(task_id)
        await tasks.delete(ident)
        return {"ok": True, "deleted": task_id.strip()}

    made: list[BaseTool] = [task_list, task_create, task_update, task_delete]
    described_by_lookups(deps, user, {t.name: t for t in made})
    return made


def described_by_lookups(deps: AgentDeps, user: User, tools: Mapping[str, BaseTool]) -> None:
    """Questions about task_update and task_delete name the task as held now."""
    source = lookup_source(deps, Capability.TASKS_READ)

    async def task_lines(task_id: str) -> list[str]:
        accounts = accounts_of(deps)
        provider, account, tasks = await accounts.tasks_for(user.id, task_id,
                                                            Capability.TASKS_WRITE)
        task = await tasks.task(own_id(task_id, accounts.names))
        return [
            f"  - title: {shown_text(task.title)}",
            f"  - due: {task.due.isoformat() if task.due else 'none'}",
            f"  - list: {shown_text('My Tasks (default list)')} of {provider.title} account "
            f"{shown_text(account.label)}",
            f"  - notes: {shown_text(task.notes or '')}",
            f"  - status: {'completed' if task.done else 'needsAction'}",
            f"  - (task id {shown_text(task_id)})",
        ]

    async def describe_task_change(args: Mapping[str, Any]) -> str:
        lines = ["Change this task:", *await task_lines(str(args.get("task_id", "")).strip())]
        return "\n".join(lines + new_values(args, ("task_id",)))

    async def describe_task_delete(args: Mapping[str, Any]) -> str:
        return "\n".join(["Delete this task:",
                          *await task_lines(str(args.get("task_id", "")).strip())])

    looks_up(tools["task_update"], Lookup(describe_task_change, thing("task", "task_id"), source))
    looks_up(tools["task_delete"], Lookup(describe_task_delete, thing("task", "task_id"), source))
