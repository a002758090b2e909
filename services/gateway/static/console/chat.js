// Chat: the caller's sessions (titles, search), a conversation replayed from the events store
// when it opens, then live over exactly one WebSocket. Approvals and questions are decided over
// REST, so a card found pending after a reload is decided the same way as a fresh one; what was
// decided comes from the run's approval records (GET /executions/{run}).

import { api, all, describe, getKey, ApiError } from "/assets/api.js";
import { h, clear, markdown, pretty, diff, pill, when, showBanner, hideBanner } from "/assets/ui.js";

let state = null;

export function mount(root, ctx, params) {
  state = { root, me: ctx.me, sessions: [], socket: null, sessionId: null, gen: 0 };
  const search = h("input", { type: "search", placeholder: "Search sessions", "aria-label": "Search sessions", oninput: renderList });
  const list = h("ul", { id: "session-list" });
  const conv = h("div", { class: "conversation" });
  state.els = { search, list, conv };
  clear(
    root,
    h(
      "div",
      { class: "chat", id: "chat" },
      h(
        "div",
        { class: "sessions" },
        h("div", { class: "row" }, h("button", { id: "new-chat", class: "grow", onclick: () => (location.hash = "#/chat/new") }, "New chat")),
        search,
        list,
      ),
      conv,
    ),
  );
  loadSessions();
  update(params);
  return unmountChat;
}

function unmountChat() {
  closeSocket();
  state = null;
}

export function update(params) {
  const id = params[0];
  state.gen += 1;
  closeSocket();
  const chat = state.root.querySelector("#chat");
  if (!id) {
    chat.classList.remove("has-session");
    clear(state.els.conv, h("div", { class: "card muted" }, "Pick a session on the left, or start a new chat."));
    state.sessionId = null;
  } else if (id === "new") {
    chat.classList.add("has-session");
    newChat();
  } else {
    chat.classList.add("has-session");
    openSession(id);
  }
  renderList();
}

async function loadSessions() {
  try {
    state.sessions = await all("/sessions");
  } catch (e) {
    if (state) showBanner("Sessions could not be listed: " + describe(e));
    return;
  }
  renderList();
}

function title(s) {
  return (s.metadata && typeof s.metadata.title === "string" && s.metadata.title) || `Session ${s.session_id.slice(0, 8)}`;
}

function renderList() {
  if (!state) return;
  const q = state.els.search.value.trim().toLowerCase();
  const shown = state.sessions.filter(
    (s) => !q || title(s).toLowerCase().includes(q) || s.session_id.includes(q) || s.assistant_id.toLowerCase().includes(q),
  );
  clear(
    state.els.list,
    shown.length === 0 ? h("li", { class: "muted small" }, h("a", {}, q ? "No session matches." : "No sessions yet.")) : null,
    ...shown.map((s) =>
      h(
        "li",
        {},
        h(
          "a",
          { href: "#/chat/" + s.session_id, class: s.session_id === state.sessionId ? "active" : "", dataset: { session: s.session_id } },
          h("span", { class: "title" }, title(s)),
          h("span", { class: "small muted" }, `${s.assistant_id} · ${when(s.last_active)} `, s.state !== "idle" ? pill(s.state) : null),
        ),
      ),
    ),
  );
}

// ---- a new chat: the session is created with the first message (its title) ----

async function newChat() {
  state.sessionId = null;
  const agent = h("select", { id: "new-agent", "aria-label": "Assistant" }, h("option", { value: "default" }, "default"));
  const auto = h("input", { type: "checkbox", id: "new-auto" });
  const input = h("textarea", { id: "message", rows: 2, placeholder: "Message (Enter to send, Shift+Enter for a new line)" });
  const send = h("button", { id: "send", type: "submit" }, "Send");
  const form = h("form", { class: "composer", onsubmit: (e) => (e.preventDefault(), start()) }, input, send);
  input.addEventListener("keydown", enterSends(form));
  clear(
    state.els.conv,
    h("div", { class: "conv-head" }, h("a", { class: "back", href: "#/chat" }, "← Sessions"), h("span", { class: "title grow" }, "New chat")),
    h(
      "div",
      { class: "card" },
      h("label", {}, "Assistant", agent),
      h("label", { class: "check" }, auto, "Auto-approve tool calls (tenant admins, or as the tenant policy allows)"),
      h("p", { class: "muted small" }, "Try: ", h("code", {}, '/tool write_file {"file_path": "hello.txt", "content": "hi"}'), " with the built-in scripted model."),
    ),
    h("div", { id: "log" }),
    form,
  );
  input.focus();
  api("GET", "/agents")
    .then((page) => clear(agent, ...(Array.isArray(page) ? page : page.items).map((a) => h("option", { value: a.id }, `${a.name} (${a.id})`))))
    .catch(() => {});

  async function start() {
    const text = input.value.trim();
    if (!text) return;
    send.disabled = true;
    try {
      const s = await api("POST", "/sessions", {
        assistant_id: agent.value || "default",
        auto_approve: auto.checked,
        metadata: { title: text.split("\n")[0].slice(0, 80) },
      });
      state.sessions.unshift(s);
      state.firstMessage = text;
      location.hash = "#/chat/" + s.session_id;
    } catch (e) {
      send.disabled = false;
      showBanner("The session could not be opened: " + describe(e));
    }
  }
}

