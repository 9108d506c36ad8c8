"""Named model endpoints from the environment and the YAML config; older keys mapped."""

from __future__ import annotations

import pytest

from panager.config import ConfigError, Settings
from panager.doctor import check_deprecated, check_models
from panager.endpoints import model_endpoints
from tests.runtime_helpers import write_config


def settings(tmp_path, config: dict | None = None, **env) -> Settings:
    home = write_config(tmp_path / "h", **(config or {}))
    values = {"openai_api_key": "sk-env", "home": home, **env}
    return Settings(_env_file=None, **values)


def test_the_environment_alone_is_the_single_default_endpoint(tmp_path):
    s = settings(tmp_path, openai_base_url="http://127.0.0.1:11434/v1", PANAGER_MODEL="llama3.1")
    endpoints = model_endpoints(s)
    assert list(endpoints.by_name) == ["llama3.1"] and endpoints.default == "llama3.1"
    e = endpoints.primary
    assert (e.base_url, e.model, e.api_key, e.fallback) == (
        "http://127.0.0.1:11434/v1", "llama3.1", "sk-env", ())
    assert not e.remote and endpoints.pickable(admin=False) == ["llama3.1"]
    assert endpoints.deprecations == []


def test_yaml_endpoints_with_keys_from_their_own_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENROUTER_KEY", "sk-or")
    config = {
        "models": {
            "gpt-4o": {"fallback": ["router"], "price_per_mtok": {"input": 2.5, "output": 10}},
            "router": {"base_url": "https://openrouter.ai/api/v1", "api_key_env": "OPENROUTER_KEY",
                       "model": "meta-llama/llama-3.1-70b-instruct", "vision": False,
                       "context_window": 128000},
            "home": {"base_url": "http://192.168.1.20:8000/v1", "tools": False},
        },
        "background_model": "home",
        "allowed_models": ["gpt-4o", "router"],
    }
    s = settings(tmp_path, config, PANAGER_MODEL="gpt-4o")
    endpoints = model_endpoints(s)
    primary, router, home = (endpoints.by_name[n] for n in ("gpt-4o", "router", "home"))
    assert primary.base_url is None and primary.api_key == "sk-env" and primary.remote
    assert primary.cost(1_000_000, 100_000) == pytest.approx(3.5)
    assert router.api_key == "sk-or" and router.remote and router.context_window == 128000
    # the environment's key goes to the environment's server only, never to another one
    assert not home.remote and not home.tools and home.api_key is None
    assert [e.name for e in endpoints.chain("gpt-4o")] == ["gpt-4o", "router"]
    assert endpoints.chain("router") == [router]  # no implicit fallback
    assert endpoints.background == "home"
    assert endpoints.pickable(admin=False) == ["gpt-4o", "router"]
    assert set(endpoints.pickable(admin=True)) == {"gpt-4o", "router", "home"}
    # a /model choice stored as a model id before endpoints had names maps to its endpoint
    assert endpoints.canonical("meta-llama/llama-3.1-70b-instruct") == "router"
    assert "sk-or" not in repr(router) and "sk-env" not in repr(primary)


