"""Context windows (tokens) per model, for when the config names none.

In order: what the serving endpoint said at start (`remember_served`, read by
panager/model_window.py: vLLM, Ollama, LM Studio, llama.cpp), else the
built-in table of model families, else `DEFAULT_WINDOW` — conservative, so
compaction stays on for a model nobody knows. Table matching ignores a
provider prefix (`openai/gpt-4o` on OpenRouter) and an Ollama tag
(`llama3.1:8b`); the longest matching family prefix wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from panager.endpoints import model_endpoints

DEFAULT_WINDOW = 8_192

KNOWN_WINDOWS: dict[str, int] = {
    "gpt-5": 400_000,
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini": 1_000_000,
    "llama3.1": 128_000,
    "llama3.2": 128_000,
    "llama3.3": 128_000,
    "llama3": 8_192,
    "qwen2.5": 32_768,
    "qwen3": 32_768,
    "mistral": 32_768,
    "mixtral": 32_768,
    "gemma3": 128_000,
    "gemma2": 8_192,
    "deepseek": 64_000,
}




@dataclass(frozen=True)
class Window:
    """A context window and where it came from (shown by doctor, /model and /debug)."""

    tokens: int
    source: str


_SERVED: dict[str, Window] = {}


def remember_served(model_name: str, tokens: int, source: str) -> None:
    """Record the window the endpoint serves `model_name` with (read once at start)."""
    _SERVED[model_name] = Window(tokens, f"server: {source}")


def table_window(model_name: str | None) -> int | None:
    """The built-in window of `model_name`'s family, or None when unknown."""
    if not model_name:
        return None
    name = model_name.lower().rsplit("/", 1)[-1].split(":", 1)[0]
    matches = [family for family in KNOWN_WINDOWS if name.startswith(family)]
    return KNOWN_WINDOWS[max(matches, key=len)] if matches else None


def window_for(model_name: str | None) -> Window:
    """Served window, else the family's, else the conservative default (never unknown)."""
    if model_name and model_name in _SERVED:
        return _SERVED[model_name]
    tokens = table_window(model_name)
    if tokens:
        return Window(tokens, "built-in table of model names")
    return Window(DEFAULT_WINDOW, "default for an unknown model")


def known_window(model_name: str | None) -> int | None:
    """The served or built-in window of `model_name`; None when neither knows it."""
    if model_name and model_name in _SERVED:
        return _SERVED[model_name].tokens
    return table_window(model_name)


def context_window_for(model_name: str | None) -> int:
    """The window in tokens for `model_name` (see `window_for`)."""
    return window_for(model_name).tokens


async def learn_served_window(settings: Any) -> Window:
    """Ask the configured endpoint for the default model's window; returns what now applies.

    A window set in the config wins and nothing is asked."""
    configured = settings.runtime.context_window
    if configured is not None:
        return Window(configured, "config context_window" if configured else "config: off")
    for endpoint in model_endpoints(settings).by_name.values():  # `models: {NAME: {…}}`
        if endpoint.context_window:
            _SERVED[endpoint.model] = Window(
                endpoint.context_window, f"config models.{endpoint.name}.context_window")
    from panager.model_window import served_window

    found = await served_window(settings.openai_base_url, settings.model, settings.openai_api_key)
    if found is not None:
        remember_served(settings.model, found.tokens, found.source)
    return window_for(settings.model)