function enterSends(form) {
  return (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  };
}

// ---- one session ----

async function openSession(id) {
  const gen = state.gen;
  state.sessionId = id;
  const s = (state.view = {
    id,
    lastSeq: 0,
    current: null, // the assistant text being streamed
    runsShown: new Set(),
    userByRun: new Map(),
    awaitingRun: false,
    tools: new Map(), // tool_call_id → card
    hitl: new Map(), // request_id → {card, run}
    subtasks: new Map(), // run_id of a `task` child run → the box its events go in
    target: null, // where the event being handled goes (a sub-task's box, or the log)
    retries: 0,
  });
  const log = h("div", { id: "log", "aria-live": "polite" });
  const input = h("textarea", { id: "message", rows: 2, placeholder: "Message (Enter to send, Shift+Enter for a new line)", disabled: true });
  const send = h("button", { id: "send", type: "submit", disabled: true }, "Send");
  const cancel = h("button", { id: "cancel", type: "button", class: "secondary", disabled: true, onclick: cancelRun }, "Cancel");
  const form = h("form", { class: "composer", onsubmit: (e) => (e.preventDefault(), sendMessage()) }, input, send, cancel);
  input.addEventListener("keydown", enterSends(form));
  const conn = h("span", { class: "conn muted", id: "conn" }, "loading…");
  const working = h("span", { class: "working", id: "working" });
  const head = h("span", { class: "title grow", id: "conv-title" }, "…");
  Object.assign(s, { log, input, send, cancel, conn, working, head });
  clear(
    state.els.conv,
    h("div", { class: "conv-head" }, h("a", { class: "back", href: "#/chat" }, "← Sessions"), head, working, conn),
    log,
    form,
  );

  let session;
  try {
    session = await api("GET", "/sessions/" + encodeURIComponent(id));
  } catch (e) {
    if (gen !== state?.gen) return;
    conn.textContent = "";
    const msg = e instanceof ApiError && (e.status === 404 || e.status === 400)
      ? "This session does not exist (any more), or it is not yours."
      : describe(e);
    clear(log, h("div", { class: "event-error", id: "session-error" }, msg));
    return;
  }
  if (gen !== state?.gen) return;
  clear(head, title(session), " ", h("span", { class: "small muted" }, session.assistant_id, session.auto_approve ? " · auto-approve" : ""));

  // History: the user's messages (for each run) and the stored events, page by page.
  try {
    const msgs = await all(`/sessions/${id}/messages`);
    for (const m of msgs) if (m.role === "user" && m.run_id && !s.userByRun.has(m.run_id)) s.userByRun.set(m.run_id, m.content);
    let after = 0;
    for (;;) {
      const page = await api("GET", `/sessions/${id}/events?after_seq=${after}&limit=1000`);
      if (gen !== state?.gen) return;
      for (const ev of page.events) handle(ev, true);
      after = page.next_after_seq;
      if (!page.has_more) break;
    }
    await settleCards([...s.hitl.values()].filter((c) => !c.decided));
  } catch (e) {
    if (gen !== state?.gen) return;
    clear(log, h("div", { class: "event-error" }, "The history could not be loaded: " + describe(e)));
    return;
  }
  if (gen !== state?.gen) return;
  setWorking(session.state === "running" || session.state === "waiting_approval");
  connect(gen);
}

