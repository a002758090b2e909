"""A small MCP server on the official Python SDK (`mcp`, installed with mcp-server-time) for what
the reference servers cannot show:

- `tools/list` is paginated: PROBE_TOOLS tools (default 10), PROBE_PAGE_SIZE per page (default 4);
- `wait_until_cancelled` sleeps; when the client's `notifications/cancelled` arrives the SDK
  cancels the handler, which writes "cancelled" to the file named by PROBE_CANCEL_MARKER. It
  writes "started" to PROBE_STARTED_MARKER first, so a test knows the request reached the
  handler before it cancels.
"""

import os

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = int(os.environ.get("PROBE_TOOLS", "10"))
PAGE = int(os.environ.get("PROBE_PAGE_SIZE", "4"))
MARKER = os.environ.get("PROBE_CANCEL_MARKER")
STARTED = os.environ.get("PROBE_STARTED_MARKER")


def all_tools() -> list[types.Tool]:
    tools = [
        types.Tool(
            name="wait_until_cancelled",
            description="Sleeps until cancelled; records the cancellation.",
            input_schema={"type": "object", "properties": {}},
        )
    ]
    for i in range(1, TOOLS):
        tools.append(
            types.Tool(
                name=f"tool_{i:02d}",
                description=f"Numbered tool {i}",
                input_schema={"type": "object", "properties": {}},
            )
        )
    return tools


async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    start = int(params.cursor) if params is not None and params.cursor else 0
    tools = all_tools()
    page = tools[start : start + PAGE]
    next_cursor = str(start + PAGE) if start + PAGE < len(tools) else None
    return types.ListToolsResult(tools=page, next_cursor=next_cursor)


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name == "wait_until_cancelled":
        if STARTED:
            with open(STARTED, "w") as f:
                f.write("started")
        try:
            await anyio.sleep(120)
        except anyio.get_cancelled_exc_class():
            if MARKER:
                with open(MARKER, "w") as f:
                    f.write("cancelled")
            raise
        return types.CallToolResult(content=[types.TextContent(text="not cancelled")])
    return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])


server = Server("agentry-probe", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
