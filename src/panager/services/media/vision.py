"""Which models can see images: a table of model families, overridden per model name.

The table names families known to take OpenAI-style `image_url` content parts.
A local server's model name says little (`llava`, `qwen2.5-vl` do; `llama3.1`
does not), so the YAML config's `vision: {model-name: true|false}` decides for
any name; `panager doctor` prints the answer for the configured model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SEEING = re.compile(
    r"(gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|chatgpt-4o|o1(?!-mini)|o3|o4"
    r"|claude-3|claude-(sonnet|opus|haiku)-4|gemini|llava|bakllava|moondream|minicpm-v"
    r"|qwen2(\.5)?-vl|qwen-vl|qwen3-vl|llama3\.2-vision|llama-3\.2-.*vision|llama-4"
    r"|gemma3|gemma-3|pixtral|mistral-small-3|internvl|phi-3\.5-vision|phi-4-multimodal"
    r"|granite3\.2-vision|grok-(2-)?vision|vision)",
    re.IGNORECASE,
)
_BLIND = re.compile(r"(gpt-3\.5|o1-mini|o3-mini|embedding|whisper|tts)", re.IGNORECASE)


def sees_images(model_name: str, overrides: Mapping[str, bool] | None = None) -> bool:
    """Whether `model_name` takes images: the config's answer for it, else the table."""
    if overrides and model_name in overrides:
        return bool(overrides[model_name])
    bare = model_name.rsplit("/", 1)[-1]  # "openai/gpt-4o" on OpenRouter
    return bool(_SEEING.search(bare)) and not _BLIND.search(bare)