function connect(gen) {
  const s = state.view;
  closeSocket();
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const url = `${proto}//${location.host}/ws/chat/${encodeURIComponent(s.id)}?after_seq=${s.lastSeq}`;
  // Browsers cannot set headers on a WebSocket: the key travels as a subprotocol.
  const ws = new WebSocket(url, ["agentry.v1", "agentry.key." + getKey()]);
  state.socket = ws;
  s.conn.textContent = "connecting…";
  let opened = false;
  ws.onopen = () => {
    opened = true;
    s.retries = 0;
    s.conn.textContent = "live";
    s.conn.className = "conn ok";
    s.input.disabled = false;
    s.send.disabled = false;
    hideBanner();
    if (state.firstMessage) {
      const text = state.firstMessage;
      state.firstMessage = null;
      sendMessage(text);
    } else s.input.focus();
  };
  ws.onmessage = (m) => {
    let ev;
    try {
      ev = JSON.parse(m.data);
    } catch {
      return;
    }
    if (ev.type === "pong") return;
    handle(ev, false);
  };
  ws.onclose = (e) => {
    if (state?.socket !== ws || gen !== state.gen) return; // closed by us
    state.socket = null;
    s.input.disabled = true;
    s.send.disabled = true;
    s.conn.className = "conn muted";
    afterClose(gen, e.code, opened);
  };
}

/** Why did the socket close, and is reconnecting any use? Ask the REST API, which says. */
async function afterClose(gen, code, opened) {
  const s = state.view;
  if (code === 1000) {
    s.conn.textContent = "closed";
    showBanner("This session was deleted.");
    return;
  }
  s.conn.textContent = "disconnected";
  try {
    await api("GET", "/sessions/" + encodeURIComponent(s.id));
  } catch (e) {
    if (gen !== state?.gen) return;
    if (e.status === 401 || e.code === "tenant_suspended") return; // the app asks for a key
    if (e.status === 404) {
      s.conn.textContent = "gone";
      showBanner("This session does not exist any more; nothing to reconnect to.");
      return;
    }
    if (e.status === 429 || e.status === 503 || e.status === 0) {
      const wait = Math.max(1, e.retryAfter || backoff(s));
      s.conn.textContent = `reconnecting in ${wait} s`;
      showBanner(describe(e) + ` Reconnecting in ${wait} s.`, "info");
      s.timer = setTimeout(() => gen === state?.gen && connect(gen), wait * 1000);
      return;
    }
    showBanner(describe(e));
    return;
  }
  if (gen !== state?.gen) return;
  if (code === 1008) {
    showBanner("The server closed the chat: this key may no longer act in this session.");
    return;
  }
  // The session is there and the key works: a dropped connection. Resume after the last seq.
  const wait = opened ? 1 : backoff(s);
  s.conn.textContent = `reconnecting in ${wait} s`;
  s.timer = setTimeout(() => gen === state?.gen && connect(gen), wait * 1000);
}

function backoff(s) {
  s.retries += 1;
  return Math.min(30, 2 ** Math.min(s.retries, 5));
}

function closeSocket() {
  if (!state) return;
  if (state.view && state.view.timer) clearTimeout(state.view.timer);
  const ws = state.socket;
  state.socket = null;
  if (ws) {
    ws.onmessage = ws.onclose = null;
    // Closing a socket still connecting makes the browser log an error: close it once it opens.
    if (ws.readyState === WebSocket.CONNECTING) ws.onopen = () => ws.close(1000, "the console closed this chat");
    else {
      ws.onopen = null;
      ws.close(1000, "the console closed this chat");
    }
  }
}

function sendMessage(text) {
  const s = state.view;
  const message = text !== undefined ? text : s.input.value.trim();
  if (!message || !state.socket || state.socket.readyState !== WebSocket.OPEN) return;
  s.current = null;
  addMsg(h("div", { class: "msg user" }, message));
  s.awaitingRun = true;
  state.socket.send(JSON.stringify({ type: "chat", payload: { message, enqueue: true } }));
  if (text === undefined) s.input.value = "";
  setWorking(true);
}

async function cancelRun() {
  const s = state.view;
  try {
    await api("POST", `/sessions/${s.id}/cancel`, {});
  } catch (e) {
    if (e.code === "no_active_run") setWorking(false);
    else showBanner("Cancel failed: " + describe(e));
  }
}

function setWorking(on) {
  const s = state.view;
  s.working.textContent = on ? "working…" : "";
  s.cancel.disabled = !on;
}

