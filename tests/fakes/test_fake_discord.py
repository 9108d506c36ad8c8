"""The real discord.py client against tests.fakes.discord_server.FakeDiscord."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import threading
from collections.abc import AsyncIterator

import aiohttp
import discord
import pytest
import pytest_asyncio
from discord import app_commands

from tests.fakes.discord_server import FakeDiscord, dm_channel_id

USER = 42
STEP = 3  # seconds: upper bound for any single wait in these tests


class RecordingClient(discord.Client):
    """A client that queues every message it receives from someone else."""

    def __init__(self) -> None:
        intents = discord.Intents.default()
        intents.message_content = True
        intents.dm_messages = True
        super().__init__(intents=intents, guild_ready_timeout=0)
        self.received: asyncio.Queue[discord.Message] = asyncio.Queue()
        self.resumed_count = 0

    async def on_message(self, message: discord.Message) -> None:
        if self.user is None or message.author.id != self.user.id:
            await self.received.put(message)

    async def on_resumed(self) -> None:
        self.resumed_count += 1

    async def next_message(self) -> discord.Message:
        return await asyncio.wait_for(self.received.get(), STEP)


@pytest_asyncio.fixture
async def loop_errors() -> AsyncIterator[list[str]]:
    """Fail the test if it leaks: loop errors, pending tasks or keep-alive threads.

    Loop errors are what a leak eventually reports ("Unclosed client session",
    "Task was destroyed but it is pending", "Task exception was never retrieved").
    """
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    gc.collect()  # let earlier tests' garbage (e.g. HTTP clients closing) schedule its tasks now
    await asyncio.sleep(0.05)
    tasks_before, threads_before = asyncio.all_tasks(), set(threading.enumerate())
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(str(context.get("message"))))
    try:
        yield errors
        await asyncio.sleep(0)
        gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert errors == []
    leftover = {
        t
        for t in asyncio.all_tasks() - tasks_before - {asyncio.current_task()}
        if "AsyncClient.aclose" not in repr(t.get_coro())  # other tests' model clients
    }
    assert not leftover, f"tasks left running: {leftover}"
    new_threads = set(threading.enumerate()) - threads_before
    for thread in new_threads:
        thread.join(timeout=1)
    assert not [t.name for t in new_threads if t.is_alive()], "threads left running"


@pytest_asyncio.fixture
async def fake(loop_errors: list[str]) -> AsyncIterator[FakeDiscord]:
    """A started fake with discord.py patched to use it; checks for leaks afterwards."""
    async with FakeDiscord() as server:
        with server.patch_discord():
            yield server
    assert server.unhandled == [], "discord.py called routes the fake does not serve"


@contextlib.asynccontextmanager
async def connected(fake: FakeDiscord, client: discord.Client) -> AsyncIterator[discord.Client]:
    """Run ``client`` against ``fake`` until the block ends, then close it cleanly."""
    task = asyncio.create_task(client.start("fake-token"))
    try:
        ready = asyncio.create_task(client.wait_until_ready())
        done, _ = await asyncio.wait({ready, task}, timeout=STEP, return_when="FIRST_COMPLETED")
        if ready not in done:
            ready.cancel()
            raise AssertionError(f"client did not get ready: {task.exception() if done else ''}")
        yield client
    finally:
        await client.close()
        await asyncio.wait_for(task, STEP)


@pytest_asyncio.fixture
async def client(fake: FakeDiscord) -> AsyncIterator[RecordingClient]:
    """A connected, ready RecordingClient."""
    async with connected(fake, RecordingClient()) as running:
        yield running  # type: ignore[misc]


def link_view(url: str) -> discord.ui.View:
    """A view with one link button. ``timeout=None``: interaction responses store every
    view, and a timed view's timeout task would outlive ``client.close()``."""
    view = discord.ui.View(timeout=None)
    view.add_item(discord.ui.Button(label="Connect Google", url=url))
    return view


@pytest.mark.asyncio
async def test_identify_carries_token_and_intents(fake: FakeDiscord, client: RecordingClient):
    (identify,) = fake.identifies
    assert identify["token"] == "fake-token"
    intents = discord.Intents._from_value(identify["intents"])
    assert intents.message_content and intents.dm_messages
    assert client.user is not None and client.user.id == fake.bot_user_id
    assert client.application_id == fake.app_id
    assert fake.heartbeats >= 1


@pytest.mark.asyncio
async def test_dm_arrives_as_dm_channel_and_reply_is_recorded(
    fake: FakeDiscord, client: RecordingClient
):
    sent_id = await fake.send_dm(USER, "hello", username="alice")
    message = await client.next_message()
    assert message.id == sent_id
    assert isinstance(message.channel, discord.DMChannel)
    assert message.channel.id == dm_channel_id(USER)
    assert message.guild is None
    assert (message.author.id, message.author.name, message.author.bot) == (USER, "alice", False)
    assert message.content == "hello"

    reply = await message.channel.send("hi there")
    (recorded,) = await fake.wait_for_messages(USER, 1)
    assert recorded["id"] == reply.id
    assert recorded["content"] == "hi there"
    assert recorded["channel_id"] == dm_channel_id(USER)
    assert recorded["recipient_id"] == USER
    assert reply.author.id == fake.bot_user_id


