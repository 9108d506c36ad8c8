"""A month of events across Google (the fake) and two CalDAV calendars (Radicale and
Xandikos): the three accounts fetched concurrently, as calendar_list_events does, against
one account at a time.

Real PostgreSQL (embedded, or DATABASE_URL), the real google-api-python-client against the
tests' fake Google, and the two CalDAV servers of the tests, each in its own process (as a
real server would be: not sharing this process's interpreter). Each calendar holds
`--events` single events and one weekly series in December 2026; every request goes through
the CalDAV door (address guard, pinned connection) like in production. Each server answers
every request after `--rtt-ms` (default 60 ms: a household's server or a provider across the
Internet; on loopback with no delay the listing is mostly this process's own parsing, which
no concurrency can overlap). The fake Google server runs in this process, on its event
loop: CPU spent here delays its answers too. Target: the concurrent listing takes at most 0.6 × the sum of
the one-at-a-time listings.

Each listing is measured twice: first with every CalDAV account's parsed objects cleared
(the first listing after a start, or of objects that all changed), then the same month
again, when unchanged objects are not parsed again (providers/caldav/parsed.py); the
table shows both and says which meets the target.

    python bench/caldav.py [--repeat 5] [--events 40] [--rtt-ms 60] [--record]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import bench_database, machine_line  # noqa: E402
from bench.results import add_record_option, record_if_asked  # noqa: E402

ZONE = ZoneInfo("Europe/Berlin")
MONTH = (datetime(2026, 12, 1, tzinfo=ZONE), datetime(2027, 1, 1, tzinfo=ZONE))
SERVE = """
import sys, threading
from pathlib import Path
from tests import caldav_servers as s
server = getattr(s, "start_" + sys.argv[1])(Path(sys.argv[2]))
print(server.url, flush=True)
threading.Event().wait()
"""


def start_server(kind: str, folder: Path, rtt_ms: int = 0) -> tuple[subprocess.Popen, object]:
    """One CalDAV server in a child process; its `DavServer` handle for seeding."""
    from tests.caldav_servers import USERS, DavServer

    child = subprocess.Popen(
        [sys.executable, "-c", SERVE, kind, str(folder)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PANAGER_BENCH_DAV_LATENCY": str(rtt_ms / 1000)},
    )
    assert child.stdout is not None
    url = child.stdout.readline().strip()  # the child prints its URL once it listens
    if not url.startswith("http://127.0.0.1:"):
        child.kill()
        raise RuntimeError(f"the {kind} server did not start")
    home = (lambda u: f"/{u}/") if kind == "radicale" else (lambda u: f"/{u}/calendars/")
    users = USERS if kind == "radicale" else {"alice": USERS["alice"]}
    return child, DavServer(kind, url, dict(users), home)


def seed(server, events: int) -> None:
    url = server.make_calendar("alice", "bench", f"Bench {server.name}")
    for i in range(events):
        day = 1 + i % 31
        hour = 8 + i % 10
        uid = f"{server.name}-{i}"
        server.put("alice", url, uid, (
            "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//bench//EN\r\nBEGIN:VEVENT\r\n"
            f"UID:{uid}\r\nDTSTAMP:20261101T000000Z\r\n"
            f"DTSTART:202612{day:02d}T{hour:02d}0000Z\r\nDTEND:202612{day:02d}T{hour:02d}3000Z\r\n"
            f"SUMMARY:{server.name} event {i}\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"))
    server.put("alice", url, "weekly", (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//bench//EN\r\nBEGIN:VEVENT\r\nUID:weekly\r\n"
        "DTSTAMP:20261101T000000Z\r\nDTSTART:20261001T170000Z\r\nDTEND:20261001T180000Z\r\n"
        "RRULE:FREQ=WEEKLY\r\nSUMMARY:Weekly\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"))


async def measure(repeat: int, events: int, rtt_ms: int) -> dict[str, float]:
    from panager.agent.tools.calendar import merged_listing
    from panager.app import App
    from panager.clock import FakeClock
    from panager.config import Settings
    from panager.frontends.web.server import start_web
    from tests.caldav_servers import caldav_of
    from tests.fakes.google_server import FakeGoogle
    from tests.google_helpers import ALICE, GoogleHarness, endpoints_of, google_settings
    from tests.scheduler_helpers import RecordingMessenger

    os.environ.setdefault("OAUTHLIB_INSECURE_TRANSPORT", "1")
    folder = Path(tempfile.mkdtemp(prefix="panager-bench-dav-"))
    children = []
    try:
        servers = []
        for kind in ("radicale", "xandikos"):
            child, server = start_server(kind, folder / kind, rtt_ms)
            children.append(child)
            seed(server, events)
            servers.append(server)
        config = folder / "config.yaml"
        config.write_text("web_fetch_allow: ['127.0.0.1']\n")
        async with bench_database() as url, FakeGoogle(page_size=250) as fake:
            settings = Settings(
                _env_file=None, database_url=url, home=folder / "home", timezone="UTC",
                access="open", config_path=config, **google_settings(fake),
            )
            app = await App.start(settings, clock=FakeClock(), model=None)
            app.deps.google.endpoints = endpoints_of(fake)
            harness = GoogleHarness(app, fake, await start_web(app), RecordingMessenger())
            user = await app.local_user()
            assert (await harness.link(user))[0] == 200
            for i in range(events):
                start = MONTH[0] + timedelta(days=i % 31, hours=9 + i % 8)
                fake.add_event(ALICE, summary=f"google event {i}", start=start.isoformat(),
                               end=(start + timedelta(minutes=30)).isoformat())
            fake.latency = rtt_ms / 1000
            for server in servers:
                await caldav_of(app).add(user.id, {
                    "url": server.url, "username": "alice",
                    "password": server.users["alice"]})
            serving = await app.deps.accounts.calendars(user.id)
            assert len(serving) == 3, serving
            parsed = caldav_of(app).parsed  # the CalDAV accounts' parsed objects (parsed.py)
            await merged_listing(serving, *MONTH, ZONE)  # warm: discovery, connections
            names = [p.name + a.key for p, a, _ in serving]
            runs: dict[str, dict[str, list[float]]] = {
                state: {"together": [], **{n: [] for n in names}} for state in ("cold", "warm")}
            counts = 0
            for _ in range(repeat):
                for state in ("cold", "warm"):
                    if state == "cold":
                        parsed.clear()  # the first listing: every object parsed
                    t = time.perf_counter()
                    listing = await merged_listing(serving, *MONTH, ZONE)
                    runs[state]["together"].append(time.perf_counter() - t)
                    counts = listing["count"]
                    for (_provider, _account, calendar), name in zip(serving, names, strict=True):
                        if state == "cold":
                            parsed.clear()
                        t = time.perf_counter()
                        await calendar.events(*MONTH, ZONE)
                        runs[state][name].append(time.perf_counter() - t)
            await harness.server.stop()
            await app.stop()
    finally:
        for child in children:
            child.kill()
            child.wait()
    found: dict[str, dict[str, float]] = {}
    for state, times in runs.items():
        medians = {name: statistics.median(t) * 1000 for name, t in times.items()}
        together = medians.pop("together")
        found[state] = {"together_ms": together, **medians, "sum_ms": sum(medians.values()),
                        "ratio": together / sum(medians.values()), "events": counts}
    return found


METRICS = {
    "ratio": {
        "label": "a month across Google (fake) and two CalDAV calendars, first listing "
                 "(nothing parsed yet): all at once / one at a time",
        "unit": "×", "better": "lower", "target": "≤ 0.60",
        "compare": "the sum of the three listings one at a time, same run (60 ms per answer)",
    },
    "together_ms": {
        "label": "a month across Google (fake) and two CalDAV calendars, fetched concurrently "
                 "(first listing)",
        "unit": "ms", "better": "lower", "target": "",
        "compare": "one account at a time, same run",
    },
    "ratio_warm": {
        "label": "… the same month listed again (unchanged objects not parsed again): all at "
                 "once / one at a time",
        "unit": "×", "better": "lower", "target": "≤ 0.60",
        "compare": "the sum of the three listings one at a time, same run (60 ms per answer)",
    },
    "together_warm_ms": {
        "label": "… the same month listed again, fetched concurrently",
        "unit": "ms", "better": "lower", "target": "",
        "compare": "the first listing, same run",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--events", type=int, default=40, help="single events per calendar")
    parser.add_argument("--rtt-ms", type=int, default=60, help="each server's answer delay")
    add_record_option(parser, "caldav")
    args = parser.parse_args()
    load = os.getloadavg()
    found = asyncio.run(measure(args.repeat, args.events, args.rtt_ms))
    cold, warm = found["cold"], found["warm"]
    print(machine_line())
    print(f"load average before the run: {load[0]:.2f}, after: {os.getloadavg()[0]:.2f}")
    print(f"A month (December 2026), {cold['events']} events listed, median of {args.repeat}, "
          f"{args.rtt_ms} ms per server answer. First listing: nothing parsed yet (each "
          "CalDAV account's parsed objects cleared before it); again: the same month listed "
          "once more, unchanged objects not parsed again.")
    print()
    print("| listing | first (ms) | again (ms) |")
    print("|---|---:|---:|")
    for name in cold:
        if name not in ("together_ms", "sum_ms", "events", "ratio"):
            print(f"| one account alone: {name} | {cold[name]:.0f} | {warm[name]:.0f} |")
    print(f"| one at a time (sum) | {cold['sum_ms']:.0f} | {warm['sum_ms']:.0f} |")
    print(f"| all three concurrently | {cold['together_ms']:.0f} | {warm['together_ms']:.0f} |")
    print(f"| ratio (target ≤ 0.60) | {cold['ratio']:.2f} | {warm['ratio']:.2f} |")
    for state, figures in (("first listing", cold), ("listed again", warm)):
        verdict = "meets" if figures["ratio"] <= 0.6 else "misses"
        print(f"{state}: {verdict} the target ({figures['ratio']:.2f})")
    record_if_asked(args, "caldav", {
        "ratio": cold["ratio"], "together_ms": cold["together_ms"],
        "ratio_warm": warm["ratio"], "together_warm_ms": warm["together_ms"],
    }, full={"rtt_ms": 60, "events": 40}, metrics=METRICS, title="Calendars: CalDAV",
        history="Calendars: CalDAV",
        note=f"median of {args.repeat}; load average {load[0]:.1f} before, "
             f"{os.getloadavg()[0]:.1f} after")

if __name__ == "__main__":
    main()