function addMsg(el) {
  const log = state.view.log;
  const stick = log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  (state.view.target || log).append(el);
  if (stick) log.scrollTop = log.scrollHeight;
  return el;
}

/** The box a `task` child run's events go in, nested in its parent's (a run a person started
 * writes to the log itself): each sub-task shows indented under the run that delegated it. */
function subtaskBox(ev) {
  const s = state.view;
  if (!ev.parent_run_id) return s.log;
  let box = s.subtasks.get(ev.run_id);
  if (!box) {
    const parent = s.subtasks.get(ev.parent_run_id) || s.log;
    box = h("div", { class: "subtask", dataset: { run: ev.run_id, parentRun: ev.parent_run_id } }, h("div", { class: "subtask-head small muted" }, "↳ sub-task ", h("code", {}, ev.run_id)));
    parent.append(box);
    s.subtasks.set(ev.run_id, box);
  }
  return box;
}

// ---- events ----

function handle(ev, replay) {
  const s = state.view;
  if (ev.seq) {
    if (ev.seq <= s.lastSeq) return; // already shown (a resume overlaps)
    s.lastSeq = ev.seq;
  }
  const d = ev.data || {};
  s.target = subtaskBox(ev);
  try {
    handleIn(ev, d, replay);
  } finally {
    s.target = null;
  }
}

function handleIn(ev, d, replay) {
  const s = state.view;
  if (ev.parent_run_id) return childEvent(ev, d, replay);
  if (ev.run_id && !s.runsShown.has(ev.run_id)) {
    s.runsShown.add(ev.run_id);
    if (!replay && s.awaitingRun) s.awaitingRun = false;
    else if (s.userByRun.has(ev.run_id)) addMsg(h("div", { class: "msg user" }, s.userByRun.get(ev.run_id)));
  }
  if (!replay && ev.event_type !== "done" && ev.event_type !== "error") setWorking(true);
  switch (ev.event_type) {
    case "text":
      return text(d);
    case "tool_call":
      return toolCall(d, ev);
    case "tool_result":
      return toolResult(d);
    case "file_operation":
      return fileOp(d);
    case "todo_update":
      s.current = null;
      return addMsg(
        h(
          "div",
          { class: "msg tool" },
          h("strong", {}, "Todos"),
          h("ul", { class: "todos" }, ...(d.todos || []).map((t) => h("li", {}, todoMark(t.status), " ", t.content))),
        ),
      );
    case "progress": {
      const card = s.tools.get(d.tool_call_id);
      if (card) card.progress.textContent = `${d.progress}${d.total ? "/" + d.total : ""} ${d.message || ""}`;
      return;
    }
    case "hitl_request":
      s.current = null;
      return hitlCard(ev, d, replay);
    case "error":
      s.current = null;
      if (!ev.seq && d.error_code === "quota_exceeded") showBanner(`Quota reached (${(d.details && d.details.quota) || "limit"}): ${d.error}`);
      return addMsg(h("div", { class: "msg event-error" }, `${d.error}`, h("span", { class: "small muted" }, ` (${d.error_code}${d.recoverable ? ", recoverable" : ""})`)));
    case "done":
      s.current = null;
      if (!replay) {
        setWorking(false);
        const open = [...s.hitl.values()].filter((c) => c.run === ev.run_id && !c.decided);
        if (open.length) settleCards(open);
        refreshListEntry();
      }
      return addMsg(
        h(
          "div",
          { class: "done-line", dataset: { status: d.status } },
          `${d.status}${d.reason ? " (" + d.reason + ")" : ""} · ${(d.token_usage && d.token_usage.total) || 0} tokens`,
        ),
      );
  }
}

/** An event of a `task` child run, in its box: its answer shows whole once final (deltas of
 * parallel sub-tasks would interleave), and its `done` ends only the sub-task. */
