"""Deployment files: compose services and healthchecks, a non-root image, every variable documented."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from panager.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def env_names() -> set[str]:
    return {str(f.validation_alias.choices[0]) for f in Settings.model_fields.values()}


def test_env_example_lists_every_variable():
    text = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.M))
    missing = env_names() - listed
    assert not missing, f".env.example lacks {sorted(missing)}"
    # every variable has a comment line right above it
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^#?\s*[A-Z][A-Z0-9_]+=", line):
            assert lines[i - 1].startswith("#"), line


def test_compose_file_shape():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["db"]["image"] == "pgvector/pgvector:pg16"
    assert "pg_isready" in " ".join(services["db"]["healthcheck"]["test"])
    assert services["migrate"]["command"] == ["db", "upgrade"]
    app = services["app"]
    assert app["command"] == ["run"]
    assert app["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert app["depends_on"]["db"]["condition"] == "service_healthy"
    assert "/healthz" in " ".join(app["healthcheck"]["test"])
    assert "pgdata" in compose["volumes"]
    tool = shutil.which("docker-compose")
    if tool:  # validate with the real parser where it is installed
        env = ROOT / ".env"
        created = not env.exists()
        if created:
            env.write_text((ROOT / ".env.example").read_text())
        try:
            run = subprocess.run([tool, "config", "-q"], cwd=ROOT, capture_output=True, text=True)
        finally:
            if created:
                env.unlink()
        assert run.returncode == 0, run.stderr


def test_dockerfile_is_slim_and_non_root():
    text = (ROOT / "Dockerfile").read_text()
    stages = text.split("\nFROM ")
    final = stages[-1]
    assert final.startswith("python:3.12-slim")
    assert "\nUSER panager" in final
    assert "gcc" not in final and "build-essential" not in final
    assert "HEALTHCHECK" in final and "/healthz" in final
