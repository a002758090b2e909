// MCP servers (seed 000's "MCP 配置" tab): the platform's servers (read-only) and the user's own,
// with their live status and last error; add, edit and delete stdio and HTTP servers. Secrets
// (env and header values, tokens) are write-only: the server shows them as "***", and a "***"
// sent back keeps the stored value (docs/mcp.md).

import { api, describe } from "/assets/api.js";
import { h, clear, pill, pretty, jsonField, showBanner, hideBanner } from "/assets/ui.js";

const EXAMPLES = [
  {
    title: "Files (stdio, the reference filesystem server)",
    server: { name: "filesystem", transport: "stdio", command: "npx", args: ["-y", "@modelcontextprotocol/server-filesystem", "/srv/shared"], env: {} },
  },
  {
    title: "A remote server over HTTP with a bearer token",
    server: { name: "github", transport: "http", url: "https://mcp.example.com/mcp", headers: {}, auth: { type: "bearer", token: "" } },
  },
  {
    title: "A hosted server that signs you in with OAuth",
    server: { name: "hosted", transport: "http", url: "https://mcp.example.com/mcp", headers: {}, auth: { type: "oauth", grant: "authorization_code" } },
  },
  {
    title: "A Python server of your own (stdio)",
    server: { name: "my_tools", transport: "stdio", command: "python3", args: ["-m", "my_mcp_server"], env: { LOG_LEVEL: "info" } },
  },
  {
    title: "Another Agentry server's tools (its /mcp endpoint)",
    server: { name: "agentry_peer", transport: "http", url: "http://127.0.0.1:8001/mcp", headers: {}, auth: { type: "bearer", token: "" } },
  },
];

/** The tools a connected server offers, as the model sees them (`<server>__<tool>`). */
function toolList(s) {
  if (!Array.isArray(s.tools)) return null;
  return h(
    "details",
    { class: "small tools" },
    h("summary", {}, `${s.tools.length} tool${s.tools.length === 1 ? "" : "s"}`),
    h(
      "ul",
      {},
      ...s.tools.map((t) => h("li", {}, h("span", { class: "mono" }, t.name), t.description ? h("span", { class: "muted" }, " — " + t.description) : null)),
    ),
  );
}

/**
 * An OAuth server's sign-in state, and the button that signs in (or out). `pending` holds the
 * sign-ins started on this page (name → {url, expires}): while one waits, the page shows its
 * link and looks at the list every 2 s, so "signed in" shows by itself once the browser tab
 * has come back through the callback.
 */
function signIn(s, base, pending, reload) {
  const si = s.sign_in;
  if (!si || si.grant !== "authorization_code") return null;
  const path = `${base}/${encodeURIComponent(s.name)}/sign-in`;
  const started = pending.get(s.name);
  if (si.signed_in || (started && started.expires < Date.now())) pending.delete(s.name);
  const start = async () => {
    try {
      const r = await api("POST", path);
      hideBanner();
      pending.set(s.name, { url: r.authorization_url, expires: Date.parse(r.expires_at) || Date.now() + 600_000 });
      // The authorization server's page opens in a new tab; the link stays on the page in case a
      // popup blocker stopped it.
      window.open(r.authorization_url, "_blank", "noopener");
      reload();
    } catch (e) {
      showBanner("Sign-in could not start: " + describe(e));
    }
  };
  const end = async () => {
    if (!confirm(`Sign out of ${s.name}? Its tools need a new sign-in.`)) return;
    try {
      await api("DELETE", path);
      hideBanner();
      reload();
    } catch (e) {
      showBanner("Not signed out: " + describe(e));
    }
  };
  const waiting = pending.get(s.name);
  return h(
    "div",
    { class: "small sign-in", dataset: { signIn: s.name } },
    si.signed_in
      ? h("span", {}, pill("signed in", "status connected"), si.expires_at ? h("span", { class: "muted" }, ` until ${new Date(si.expires_at * 1000).toLocaleString()} `) : " ", h("button", { class: "secondary small", onclick: end }, "Sign out"))
      : waiting
        ? h(
            "span",
            {},
            h("a", { href: waiting.url, target: "_blank", rel: "noopener", class: "sign-in-link" }, "Open the sign-in page"),
            h("span", { class: "muted" }, ` — waiting for you to sign in (until ${new Date(waiting.expires).toLocaleTimeString()}) `),
            h("button", { class: "secondary small", onclick: start }, "Start again"),
          )
        : h("button", { class: "small", onclick: start }, "Sign in"),
  );
}