function childEvent(ev, d, replay) {
  const s = state.view;
  if (!replay) setWorking(true);
  switch (ev.event_type) {
    case "text":
      if (d.is_final && d.content) addMsg(h("div", { class: "msg assistant" }, markdown(d.content)));
      return;
    case "done": {
      const open = [...s.hitl.values()].filter((c) => c.run === ev.run_id && !c.decided);
      if (!replay && open.length) settleCards(open);
      return addMsg(h("div", { class: "done-line", dataset: { status: d.status } }, `sub-task ${d.status}${d.reason ? " (" + d.reason + ")" : ""} · ${(d.token_usage && d.token_usage.total) || 0} tokens`));
    }
    case "tool_call":
      return toolCall(d, ev);
    case "tool_result":
      return toolResult(d);
    case "file_operation":
      return fileOp(d);
    case "hitl_request":
      return hitlCard(ev, d, replay);
    case "error":
      return addMsg(h("div", { class: "msg event-error" }, `${d.error}`, h("span", { class: "small muted" }, ` (${d.error_code}${d.recoverable ? ", recoverable" : ""})`)));
    case "progress": {
      const card = s.tools.get(d.tool_call_id);
      if (card) card.progress.textContent = `${d.progress}${d.total ? "/" + d.total : ""} ${d.message || ""}`;
      return;
    }
    default:
      return;
  }
}

function todoMark(status) {
  return { pending: "○", in_progress: "◐", completed: "●" }[status] || "○";
}

function text(d) {
  const s = state.view;
  if (!s.current) s.current = addMsg(h("div", { class: "msg assistant" }, h("div", { class: "stream" })));
  const el = s.current;
  if (d.is_final) {
    clear(el, markdown(d.content));
    s.current = null;
  } else el.firstChild.append(d.content);
  const log = s.log;
  log.scrollTop = log.scrollHeight;
}

function toolCall(d, ev) {
  const s = state.view;
  s.current = null;
  const result = h("div", { class: "result" });
  const progress = h("div", { class: "small muted" });
  const el = addMsg(
    h(
      "div",
      { class: "msg tool", dataset: { toolCall: d.tool_call_id } },
      h("details", {}, h("summary", {}, "→ ", h("span", { class: "name" }, d.tool_name)), h("pre", {}, pretty(d.tool_args))),
      progress,
      result,
    ),
  );
  s.tools.set(d.tool_call_id, { el, result, progress, run: ev && ev.run_id });
}

/** Raster images a tool returned, shown inline; the JSON keeps a short stand-in for their data.
 * They come as the result's `images` (`[{"mime_type", "data": base64}]`, what the model was sent
 * as image parts), or, from older runs, as MCP content blocks (`{"type": "image", "data",
 * "mimeType"}`). */
const IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
const BASE64 = /^[A-Za-z0-9+/=\s]+$/;
function toolImages(result) {
  if (!result || typeof result !== "object") return { images: [], shown: result };
  const img = (mime, data) => h("img", { class: "tool-image", src: `data:${mime};base64,${data}`, alt: `image from the tool (${mime})` });
  const stand = (data) => `(${data.length} base64 characters, shown below)`;
  const listed = Array.isArray(result.images) ? result.images.filter((i) => i && IMAGE_TYPES.includes(i.mime_type) && typeof i.data === "string" && BASE64.test(i.data)) : [];
  const blocks = Array.isArray(result.content) ? result.content : [];
  const inBlocks = blocks.filter((b) => b && b.type === "image" && IMAGE_TYPES.includes(b.mimeType) && typeof b.data === "string" && BASE64.test(b.data));
  if (!listed.length && !inBlocks.length) return { images: [], shown: result };
  const shown = { ...result };
  if (listed.length) shown.images = result.images.map((i) => (listed.includes(i) ? { ...i, data: stand(i.data) } : i));
  if (inBlocks.length) shown.content = blocks.map((b) => (inBlocks.includes(b) ? { ...b, data: stand(b.data) } : b));
  return { images: [...listed.map((i) => img(i.mime_type, i.data)), ...inBlocks.map((b) => img(b.mimeType, b.data))], shown };
}

function toolResult(d) {
  const s = state.view;
  const card = s.tools.get(d.tool_call_id);
  const { images, shown } = toolImages(d.result);
  const body = typeof shown === "string" ? shown : pretty(shown);
  const ok = d.status === "success";
  const details = h(
    "details",
    { open: body.length < 400 },
    h("summary", {}, ok ? "✓ result" : "✗ error", h("span", { class: "small muted" }, ` (${body.length} characters)`)),
    h("pre", {}, body),
  );
  const box = h("div", {}, details, ...images);
  if (card) {
    card.result.append(box);
    card.progress.textContent = "";
  } else addMsg(h("div", { class: "msg tool" }, box));
}

