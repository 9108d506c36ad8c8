"""Settings: defaults, one-line errors naming the variable, YAML runtime config."""

from __future__ import annotations

import pytest

from panager.config import ConfigError, load_settings


def test_defaults(monkeypatch, tmp_path):
    monkeypatch.setenv("PANAGER_HOME", str(tmp_path))
    s = load_settings(_env_file=None)
    assert s.model == "gpt-4o-mini" and s.api_type == "chat" and s.access == "invite"
    assert s.http_port == 8765 and s.public_url == "http://localhost:8765"
    assert not s.model_configured and s.runtime.max_iterations == 10


@pytest.mark.parametrize(
    ("name", "value", "fix"),
    [
        ("PANAGER_ACCESS", "everyone", "open, allowlist, invite"),
        ("OPENAI_API_TYPE", "completions", "'chat' or 'responses'"),
        ("PANAGER_TIMEZONE", "Mars/Olympus", "IANA zone"),
        ("PANAGER_HTTP_PORT", "http", "port number"),
        ("PANAGER_ADMIN_IDS", "12,abc", "comma-separated"),
    ],
)
def test_bad_value_names_variable_and_fix(monkeypatch, name, value, fix):
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings(_env_file=None)
    message = str(err.value)
    assert message.startswith(f"{name} is invalid") and fix in message
    assert "\n" not in message and "Traceback" not in message


def test_secret_values_are_never_echoed(monkeypatch):
    monkeypatch.setenv("GOOGLE_CLIENT_ID", "id")
    monkeypatch.setenv("GOOGLE_CLIENT_SECRET", "very-secret-value")
    with pytest.raises(ConfigError) as err:
        load_settings(_env_file=None)
    assert "PANAGER_SECRET_KEY" in str(err.value)
    assert "very-secret-value" not in str(err.value)


def test_telegram_api_url_is_a_base_url_and_never_echoes_a_token(monkeypatch):
    monkeypatch.setenv("TELEGRAM_API_URL", " ")
    assert load_settings(_env_file=None).telegram_api_url == "https://api.telegram.org"
    monkeypatch.setenv("TELEGRAM_API_URL", "http://localhost:8081/")
    assert load_settings(_env_file=None).telegram_api_url == "http://localhost:8081"
    token = "123456789:AAHsecret-telegram-token-in-a-url"
    for bad in ("localhost:8081", "http://:8081", f"https://api.telegram.org/bot{token}"):
        monkeypatch.setenv("TELEGRAM_API_URL", bad)
        with pytest.raises(ConfigError) as err:
            load_settings(_env_file=None)
        message = str(err.value)
        assert message.startswith("TELEGRAM_API_URL is invalid") and "\n" not in message
        assert token not in message


def test_admin_ids_parse(monkeypatch):
    monkeypatch.setenv("PANAGER_ADMIN_IDS", "123, 456")
    assert load_settings(_env_file=None).admin_ids == [123, 456]


def test_yaml_runtime_config(monkeypatch, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(
        "max_iterations: 3\neffects:\n  - kind: compact\n    params: {threshold: 0.5}\n"
    )
    monkeypatch.setenv("PANAGER_CONFIG", str(path))
    cfg = load_settings(_env_file=None).runtime
    assert cfg.max_iterations == 3 and cfg.effects[0].kind == "compact"


def test_yaml_errors_are_one_line(monkeypatch, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("max_iterations: lots\n")
    monkeypatch.setenv("PANAGER_CONFIG", str(path))
    with pytest.raises(ConfigError, match="max_iterations"):
        _ = load_settings(_env_file=None).runtime
    monkeypatch.setenv("PANAGER_CONFIG", str(tmp_path / "missing.yaml"))
    with pytest.raises(ConfigError, match="does not exist"):
        _ = load_settings(_env_file=None).runtime
