"""`@tool` for per-user closures, with each tool's argument schema built once.

Tools are closures over the user, so every turn defines them again. langchain's
`@tool` infers a pydantic model from the signature on every definition — some
fifteen model classes per turn, which was most of a turn's CPU time under load
(about 70 ms of it). The schema depends only on the function's signature, so
this decorator builds it on the first definition of each tool and reuses it
for every later closure of the same function.

Every tool also declares how its calls are classed (SPEC §2, "Outside content and
confirmation"): `ordinary` (reads; writes the person sees and can undo) or
`consequential` (sends anything to another person or out of the instance, deletes
or overwrites what cannot simply be restored, creates or changes an agent
schedule). The class sits beside the schema — `@tool(classify=ORDINARY)` or a rule
`(args, view) -> class` when the arguments decide — and a tool that declares
nothing is consequential. `describe` turns a call into the plain words a
confirmation question shows (default: the tool name and its arguments).

A few tools are asked about every time, tainted or not (`always_ask`: `email_send`).
Their `prepare(args, key)` builds the question's words when it is asked (it may fetch
what the call would act on and record what was shown under `key`, the tool call id or
proposal id); while the call runs, `CURRENT_CALL` holds that same key.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, overload

from langchain_core.tools import BaseTool, StructuredTool

from panager.errors import ToolError

log = logging.getLogger(__name__)
_SCHEMAS: dict[Any, Any] = {}
_SURROGATES = re.compile("[\ud800-\udfff]")


ToolClass = Literal["ordinary", "consequential"]
ORDINARY: ToolClass = "ordinary"
CONSEQUENTIAL: ToolClass = "consequential"
CLASSIFY_KEY = "panager_classify"
DESCRIBE_KEY = "panager_describe"
ALWAYS_ASK_KEY = "panager_always_ask"
LOOKUP_KEY = "panager_lookup"
LOOKUP_BUDGET = 5.0  # seconds one lookup may take before the question goes without it
# The tool call id (or proposal id) of the call running now; set around each tool run.
CURRENT_CALL: ContextVar[str | None] = ContextVar("panager_current_call", default=None)
# Names of tools asked about on every call (the graph routes their calls to the question).
ALWAYS_ASKED: set[str] = set()


@dataclass(frozen=True)
class CallView:
    """What a classification rule may look at besides the call's arguments."""

    person_text: str = ""  # everything the person typed themselves in the model's input
    tainted: bool = False  # the reply holding the call was written with outside content
    unattended: bool = False  # nobody is present (scheduled run, heartbeat, webhook)
    latest_text: str = ""  # the person's latest message alone ("" when it is outside content)


Classifier = Callable[[Mapping[str, Any], CallView], ToolClass]
Describer = Callable[[Mapping[str, Any]], str]
Preparer = Callable[[Mapping[str, Any], str], Awaitable[str]]
ToolT = TypeVar("ToolT", bound=BaseTool)


def _make(function: Callable[..., Any]) -> StructuredTool:
    key = function.__code__  # one per `def`, shared by all its closures
    is_async = inspect.iscoroutinefunction(function)
    made = StructuredTool.from_function(
        None if is_async else function,
        function if is_async else None,
        args_schema=_SCHEMAS.get(key),
    )
    _SCHEMAS.setdefault(key, made.args_schema)
    return made


@overload
def tool(function: Callable[..., Any], /) -> StructuredTool: ...
@overload
def tool(
    *, classify: ToolClass | Classifier, describe: Describer | None = None
) -> Callable[[Callable[..., Any]], StructuredTool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    classify: ToolClass | Classifier | None = None,
    describe: Describer | None = None,
) -> StructuredTool | Callable[[Callable[..., Any]], StructuredTool]:
    """langchain's `@tool` (name, docstring description, inferred args) plus the call class.

    `@tool(classify=ORDINARY)`, `@tool(classify=rule, describe=words)`; a bare `@tool`
    declares nothing and is treated as consequential."""

    def wrap(fn: Callable[..., Any]) -> StructuredTool:
        made = _make(fn)
        if classify is not None:
            declare(made, classify, describe)
        return made

    return wrap(function) if function is not None else wrap


def declare(
    made: ToolT, classify: ToolClass | Classifier, describe: Describer | None = None
) -> ToolT:
    """Attach a class (or rule) and a describer to a tool built elsewhere (e.g. MCP tools)."""
    made.metadata = {**(made.metadata or {}), CLASSIFY_KEY: classify, DESCRIBE_KEY: describe}
    return made


def always_ask(made: ToolT, prepare: Preparer | None = None) -> ToolT:
    """Mark a (consequential) tool whose every call waits for the person's Approve."""
    made.metadata = {**(made.metadata or {}), ALWAYS_ASK_KEY: prepare or True}
    ALWAYS_ASKED.add(made.name)
    return made


def asks_always(made: BaseTool) -> bool:
    """Whether every call of the tool is asked about."""
    return bool((made.metadata or {}).get(ALWAYS_ASK_KEY))


@dataclass(frozen=True)
class Lookup:
    """How a question names what a call acts on in the object's own words (I/O).

    `read(args)` gives the whole description from the object as it is now (raising
    `ToolError` with the reason when it cannot); `thing(args)` names the object for a
    failed read ("event `"3k9…"`"); `source` is who answers ("Google")."""

    read: Callable[[Mapping[str, Any]], Awaitable[str]]
    thing: Callable[[Mapping[str, Any]], str]
    source: str


