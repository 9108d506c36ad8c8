"""Tasks in the provider contract: task lists, tasks, changes and the `Tasks` protocol.

See provider.py for the rules every type here follows (ids, errors).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from typing import Protocol


@dataclass(frozen=True)
class TaskListInfo:
    """One task list of one account."""

    id: str  # provider-qualified
    name: str
    account: str
    provider: str
    default: bool = False


@dataclass(frozen=True)
class Task:
    """One task as the server holds it now."""

    id: str  # opaque, provider-qualified
    title: str
    account: str = ""
    due: date | None = None
    notes: str | None = None
    done: bool = False
    completed_at: datetime | None = None
    parent: str | None = None
    version: str = ""


@dataclass(frozen=True)
class NewTask:
    """A task to add to the default list."""

    title: str
    due: date | None = None
    notes: str | None = None


@dataclass(frozen=True)
class TaskChange:
    """Fields to change; None keeps a field, `clear_due` removes the due date."""

    title: str | None = None
    notes: str | None = None
    due: date | None = None
    clear_due: bool = False
    completed: bool | None = None

    def __bool__(self) -> bool:
        return (
            any(v is not None for v in (self.title, self.notes, self.due, self.completed))
            or self.clear_due
        )


@dataclass(frozen=True)
class TaskListing:
    """Tasks of the default list."""

    tasks: list[Task]
    truncated: bool = False


class Tasks(Protocol):
    """One account's tasks (the default list, as the tools know it)."""

    async def lists(self) -> list[TaskListInfo]:
        """The account's task lists, the default one marked."""
        ...

    async def tasks(self, show_completed: bool = False) -> TaskListing:
        """Tasks of the default list (open ones unless `show_completed`)."""
        ...

    async def task(self, task_id: str) -> Task:
        """One task as held now (`NotFound` when gone)."""
        ...

    async def create(self, task: NewTask) -> Task:
        """Add a task to the default list."""
        ...

    async def update(self, task_id: str, change: TaskChange) -> Task:
        """Change a task (`NotFound` when gone)."""
        ...

    async def complete(self, task_id: str) -> Task:
        """Mark a task done."""
        ...

    async def delete(self, task_id: str) -> None:
        """Delete a task (`NotFound` when gone)."""
        ...
