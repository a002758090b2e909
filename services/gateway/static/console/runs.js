// Runs: executions with filters (status, session), and one run with its steps, tool calls
// (input, output, duration, who approved), approvals and token usage, linked to its session.

import { api, describe } from "/assets/api.js";
import { h, clear, pill, pretty, when } from "/assets/ui.js";

const STATUSES = ["running", "waiting_approval", "completed", "failed", "cancelled", "rejected", "timeout", "interrupted"];

let view = null;

export function mount(root, ctx, params) {
  const status = h("select", { id: "runs-status", "aria-label": "status" }, h("option", { value: "" }, "any status"), ...STATUSES.map((s) => h("option", { value: s }, s)));
  const session = h("input", { id: "runs-session", placeholder: "session id", "aria-label": "session id", class: "grow" });
  const list = h("div", { id: "runs-list" });
  const detail = h("div", { id: "run-detail" });
  view = { root, list, detail, status, session, alive: true };
  clear(
    root,
    h("h1", {}, "Runs"),
    h(
      "form",
      { class: "row card", onsubmit: (e) => (e.preventDefault(), load()) },
      status,
      session,
      h("button", { type: "submit", id: "runs-filter" }, "Filter"),
    ),
    h("div", { class: "split" }, list, detail),
  );
  load();
  update(params);
  return () => (view.alive = false);
}

export function update(params) {
  if (params[0]) show(params[0]);
  else clear(view.detail, h("p", { class: "muted card" }, "Pick a run to see its steps, tool calls and approvals."));
}

async function load() {
  const q = new URLSearchParams({ limit: "100" });
  if (view.status.value) q.set("status", view.status.value);
  if (view.session.value.trim()) q.set("session_id", view.session.value.trim());
  let page;
  try {
    page = await api("GET", "/executions?" + q);
  } catch (e) {
    clear(view.list, h("p", { class: "error" }, describe(e)));
    return;
  }
  if (!view.alive) return;
  clear(
    view.list,
    page.items.length === 0
      ? h("p", { class: "muted card" }, "No run matches.")
      : h(
          "div",
          { class: "table-wrap" },
          h(
            "table",
            {},
            h("thead", {}, h("tr", {}, h("th", {}, "Started"), h("th", {}, "Status"), h("th", {}, "Input"), h("th", { class: "hide-narrow" }, "Tokens"))),
            h(
              "tbody",
              {},
              ...page.items.map((r) =>
                h(
                  "tr",
                  { class: "clickable", dataset: { run: r.id }, onclick: () => (location.hash = "#/runs/" + r.id) },
                  h("td", { class: "small" }, when(r.started_at)),
                  h("td", {}, pill(r.status)),
                  h("td", { class: "small" }, r.parent_execution_id ? "↳ sub-task: " : "", (r.input || "").slice(0, 80)),
                  h("td", { class: "hide-narrow small" }, (r.token_usage && r.token_usage.total) || 0),
                ),
              ),
            ),
          ),
          h("p", { class: "small muted" }, `${page.items.length} of ${page.total}`),
        ),
  );
}

async function show(id) {
  // Only the run asked for last is shown, whichever answer arrives first.
  const asked = (view.asked = id);
  let r;
  try {
    r = await api("GET", "/executions/" + encodeURIComponent(id));
  } catch (e) {
    if (view.asked === asked) clear(view.detail, h("p", { class: "error card" }, describe(e)));
    return;
  }
  if (!view.alive || view.asked !== asked) return;
  const u = r.token_usage || {};
  clear(
    view.detail,
    h(
      "div",
      { class: "card", id: "run" },
      h("h2", {}, "Run ", h("span", { class: "mono small" }, r.id)),
      h(
        "dl",
        { class: "kv" },
        h("dt", {}, "status"), h("dd", {}, pill(r.status), r.error ? h("div", { class: "error small" }, r.error) : null),
        h("dt", {}, "session"), h("dd", {}, h("a", { href: "#/chat/" + r.session_id, class: "mono small" }, r.session_id)),
        r.parent_execution_id ? h("dt", {}, "sub-task of") : null,
        r.parent_execution_id ? h("dd", {}, h("a", { href: "#/runs/" + r.parent_execution_id, class: "mono small" }, r.parent_execution_id), h("span", { class: "small muted" }, ` (call ${r.parent_tool_call_id || "?"})`)) : null,
        h("dt", {}, "assistant"), h("dd", {}, r.assistant_id),
        h("dt", {}, "input"), h("dd", {}, r.input),
        h("dt", {}, "steps"), h("dd", {}, String(r.steps)),
        h("dt", {}, "tokens"), h("dd", {}, `${u.input || 0} in · ${u.output || 0} out · ${u.total || 0} total`),
        h("dt", {}, "started"), h("dd", {}, when(r.started_at)),
        h("dt", {}, "ended"), h("dd", {}, when(r.completed_at) || "—"),
      ),
      h("h3", {}, `Tool calls (${r.tool_calls.length})`),
      ...r.tool_calls.map((c) =>
        h(
          "div",
          { class: "tool msg" },
          h("div", { class: "row" }, h("span", { class: "name" }, c.tool_name), c.error ? pill("error") : pill("success"), h("span", { class: "small muted" }, `${c.duration_ms ?? "?"} ms`), c.approved_by ? h("span", { class: "small muted" }, `approved by ${c.approved_by.slice(0, 8)}`) : null),
          h("details", {}, h("summary", {}, "input"), h("pre", {}, pretty(c.input))),
          h("details", {}, h("summary", {}, c.error ? "error" : "output"), h("pre", {}, c.error ? c.error : pretty(c.output))),
        ),
      ),
      h("h3", {}, `Approvals and questions (${r.approvals.length})`),
      ...r.approvals.map((a) =>
        h(
          "div",
          { class: "msg small" },
          pill(a.status),
          ` ${a.kind} `,
          a.tool_call_id ? h("span", { class: "mono" }, a.tool_call_id) : null,
          a.decided_by ? ` · by ${a.decided_by.slice(0, 8)}` : "",
          a.decided_at ? ` · ${when(a.decided_at)}` : "",
          a.decision ? h("pre", {}, pretty(a.decision)) : null,
        ),
      ),
    ),
  );
}
