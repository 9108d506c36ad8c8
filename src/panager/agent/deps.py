"""What tools and slash commands may use: services, settings, clock. Built once by the app."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from panager.clock import Clock
from panager.config import RuntimeConfig, Settings
from panager.services.users import UserService


@dataclass
class AgentDeps:
    """Shared services; per-user tools close over one user plus these."""

    settings: Settings
    config: RuntimeConfig
    clock: Clock
    users: UserService
    pool: Any = None
    memory: Any = None  # services.memory.MemoryService
    scheduler: Any = None  # services.scheduler.ScheduleService
    google: Any = None  # services.google.GoogleService
    usage: Any = None  # services.usage.UsageService
    messenger: Any = None  # agent.messaging.FanoutMessenger (delivery to users)
    extra: dict[str, Any] = field(default_factory=dict)