def test_older_keys_map_onto_endpoints_with_one_deprecation_line(tmp_path):
    config = {"allowed_models": ["gpt-4o-mini", "llama3.1:8b"], "vision": {"llama3.1:8b": True},
              "context_window": 32000}
    s = settings(tmp_path, config, openai_base_url="http://127.0.0.1:9/v1")
    endpoints = model_endpoints(s)
    assert endpoints.pickable(admin=False) == ["gpt-4o-mini", "llama3.1:8b"]
    legacy = endpoints.by_name["llama3.1:8b"]
    assert legacy.base_url == "http://127.0.0.1:9/v1" and legacy.vision is True
    assert endpoints.primary.context_window == 32000
    ok, detail = _run(check_deprecated(s, {}))
    assert ok is None and detail.count("\n") == 0
    assert "allowed_models" in detail and "llama3.1:8b" in detail and "vision" in detail


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"models": {"a": {"fallback": ["nowhere"]}}}, "models.a.fallback names 'nowhere'"),
        ({"models": {"a": {"fallback": ["a"]}}}, "models.a.fallback names itself"),
        ({"background_model": "tiny"}, "background_model names 'tiny'"),
    ],
)
def test_a_bad_name_is_one_line_naming_the_key(tmp_path, config, named):
    s = settings(tmp_path, config)
    with pytest.raises(ConfigError) as err:
        _ = model_endpoints(s)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_doctor_says_which_endpoints_are_remote(tmp_path, monkeypatch):
    monkeypatch.delenv("LOCAL_KEY", raising=False)
    config = {"models": {"gpt-4o": {"fallback": ["local"]},
                         "local": {"base_url": "http://localhost:11434/v1"}}}
    ok, detail = _run(check_models(settings(tmp_path, config, PANAGER_MODEL="gpt-4o"), {}))
    assert ok is True and "gpt-4o (remote; fallback local)" in detail and "local (local)" in detail
    config["models"]["cloud"] = {"base_url": "https://api.example.com/v1",
                                 "api_key_env": "LOCAL_KEY"}
    config["models"]["gpt-4o"]["fallback"] = ["cloud"]
    ok, detail = _run(check_models(
        settings(tmp_path, config, PANAGER_MODEL="gpt-4o"), {}))
    assert ok is False and "cloud has no key: set LOCAL_KEY" in detail


def _run(coro):
    import asyncio

    return asyncio.run(coro)


def test_an_endpoints_context_window_is_the_window_of_its_model(tmp_path):
    from panager.agent.graph.effects.windows import learn_served_window, window_for

    config = {"models": {"gpt-4o": {},
                         "big-local": {"base_url": "http://127.0.0.1:9/v1",
                                       "model": "my-finetune-v2", "context_window": 65536}}}
    s = settings(tmp_path, config, PANAGER_MODEL="gpt-4o")
    assert window_for("my-finetune-v2").tokens != 65536  # unknown name: the default before
    _run(learn_served_window(s))
    window = window_for("my-finetune-v2")
    assert window.tokens == 65536 and "models.big-local.context_window" in window.source


def test_embeddings_and_transcription_stay_on_the_default_unless_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME_KEY", "sk-home")
    models = {"gpt-4o": {"fallback": ["home"]},
              "home": {"base_url": "http://127.0.0.1:11434/v1", "api_key_env": "HOME_KEY"}}
    plain = settings(tmp_path, {"models": models}, PANAGER_MODEL="gpt-4o",
                     openai_base_url="http://127.0.0.1:9/v1",
                     PANAGER_TRANSCRIPTION_BASE_URL="http://127.0.0.1:7/v1")
    assert model_endpoints(plain).embedding == ("http://127.0.0.1:9/v1", "sk-env")
    assert model_endpoints(plain).transcription == ("http://127.0.0.1:7/v1", "sk-env")
    named = settings(tmp_path, {"models": models, "embedding_endpoint": "home",
                                "transcription_endpoint": "home"}, PANAGER_MODEL="gpt-4o")
    assert model_endpoints(named).embedding == ("http://127.0.0.1:11434/v1", "sk-home")
    assert model_endpoints(named).transcription == ("http://127.0.0.1:11434/v1", "sk-home")
    with pytest.raises(ConfigError, match="embedding_endpoint names 'nowhere'"):
        _ = model_endpoints(settings(tmp_path, {"embedding_endpoint": "nowhere"}))


def test_the_environments_key_never_goes_to_another_server(tmp_path):
    config = {
        "models": {
            "gpt-4o": {"fallback": ["router", "proxy"]},
            "router": {"base_url": "https://openrouter.ai/api/v1"},
            "proxy": {"base_url": "https://api.openai.com/v1/", "model": "gpt-4o-mini"},
        },
        "embedding_endpoint": "router",
    }
    s = settings(tmp_path, config, PANAGER_MODEL="gpt-4o")
    router, proxy = model_endpoints(s).by_name["router"], model_endpoints(s).by_name["proxy"]
    assert router.api_key is None and proxy.api_key == "sk-env"
    ok, text = _run(check_models(s, {}))
    assert not ok and "router has no key: name its key's variable in api_key_env" in text
    # embeddings on a server without a key send a placeholder, not the environment's key
    assert model_endpoints(s).embedding == ("https://openrouter.ai/api/v1", "unused")
