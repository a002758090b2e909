"""A small MCP server on the official Python SDK (`mcp`, installed with mcp-server-time) for what
the reference servers cannot show:

- `tools/list` is paginated: PROBE_TOOLS tools (default 10), PROBE_PAGE_SIZE per page (default 4);
- `wait_until_cancelled` sleeps; when the client's `notifications/cancelled` arrives the SDK
  cancels the handler, which writes "cancelled" to the file named by PROBE_CANCEL_MARKER. It
  writes "started" to PROBE_STARTED_MARKER first, so a test knows the request reached the
  handler before it cancels.
- with PROBE_CATALOG=N: N resources (`probe://res/<i>`, text) and N prompts (`prompt_<i>`), both
  lists paginated like the tools, and `probe://big`, a blob of PROBE_BIG_BYTES bytes (default
  9 MiB, over the client's cap);
- with PROBE_TASK_TOOLS=1, two more tools declare `execution.taskSupport`: `needs_a_task`
  ("required": callable only as an MCP task) and `task_or_not` ("optional"). Calling
  `needs_a_task` without a task fails with -32601, as the spec says;
- with PROBE_OPS_TOOLS=1 (or the argument `--ops`), `exit_now` ends the process at once (a server
  that dies under a call) and `working_directory` answers the directory the server runs in.
"""

import os
import sys

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.server.stdio import stdio_server

TOOLS = int(os.environ.get("PROBE_TOOLS", "10"))
PAGE = int(os.environ.get("PROBE_PAGE_SIZE", "4"))
MARKER = os.environ.get("PROBE_CANCEL_MARKER")
STARTED = os.environ.get("PROBE_STARTED_MARKER")
TASK_TOOLS = os.environ.get("PROBE_TASK_TOOLS") == "1"
OPS_TOOLS = os.environ.get("PROBE_OPS_TOOLS") == "1" or "--ops" in sys.argv[1:]
CATALOG = int(os.environ.get("PROBE_CATALOG", "0"))
BIG = int(os.environ.get("PROBE_BIG_BYTES", str(9 * 1024 * 1024)))


def page_of(items, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    next_cursor = str(start + PAGE) if start + PAGE < len(items) else None
    return items[start : start + PAGE], next_cursor


async def list_resources(ctx, params) -> types.ListResourcesResult:
    items = [types.Resource(name=f"res_{i}", uri=f"probe://res/{i}") for i in range(CATALOG)]
    page, next_cursor = page_of(items, params)
    return types.ListResourcesResult(resources=page, next_cursor=next_cursor)


async def list_prompts(ctx, params) -> types.ListPromptsResult:
    items = [types.Prompt(name=f"prompt_{i}") for i in range(CATALOG)]
    page, next_cursor = page_of(items, params)
    return types.ListPromptsResult(prompts=page, next_cursor=next_cursor)


async def read_resource(ctx, params) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri == "probe://big":
        import base64

        blob = base64.b64encode(b"x" * BIG).decode()
        return types.ReadResourceResult(contents=[types.BlobResourceContents(uri=uri, blob=blob)])
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, text=f"contents of {uri}")])


def all_tools() -> list[types.Tool]:
    tools = [
        types.Tool(
            name="wait_until_cancelled",
            description="Sleeps until cancelled; records the cancellation.",
            input_schema={"type": "object", "properties": {}},
        )
    ]
    if TASK_TOOLS:
        for name, support in [("needs_a_task", "required"), ("task_or_not", "optional")]:
            tools.append(
                types.Tool(
                    name=name,
                    description=f"taskSupport: {support}",
                    input_schema={"type": "object", "properties": {}},
                    execution=types.ToolExecution(task_support=support),
                )
            )
    if OPS_TOOLS:
        for name, description in [
            ("exit_now", "Ends the server process at once."),
            ("working_directory", "The directory the server runs in."),
        ]:
            tools.append(
                types.Tool(
                    name=name,
                    description=description,
                    input_schema={"type": "object", "properties": {}},
                )
            )
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
    if params.name == "exit_now":
        os._exit(3)
    if params.name == "working_directory":
        return types.CallToolResult(content=[types.TextContent(text=os.getcwd())])
    if params.name == "needs_a_task":
        raise MCPError(-32601, "needs_a_task must be called as a task")
    return types.CallToolResult(content=[types.TextContent(text=f"called {params.name}")])


catalog = (
    {"on_list_resources": list_resources, "on_read_resource": read_resource, "on_list_prompts": list_prompts}
    if CATALOG
    else {}
)
server = Server("agentry-probe", on_list_tools=list_tools, on_call_tool=call_tool, **catalog)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
