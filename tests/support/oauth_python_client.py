"""The official Python MCP SDK client (`mcp`, in .cache/venv) against an OAuth-protected MCP
server, doing OAuth itself: 401 → protected-resource metadata → authorization-server metadata →
dynamic client registration → authorization code with PKCE → token → calls (and a refresh when
the token expires). The browser step is the test fixture's automatic approval
(tests/support/oauth_fixture.py): the redirect handler fetches the authorization URL, adding the
fixture's test-only `user` and `claims` parameters, and hands the redirect's code to the SDK.

Environment:
  MCP_URL        the MCP server (required)
  OAUTH_MODE     "authorization_code" (default) or "client_credentials"
  OAUTH_USER     the fixture's test user to approve as (authorization_code)
  OAUTH_CLAIMS   a JSON object of extra token claims (authorization_code)
  OAUTH_SCOPE    the scope to ask for
  OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, OAUTH_ISSUER   (client_credentials)
  CALL           a JSON list of [tool, arguments] pairs to call in order (default: none)
  PAUSE_BEFORE   seconds to wait before the calls after the first (to let a short token expire)

Prints one JSON object: {"tools": [...], "results": [{"error": bool, "text": str}], "token": {...}}.
"""

import asyncio
import json
import os
from urllib.parse import parse_qs, urlencode, urlparse

import httpx2 as httpx

from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


async def main() -> None:
    url = os.environ["MCP_URL"]
    mode = os.environ.get("OAUTH_MODE", "authorization_code")
    scope = os.environ.get("OAUTH_SCOPE") or None
    storage = MemoryStorage()
    redirect: dict[str, AuthorizationCodeResult] = {}

    async def approve(authorization_url: str) -> None:
        extra = {}
        if os.environ.get("OAUTH_USER"):
            extra["user"] = os.environ["OAUTH_USER"]
        if os.environ.get("OAUTH_CLAIMS"):
            extra["claims"] = os.environ["OAUTH_CLAIMS"]
        sep = "&" if "?" in authorization_url else "?"
        async with httpx.AsyncClient() as http:
            r = await http.get(authorization_url + (sep + urlencode(extra) if extra else ""))
        if r.status_code != 302:
            raise RuntimeError(f"authorize answered {r.status_code}: {r.text}")
        q = parse_qs(urlparse(r.headers["location"]).query)
        if "error" in q:
            raise RuntimeError(f"authorize refused: {q}")
        redirect["result"] = AuthorizationCodeResult(
            code=q["code"][0], state=q.get("state", [None])[0], iss=q.get("iss", [None])[0]
        )

    async def callback() -> AuthorizationCodeResult:
        return redirect.pop("result")

    if mode == "client_credentials":
        auth = ClientCredentialsOAuthProvider(
            server_url=url,
            storage=storage,
            client_id=os.environ["OAUTH_CLIENT_ID"],
            client_secret=os.environ["OAUTH_CLIENT_SECRET"],
            scope=scope,
            issuer=os.environ["OAUTH_ISSUER"],
        )
    else:
        auth = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                client_name="python-sdk-test",
                redirect_uris=["http://127.0.0.1:9/callback"],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
                scope=scope,
            ),
            storage=storage,
            redirect_handler=approve,
            callback_handler=callback,
        )

    calls = json.loads(os.environ.get("CALL", "[]"))
    pause = float(os.environ.get("PAUSE_BEFORE", "0"))
    out: dict = {"results": []}
    async with httpx.AsyncClient(auth=auth, timeout=60) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1]) as s:
                init = await s.initialize()
                out["server"] = init.server_info.name
                tools = await s.list_tools()
                out["tools"] = sorted(t.name for t in tools.tools)
                for i, (name, arguments) in enumerate(calls):
                    if i > 0 and pause:
                        await asyncio.sleep(pause)
                    r = await s.call_tool(name, arguments)
                    text = "".join(c.text for c in r.content if getattr(c, "type", "") == "text")
                    out["results"].append({"error": bool(r.is_error), "text": text})
    if storage.tokens is not None:
        out["token"] = {
            "has_refresh_token": storage.tokens.refresh_token is not None,
            "scope": storage.tokens.scope,
        }
    if storage.client is not None:
        out["client_id"] = storage.client.client_id
    print(json.dumps(out))


asyncio.run(main())