export function mount(root, ctx) {
  const me = ctx.me;
  const base = `/users/${me.user_id}/mcp-servers`;
  const list = h("div", { id: "mcp-list" });
  const formBox = h("div", { class: "card", id: "mcp-form" });
  let alive = true;
  let poll = null;
  // A server just added or changed connects in the background: `settling` names it, and the
  // list is looked at again until it has left "disconnected" (a few seconds at most).
  let settling = null;
  let settleTries = 0;
  const pending = new Map();

  clear(
    root,
    h("div", { class: "row" }, h("h1", { class: "grow" }, "MCP servers"), h("button", { class: "secondary", id: "mcp-refresh", onclick: load }, "Refresh")),
    h("p", { class: "muted" }, "Tools of these servers are offered to your runs as ", h("code", {}, "<server>__<tool>"), ". The status is live: a server connects when it is added (and when a run needs it), and then lists its tools here. An OAuth server shows Sign in until you have signed in to it."),
    list,
    formBox,
    h(
      "div",
      { class: "card" },
      h("h2", {}, "Examples to start from"),
      h("ul", {}, ...EXAMPLES.map((ex) => h("li", {}, h("a", { href: "#/mcp", onclick: (e) => (e.preventDefault(), showForm(ex.server, false)) }, ex.title)))),
    ),
  );
  showForm(null, false);
  load();
  return () => {
    alive = false;
    clearTimeout(poll);
  };

  async function load() {
    let servers;
    try {
      servers = await api("GET", base);
    } catch (e) {
      if (alive) clear(list, h("p", { class: "error" }, "The servers could not be listed: " + describe(e)));
      return;
    }
    if (!alive) return;
    const items = Array.isArray(servers) ? servers : servers.items || [];
    // A server connecting now settles soon: look again until it has.
    clearTimeout(poll);
    const unsettled = settling && settleTries++ < 15 && items.some((s) => s.name === settling && s.status === "disconnected");
    if (!unsettled) settling = null;
    if (unsettled || items.some((s) => s.status === "connecting")) poll = setTimeout(load, 1000);
    else if (pending.size) poll = setTimeout(load, 2000);
    clear(
      list,
      items.length === 0
        ? h("p", { class: "muted card" }, "No MCP servers yet. Add one below, or start from an example.")
        : h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "Server"), h("th", {}, "Status"), h("th", { class: "hide-narrow" }, "Transport"), h("th", {}, ""))),
              h(
                "tbody",
                {},
                ...items.map((s) =>
                  h(
                    "tr",
                    { dataset: { server: s.name } },
                    h("td", {}, h("strong", {}, s.name), s.source === "platform" ? h("div", { class: "small muted" }, "platform (read-only)") : null, s.description ? h("div", { class: "small muted" }, s.description) : null),
                    h(
                      "td",
                      {},
                      pill(s.disabled ? "disabled" : s.status, "status " + (s.disabled ? "" : s.status)),
                      s.status_message ? h("div", { class: "small error last-error" }, s.status_message) : null,
                      signIn(s, base, pending, load),
                      toolList(s),
                    ),
                    h("td", { class: "hide-narrow" }, s.transport || ""),
                    h(
                      "td",
                      {},
                      s.read_only
                        ? null
                        : h(
                            "div",
                            { class: "row" },
                            h("button", { class: "secondary small", onclick: () => edit(s.name) }, "Edit"),
                            h("button", { class: "danger small", dataset: { delete: s.name }, onclick: () => remove(s.name) }, "Delete"),
                          ),
                    ),
                  ),
                ),
              ),
            ),
          ),
    );
  }

  async function edit(name) {
    try {
      const s = await api("GET", `${base}/${encodeURIComponent(name)}`);
      showForm(s, true);
    } catch (e) {
      showBanner(describe(e));
    }
  }

  async function remove(name) {
    if (!confirm(`Delete the MCP server ${name}?`)) return;
    try {
      await api("DELETE", `${base}/${encodeURIComponent(name)}`);
      hideBanner();
      load();
    } catch (e) {
      showBanner("Not deleted: " + describe(e));
    }
  }

  function showForm(server, editing) {
    const s = server || { transport: "http", headers: {}, env: {}, args: [] };
    const transport = s.transport || (s.command ? "stdio" : "http");
    const name = h("input", { id: "mcp-name", value: s.name || "", required: true, disabled: editing, placeholder: "letters, digits, _ and -" });
    const kind = h("select", { id: "mcp-transport" }, h("option", { value: "http" }, "HTTP (Streamable HTTP)"), h("option", { value: "stdio" }, "stdio (a local program)"));
    kind.value = transport;
    const url = h("input", { id: "mcp-url", value: s.url || "", placeholder: "https://host/mcp" });
    const headers = h("textarea", { id: "mcp-headers", rows: 2, value: s.headers && Object.keys(s.headers).length ? pretty(s.headers) : "" , placeholder: '{"X-Team": "platform"}' });
    const authType = h("select", { id: "mcp-auth" }, ...["none", "bearer", "api_key", "oauth"].map((t) => h("option", { value: t }, t === "oauth" ? "oauth (sign in)" : t)));
    authType.value = (s.auth && (s.auth.type === "bearer_token" ? "bearer" : s.auth.type)) || "none";
    const secret = h("input", { id: "mcp-secret", type: "password", autocomplete: "off", value: (s.auth && (s.auth.token || s.auth.key)) || "", placeholder: "token or key (write-only)" });
    const oauth = (s.auth && s.auth.type === "oauth" && s.auth) || {};
    const grant = h("select", { id: "mcp-oauth-grant" }, h("option", { value: "authorization_code" }, "authorization code (each user signs in)"), h("option", { value: "client_credentials" }, "client credentials (a machine client)"));
    grant.value = oauth.grant || "authorization_code";
    const clientId = h("input", { id: "mcp-oauth-client-id", value: oauth.client_id || "", placeholder: "empty: register dynamically" });
    const clientSecret = h("input", { id: "mcp-oauth-client-secret", type: "password", autocomplete: "off", value: oauth.client_secret || "", placeholder: "write-only" });
    const scopes = h("input", { id: "mcp-oauth-scopes", value: (oauth.scopes || []).join(" "), placeholder: "space-separated; empty: what the server asks for" });
    const oauthPart = h("div", {}, h("label", {}, "Grant", grant), h("label", {}, "Client id", clientId), h("label", {}, "Client secret", clientSecret), h("label", {}, "Scopes", scopes));
    const secretPart = h("label", {}, "Token / key", secret);
    const command = h("input", { id: "mcp-command", value: s.command || "", placeholder: "npx" });
    const args = h("textarea", { id: "mcp-args", rows: 2, value: s.args && s.args.length ? JSON.stringify(s.args) : "", placeholder: '["-y", "@modelcontextprotocol/server-filesystem", "/srv"]' });
    const env = h("textarea", { id: "mcp-env", rows: 2, value: s.env && Object.keys(s.env).length ? pretty(s.env) : "", placeholder: '{"LOG_LEVEL": "info"}' });
    const timeout = h("input", { id: "mcp-timeout", type: "number", min: 1, value: s.timeout_secs || "", placeholder: "60" });
    const disabled = h("input", { type: "checkbox", id: "mcp-disabled", checked: !!s.disabled });
    const err = h("p", { class: "error", role: "alert" });
    const httpPart = h("div", {}, h("label", {}, "URL", url), h("label", {}, "Headers (JSON object; values are secrets, shown as ***)", headers), h("label", {}, "Authentication", authType), secretPart, oauthPart);
    const stdioPart = h("div", {}, h("label", {}, "Command", command), h("label", {}, "Arguments (JSON array)", args), h("label", {}, "Environment (JSON object; values are secrets, shown as ***)", env));
    const sync = () => {
      httpPart.hidden = kind.value !== "http";
      stdioPart.hidden = kind.value !== "stdio";
      secretPart.hidden = !["bearer", "api_key"].includes(authType.value);
      oauthPart.hidden = authType.value !== "oauth";
    };
    kind.addEventListener("change", sync);
    authType.addEventListener("change", sync);
    sync();
    clear(
      formBox,
      h("h2", {}, editing ? `Edit ${s.name}` : "Add an MCP server"),
      h(
        "form",
        {
          onsubmit: async (e) => {
            e.preventDefault();
            err.textContent = "";
            let body;
            try {
              body = { name: name.value.trim(), transport: kind.value, disabled: disabled.checked };
              if (timeout.value) body.timeout_secs = Number(timeout.value);
              if (kind.value === "http") {
                body.url = url.value.trim();
                const hd = jsonField("headers", headers.value);
                if (Object.keys(hd).length) body.headers = hd;
                if (authType.value === "bearer") body.auth = { type: "bearer", token: secret.value };
                else if (authType.value === "api_key") body.auth = { type: "api_key", key: secret.value };
                else if (authType.value === "oauth") {
                  body.auth = { type: "oauth", grant: grant.value };
                  if (clientId.value.trim()) body.auth.client_id = clientId.value.trim();
                  if (clientSecret.value) body.auth.client_secret = clientSecret.value;
                  const sc = scopes.value.trim().split(/\s+/).filter(Boolean);
                  if (sc.length) body.auth.scopes = sc;
                }
              } else {
                body.command = command.value.trim();
                body.args = jsonField("args", args.value, "array");
                const ev = jsonField("env", env.value);
                if (Object.keys(ev).length) body.env = ev;
              }
            } catch (x) {
              err.textContent = x.message;
              return;
            }
            try {
              if (editing) await api("PUT", `${base}/${encodeURIComponent(s.name)}`, body);
              else await api("POST", base, body);
              showForm(null, false);
              settling = body.disabled ? null : body.name;
              settleTries = 0;
              load();
            } catch (x) {
              err.textContent = describe(x) + (x.details && x.details.field ? ` [${x.details.field}]` : "");
            }
          },
        },
        h("label", {}, "Name", name),
        h("label", {}, "Transport", kind),
        httpPart,
        stdioPart,
        h("label", {}, "Timeout per tool call, seconds", timeout),
        h("label", { class: "check" }, disabled, "Disabled"),
        h("div", { class: "row" }, h("button", { type: "submit", id: "mcp-save" }, editing ? "Save" : "Add server"), editing || server ? h("button", { type: "button", class: "secondary", onclick: () => showForm(null, false) }, "Clear") : null),
        err,
      ),
    );
  }
}
