// Administration. The platform admin: tenants with their quotas and status, each tenant's users,
// keys (a new key is shown once; revoke) and usage per day. A tenant admin: their own tenant's
// status and quotas (read-only: /tenant), users, keys and usage per day (the same views over
// /tenant/...), and the tenant's MCP virtual servers.

import { api, all, describe } from "/assets/api.js";
import { h, clear, pill, when, showBanner, hideBanner } from "/assets/ui.js";

const QUOTAS = [
  ["max_users", "Users"],
  ["max_sessions_per_user", "Sessions per user"],
  ["max_mcp_servers", "MCP servers per user"],
  ["requests_per_minute", "Requests per minute"],
  ["tokens_per_day", "Tokens per day"],
  ["max_concurrent_runs", "Concurrent runs"],
  ["workspace_quota_bytes", "Workspace bytes"],
];

export function mount(root, ctx, params) {
  const state = { alive: true };
  if (ctx.me.kind === "platform_admin") platform(root, state, params);
  else {
    const info = h("div", { class: "card", id: "tenant-info" });
    const box = h("div");
    const virtual = h("div", { class: "card", id: "virtual-servers" });
    clear(root, h("h1", {}, `Tenant ${ctx.me.tenant_name}`), info, box, virtual);
    tenantInfo(info, state);
    tenantDetail(box, "/tenant", state, ctx.me);
    virtualServers(virtual, state);
  }
  return () => (state.alive = false);
}

/** The tenant admin's own tenant: status, quotas and features, read-only. */
async function tenantInfo(box, state) {
  let t;
  try {
    t = await api("GET", "/tenant");
  } catch (e) {
    clear(box, h("p", { class: "error" }, describe(e)));
    return;
  }
  if (!state.alive) return;
  const limit = (v, k) => {
    if (!v) return "no limit";
    if (k === "workspace_quota_bytes") return v >= 2 ** 30 ? `${+(v / 2 ** 30).toFixed(1)} GiB` : `${+(v / 2 ** 20).toFixed(1)} MiB`;
    return Number(v).toLocaleString("en");
  };
  clear(
    box,
    h("h2", {}, "Status and quotas ", pill(t.status)),
    h("p", { class: "muted small" }, "Set by the platform administrator; shown here read-only."),
    h(
      "dl",
      { class: "kv", id: "tenant-quotas" },
      ...QUOTAS.flatMap(([k, label]) => [h("dt", {}, label), h("dd", { dataset: { quota: k } }, limit(t[k], k))]),
      h("dt", {}, "Features"),
      h("dd", {}, t.features_enabled.length ? t.features_enabled.join(", ") : "none"),
      h("dt", {}, "Local (stdio) MCP servers"),
      h("dd", {}, t.features_enabled.includes("stdio_mcp") ? (t.policy.stdio_mcp_role === "member" ? "allowed for everyone" : "allowed for admins") : "not allowed"),
      h("dt", {}, "Switching approvals off"),
      h("dd", {}, t.policy.members_may_auto_approve ? "allowed for everyone" : "admins only"),
      h("dt", {}, "Network from tools"),
      h("dd", {}, t.policy.sandbox.egress ? "allowed" : "off"),
    ),
  );
}