function fileOp(d) {
  const s = state.view;
  const m = d.metrics || {};
  const line = h(
    "div",
    { class: "small" },
    `${d.operation} ${d.file_path}`,
    d.operation === "read" ? ` (${m.lines_read || 0} lines)` : ` (+${m.lines_added || 0} −${m.lines_removed || 0})`,
  );
  const box = h("div", {}, line, d.diff ? diff(d.diff) : null);
  const last = [...s.tools.values()].pop();
  if (last) last.result.append(box);
  else addMsg(h("div", { class: "msg tool" }, box));
}

// ---- approvals and questions ----

function hitlCard(ev, d, replay) {
  const s = state.view;
  const entry = { card: null, run: ev.run_id, decided: false, data: d, actions: null };
  s.hitl.set(d.request_id, entry);
  const actions = h("div", { class: "actions" });
  entry.actions = actions;
  let body;
  if (d.kind === "question") {
    const q = d.question || {};
    body = [h("div", {}, h("strong", {}, "Question: "), q.text || "")];
  } else {
    const a = (d.action_requests || [])[0] || {};
    // The description repeats the arguments as one line of JSON: show its words, the arguments once.
    const what = String(a.description || "").replace(/ with [[{][\s\S]*$/, "");
    body = [
      h("div", {}, h("strong", {}, "Approval needed: "), h("span", { class: "mono" }, a.name || "")),
      what && what !== a.name ? h("div", { class: "small muted" }, what) : null,
      h("pre", { class: "args" }, pretty(a.args)),
      previewDiff(a.args),
    ];
  }
  // Built with h(), which leaves out null parts (a plain append would print "null").
  const card = h("div", { class: "msg hitl", dataset: { request: d.request_id } }, ...body, actions);
  entry.card = card;
  // Drawn with the call it gates, above that call's result (which comes after the decision),
  // live and on replay alike.
  const gated = gatedTool(d, ev);
  if (gated) {
    gated.el.insertBefore(card, gated.result);
    const log = s.log;
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 400) log.scrollTop = log.scrollHeight;
  } else addMsg(card);
  if (replay) actions.append(h("span", { class: "muted small" }, "checking…"));
  else showControls(entry);
}

/** The tool card of the call a request gates: an approval names its call; a question (asked by a
 * tool, or an MCP server during a call) belongs to the run's newest call without a result. */
function gatedTool(d, ev) {
  const s = state.view;
  const id = ((d.action_requests || [])[0] || {}).tool_call_id;
  if (id) return s.tools.get(id) || null;
  return [...s.tools.values()].reverse().find((t) => t.run === ev.run_id && !t.result.hasChildNodes()) || null;
}

/** edit_file's change, before it is made. */
function previewDiff(args) {
  if (!args || typeof args.old_string !== "string" || typeof args.new_string !== "string") return null;
  const lines = [
    ...args.old_string.split("\n").map((l) => "-" + l),
    ...args.new_string.split("\n").map((l) => "+" + l),
  ];
  return diff(lines.join("\n"));
}

function showControls(entry) {
  const d = entry.data;
  const a = entry.actions;
  clear(a);
  if (d.kind === "question") {
    const q = d.question || {};
    const row = h("div", { class: "row" });
    if (q.schema) {
      const t = h("textarea", { rows: 3, placeholder: "JSON answer", "aria-label": "answer" });
      row.append(t, h("button", { onclick: () => {
        let v;
        try { v = JSON.parse(t.value); } catch { return showBanner("The answer is not valid JSON."); }
        decide(entry, { type: "answer", answer: v });
      } }, "Answer"));
    } else if (q.options && q.options.length) {
      for (const o of q.options) row.append(h("button", { class: "secondary", dataset: { option: o }, onclick: () => decide(entry, { type: "answer", answer: o }) }, o));
    } else if (q.question_type === "confirm") {
      row.append(
        h("button", { onclick: () => decide(entry, { type: "answer", answer: "yes" }) }, "Yes"),
        h("button", { class: "secondary", onclick: () => decide(entry, { type: "answer", answer: "no" }) }, "No"),
      );
    } else {
      const t = h("input", { placeholder: "Your answer", "aria-label": "answer", class: "grow" });
      row.append(t, h("button", { onclick: () => decide(entry, { type: "answer", answer: t.value }) }, "Answer"));
    }
    row.append(h("button", { class: "danger", onclick: () => decide(entry, { type: "reject", message: "declined in the console" }) }, "Decline"));
    a.append(row);
    return;
  }
  const args = ((d.action_requests || [])[0] || {}).args;
  const reason = h("input", { placeholder: "Reason (optional)", "aria-label": "reason", class: "grow reason" });
  const editor = h("div", { hidden: true });
  const text = h("textarea", { rows: 6, "aria-label": "edited arguments", class: "edit-args" });
  editor.append(
    text,
    h("div", { class: "row" },
      h("button", { class: "approve-edited", onclick: () => {
        let v;
        try { v = JSON.parse(text.value); } catch (e) { return showBanner("The edited arguments are not valid JSON: " + e.message); }
        decide(entry, { type: "edit", args: v });
      } }, "Approve with these arguments"),
      h("button", { class: "secondary", onclick: () => (editor.hidden = true) }, "Cancel edit"),
    ),
  );
  a.append(
    h("div", { class: "row" },
      h("button", { class: "approve", onclick: () => decide(entry, { type: "approve" }) }, "Approve"),
      h("button", { class: "secondary edit", onclick: () => { text.value = pretty(args); editor.hidden = false; text.focus(); } }, "Edit…"),
      h("button", { class: "danger reject", onclick: () => decide(entry, { type: "reject", message: reason.value.trim() || "rejected in the console" }) }, "Reject"),
      reason,
    ),
    editor,
  );
}

async function decide(entry, decision) {
  const s = state.view;
  for (const b of entry.actions.querySelectorAll("button")) b.disabled = true;
  try {
    await api("POST", `/sessions/${s.id}/approvals/${entry.data.request_id}`, decision);
    showDecided(entry, { status: decisionStatus(decision), decision, decided_by: state.me.user_id });
  } catch (e) {
    if (e.code === "approval_not_pending") await settleCards([entry]);
    else {
      showBanner("The decision was not taken: " + describe(e));
      for (const b of entry.actions.querySelectorAll("button")) b.disabled = false;
    }
  }
}

function decisionStatus(d) {
  return { approve: "approved", edit: "edited", reject: "rejected", answer: "answered" }[d.type];
}

/** Cards whose state is not known here: ask the runs' approval records. */
async function settleCards(entries) {
  const byRun = new Map();
  for (const e of entries) {
    if (!e.run) continue;
    if (!byRun.has(e.run)) byRun.set(e.run, []);
    byRun.get(e.run).push(e);
  }
  for (const [run, list] of byRun) {
    let detail;
    try {
      detail = await api("GET", "/executions/" + run);
    } catch (err) {
      for (const e of list) clear(e.actions, h("span", { class: "error small" }, "Its state is unknown: " + describe(err)));
      continue;
    }
    for (const e of list) {
      const rec = (detail.approvals || []).find((a) => a.id === e.data.request_id);
      if (!rec || rec.status === "pending") {
        if (rec || ["waiting_approval", "running"].includes(detail.status)) showControls(e);
        else showDecided(e, { status: "cancelled" });
      } else showDecided(e, rec);
    }
  }
}

function showDecided(entry, rec) {
  entry.decided = true;
  entry.card.classList.add("decided");
  const who = rec.decided_by ? (rec.decided_by === state.me.user_id ? " by you" : ` by ${rec.decided_by.slice(0, 8)}`) : "";
  const dec = rec.decision || {};
  let text;
  let extra = null;
  switch (rec.status) {
    case "approved":
      text = "Approved" + who;
      break;
    case "edited":
      text = "Approved with edited arguments" + who;
      if (dec.args) extra = h("pre", {}, pretty(dec.args));
      break;
    case "rejected":
      text = "Rejected" + who + (dec.message ? `: ${dec.message}` : "");
      break;
    case "answered":
      text = "Answered" + who + ": " + (typeof dec.answer === "string" ? dec.answer : JSON.stringify(dec.answer));
      break;
    case "timed_out":
      text = "Timed out: nobody decided in time";
      break;
    default:
      text = "No longer pending: the run ended";
  }
  clear(entry.actions, h("div", { class: "decision", dataset: { status: rec.status || "cancelled" } }, pill(rec.status || "cancelled"), " ", text), extra);
}

async function refreshListEntry() {
  try {
    const fresh = await api("GET", "/sessions/" + state.view.id);
    const i = state.sessions.findIndex((x) => x.session_id === fresh.session_id);
    if (i >= 0) state.sessions[i] = fresh;
    else state.sessions.unshift(fresh);
    renderList();
  } catch {
    /* the list stays as it was */
  }
}
