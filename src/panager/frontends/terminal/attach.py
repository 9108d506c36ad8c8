"""`/attach PATH [message]` in the terminal: a local file taken in like any attachment.

PATH may be quoted ("my scan.pdf") and may start with ~. The file is read up to
the size cap (a larger one is refused without reading it all); the rest of the
line is the message that goes with it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from panager.services.media.intake import Attachment, MediaIntake, refused
from panager.services.media.sniff import clean_name

USAGE = "Usage: /attach PATH [message] — e.g. /attach ~/scan.pdf what is the due date?"


def is_attach(text: str) -> bool:
    """Whether the line is an /attach command."""
    return text.strip().split(maxsplit=1)[0:1] == ["/attach"]


def parse_attach(text: str) -> tuple[str, str] | None:
    """(path, message) of an /attach line; None when no path is given or quotes are open."""
    rest = text.strip()[len("/attach"):].strip()
    if not rest:
        return None
    if rest[0] in "\"'":
        end = rest.find(rest[0], 1)
        return (rest[1:end], rest[end + 1 :].strip()) if end > 1 else None
    path, *message = rest.split(maxsplit=1)
    return path, message[0] if message else ""


async def take_file(intake: MediaIntake, person_id: int, path_text: str) -> Attachment:
    """The file at `path_text` read (up to the cap) and taken in; a line when it cannot be."""
    cap = intake.limits.max_bytes
    name, data, problem = await asyncio.to_thread(_read, path_text, cap)
    if data is None:
        return refused(Attachment("rejected", clean_name(name)), problem)
    return await intake.take(person_id, name, data)


def _read(path_text: str, cap: int) -> tuple[str, bytes | None, str]:
    """(name, bytes, "") or (name, None, why not)."""
    path = Path(path_text).expanduser()
    try:
        if not path.is_file():
            return path.name, None, f"there is no file at {path_text}"
        with path.open("rb") as handle:
            data = handle.read(cap + 1)
    except OSError as exc:
        return path.name, None, f"it could not be read ({exc.strerror or type(exc).__name__})"
    if len(data) > cap:
        return path.name, None, f"it is larger than the {cap / 1e6:g} MB limit"
    return path.name, data, ""
