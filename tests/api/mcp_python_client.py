"""The official Python MCP SDK (`mcp`, in the test venv) against /mcp with an Agentry API key as
its bearer token: initialize, the declared capabilities, tools/list, a tools/call (read_file), an unknown
resource. Prints one JSON object for tests/api/mcp_server.rs to check."""

import asyncio
import json
import os

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main() -> None:
    url, key = os.environ["AGENTRY_MCP_URL"], os.environ["AGENTRY_KEY"]
    out: dict = {}
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {key}"})
    async with http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                init = await s.initialize()
                out["server"] = init.server_info.name
                out["protocol"] = init.protocol_version
                out["capabilities"] = sorted(
                    init.capabilities.model_dump(exclude_none=True).keys()
                )
                tools = await s.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                r = await s.call_tool("read_file", {"file_path": "py.txt"})
                out["read_error"] = r.is_error
                out["read_text"] = "".join(
                    c.text for c in r.content if getattr(c, "type", "") == "text"
                )
                try:
                    await s.read_resource("agentry://nope")
                    out["unknown_resource"] = "answered"
                except Exception as e:  # the SDK's McpError
                    err = getattr(e, "error", None)
                    out["unknown_resource"] = getattr(err, "code", str(e))
    print(json.dumps(out))


asyncio.run(main())
