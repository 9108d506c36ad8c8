"""MCP servers the operator trusts: process lifecycle, schemas, pins and scoping.

`hub.McpHub` is the one object the app holds: a supervised `connection.ServerConnection`
per configured server (config: `panager.mcp_config`), the listing read leniently
(`listing`), names and schemas fit for the model API (`schemas`), results as capped
text (`results`) and the operator's approvals (`pins`, table `mcp_tool_pins`).
"""
