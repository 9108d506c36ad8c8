"""From the YAML `effects:` list (and `context_window`) to effect instances.

```yaml
context_window: 32000          # tokens; omit for the built-in per model family; 0 = no compaction
daily_token_budget: 200000     # the default: token_budget for non-admins; 0 = unlimited
effects:                       # omit for the defaults; [] for none
  - kind: trim_tool_results
    params: {max_result_length: 500, preserve_recent: 4}
  - kind: compact
    params: {threshold: 0.8, target: 0.4}
  - kind: token_budget
    params: {daily_tokens: 200000, warn_at: 0.8}
  - kind: loop_detect
    params: {max_repeats: 3}
```

With no `effects` key: `token_budget` unless `daily_token_budget` is 0, and
`trim_tool_results` + `compact` when the context window is known (configured,
or built in for the model's family). Effects run in list order, before and
after each model call; the usage recorder always runs first.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from panager.agent.graph.effects import Effect, ModelCall
from panager.agent.graph.effects.budget import TokenBudget
from panager.agent.graph.effects.compact import Compact
from panager.agent.graph.effects.loop_detect import LoopDetect
from panager.agent.graph.effects.trim import TrimToolResults
from panager.agent.graph.effects.windows import context_window_for
from panager.config import ConfigError, EffectSpec, RuntimeConfig
from panager.model_router import answered_by

if TYPE_CHECKING:
    from panager.clock import Clock
    from panager.services.memory.service import MemoryService
    from panager.services.usage import UsageService

log = logging.getLogger(__name__)

class EffectKind(Protocol):
    """An effect class: the parameters its YAML entry may set, and its constructor."""

    @property
    def params(self) -> tuple[str, ...]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Effect: ...


EFFECT_KINDS: dict[str, EffectKind] = {
    "trim_tool_results": TrimToolResults,
    "compact": Compact,
    "token_budget": TokenBudget,
    "loop_detect": LoopDetect,
}


class UsageRecorder:
    """Adds each model call's tokens to `token_usage` (always on; not configurable)."""

    name = "usage"

    def __init__(self, usage: UsageService | None) -> None:
        self.usage = usage

    async def before_model(self, call: ModelCall) -> None:
        """Nothing before the call."""

    async def after_model(self, call: ModelCall) -> None:
        """Record the reply's usage metadata for the user, today, this model."""
        if self.usage is None or call.response is None or not call.response.usage_metadata:
            return
        try:
            name = answered_by(call.response, call.model_name)  # a fallback's, if one answered
            await self.usage.record(call.user, name, dict(call.response.usage_metadata))
        except Exception:
            log.exception("could not record token usage for user %s", call.user.id)


def resolve_context_window(config: RuntimeConfig, model_name: str | None) -> int | None:
    """The configured window (0 → None: compaction off), else the model family's."""
    if config.context_window is not None:
        return config.context_window or None
    return context_window_for(model_name)


def default_specs(config: RuntimeConfig, model_name: str | None) -> list[EffectSpec]:
    """The effects used when the config lists none."""
    specs = []
    if config.daily_token_budget:
        specs.append(EffectSpec(kind="token_budget"))
    if resolve_context_window(config, model_name):
        specs += [EffectSpec(kind="trim_tool_results"), EffectSpec(kind="compact")]
    return specs


def build_effect(spec: EffectSpec, config: RuntimeConfig, services: EffectServices) -> Effect:
    """One effect from its spec; a bad kind or parameter raises ConfigError (one line)."""
    cls = EFFECT_KINDS.get(spec.kind)
    if cls is None:
        kinds = ", ".join(EFFECT_KINDS)
        raise ConfigError(f"effects: unknown kind {spec.kind!r}; use one of: {kinds}.")
    unknown = sorted(set(spec.params) - set(cls.params))
    if unknown:
        valid = ", ".join(cls.params)
        raise ConfigError(
            f"effects: {spec.kind} has no parameter {unknown[0]!r}; valid: {valid}."
        )
    try:
        return cls(**spec.params, **_injected(spec.kind, config, services))
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"effects: {spec.kind}: {exc}.") from None


@dataclass(frozen=True)
class EffectServices:
    """The services effects use (usage for budgets and summaries, memory for compaction)."""

    usage: UsageService | None = None
    memory: MemoryService | None = None
    exempt: Callable[[int], Awaitable[bool]] | None = None  # no daily token budget (admins)
    clock: Clock | None = None  # when compactions ran (shown by /debug)


def _injected(kind: str, config: RuntimeConfig, services: EffectServices) -> dict[str, Any]:
    """What an effect gets from the app rather than from YAML."""
    if kind == "compact":
        return {
            "history_max_tokens": config.history_max_tokens,
            "usage": services.usage,
            "memory": services.memory,
            "clock": services.clock,
        }
    if kind == "token_budget":
        return {"usage": services.usage, "exempt": services.exempt}
    return {}


def build_effects(
    config: RuntimeConfig, services: EffectServices, model_name: str | None = None
) -> list[Effect]:
    """The configured effects (or the defaults), in order."""
    specs = config.effects if config.effects is not None else default_specs(config, model_name)
    effects = []
    for spec in specs:
        params = dict(spec.params)
        if spec.kind == "token_budget":
            params.setdefault("daily_tokens", config.daily_token_budget)
        if spec.kind == "compact" and config.context_window is not None:
            params.setdefault("context_window", config.context_window)
        effects.append(build_effect(EffectSpec(kind=spec.kind, params=params), config, services))
    return effects
