"""`@tool` for per-user closures, with each tool's argument schema built once.

Tools are closures over the user, so every turn defines them again. langchain's
`@tool` infers a pydantic model from the signature on every definition — some
fifteen model classes per turn, which was most of a turn's CPU time under load
(about 70 ms of it). The schema depends only on the function's signature, so
this decorator builds it on the first definition of each tool and reuses it
for every later closure of the same function.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

from langchain_core.tools import StructuredTool

_SCHEMAS: dict[Any, Any] = {}
_SURROGATES = re.compile("[\ud800-\udfff]")


def tool(function: Callable[..., Any]) -> StructuredTool:
    """Same as langchain's bare `@tool` (name, docstring description, inferred args)."""
    key = function.__code__  # one per `def`, shared by all its closures
    is_async = inspect.iscoroutinefunction(function)
    made = StructuredTool.from_function(
        None if is_async else function,
        function if is_async else None,
        args_schema=_SCHEMAS.get(key),
    )
    _SCHEMAS.setdefault(key, made.args_schema)
    return made


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
