"""What an MCP tool looks like to the model: its name, its schema, its pinned hash.

Pure functions, no I/O. Names become `mcp__<server>__<tool>` within the API's rule
`^[a-zA-Z0-9_-]{1,64}$`; when two tools sanitise to the same name, or a name is too
long, a short hash of the original name makes it unique — the same input always
gives the same names. Schemas are repaired where the OpenAI API would refuse them
(local `$ref`s inlined, a missing top-level `type`, a top-level `anyOf`/`oneOf` of
objects merged, arrays without `items`); a schema that cannot be repaired leaves
the tool out. The hash pins what the operator approved: the tool's name, its
description and its input schema exactly as the server sent them.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

NAME_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
MAX_NAME = 64
MAX_DESCRIPTION_CHARS = 1_024
MAX_SCHEMA_CHARS = 16_000
_MAX_REF_DEPTH = 8
_COMBINERS = ("anyOf", "oneOf")
_TOP_FORBIDDEN = ("allOf", "not", "enum")


class SchemaRefused(ValueError):
    """The input schema cannot be offered to the model; the message says why."""


def tool_hash(name: str, description: str | None, schema: Any) -> str:
    """A stable fingerprint of what the server says a tool is and takes."""
    payload = json.dumps(
        [name, description or "", schema], sort_keys=True, ensure_ascii=False, default=str
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def cap_description(text: str | None, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """The server's description cut to `limit` characters (it sits in every prompt)."""
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


MAX_PARAM_DESCRIPTION_CHARS = 300


def param_descriptions(schema: Any, path: str = "") -> list[tuple[str, str]]:
    """Every `description` inside an input schema, with where it sits ('a.b', 'items')."""
    found: list[tuple[str, str]] = []
    if isinstance(schema, dict):
        if path and isinstance(schema.get("description"), str):
            found.append((path, schema["description"]))
        for key, value in schema.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    found += param_descriptions(sub, f"{path}.{name}" if path else str(name))
            elif key != "description" and isinstance(value, dict | list):
                found += param_descriptions(value, f"{path}[{key}]" if path else f"[{key}]")
    elif isinstance(schema, list):
        for item in schema:
            found += param_descriptions(item, path)
    return found


def offered_schema(schema: Any, wrap: Any = None) -> Any:
    """The schema the model gets: every nested `description` capped (and passed through
    `wrap`, which frames an unreviewed server's words)."""

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items() if k != "description"}
            text = node.get("description")
            if isinstance(text, str):
                capped = cap_description(text, MAX_PARAM_DESCRIPTION_CHARS)
                out["description"] = capped if wrap is None else wrap(capped)
            elif "description" in node:
                out["description"] = walk(text)
            return out
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    return walk(copy.deepcopy(schema))


def _short(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:6]


def model_name(server: str, tool: str) -> str:
    """`mcp__<server>__<tool>` sanitised; over-long names keep a hash of the original."""
    raw = f"mcp__{server}__{tool}"
    name = _UNSAFE.sub("_", raw)
    if len(name) > MAX_NAME:
        name = f"{name[: MAX_NAME - 7]}_{_short(raw)}"
    return name


def assign_names(pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """A unique model-facing name for each (server, tool); collisions resolved by sort order.

    The first pair in sorted order keeps the plain sanitised name; the others get a
    hash suffix of their original name, so names do not depend on listing order."""
    names: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for server, tool in sorted(set(pairs)):
        name = model_name(server, tool)
        if name in taken:
            name = f"{name[: MAX_NAME - 7]}_{_short(f'{server}/{tool}')}"
        taken.add(name)
        names[(server, tool)] = name
    return names


def repair_schema(schema: Any) -> dict[str, Any]:
    """An input schema the OpenAI API accepts, or SchemaRefused saying why not."""
    if schema is None:
        schema = {}
    if not isinstance(schema, dict):
        raise SchemaRefused("the input schema is not a JSON object")
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    fixed = _inline(copy.deepcopy(schema), defs, 0)
    fixed.pop("$defs", None)
    fixed.pop("definitions", None)
    fixed.pop("$schema", None)
    fixed = _merge_top_variants(fixed)
    for key in _TOP_FORBIDDEN:
        if key in fixed:
            raise SchemaRefused(f"'{key}' at the top of the input schema")
    kind = fixed.setdefault("type", "object")
    if kind != "object":
        raise SchemaRefused(f"the input schema is of type {kind!r}, not an object")
    fixed.setdefault("properties", {})
    _fix_nodes(fixed)
    if len(json.dumps(fixed, default=str)) > MAX_SCHEMA_CHARS:
        raise SchemaRefused(f"the input schema is longer than {MAX_SCHEMA_CHARS} characters")
    return fixed


def _inline(node: Any, defs: dict[str, Any], depth: int) -> Any:
    """Replace local `$ref`s by their definitions (recursion past a depth is refused)."""
    if isinstance(node, list):
        return [_inline(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, defs)
        if depth >= _MAX_REF_DEPTH:
            raise SchemaRefused(f"'$ref' {ref} nests deeper than {_MAX_REF_DEPTH} levels")
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**copy.deepcopy(target), **rest}, defs, depth + 1)
    return {
        k: _inline(v, defs, depth) if k not in ("$defs", "definitions") else v
        for k, v in node.items()
    }


def _resolve(ref: str, defs: dict[str, Any]) -> Any:
    for prefix in ("#/$defs/", "#/definitions/"):
        if ref.startswith(prefix) and ref[len(prefix) :] in defs:
            return defs[ref[len(prefix) :]]
    raise SchemaRefused(f"'$ref' {ref} does not point into the schema's own definitions")


def _merge_top_variants(schema: dict[str, Any]) -> dict[str, Any]:
    """A top-level anyOf/oneOf of object schemas as one object: every property, none required
    unless all variants require it."""
    for key in _COMBINERS:
        variants = schema.get(key)
        if variants is None:
            continue
        if not isinstance(variants, list) or not all(
            isinstance(v, dict) and v.get("type", "object") == "object" for v in variants
        ):
            raise SchemaRefused(f"'{key}' at the top of the input schema mixes non-objects")
        merged = {k: v for k, v in schema.items() if k not in _COMBINERS}
        properties = dict(merged.get("properties", {}))
        required: set[str] | None = None
        for variant in variants:
            properties.update(variant.get("properties", {}))
            wanted = set(variant.get("required", []))
            required = wanted if required is None else required & wanted
        merged["type"] = "object"
        merged["properties"] = properties
        merged["required"] = sorted(set(merged.get("required", [])) | (required or set()))
        if not merged["required"]:
            merged.pop("required")
        return merged
    return schema


def _fix_nodes(node: Any) -> None:
    """Give every array an `items` and every node with `properties`/`items` its `type`
    (the API refuses arrays without `items`; some validators refuse untyped objects)."""
    if isinstance(node, list):
        for item in node:
            _fix_nodes(item)
        return
    if not isinstance(node, dict):
        return
    if "type" not in node and not any(k in node for k in ("anyOf", "oneOf", "allOf", "enum")):
        if isinstance(node.get("properties"), dict):
            node["type"] = "object"
        elif "items" in node:
            node["type"] = "array"
    kind = node.get("type")
    if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in node:
        node["items"] = {}
    for key, value in node.items():
        if key == "properties" and isinstance(value, dict):
            for child in value.values():
                _fix_nodes(child)
        elif key not in ("enum", "const", "default", "examples"):
            _fix_nodes(value)
