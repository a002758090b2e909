// A small Agentry WebSocket client: sends one message, prints the run's events, asks you about
// approvals, and reconnects with `?after_seq=` (missing nothing) if the connection drops.
// No dependencies: Node.js 22+ (its built-in WebSocket; on Node 20 add --experimental-websocket).
//
//   node ws_chat.mjs http://127.0.0.1:8000 "$KEY" "hello"              # a new session
//   node ws_chat.mjs http://127.0.0.1:8000 "$KEY" "and then?" SESSION  # continue one
//   node ws_chat.mjs --cancel-after 1000 http://127.0.0.1:8000 "$KEY" "/sleep 60000" SESSION
//                                       # send a `cancel` frame 1 s after the message
//   node ws_chat.mjs --resume 6 http://127.0.0.1:8000 "$KEY" SESSION
//                                       # send nothing: replay what came after seq 6, then
//                                       # follow the run live until its `done`
//
// The key travels as a subprotocol, as browsers must send it (they cannot set headers).
import * as readline from "node:readline/promises";

const args = process.argv.slice(2);
function option(name) {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const [, value] = args.splice(i, 2);
  if (!/^\d+$/.test(value ?? "")) {
    console.error(`${name} needs a whole number`);
    process.exit(2);
  }
  return Number(value);
}
const cancelAfter = option("--cancel-after");
const resumeAfter = option("--resume");
const [base, key, ...positional] = args;
// With --resume there is no message: the third argument is the session.
const [message, given] = resumeAfter === undefined ? positional : [undefined, positional[0]];
if (!base || !key || (resumeAfter === undefined ? !message : !given)) {
  console.error("usage: node ws_chat.mjs [--cancel-after MS] BASE_URL KEY MESSAGE [SESSION_ID]\n" +
    "       node ws_chat.mjs --resume SEQ BASE_URL KEY SESSION_ID");
  process.exit(2);
}
const api = `${base.replace(/\/$/, "")}/api/v1`;
// Lines typed (or piped) on stdin, read one per question; none left means "no".
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function ask(prompt) {
  process.stderr.write(prompt);
  const { value, done } = await lines.next();
  return done ? "" : value.trim();
}

async function rest(method, path, body) {
  const res = await fetch(api + path, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body && JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${json.error_code}: ${json.message}`);
  return json;
}

const session = given ?? (await rest("POST", "/sessions", {})).session_id;
console.log(`session ${session}`);
let lastSeq = resumeAfter ?? 0;
// Resuming sends no message; nothing after SEQ and no run going means nothing to wait for.
let sent = resumeAfter !== undefined;
if (sent) {
  const missed = await rest("GET", `/sessions/${session}/events?after_seq=${lastSeq}&limit=1`);
  const { state } = await rest("GET", `/sessions/${session}`);
  if (missed.events.length === 0 && (state === "idle" || state === "closed")) {
    console.log(`[nothing after seq ${lastSeq}; no run in progress]`);
    process.exit(0);
  }
}

function connect() {
  const url = `${base.replace(/^http/, "ws").replace(/\/$/, "")}/ws/chat/${session}` +
    (lastSeq || resumeAfter !== undefined ? `?after_seq=${lastSeq}` : "");
  const ws = new WebSocket(url, ["agentry.v1", `agentry.key.${key}`]);
  const frame = (type, payload) => ws.send(JSON.stringify({ type, payload }));
  ws.onopen = () => {
    if (sent) return;
    sent = true;
    frame("chat", { message });
    if (cancelAfter !== undefined) {
      setTimeout(() => {
        console.error(`\n[cancel sent after ${cancelAfter} ms]`);
        frame("cancel", {});
      }, cancelAfter);
    }
  };
  ws.onmessage = async ({ data }) => {
    const ev = JSON.parse(data);
    if (ev.seq) lastSeq = ev.seq;
    const d = ev.data ?? {};
    switch (ev.event_type) {
      case "text":
        if (!d.is_final) process.stdout.write(d.content);
        break;
      case "tool_call":
        console.log(`\n[tool_call] ${d.tool_name} ${JSON.stringify(d.tool_args)}`);
        break;
      case "tool_result":
        console.log(`[tool_result ${d.status}] ${JSON.stringify(d.result).slice(0, 200)}`);
        break;
      case "hitl_request": {
        const what = d.kind === "approval"
          ? d.action_requests.map((a) => `${a.name} ${JSON.stringify(a.args)}`).join(", ")
          : d.question?.text;
        const answer = await ask(`\n[approval needed] ${what}\napprove? [y/N] `);
        frame("hitl_decision", d.kind === "approval"
          ? { request_id: d.request_id, type: /^y/i.test(answer) ? "approve" : "reject" }
          : { request_id: d.request_id, type: "answer", answer });
        break;
      }
      case "error":
        console.log(`\n[error ${d.error_code}] ${d.error}`);
        if (!ev.seq && !d.recoverable) process.exit(1);
        break;
      case "done":
        console.log(`\n[done] ${d.status}${d.cancelled ? " (cancelled)" : ""} tokens=${d.token_usage.total}`);
        ws.close();
        // Success: the run completed, was cancelled as asked, or was only being watched.
        process.exit(d.status === "completed" || resumeAfter !== undefined ||
          (cancelAfter !== undefined && d.cancelled) ? 0 : 1);
      default:
        console.log(`[${ev.event_type}] ${JSON.stringify(d)}`);
    }
  };
  // Dropped before `done`: reconnect and resume after the last event seen.
  ws.onclose = (e) => {
    if (e.code === 1008 || e.code === 1002) process.exit(1);
    console.error(`\n(connection closed: ${e.code}; resuming after seq ${lastSeq})`);
    setTimeout(connect, 1000);
  };
}
connect();