function platform(root, state) {
  const list = h("div", { id: "tenants" });
  const detail = h("div", { id: "tenant-detail" });
  const name = h("input", { id: "tenant-name", placeholder: "acme", required: true });
  const quotaInputs = QUOTAS.map(([k, label]) => [k, h("input", { type: "number", min: 0, placeholder: "0 = no limit", "aria-label": label, dataset: { quota: k } }), label]);
  const stdio = h("input", { type: "checkbox", id: "tenant-stdio" });
  const err = h("p", { class: "error", role: "alert" });
  clear(
    root,
    h("h1", {}, "Platform administration"),
    h(
      "details",
      { class: "card" },
      h("summary", {}, h("strong", {}, "Create a tenant")),
      h(
        "form",
        {
          id: "tenant-create",
          onsubmit: async (e) => {
            e.preventDefault();
            const body = { name: name.value.trim(), features_enabled: stdio.checked ? ["stdio_mcp"] : [] };
            for (const [k, input] of quotaInputs) if (input.value !== "") body[k] = Number(input.value);
            try {
              const t = await api("POST", "/admin/tenants", body);
              err.textContent = "";
              name.value = "";
              await loadTenants();
              openTenant(t);
            } catch (x) {
              err.textContent = describe(x);
            }
          },
        },
        h("label", {}, "Name", name),
        h("div", { class: "quota-grid" }, ...quotaInputs.map(([, input, label]) => h("label", {}, label, input))),
        h("label", { class: "check" }, stdio, "Local (stdio) MCP servers allowed"),
        h("button", { type: "submit" }, "Create tenant"),
        err,
      ),
    ),
    h("div", { class: "split" }, list, detail),
  );
  loadTenants();

  async function loadTenants() {
    let items;
    try {
      items = await all("/admin/tenants");
    } catch (e) {
      clear(list, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!state.alive) return;
    clear(
      list,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Tenant"), h("th", {}, "Status"), h("th", { class: "hide-narrow" }, "Quotas"))),
          h(
            "tbody",
            {},
            ...items.map((t) =>
              h(
                "tr",
                { class: "clickable", dataset: { tenant: t.name }, onclick: () => openTenant(t) },
                h("td", {}, h("strong", {}, t.name), h("div", { class: "mono small muted" }, t.id)),
                h("td", {}, pill(t.status)),
                h("td", { class: "hide-narrow small" }, QUOTAS.filter(([k]) => t[k]).map(([k, l]) => `${l}: ${t[k]}`).join(" · ") || "no limits"),
              ),
            ),
          ),
        ),
      ),
    );
  }

  function openTenant(t) {
    const box = h("div");
    const status = h("select", { id: "tenant-status" }, h("option", { value: "active" }, "active"), h("option", { value: "suspended" }, "suspended"));
    status.value = t.status;
    const inputs = QUOTAS.map(([k, label]) => [k, h("input", { type: "number", min: 0, value: t[k] ?? 0, "aria-label": label }), label]);
    const err = h("p", { class: "error", role: "alert" });
    clear(
      detail,
      h(
        "form",
        {
          class: "card",
          onsubmit: async (e) => {
            e.preventDefault();
            const body = { status: status.value };
            for (const [k, input] of inputs) body[k] = Number(input.value);
            try {
              const fresh = await api("PATCH", `/admin/tenants/${t.id}`, body);
              err.textContent = "";
              showBanner(`Tenant ${fresh.name} saved.`, "info");
              loadTenants();
            } catch (x) {
              err.textContent = describe(x);
            }
          },
        },
        h("h2", {}, t.name),
        h("label", {}, "Status", status),
        h("div", { class: "quota-grid" }, ...inputs.map(([, input, label]) => h("label", {}, label, input))),
        h("button", { type: "submit", id: "tenant-save" }, "Save tenant"),
        err,
      ),
      box,
    );
    tenantDetail(box, `/admin/tenants/${t.id}`, state, null);
  }
}

/** Users, keys and usage of one tenant, under `base`. */
/**
 * The tenant's MCP virtual servers (docs/mcp.md, "Virtual servers"): named subsets of the tools
 * `/mcp` offers, served at `/mcp/{name}`, by role patterns. List, add, delete.
 */
function virtualServers(box, state) {
  const list = h("div", { id: "virtual-list" });
  const name = h("input", { id: "virtual-name", required: true, placeholder: "support" });
  const description = h("input", { id: "virtual-description", placeholder: "What the support desk's MCP client may use" });
  const tools = h("textarea", { id: "virtual-tools", rows: 3, placeholder: "files:read_file\ngithub:*\nassistants:ask_support" });
  const err = h("p", { class: "error", role: "alert" });
  clear(
    box,
    h("h2", {}, "MCP virtual servers"),
    h("p", { class: "muted small" }, "A named subset of the tools /mcp offers, for an MCP client that should see only those: each caller gets the tools their role allows that these patterns match (service:tool, service:prefix*, service:*, !denial)."),
    list,
    h(
      "form",
      {
        id: "virtual-form",
        onsubmit: async (e) => {
          e.preventDefault();
          err.textContent = "";
          const body = { name: name.value.trim(), description: description.value.trim(), tools: tools.value.split(/\s+/).filter(Boolean) };
          try {
            await api("POST", "/tenant/mcp-virtual-servers", body);
            name.value = description.value = tools.value = "";
            load();
          } catch (x) {
            err.textContent = describe(x) + (x.details && x.details.field ? ` [${x.details.field}]` : "");
          }
        },
      },
      h("label", {}, "Name", name),
      h("label", {}, "Description", description),
      h("label", {}, "Tool patterns (one per line)", tools),
      h("button", { type: "submit", id: "virtual-save" }, "Add virtual server"),
      err,
    ),
  );
  load();

  async function load() {
    let items;
    try {
      items = await api("GET", "/tenant/mcp-virtual-servers");
    } catch (e) {
      clear(list, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!state.alive) return;
    clear(
      list,
      items.length === 0
        ? h("p", { class: "muted small" }, "None yet.")
        : h(
            "div",
            { class: "table-wrap" },
            h(
              "table",
              {},
              h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "URL"), h("th", {}, "Tools"), h("th", {}, ""))),
              h(
                "tbody",
                {},
                ...items.map((v) =>
                  h(
                    "tr",
                    { dataset: { virtual: v.name } },
                    h("td", {}, h("strong", {}, v.name), v.description ? h("div", { class: "small muted" }, v.description) : null),
                    h("td", { class: "mono small" }, location.origin + v.path),
                    h("td", { class: "mono small" }, v.tools.join(" ")),
                    h("td", {}, h("button", { class: "danger small", onclick: () => remove(v.name) }, "Delete")),
                  ),
                ),
              ),
            ),
          ),
    );
  }

  async function remove(n) {
    if (!confirm(`Delete the virtual server ${n}? Clients connected to it lose it at once.`)) return;
    try {
      await api("DELETE", `/tenant/mcp-virtual-servers/${encodeURIComponent(n)}`);
      hideBanner();
      load();
    } catch (x) {
      showBanner(describe(x));
    }
  }
}

