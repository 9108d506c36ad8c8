"""The context window comes from the serving endpoint (local fakes of each server's metadata).

vLLM, Ollama, LM Studio and llama.cpp each say how long a prompt they accept
in their own endpoint; the fake OpenAI server plays each. A model nobody
describes gets the conservative default, with compaction on.
"""

from __future__ import annotations

import pytest

from panager.agent.commands import CommandContext, dispatch
from panager.agent.graph.effects import windows
from panager.agent.graph.effects.registry import default_specs
from panager.agent.graph.effects.windows import DEFAULT_WINDOW, learn_served_window, window_for
from panager.config import RuntimeConfig
from panager.model_window import OLLAMA_DEFAULT_CTX, served_window, server_root
from tests.cli.test_cli import cli_env, run_cli
from tests.fakes.openai_server import FakeOpenAI, tool_call
from tests.fakes.scripted_model import ScriptedChatModel

OLLAMA_SHOW = {
    "parameters": 'stop "<|eot_id|>"\nnum_ctx 16384',
    "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
}


@pytest.fixture
async def server():
    async with FakeOpenAI() as fake:
        yield fake


@pytest.fixture(autouse=True)
def _forget_served(monkeypatch):
    monkeypatch.setattr(windows, "_SERVED", {})


async def test_vllm_max_model_len(server):
    server.model_fields["Qwen/Qwen2.5-7B-Instruct"] = {"max_model_len": 24576}
    found = await served_window(server.base_url, "Qwen/Qwen2.5-7B-Instruct")
    assert (found.tokens, found.source) == (24576, "vLLM max_model_len")


async def test_ollama_loaded_context_wins_over_num_ctx_and_the_models_maximum(server):
    server.native[("POST", "/api/show")] = OLLAMA_SHOW
    assert (await served_window(server.base_url, "llama3.1:8b")).tokens == 16384  # num_ctx
    server.native[("GET", "/api/ps")] = {
        "models": [{"name": "llama3.1:8b", "context_length": 8192}]
    }
    found = await served_window(server.base_url, "llama3.1:8b")
    assert (found.tokens, found.source) == (8192, "Ollama context_length of the loaded model")


async def test_ollama_without_num_ctx_is_its_small_default_not_the_name_tables_128k(server):
    server.native[("POST", "/api/show")] = {"parameters": "", "model_info": OLLAMA_SHOW["model_info"]}
    found = await served_window(server.base_url, "llama3.1")
    assert found.tokens == OLLAMA_DEFAULT_CTX and "OLLAMA_CONTEXT_LENGTH" in found.source
    assert window_for("llama3.1").tokens == 128_000  # what the name table alone would claim


async def test_lm_studio_loaded_context_length(server):
    server.native[("GET", "/api/v0/models")] = {
        "data": [
            {"id": "other", "loaded_context_length": 999},
            {"id": "qwen2.5-7b-instruct", "max_context_length": 32768,
             "loaded_context_length": 12000},
        ]
    }
    found = await served_window(server.base_url, "qwen2.5-7b-instruct")
    assert (found.tokens, found.source) == (12000, "LM Studio loaded_context_length")


async def test_llama_cpp_props_n_ctx(server):
    server.native[("GET", "/props")] = {"default_generation_settings": {"n_ctx": 6144}}
    found = await served_window(server.base_url, "whatever.gguf")
    assert (found.tokens, found.source) == (6144, "llama.cpp n_ctx")
    assert "GET /props" in server.native_requests


async def test_unknown_model_without_metadata_gets_the_default_with_compaction_on(server):
    found = await served_window(server.base_url, "my-local-model")
    assert found is None  # every probe answered 404 or had nothing
    window = window_for("my-local-model")
    assert (window.tokens, window.source) == (DEFAULT_WINDOW, "default for an unknown model")
    kinds = [s.kind for s in default_specs(RuntimeConfig(), "my-local-model")]
    assert "compact" in kinds
    off = RuntimeConfig(context_window=0, daily_token_budget=0)
    assert [s.kind for s in default_specs(off, "x")] == []


async def test_unreachable_endpoint_or_hosted_api_is_not_a_failure():
    assert await served_window(None, "gpt-4o") is None
    assert await served_window("http://127.0.0.1:9/v1", "llama3.1") is None
    assert server_root("http://h:11434/v1/") == "http://h:11434"


async def test_learned_window_is_used_for_that_model_and_config_wins(server, make_settings):
    server.native[("GET", "/props")] = {"default_generation_settings": {"n_ctx": 6144}}
    settings = make_settings(openai_base_url=server.base_url, openai_api_key="k", model="local")
    window = await learn_served_window(settings)
    assert (window.tokens, window.source) == (6144, "server: llama.cpp n_ctx")
    assert window_for("local").tokens == 6144 and window_for("other").tokens == DEFAULT_WINDOW


async def test_doctor_shows_the_window_its_source_and_a_tool_call(fresh_db, tmp_path, server):
    server.native[("POST", "/api/show")] = OLLAMA_SHOW
    env = cli_env(fresh_db(), tmp_path, server.base_url)
    env["PANAGER_MODEL"] = "llama3.1:8b"
    server.script(tool_call("ping_tool", {}))
    code, out, _ = await run_cli(["doctor"], env)
    lines = {x.split()[1]: x for x in out.splitlines() if x.split()}
    assert lines["window"].startswith("OK") and "16,384 tokens (server: Ollama num_ctx)" in out
    assert any(x.startswith("OK") and "calls tools" in x for x in out.splitlines()), out
    server.script("I would rather talk.")
    code, out, _ = await run_cli(["doctor"], env)
    assert code == 1 and "answered without calling the tool" in out


async def test_debug_shows_the_served_window_of_a_local_server(server, make_settings, clock):
    from panager.app import App

    server.model_fields["local-model"] = {"max_model_len": 20000}
    settings = make_settings(
        openai_base_url=server.base_url, openai_api_key="k", model="local-model"
    )
    app = await App.start(settings, clock=clock, model=ScriptedChatModel(default="ok"))
    try:
        user = await app.local_user()
        reply = await dispatch(CommandContext(user=user, assistant=app.assistant), "/debug")
    finally:
        await app.stop()
    assert "context window: 20,000 tokens (server: vLLM max_model_len)" in reply.text
