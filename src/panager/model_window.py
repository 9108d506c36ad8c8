"""The context window a model is actually served with, asked of the serving endpoint.

Local servers say how long a prompt they accept, each in its own way:

- vLLM: `GET /v1/models` → the model's `max_model_len`;
- Ollama: `POST /api/show` → `num_ctx` in `parameters` (the Modelfile's
  setting), capped by `model_info.<arch>.context_length`; `GET /api/ps` →
  `context_length` of the loaded model (what it runs with right now). Without
  either, Ollama serves `OLLAMA_DEFAULT_CTX` tokens whatever the model could
  do, and silently drops the start of a longer prompt — the system prompt;
- LM Studio: `GET /api/v0/models` → `loaded_context_length` (else
  `max_context_length`);
- llama.cpp's server: `GET /props` → `default_generation_settings.n_ctx`.

Hosted APIs (no `OPENAI_BASE_URL`) are not asked: the name table covers them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

import aiohttp

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 3.0
OLLAMA_DEFAULT_CTX = 4096  # Ollama's default num_ctx (it was 2048 before 0.6)


@dataclass(frozen=True)
class ServedWindow:
    """A window in tokens and where it was read."""

    tokens: int
    source: str


def server_root(base_url: str) -> str:
    """`http://host:11434/v1/` → `http://host:11434` (the native API's root)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


def _positive(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def _same_model(entry_id: str, model: str) -> bool:
    a, b = entry_id.lower(), model.lower()
    return a == b or (a.split(":", 1)[0] == b and ":" not in b)


def vllm_window(body: Any, model: str) -> ServedWindow | None:
    """`max_model_len` of `model` in an OpenAI-style model list (vLLM)."""
    entries = body.get("data") if isinstance(body, dict) else None
    for entry in entries or []:
        if isinstance(entry, dict) and _same_model(str(entry.get("id", "")), model):
            tokens = _positive(entry.get("max_model_len"))
            if tokens:
                return ServedWindow(tokens, "vLLM max_model_len")
    return None


def lmstudio_window(body: Any, model: str) -> ServedWindow | None:
    """LM Studio's loaded (else maximum) context length of `model`."""
    entries = body.get("data") if isinstance(body, dict) else None
    for entry in entries or []:
        if not isinstance(entry, dict) or not _same_model(str(entry.get("id", "")), model):
            continue
        loaded = _positive(entry.get("loaded_context_length"))
        if loaded:
            return ServedWindow(loaded, "LM Studio loaded_context_length")
        most = _positive(entry.get("max_context_length"))
        if most:
            return ServedWindow(most, "LM Studio max_context_length (model not loaded)")
    return None


def ollama_window(show: Any, running: Any, model: str) -> ServedWindow | None:
    """What Ollama serves `model` with: loaded context, else num_ctx, else its default."""
    if not isinstance(show, dict):
        return None
    info = show.get("model_info") or {}
    maximum = next(
        (_positive(v) for k, v in info.items() if k.endswith(".context_length")), None
    )
    for entry in (running or {}).get("models") or []:
        if isinstance(entry, dict) and _same_model(str(entry.get("name", "")), model):
            loaded = _positive(entry.get("context_length"))
            if loaded:
                return ServedWindow(loaded, "Ollama context_length of the loaded model")
    found = re.search(r"^\s*num_ctx\s+(\d+)", str(show.get("parameters") or ""), re.M)
    if found:
        tokens = int(found.group(1))
        return ServedWindow(min(tokens, maximum or tokens), "Ollama num_ctx")
    tokens = min(OLLAMA_DEFAULT_CTX, maximum or OLLAMA_DEFAULT_CTX)
    return ServedWindow(tokens, "Ollama default num_ctx (set num_ctx or OLLAMA_CONTEXT_LENGTH)")


def llamacpp_window(body: Any) -> ServedWindow | None:
    """llama.cpp server's per-slot context from `/props`."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings") or {}
    tokens = _positive(settings.get("n_ctx")) or _positive(body.get("n_ctx"))
    return ServedWindow(tokens, "llama.cpp n_ctx") if tokens else None


async def _get(session: aiohttp.ClientSession, url: str, json: Any = None) -> Any:
    """GET (or POST `json`) → parsed JSON, or None on any failure."""
    try:
        method = session.post if json is not None else session.get
        async with method(url, json=json) as response:
            if response.status != 200:
                return None
            return await response.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def _probe(session: aiohttp.ClientSession, base_url: str, model: str) -> ServedWindow | None:
    root = server_root(base_url)
    found = vllm_window(await _get(session, base_url.rstrip("/") + "/models"), model)
    if found:
        return found
    show = await _get(session, f"{root}/api/show", json={"model": model})
    if show is not None:
        return ollama_window(show, await _get(session, f"{root}/api/ps"), model)
    found = lmstudio_window(await _get(session, f"{root}/api/v0/models"), model)
    return found or llamacpp_window(await _get(session, f"{root}/props"))


async def served_window(
    base_url: str | None, model: str, api_key: str | None = None
) -> ServedWindow | None:
    """The window the endpoint at `base_url` serves `model` with, or None when it does not say."""
    if not base_url:
        return None
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    client_timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=client_timeout, headers=headers) as session:
            return await asyncio.wait_for(_probe(session, base_url, model), PROBE_TIMEOUT * 2)
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.debug("could not read the context window from %s: %s", base_url, exc)
        return None
