// The official JavaScript A2A SDK (@a2a-js/sdk, installed into .cache/mcp/clients by
// scripts/install-mcp-test-servers.sh) against one of Agentry's A2A agents: the card resolved
// from the agent's base URL, one SendMessage and one SendStreamingMessage over the JSON-RPC
// binding (A2A v1.0), and a bad key. Prints one JSON object; tests/api/a2a.rs asserts on it.
//
// Environment:
//   A2A_SDK_DIR   where @a2a-js/sdk is installed (required)
//   A2A_AGENT     the agent's base URL, http://host:port/a2a/{tenant_id}/{agent_id} (required)
//   A2A_KEY       a tenant API key, sent as `Authorization: Bearer …` (required)
//
// Output: {"card", "sent": {"id", "context", "state", "text"}, "stream": {"kinds", "states",
//          "text", "id"}, "bad_key": {"class", "message"}}

import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { randomUUID } from "node:crypto";

const sdk = (p) => import(pathToFileURL(join(process.env.A2A_SDK_DIR, "dist", p)).href);
const { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } = await sdk("client/index.js");
const { Role, TaskState } = await sdk("index.js");

const agent = process.env.A2A_AGENT;

/** A fetch that sends `key` as the bearer token, as a deployment's client would. */
const withKey = (key) => (input, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set("Authorization", `Bearer ${key}`);
  return fetch(input, { ...init, headers });
};

async function clientWith(key) {
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl: withKey(key) })],
    }),
  );
  // The public card needs no key: the SDK's own resolver fetches the well-known path. It
  // resolves that path against the URL as a base, so the agent's base URL goes with a trailing
  // slash (else its last segment, the agent id, would be replaced).
  return factory.createFromUrl(`${agent.replace(/\/$/, "")}/`);
}

const message = (text) => ({
  messageId: randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: "text", value: text }, metadata: undefined }],
  contextId: "",
  taskId: "",
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
});

const request = (text) => ({ tenant: "", message: message(text), configuration: undefined, metadata: undefined });

const artifactText = (artifacts) =>
  artifacts.flatMap((a) => a.parts).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");

const out = {};
const client = await clientWith(process.env.A2A_KEY);
const card = await client.getAgentCard();
out.card = {
  name: card.name,
  interfaces: card.supportedInterfaces.map((i) => ({
    url: i.url,
    protocolBinding: i.protocolBinding,
    protocolVersion: i.protocolVersion,
    tenant: i.tenant,
  })),
  streaming: card.capabilities?.streaming ?? null,
  protocolVersion: client.protocolVersion,
};

// SendMessage, blocking: a Task (never a bare Message from Agentry).
const sent = await client.sendMessage(request("hello from javascript"));
if (!("status" in sent)) throw new Error(`expected a task, got ${JSON.stringify(sent)}`);
out.sent = {
  id: sent.id,
  context: sent.contextId,
  state: TaskState[sent.status.state],
  text: artifactText(sent.artifacts),
};

// SendStreamingMessage: the events as they come, the artifact text rebuilt from the chunks.
const stream = { kinds: [], states: [], text: "", ids: [] };
for await (const ev of client.sendMessageStream(request("stream from javascript"))) {
  const { $case, value } = ev.payload;
  stream.kinds.push($case);
  if ($case === "task") {
    stream.ids.push(value.id);
    stream.states.push(TaskState[value.status.state]);
  } else if ($case === "statusUpdate") {
    stream.ids.push(value.taskId);
    stream.states.push(TaskState[value.status.state]);
  } else if ($case === "artifactUpdate") {
    stream.ids.push(value.taskId);
    stream.text += artifactText([value.artifact]);
  }
}
out.stream = stream;

// A bad key: the SDK raises the server's JSON-RPC error (sent with the HTTP 401).
try {
  const bad = await clientWith("agk_not_a_key");
  await bad.sendMessage(request("nobody"));
  out.bad_key = null;
} catch (e) {
  out.bad_key = { class: e.constructor.name, message: String(e.message), code: e.code ?? e.envelopeCode ?? null };
}

console.log(JSON.stringify(out));
