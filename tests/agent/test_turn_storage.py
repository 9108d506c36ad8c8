"""Per-user turn locks across "processes", many users on a small pool, checkpoint pruning."""

from __future__ import annotations

import asyncio

from panager.agent.turns.threads import thread_values
from panager.agent.turns.turnlock import TurnLocks
from panager.app import App
from tests.fakes.scripted_model import ScriptedChatModel
from tests.runtime_helpers import write_config

COUNT_CHECKPOINTS = "SELECT count(*) AS n FROM checkpoints WHERE thread_id = %s"


async def test_turn_locks_serialise_one_user_across_processes(db_url):
    one, two = TurnLocks(db_url), TurnLocks(db_url)  # two processes' lock managers
    order: list[str] = []
    try:
        async with one.hold(5):
            waiting = asyncio.create_task(_hold(two, 5, order, "second"))
            async with two.hold(6):  # another user is not blocked
                order.append("other user")
            await asyncio.sleep(0.2)
            assert not waiting.done()
            order.append("first done")
        await asyncio.wait_for(waiting, 5)
        assert order == ["other user", "first done", "second"]
    finally:
        await one.close()
        await two.close()


async def _hold(locks: TurnLocks, user_id: int, order: list[str], label: str) -> None:
    async with locks.hold(user_id):
        order.append(label)


async def test_more_users_than_pool_connections_do_not_deadlock(make_settings, clock):
    model = ScriptedChatModel(default="hi", delay=0.05)
    app = await App.start(make_settings(), clock=clock, model=model, pool_size=3)
    try:
        users = [await app.deps.users.ensure(1_000 + i, f"user{i}") for i in range(12)]
        results = await asyncio.wait_for(
            asyncio.gather(*(app.assistant.run_turn(u, "hello") for u in users)), 30
        )
        assert all(r.ok and r.text == "hi" for r in results)
    finally:
        await app.stop()


async def checkpoints(app, user) -> int:
    async with app.pool.connection() as conn:
        row = await (await conn.execute(COUNT_CHECKPOINTS, (user.thread_id,))).fetchone()
        return row["n"]


async def test_pruning_keeps_one_checkpoint_and_the_whole_state(make_app, tmp_path):
    app = await make_app(model=ScriptedChatModel(default="ok"))
    user = await app.local_user()
    for i in range(6):
        assert (await app.assistant.run_turn(user, f"message {i}")).ok
    await app.deps.runtime.pruner.drain()
    assert await checkpoints(app, user) == 1
    messages = (await thread_values(app.assistant, user))["messages"]
    assert [m.content for m in messages[::2]] == [f"message {i}" for i in range(6)]


async def test_without_pruning_checkpoints_accumulate(make_app, tmp_path):
    home = write_config(tmp_path / "h", checkpoint_pruning=False)
    app = await make_app(model=ScriptedChatModel(default="ok"), home=home)
    assert app.deps.runtime.pruner is None
    user = await app.local_user()
    for i in range(6):
        await app.assistant.run_turn(user, f"message {i}")
    assert await checkpoints(app, user) >= 6