@pytest.mark.asyncio
async def test_reply_with_nonce_and_link_button(fake: FakeDiscord, client: RecordingClient):
    await fake.send_dm(USER, "connect google")
    message = await client.next_message()
    url = "https://accounts.example/auth?state=abc"
    await message.channel.send("Connect:", nonce="turn-1", view=link_view(url))
    (recorded,) = fake.messages_to(USER)
    assert (recorded["nonce"], recorded["enforce_nonce"]) == ("turn-1", True)
    (row,) = recorded["components"]
    (button,) = row["components"]
    assert (button["type"], button["style"], button["url"]) == (2, 5, url)
    assert button["label"] == "Connect Google"


@pytest.mark.asyncio
async def test_enforced_nonce_returns_the_first_message(fake: FakeDiscord, client: RecordingClient):
    channel = await (await client.fetch_user(USER)).create_dm()
    first = await channel.send("once", nonce="n-1")
    again = await channel.send("once", nonce="n-1")
    assert again.id == first.id
    assert len(fake.messages_to(USER)) == 1


@pytest.mark.asyncio
async def test_proactive_dm_to_a_user(fake: FakeDiscord, client: RecordingClient):
    user = await client.fetch_user(77)
    await user.send("reminder: standup")
    (recorded,) = await fake.wait_for_messages(77, 1)
    assert recorded["content"] == "reminder: standup"
    assert recorded["channel_id"] == dm_channel_id(77)


@pytest.mark.asyncio
async def test_guild_message_has_guild(fake: FakeDiscord, client: RecordingClient):
    await fake.send_guild_message(USER, "in a server", guild_id=5000, channel_id=5001)
    message = await client.next_message()
    assert message.guild is not None and message.guild.id == 5000
    assert isinstance(message.channel, discord.TextChannel)
    assert message.channel.id == 5001
    assert not isinstance(message.channel, discord.DMChannel)
    await fake.send_guild_message(USER, "other channel", guild_id=5000, channel_id=5002)
    other = await client.next_message()
    assert other.guild is not None and other.guild.id == 5000
    assert isinstance(other.channel, discord.TextChannel) and other.channel.id == 5002
    assert client.get_channel(5002) is not None


@pytest.mark.asyncio
async def test_fetch_channel_and_message(fake: FakeDiscord, client: RecordingClient):
    await fake.send_dm(USER, "hi")
    await client.next_message()
    channel = await client.fetch_channel(dm_channel_id(USER))
    assert isinstance(channel, discord.DMChannel)
    assert channel.recipient is not None and channel.recipient.id == USER
    sent = await channel.send("stored")
    assert (await channel.fetch_message(sent.id)).content == "stored"
    with pytest.raises(discord.NotFound):
        await client.fetch_channel(123)


@pytest.mark.asyncio
async def test_typing_edit_and_delete_are_recorded(fake: FakeDiscord, client: RecordingClient):
    await fake.send_dm(USER, "think hard")
    message = await client.next_message()
    async with message.channel.typing():
        status = await message.channel.send("working…")
    await status.edit(content="done")
    await status.delete()
    assert fake.typing == [dm_channel_id(USER)]
    assert [(e["id"], e["content"]) for e in fake.edits] == [(status.id, "done")]
    assert [d["id"] for d in fake.deletions] == [status.id]


@pytest.mark.asyncio
async def test_discord_limits_are_enforced(fake: FakeDiscord, client: RecordingClient):
    channel = await (await client.fetch_user(USER)).create_dm()
    with pytest.raises(discord.HTTPException) as too_long:
        await channel.send("x" * 2001)
    assert (too_long.value.status, too_long.value.code) == (400, 50035)
    with pytest.raises(discord.HTTPException) as empty:
        await channel.send("   ")
    assert empty.value.code == 50006
    assert fake.sent == []


@pytest.mark.asyncio
async def test_file_upload_is_multipart(fake: FakeDiscord, client: RecordingClient):
    channel = await (await client.fetch_user(USER)).create_dm()
    message = await channel.send("see file", file=discord.File(io.BytesIO(b"abc"), "notes.txt"))
    (recorded,) = fake.messages_to(USER)
    assert recorded["content"] == "see file"
    assert [(f["filename"], f["data"]) for f in recorded["files"]] == [("notes.txt", b"abc")]
    assert message.attachments[0].filename == "notes.txt"


