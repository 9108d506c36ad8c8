"""The attachment intake and the turn it feeds, through the real graph and PostgreSQL (the
model and the transcription endpoint are the fake OpenAI server): bad input loses nothing,
images stay out of the checkpoints, limits hold."""

from __future__ import annotations

import asyncio

import pytest

from panager.services.media.intake import Attachment
from panager.services.media.sniff import clean_name, sniff
from tests.fakes.openai_server import FakeOpenAI
from tests.media_files import ogg_opus, png, png_claiming, wav
from tests.runtime_helpers import write_config

ME = 7001


@pytest.fixture
async def start(make_app, openai, tmp_path):
    async def make(**config):
        write_config(tmp_path / "home", **config)
        app = await make_app(openai_base_url=openai.base_url, openai_api_key="test")
        user = await app.deps.users.ensure(ME, "me")
        return app, user

    return make


async def turn(app, user, text: str, attachment: Attachment):
    notes = app.assistant.attachment_notes(user, [attachment])
    result = await app.assistant.run_turn(user, text, attachments=[attachment])
    return notes, result


BAD_FILES = [
    ("empty.png", b"", "image/png", "I couldn't use empty.png: it is empty (0 bytes)."),
    ("photo.png", b"%PDF-1.4 not an image", "image/png",
     "I couldn't use photo.png: it claims to be an image but its contents are application/pdf."),
    ("huge.png", png_claiming(50_000, 50_000), "image/png",
     "I couldn't use huge.png: it is 50,000×50,000 pixels; the limit is 40,000,000."),
    ("noise.bin", bytes(range(256)) * 4, None,
     "I couldn't use noise.bin: its type is not one I can read (images, audio, PDF, DOCX, "
     "text, CSV, HTML)."),
    ("long.ogg", ogg_opus(3_600), "audio/ogg",
     "I couldn't use long.ogg: it is 60.0 minutes long; the limit is 10 minutes."),
]


@pytest.mark.parametrize(("name", "data", "declared", "line"), BAD_FILES,
                         ids=[b[0] for b in BAD_FILES])
async def test_bad_files_get_one_line_and_the_words_are_answered(
    start, openai, name, data, declared, line
):
    app, user = await start()
    openai.script("Answered your words.")
    att = await app.deps.media.take(user.id, name, data, declared_type=declared)
    assert att.kind == "rejected"
    notes, result = await turn(app, user, "please also check my calendar", att)
    assert notes == [line]
    assert result.ok and result.text == "Answered your words."
    assert openai.last_user_text() == "please also check my calendar"
    assert openai.image_parts() == [] and openai.transcription_requests == []


async def test_a_transcriber_that_refuses_gets_one_line(start, openai):
    app, user = await start()
    openai.transcripts.append(400)
    openai.script("Still answered.")
    att = await app.deps.media.take(user.id, "memo.wav", wav(1.0), voice=False)
    notes, result = await turn(app, user, "and what about tomorrow?", att)
    assert notes == ["I couldn't use memo.wav: the transcription service refused it (HTTP 400)."]
    assert result.text == "Still answered." and len(openai.transcription_requests) == 1


async def test_a_transcription_endpoint_that_times_out_gets_one_line(start, openai):
    app, user = await start(transcription_timeout_seconds=0.3)
    openai.transcription_delay = 2.0
    openai.script("Still answered.")
    att = await app.deps.media.take(user.id, "voice.ogg", ogg_opus(2.0), voice=True)
    notes, result = await turn(app, user, "and the weather?", att)
    assert notes == ["I couldn't use voice.ogg: the transcription service did not answer in time."]
    assert result.text == "Still answered."


async def test_the_transcription_endpoint_and_model_are_configurable(make_app, tmp_path):
    async with FakeOpenAI() as chat, FakeOpenAI() as speech:
        speech.transcripts.append("from the speech server")
        app = await make_app(openai_base_url=chat.base_url, openai_api_key="test",
                             transcription_base_url=speech.base_url,
                             transcription_model="Systran/faster-whisper-small")
        att = await app.deps.media.take(ME, "v.ogg", ogg_opus(1.0), voice=True)
        assert att.kind == "voice" and att.own_words and att.text == "from the speech server"
        assert speech.transcription_requests[0]["model"] == "Systran/faster-whisper-small"
        assert chat.transcription_requests == []


async def test_a_decoder_that_runs_too_long_is_killed(start, openai, monkeypatch, tmp_path):
    from panager.services.media import sandbox

    app, user = await start(decode_timeout_seconds=0.5)
    stuck = tmp_path / "stuck-decoder"
    stuck.write_text("#!/bin/sh\nexec sleep 30\n")
    stuck.chmod(0o755)
    monkeypatch.setattr(sandbox.sys, "executable", str(stuck))  # a decoder that never ends
    started = asyncio.get_running_loop().time()
    att = await app.deps.media.take(user.id, "a.png", png(), declared_type="image/png")
    assert asyncio.get_running_loop().time() - started < 5
    assert att.notice == "I couldn't use a.png: reading it took too long, so it was stopped."


