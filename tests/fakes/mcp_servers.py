"""MCP servers written for the tests with the `mcp` SDK: one program, two transports.

    python tests/fakes/mcp_servers.py stdio
    python tests/fakes/mcp_servers.py http PORT

Run by path (not `-m`): Panager starts stdio servers in a directory of their own, so
this file imports nothing from the test package. Behaviour the tests steer:

- `FAKE_MCP_DESCRIPTION_FILE`: the `echo` tool's description is read from this file
  at every listing (a server changing its description under the operator);
- `FAKE_MCP_PARAM_DESCRIPTION_FILE`: the same for the description of echo's `text`;
- `FAKE_MCP_MARK_FILE`: `die` appends a line here before it kills the process, so a
  test knows the call reached the server;
- `FAKE_MCP_REFUSE_LISTING_FILE`: while this file exists, `tools/list` is answered with
  a JSON-RPC error whose message is the file's text (a server that fails with words of
  its own choosing).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.server import runner
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

_strict_serialize = runner._methods.serialize_server_result


def _lenient_serialize(method: str, version: str, dumped: Any) -> Any:
    """Like servers built on other SDKs: tool listings go out as written, unchecked."""
    if method == "tools/list":
        return dumped
    return _strict_serialize(method, version, dumped)


runner._methods.serialize_server_result = _lenient_serialize  # type: ignore[attr-defined]

PNG_1PX = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082"
    )
).decode()
COUNTER = {"calls": 0}
SERVER_ERROR = -32003  # a server-defined JSON-RPC error code


class Place(BaseModel):
    city: str
    country: str = "KR"


def _description() -> str | None:
    path = os.environ.get("FAKE_MCP_DESCRIPTION_FILE")
    return Path(path).read_text() if path and Path(path).exists() else None


def _param_description() -> str | None:
    path = os.environ.get("FAKE_MCP_PARAM_DESCRIPTION_FILE")
    return Path(path).read_text() if path and Path(path).exists() else None


def _refusal() -> str | None:
    path = os.environ.get("FAKE_MCP_REFUSE_LISTING_FILE")
    return Path(path).read_text() if path and Path(path).exists() else None


class FakeServer(MCPServer):
    async def list_tools(self) -> list[types.Tool]:
        refusal = _refusal()
        if refusal is not None:
            raise MCPError(code=SERVER_ERROR, message=refusal)
        tools = await super().list_tools()
        description = _description()
        out = []
        for tool in tools:
            if tool.name == "echo" and description is not None:
                tool = tool.model_copy(update={"description": description})
            if tool.name == "echo" and (param := _param_description()) is not None:
                schema = json.loads(json.dumps(tool.input_schema))
                schema["properties"]["text"]["description"] = param
                tool = tool.model_copy(update={"input_schema": schema})
            if tool.name == "pick":  # a top-level anyOf of two objects
                tool = tool.model_copy(update={"input_schema": {
                    "anyOf": [
                        {"type": "object", "properties": {"id": {"type": "string"}},
                         "required": ["id"]},
                        {"type": "object", "properties": {"name": {"type": "string"}},
                         "required": ["name"]},
                    ]
                }})
            if tool.name == "loose":  # no top-level type, an array without items
                tool = tool.model_copy(update={"input_schema": {
                    "properties": {"tags": {"type": "array"}}
                }})
            if tool.name == "scalar":  # not an object at all: cannot be offered
                tool = tool.model_copy(update={"input_schema": {"type": "string"}})
            out.append(tool)
        return out


server = FakeServer("panager-test")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return f"echo: {text}"


@server.tool(description="Return this process's environment and working directory.")
def environment() -> str:
    return json.dumps({"env": dict(os.environ), "cwd": os.getcwd()})


@server.tool(description="Sleep, then answer.")
async def sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "woke up"


@server.tool(description="A long text.")
def big(chars: int) -> str:
    return "x" * chars


@server.tool(description="Die in the middle of the call.")
def die() -> str:
    mark = os.environ.get("FAKE_MCP_MARK_FILE")
    if mark:
        with open(mark, "a") as handle:
            handle.write(f"{os.getpid()}\n")
    sys.stderr.write(f"dying; token {os.environ.get('FAKE_TOKEN', '-')}\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool(description="How many calls this process has answered (state kept per process).")
def counter() -> str:
    COUNTER["calls"] += 1
    return f"{COUNTER['calls']} calls; pid {os.getpid()}"


@server.tool(description="A picture and a text.")
def picture() -> list[Any]:
    return [
        types.TextContent(type="text", text="here is the picture"),
        types.ImageContent(type="image", data=PNG_1PX, mime_type="image/png"),
    ]


@server.tool(description="Look a place up (a nested model: the schema has a $ref).")
def lookup(place: Place) -> str:
    return f"{place.city}, {place.country}"


@server.tool(description="Pick by id or by name.")
def pick(id: str | None = None, name: str | None = None) -> str:
    return f"picked {id or name}"


@server.tool(description="Tags, loosely typed.")
def loose(tags: list[str] | None = None) -> str:
    return f"tags {tags}"


@server.tool(description="A string schema.")
def scalar(value: str = "") -> str:
    return value


@server.tool(description="Fail on purpose.")
def fail() -> str:
    raise ValueError("the wiki is down <script>")


@server.tool(description="Refuse with a JSON-RPC error whose message is the text given.")
def refuse(text: str) -> str:
    raise MCPError(code=SERVER_ERROR, message=text)  # a protocol error, not an isError result


def main() -> None:
    if sys.argv[1:2] == ["http"]:
        import uvicorn

        port = int(sys.argv[2])
        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    else:
        server.run()


if __name__ == "__main__":
    main()