def looks_up(made: ToolT, lookup: Lookup) -> ToolT:
    """Give a tool the lookup its questions are described with (before `confirm`)."""
    made.metadata = {**(made.metadata or {}), LOOKUP_KEY: lookup}
    return made


async def question_words(
    made: BaseTool, name: str, args: Mapping[str, Any], key: str, budget: float | None = None
) -> str:
    """The words a question shows for a call, resolved now (I/O: run it before the confirm
    node, never inside it): the tool's `prepare` when it has one (it may record what it
    showed under `key`), else its `Lookup`, else `describe_call`. A read that fails or
    takes longer than `budget` seconds (default `LOOKUP_BUDGET`) never blocks and never
    shows less: the raw call is shown with why the object could not be read."""
    meta = made.metadata or {}
    prepare = meta.get(ALWAYS_ASK_KEY)
    lookup = meta.get(LOOKUP_KEY)
    if callable(prepare):
        read: Callable[[], Awaitable[str]] = lambda: prepare(args, key)  # noqa: E731
        thing, source = f"what {name} would act on", "the provider"
    elif isinstance(lookup, Lookup):
        read = lambda: lookup.read(args)  # noqa: E731
        try:
            thing = lookup.thing(args)
        except Exception:
            thing = "the object"
        source = lookup.source
    else:
        return describe_call(made, name, args)
    try:
        return str(await asyncio.wait_for(read(), LOOKUP_BUDGET if budget is None else budget))
    except TimeoutError:
        why = f"{source} did not answer"
    except Exception as exc:
        log.info("could not describe %s (%s)", name, type(exc).__name__)
        why = str(exc) if isinstance(exc, ToolError) else f"{source} failed ({type(exc).__name__})"
    return f"{describe_call(made, name, args)}\n(could not read {thing}: {why})"


def declared(made: BaseTool) -> bool:
    """Whether the tool says how its calls are classed."""
    return CLASSIFY_KEY in (made.metadata or {})


def classify_call(made: BaseTool, args: Mapping[str, Any], view: CallView) -> ToolClass:
    """The class of one call; undeclared tools and failing rules count as consequential."""
    rule = (made.metadata or {}).get(CLASSIFY_KEY)
    if rule == ORDINARY:
        return ORDINARY
    if rule == CONSEQUENTIAL:
        return CONSEQUENTIAL
    if not callable(rule):
        return CONSEQUENTIAL
    try:
        return ORDINARY if rule(args, view) == ORDINARY else CONSEQUENTIAL
    except Exception:
        return CONSEQUENTIAL


def describe_call(made: BaseTool | None, name: str, args: Mapping[str, Any]) -> str:
    """Plain words for a confirmation question: the tool's own describer, else name + args."""
    describer = (made.metadata or {}).get(DESCRIBE_KEY) if made is not None else None
    if callable(describer):
        try:
            return str(describer(args))
        except Exception:
            pass
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    return f"{name}({shown})"


def clean_args(value: Any) -> Any:
    """Tool arguments with lone surrogates (unencodable as UTF-8) replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATES.sub("\ufffd", value)
        return value
    if isinstance(value, dict):
        return {k: clean_args(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean_args(v) for v in value]
    return value


# Characters that change how text looks without being seen, or that a terminal acts on:
# C0/C1 controls (not tab/newline), bidi controls and marks, zero-width, line/paragraph
# separators, interlinear annotation, tag characters, soft hyphen.
_INVISIBLE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2069\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
_MENTION = re.compile(r"@(everyone|here)\b|<[@#][!&]?\d+>", re.IGNORECASE)


def visible(text: str) -> str:
    """`text` with every invisible or control character written out (`<U+202E>`)."""
    return _INVISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def shown_block(text: str) -> str:
    """A long multi-line text as a question shows it, whole: in a code block (no markup,
    link or mention renders there — Discord, Telegram's `<pre>` — so nothing in it passes
    for Panager's own words), backtick runs broken so it cannot close the block,
    invisible characters made visible, every line kept. A front end too narrow for it
    sends it in parts (frontends/shared/chunking.py keeps each part's block closed)."""
    shown = visible(text).replace("`", "`\u200b")
    shown = _MENTION.sub(lambda m: m.group().replace("@", "@\u200b"), shown)
    return f"```\n{shown}\n```"


def shown_text(text: str, limit: int | None = None) -> str:
    """A value as a question shows it, whole and literal: a JSON string (its bounds and
    any whitespace visible, control characters escaped) inside inline code, so no front
    end renders Markdown, a link, a spoiler or a mention from it; backticks written
    `\\u0060` so the code span cannot be closed; invisible characters made visible
    (`<U+202E>`); mentions defused. Questions show values whole; `limit` (other notices)
    cuts with the number of characters left out said."""
    shown = visible(text)
    more = ""
    if limit is not None and len(shown) > limit:
        shown, more = shown[:limit], f" (… {len(shown) - limit} more characters)"
    shown = _MENTION.sub(lambda m: m.group().replace("@", "@\u200b"), shown)
    quoted = json.dumps(shown, ensure_ascii=False).replace("`", "\\u0060")
    return f"`{quoted}`{more}"
