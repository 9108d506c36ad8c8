"""The attachment decoder's child process: none of the parent's secrets, descriptors or
working directory; where namespaces are allowed, no network and no view of PANAGER_HOME."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from panager import doctor
from panager.services.media.sandbox import DECODER, Limits, isolation, run_job, spawn
from tests.media_files import png

pytestmark = pytest.mark.timeout(60)
SECRETS = {
    "PANAGER_SECRET_KEY": "k3y-0f-the-instance-that-seals-google-tokens",
    "OPENAI_API_KEY": "sk-model-token-1234",
    "DISCORD_TOKEN": "discord-bot-token-5678",
    "TELEGRAM_BOT_TOKEN": "123:telegram-bot-token",
    "DATABASE_URL": "postgresql://panager:hunter2@db/panager",
}
PROBE = r"""
import json, os, socket, sys
seen = {"env": dict(os.environ), "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
        "cwd": os.getcwd(), "cwd_files": os.listdir("."), "home": os.listdir(sys.argv[1])}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=2).close()
    seen["net"] = True
except OSError:
    seen["net"] = False
print(json.dumps(seen))
"""


async def test_the_decoder_child_holds_no_secret(monkeypatch, tmp_path):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    home = tmp_path / "home"
    (home / "pgdata").mkdir(parents=True)
    (home / "config.yaml").write_text("secret: yes\n")
    leaked_r, leaked_w = os.pipe()  # an inheritable descriptor the parent holds open
    os.set_inheritable(leaked_w, True)
    listener = socket.create_server(("127.0.0.1", 0))
    limits = Limits(hidden=home)
    try:
        async with spawn(["-c", PROBE, str(home), str(listener.getsockname()[1])],
                         limits) as proc:
            out, err = await proc.communicate(b"")
    finally:
        os.close(leaked_r)
        os.close(leaked_w)
        listener.close()
    assert proc.returncode == 0, err
    seen = json.loads(out)
    assert set(seen["env"]) <= {"PATH", "LANG", "PYTHONPATH"}, seen["env"]
    assert not any(v in json.dumps(seen["env"]) for v in SECRETS.values())
    assert seen["fds"] == [0, 1, 2, 3]  # its pipes, and the directory os.listdir opened
    assert seen["cwd_files"] == [] and not seen["cwd"].startswith(str(tmp_path))
    assert not Path(seen["cwd"]).exists()  # removed after the job  # noqa: ASYNC240
    where = isolation(home)
    if where.namespaces:  # this machine allows them: no network, PANAGER_HOME hidden
        assert seen["net"] is False and seen["home"] == []
        assert "no network" in where.detail and str(home.resolve()) in where.detail
    else:
        assert "not available" in where.detail
    # the real decoder runs the same way and still reads a file
    info, _ = await run_job({"job": "image", "mime": "image/png", "max_pixels": 10_000},
                            png(4, 3), limits)
    assert (info["width"], info["height"]) == (4, 3)
    assert DECODER == ("-m", "panager.services.media.decode")
    assert (await doctor.check_decoder(_Settings(home), {})) == (True, where.detail)


class _Settings:
    def __init__(self, home):
        self.home = home