function tenantDetail(box, base, state, me) {
  const users = h("div", { id: "users" });
  const keys = h("div", { id: "keys" });
  const usage = h("div", { id: "usage" });
  const shown = h("div", { id: "new-key" });
  clear(box, h("div", { class: "card" }, h("h2", {}, "Users"), users), h("div", { class: "card" }, h("h2", {}, "API keys"), shown, keys), h("div", { class: "card" }, h("h2", {}, "Usage per day (last 30 days)"), usage));
  let userList = [];
  loadUsers().then(loadKeys);
  loadUsage();

  async function loadUsers() {
    let customRoles = [];
    try {
      userList = await all(`${base}/users`);
      // The tenant's custom roles (a tenant admin lists them; the platform admin has no such
      // route, and is offered those its users already hold).
      if (base === "/tenant") customRoles = (await api("GET", "/tenant/roles")).filter((r) => !r.builtin).map((r) => r.name);
    } catch (e) {
      clear(users, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!state.alive) return;
    for (const u of userList) if (u.custom_role && !customRoles.includes(u.custom_role)) customRoles.push(u.custom_role);
    const roleNames = ["member", "admin", ...customRoles];
    // A built-in role is `role`; a custom one is `custom_role` (its holder's `role` is member).
    const roleBody = (r) => (r === "admin" || r === "member" ? { role: r } : { custom_role: r });
    const roleOptions = (selected) => roleNames.map((r) => h("option", { value: r, selected: r === selected }, r));
    const name = h("input", { id: "user-name", placeholder: "name", required: true, class: "grow" });
    const role = h("select", { id: "user-role", "aria-label": "role" }, ...roleOptions("member"));
    const err = h("p", { class: "error", role: "alert" });
    clear(
      users,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "User"), h("th", {}, "Role"), h("th", {}, ""))),
          h(
            "tbody",
            {},
            ...userList.map((u) =>
              h(
                "tr",
                { dataset: { user: u.name } },
                h("td", {}, u.name, u.disabled ? " " : null, u.disabled ? pill("disabled", "error") : null, h("div", { class: "mono small muted" }, u.id)),
                h(
                  "td",
                  {},
                  me && me.user_id === u.id
                    ? h("span", { class: "user-role" }, u.custom_role || u.role)
                    : h(
                        "select",
                        {
                          class: "user-role",
                          "aria-label": `role of ${u.name}`,
                          dataset: { roleOf: u.name },
                          onchange: (e) => patchUser(u, roleBody(e.target.value)),
                        },
                        ...roleOptions(u.custom_role || u.role),
                      ),
                ),
                h(
                  "td",
                  {},
                  me && me.user_id === u.id
                    ? h("span", { class: "small muted" }, "you")
                    : h("button", { class: "secondary small", onclick: () => patchUser(u, { disabled: !u.disabled }) }, u.disabled ? "Enable" : "Disable"),
                ),
              ),
            ),
          ),
        ),
      ),
      h(
        "form",
        {
          class: "row",
          id: "user-create",
          onsubmit: async (e) => {
            e.preventDefault();
            try {
              await api("POST", `${base}/users`, { name: name.value.trim(), ...roleBody(role.value) });
              await loadUsers();
              loadKeys();
            } catch (x) {
              err.textContent = describe(x);
            }
          },
        },
        name,
        role,
        h("button", { type: "submit" }, "Add user"),
      ),
      err,
    );
  }

  async function patchUser(u, body) {
    try {
      await api("PATCH", `${base}/users/${u.id}`, body);
      await loadUsers();
      loadKeys();
    } catch (x) {
      showBanner(describe(x));
    }
  }

  async function loadKeys() {
    let list;
    try {
      list = await all(`${base}/api-keys`);
    } catch (e) {
      clear(keys, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!state.alive) return;
    const names = new Map(userList.map((u) => [u.id, u.name]));
    const user = h("select", { id: "key-user", "aria-label": "user" }, ...userList.map((u) => h("option", { value: u.id }, u.name)));
    const kname = h("input", { id: "key-name", placeholder: "key name (laptop, ci…)", required: true, class: "grow" });
    const err = h("p", { class: "error", role: "alert" });
    clear(
      keys,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Key"), h("th", {}, "User"), h("th", {}, "State"), h("th", {}, ""))),
          h(
            "tbody",
            {},
            ...list.map((k) =>
              h(
                "tr",
                { dataset: { key: k.name } },
                h("td", {}, k.name, h("div", { class: "mono small muted" }, k.prefix), h("div", { class: "small muted" }, k.custom_role || k.role)),
                h("td", { class: "small" }, names.get(k.user_id) || k.user_id.slice(0, 8)),
                h("td", {}, k.revoked_at ? pill("revoked") : pill("active"), k.expires_at ? h("div", { class: "small muted" }, "expires " + when(k.expires_at)) : null),
                h("td", {}, k.revoked_at || (me && me.key_id === k.id) ? null : h("button", { class: "danger small", dataset: { revoke: k.name }, onclick: () => revoke(k) }, "Revoke")),
              ),
            ),
          ),
        ),
      ),
      userList.length
        ? h(
            "form",
            {
              class: "row",
              id: "key-create",
              onsubmit: async (e) => {
                e.preventDefault();
                try {
                  const k = await api("POST", `${base}/api-keys`, { user_id: user.value, name: kname.value.trim() });
                  clear(
                    shown,
                    h("div", { class: "secret-once" }, h("strong", {}, `New key “${k.name}” — copy it now, it is shown only once:`), h("div", { class: "mono", id: "new-key-value" }, k.key)),
                  );
                  loadKeys();
                } catch (x) {
                  err.textContent = describe(x);
                }
              },
            },
            user,
            kname,
            h("button", { type: "submit" }, "Create key"),
          )
        : h("p", { class: "muted small" }, "Add a user first."),
      err,
    );
  }

  async function revoke(k) {
    if (!confirm(`Revoke the key ${k.name} (${k.prefix})? Clients using it stop at once.`)) return;
    try {
      await api("DELETE", `${base}/api-keys/${k.id}`);
      hideBanner();
      loadKeys();
    } catch (x) {
      showBanner(describe(x));
    }
  }

  async function loadUsage() {
    let u;
    try {
      u = await api("GET", `${base}/usage`);
    } catch (e) {
      clear(usage, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!state.alive) return;
    const max = Math.max(1, ...u.days.map((d) => d.total_tokens));
    const t = u.totals;
    clear(
      usage,
      h("p", { class: "small" }, `${u.from} – ${u.to}: ${t.runs} runs · ${t.total_tokens} tokens · ${t.tool_calls} tool calls`),
      u.days.length
        ? h(
            "div",
            { class: "bars", role: "img", "aria-label": "tokens per day" },
            ...u.days.map((d) => {
              const bar = h("div", { class: "bar", title: `${d.day}: ${d.total_tokens} tokens, ${d.runs} runs, ${d.tool_calls} tool calls` });
              bar.style.height = `${Math.max(2, Math.round((100 * d.total_tokens) / max))}%`;
              return bar;
            }),
          )
        : h("p", { class: "muted small" }, "No activity in this period."),
      u.days.length
        ? h("div", { class: "table-wrap" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Day"), h("th", {}, "Runs"), h("th", {}, "Tokens"), h("th", {}, "Tool calls"))), h("tbody", {}, ...u.days.map((d) => h("tr", {}, h("td", {}, d.day), h("td", {}, d.runs), h("td", {}, d.total_tokens), h("td", {}, d.tool_calls))))))
        : null,
    );
  }
}