async def test_a_decoder_over_its_memory_limit_dies_and_the_person_gets_a_line(start, openai):
    app, user = await start(decode_memory_mb=128, image_max_pixels=400_000_000)
    att = await app.deps.media.take(user.id, "big.png", png_claiming(16_000, 16_000))
    assert att.kind == "rejected"
    assert att.notice.startswith("I couldn't use big.png: ")


async def test_twenty_images_grow_the_checkpoint_by_little_and_hold_no_base64(start, openai):
    app, user = await start()
    photo = png(1200, 900, rgb=(10, 120, 200))
    sizes = []
    for i in range(20):
        openai.script(f"Image {i} seen.")
        att = await app.deps.media.take(user.id, f"photo{i}.png", photo)
        result = await app.assistant.run_turn(user, f"look at {i}", attachments=[att])
        assert result.text == f"Image {i} seen."
        assert len(openai.image_parts()) == 1  # this turn's image only, in full
        sizes.append(await checkpoint_bytes(app))
    growth = (sizes[-1] - sizes[0]) / 19
    assert growth < 10_000, sizes
    encoded = __import__("base64").b64encode(photo[:60]).decode()[:40]
    async with app.pool.connection() as conn:
        for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
            row = await (await conn.execute(
                f"SELECT count(*) AS n FROM {table} WHERE position(%s in "
                f"encode(convert_to(({table})::text, 'UTF8'), 'escape')) > 0", ("base64,",)
            )).fetchone()
            assert row["n"] == 0, table
            row = await (await conn.execute(
                f"SELECT count(*) AS n FROM {table} WHERE position(%s in ({table})::text) > 0",
                (encoded,))).fetchone()
            assert row["n"] == 0, table


async def checkpoint_bytes(app) -> int:
    async with app.pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT (SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM checkpoints c) + "
            "(SELECT coalesce(sum(pg_column_size(b.*)), 0) FROM checkpoint_blobs b) + "
            "(SELECT coalesce(sum(pg_column_size(w.*)), 0) FROM checkpoint_writes w) AS n"
        )).fetchone()
    return int(row["n"])


async def test_images_stay_within_the_persons_quota(start, openai):
    app, user = await start(media_quota_bytes=1_000_000)
    store = app.deps.media.store
    ids = [await store.put(user.id, f"p{i}.png", "image/png", b"x" * 400_000,
                           app.clock.now()) for i in range(4)]
    assert await store.get(user.id, ids[0]) is None  # the oldest made room
    assert (await store.get(user.id, ids[-1])).data == b"x" * 400_000
    assert await store.get(user.id + 1, ids[-1]) is None  # never another person's


def test_types_come_from_the_bytes_and_names_are_cleaned():
    assert sniff(png()).mime == "image/png"
    assert sniff(ogg_opus(1)).mime == "audio/ogg"
    assert sniff(wav(0.1)).mime == "audio/wav"
    assert sniff(b"a,b\n1,2\n", "t.csv").mime == "text/csv"
    assert sniff(b"<!DOCTYPE html><p>x", "x.txt").mime == "text/html"
    assert clean_name("../../etc/passwd") == "passwd"
    assert clean_name("<b>x</b>.png") == "b_.png"  # no path, no markup characters
    assert clean_name("<img onerror=x>.png") == "img onerror_x_.png"
    assert clean_name("\u202egnp.exe") == "gnp.exe"


async def test_model_changes_whether_images_are_sent(start, openai):
    from panager.agent.commands import CommandContext, dispatch

    app, user = await start(vision={"my-local-llava": True},
                            allowed_models=["gpt-4o-mini", "llama3.1:8b", "my-local-llava"])
    assert app.assistant.sees_images(user)  # gpt-4o-mini, by name
    ctx = CommandContext(user=user, assistant=app.assistant, front_end="terminal")
    reply = await dispatch(ctx, "/model llama3.1:8b")
    assert reply.ok, reply.text
    user = await app.deps.users.get(ME)
    assert not app.assistant.sees_images(user)
    att = await app.deps.media.take(user.id, "r.png", png())
    assert app.assistant.attachment_notes(user, [att])[0].startswith(
        "The model in use (llama3.1:8b) can't see images")
    openai.script("words answered")
    assert (await app.assistant.run_turn(user, "hi", attachments=[att])).text == "words answered"
    assert openai.image_parts() == [] and openai.requests[-1]["model"] == "llama3.1:8b"
    await dispatch(ctx, "/model my-local-llava")
    assert app.assistant.sees_images(await app.deps.users.get(ME))
