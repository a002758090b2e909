// The official TypeScript MCP SDK client (@modelcontextprotocol/sdk, installed into .cache/mcp/npm
// by scripts/install-mcp-test-servers.sh) against an MCP server: initialize, tools/list, the
// calls asked for (answering every elicitation "yes"), and prints one JSON object.
//
// Environment:
//   MCP_SDK_DIR   where @modelcontextprotocol/sdk is installed (required)
//   MCP_URL       the server (required)
//   MCP_KEY       a bearer token sent as `Authorization: Bearer …` (an Agentry API key), or
//   OAUTH_USER    …no key: the SDK's own OAuth (its `auth` provider: 401 → protected-resource
//                 metadata → authorization-server metadata → dynamic client registration →
//                 authorization code with PKCE → token). The browser step is the OAuth test
//                 fixture's automatic approval (tests/support/oauth_fixture.py): the authorization
//                 URL is opened with the fixture's test-only `user` (OAUTH_USER) and `claims`
//                 (OAUTH_CLAIMS, a JSON object) parameters, and the redirect's code handed back.
//   CALL          a JSON list of [tool, arguments] pairs to call in order
//
// Output: {"server", "protocol", "tools": [...], "results": [{"error", "text"}], "elicitations",
//          "oauth": {"registered", "token_type", "has_refresh_token"}}

import { pathToFileURL } from "node:url";
import { join } from "node:path";

// The SDK lives in the test cache, not beside this script: imported from MCP_SDK_DIR.
const sdk = (p) => import(pathToFileURL(join(process.env.MCP_SDK_DIR, "dist/esm", p)).href);
const { Client } = await sdk("client/index.js");
const { StreamableHTTPClientTransport } = await sdk("client/streamableHttp.js");
const { UnauthorizedError } = await sdk("client/auth.js");
const { ElicitRequestSchema } = await sdk("types.js");

const url = new URL(process.env.MCP_URL);
const calls = JSON.parse(process.env.CALL || "[]");
const out = { results: [], elicitations: 0 };

/** An in-memory OAuth client: what a desktop app would keep on disk. */
class FixtureApprovedProvider {
  constructor() {
    this.saved = {};
    this.pendingCode = undefined;
  }
  get redirectUrl() {
    return "http://127.0.0.1:9/callback";
  }
  get clientMetadata() {
    return {
      client_name: "typescript-sdk-test",
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  clientInformation() {
    return this.saved.client;
  }
  saveClientInformation(info) {
    this.saved.client = info;
  }
  tokens() {
    return this.saved.tokens;
  }
  saveTokens(tokens) {
    this.saved.tokens = tokens;
  }
  saveCodeVerifier(v) {
    this.saved.verifier = v;
  }
  codeVerifier() {
    return this.saved.verifier;
  }
  async redirectToAuthorization(authorizationUrl) {
    // The "browser": open the URL as the test user; the fixture approves at once.
    const u = new URL(authorizationUrl);
    if (process.env.OAUTH_USER) u.searchParams.set("user", process.env.OAUTH_USER);
    if (process.env.OAUTH_CLAIMS) u.searchParams.set("claims", process.env.OAUTH_CLAIMS);
    const r = await fetch(u, { redirect: "manual" });
    if (r.status !== 302) throw new Error(`authorize answered ${r.status}: ${await r.text()}`);
    const back = new URL(r.headers.get("location"));
    if (back.searchParams.get("error")) throw new Error(`authorize refused: ${back.search}`);
    this.pendingCode = back.searchParams.get("code");
  }
}

function newClient() {
  const client = new Client(
    { name: "typescript-sdk-test", version: "0.0.0" },
    { capabilities: { elicitation: { form: {} } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async () => {
    out.elicitations += 1;
    return { action: "accept", content: { answer: true } };
  });
  return client;
}

async function main() {
  let client = newClient();
  let transport;
  if (process.env.MCP_KEY) {
    transport = new StreamableHTTPClientTransport(url, {
      requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_KEY}` } },
    });
    await client.connect(transport);
  } else {
    const provider = new FixtureApprovedProvider();
    transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
    try {
      await client.connect(transport);
      throw new Error("the server let an unauthenticated client in");
    } catch (e) {
      if (!(e instanceof UnauthorizedError)) throw e;
    }
    if (!provider.pendingCode) throw new Error("the SDK never asked for authorization");
    await transport.finishAuth(provider.pendingCode);
    client = newClient();
    transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
    await client.connect(transport);
    out.oauth = {
      registered: Boolean(provider.saved.client?.client_id),
      token_type: provider.saved.tokens?.token_type,
      has_refresh_token: Boolean(provider.saved.tokens?.refresh_token),
    };
  }
  out.server = client.getServerVersion()?.name;
  out.protocol = transport.protocolVersion;
  const tools = await client.listTools();
  out.tools = tools.tools.map((t) => t.name).sort();
  for (const [name, args] of calls) {
    const r = await client.callTool({ name, arguments: args });
    out.results.push({
      error: Boolean(r.isError),
      text: (r.content || []).filter((c) => c.type === "text").map((c) => c.text).join(""),
    });
  }
  await transport.terminateSession().catch(() => {});
  await client.close();
  console.log(JSON.stringify(out));
}

main().catch((e) => {
  console.error(e?.stack || String(e));
  process.exit(1);
});
