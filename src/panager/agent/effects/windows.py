"""Built-in context windows (tokens) per model family, for when the config names none.

Matching ignores a provider prefix (`openai/gpt-4o` on OpenRouter) and an
Ollama tag (`llama3.1:8b`); the longest matching family prefix wins. Unknown
models get None: compaction then needs `context_window` in the config.
"""

from __future__ import annotations

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


def context_window_for(model_name: str | None) -> int | None:
    """The built-in window of `model_name`'s family, or None when unknown."""
    if not model_name:
        return None
    name = model_name.lower().rsplit("/", 1)[-1].split(":", 1)[0]
    matches = [family for family in KNOWN_WINDOWS if name.startswith(family)]
    return KNOWN_WINDOWS[max(matches, key=len)] if matches else None