@pytest.mark.asyncio
async def test_incoming_attachment_and_sticker(fake: FakeDiscord, client: RecordingClient):
    files = [{"filename": "a.png", "data": b"\x89PNG", "content_type": "image/png"}]
    await fake.send_dm(USER, "", attachments=files)
    with_file = await client.next_message()
    assert [a.filename for a in with_file.attachments] == ["a.png"]
    assert await with_file.attachments[0].read() == b"\x89PNG"
    await fake.send_dm(USER, "", sticker=True)
    with_sticker = await client.next_message()
    assert len(with_sticker.stickers) == 1 and with_sticker.content == ""


@pytest.mark.asyncio
async def test_replayed_message_create_arrives_twice(fake: FakeDiscord, client: RecordingClient):
    first_id = await fake.send_dm(USER, "only once please", message_id=123456789)
    await fake.replay_last()
    first, second = await client.next_message(), await client.next_message()
    assert first.id == second.id == first_id == 123456789
    await fake.send_dm(USER, "again", message_id=123456789)
    assert (await client.next_message()).id == first_id


@pytest.mark.asyncio
async def test_disconnect_and_resume_replays_missed_events(
    fake: FakeDiscord, client: RecordingClient
):
    await fake.send_dm(USER, "before")
    assert (await client.next_message()).content == "before"

    async def while_away() -> None:
        await fake.send_dm(USER, "while away")

    await fake.disconnect_and_resume(during=while_away, timeout=STEP)
    assert (await client.next_message()).content == "while away"
    assert len(fake.identifies) == 1
    (resume,) = fake.resumes
    assert resume["token"] == "fake-token"
    await fake.send_dm(USER, "after")
    assert (await client.next_message()).content == "after"
    assert client.received.empty()
    assert client.resumed_count == 1


@pytest.mark.asyncio
async def test_slash_commands_sync_and_respond(fake: FakeDiscord):
    client = RecordingClient()
    tree = app_commands.CommandTree(client)

    @tree.command(name="start", description="Redeem an invite code")
    async def start(interaction: discord.Interaction, code: str, uses: int = 1) -> None:
        view = link_view("https://x.example")
        await interaction.response.send_message(f"code={code} uses={uses}", view=view)

    @tree.command(name="slow", description="Defers, then follows up")
    async def slow(interaction: discord.Interaction) -> None:
        await interaction.response.defer(thinking=True)
        await interaction.followup.send("finished")

    @tree.command(name="status", description="Answers, then edits the answer")
    async def status(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("working")
        await interaction.edit_original_response(content="done")

    async with connected(fake, client):
        await tree.sync()
        assert sorted(c["name"] for c in fake.commands) == ["slow", "start", "status"]
        await fake.send_slash_command(USER, "start", {"code": "ABC", "uses": 3})
        (reply,) = await fake.wait_for_messages(USER, 1, timeout=STEP)
        assert reply["content"] == "code=ABC uses=3"
        assert reply["components"][0]["components"][0]["url"] == "https://x.example"
        await fake.send_slash_command(USER, "slow")
        _, followup = await fake.wait_for_messages(USER, 2, timeout=STEP)
        assert followup["content"] == "finished"
        await fake.send_slash_command(USER, "status")
        *_, answer = await fake.wait_for_messages(USER, 3, timeout=STEP)
        await fake.wait_for(lambda: bool(fake.edits), STEP)
        assert (fake.edits[0]["id"], fake.edits[0]["content"]) == (answer["id"], "done")
    assert [i["type"] for i in fake.interactions] == [4, 5, 4]


@pytest.mark.asyncio
async def test_a_restarted_client_identifies_again(fake: FakeDiscord):
    async with connected(fake, RecordingClient()):
        await fake.send_dm(USER, "first run")
    async with connected(fake, RecordingClient()) as second:
        await fake.wait_until_ready(timeout=STEP)
        await fake.send_dm(USER, "second run")
        assert (await second.next_message()).content == "second run"  # type: ignore[attr-defined]
    assert len(fake.identifies) == 2


@pytest.mark.asyncio
async def test_rest_content_type_is_exact(fake: FakeDiscord):
    async with (
        aiohttp.ClientSession() as session,
        session.get(fake.rest_base + "/users/@me") as response,
    ):
        assert response.headers["Content-Type"] == "application/json"
        assert (await response.json())["id"] == str(fake.bot_user_id)


@pytest.mark.asyncio
async def test_wrong_token_is_a_login_failure(loop_errors: list[str]):
    async with FakeDiscord(token="right") as server:
        with server.patch_discord():
            client = RecordingClient()
            with pytest.raises(discord.LoginFailure):
                await client.login("wrong")
            await client.close()


@pytest.mark.asyncio
async def test_leak_detector_sees_an_unclosed_session(loop_errors: list[str]):
    session = aiohttp.ClientSession()
    del session
    gc.collect()
    assert any("Unclosed client session" in error for error in loop_errors)
    loop_errors.clear()
