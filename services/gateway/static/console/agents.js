// Agents (assistants): the tenant's list, and one assistant's prompt, model, tools, approvals
// and profile. A field left empty is inherited from the profile (its effective value is shown
// as the placeholder). Tenant admins create, change and delete; members read.

import { api, describe } from "/assets/api.js";
import { h, clear, showBanner, hideBanner } from "/assets/ui.js";

const BUILTIN_PROFILES = ["general", "devops", "sre", "orchestrator"];

// The built-in profiles and the tenant's own, by id.
async function profileIds() {
  try {
    return (await api("GET", "/profiles")).map((p) => p.id);
  } catch (_) {
    return BUILTIN_PROFILES;
  }
}

// The tenant's own model connections (bring your own key), by id.
async function connectionIds() {
  try {
    return (await api("GET", "/model-connections")).map((c) => c.id);
  } catch (_) {
    return [];
  }
}

export function mount(root, ctx) {
  const admin = ctx.me.role === "admin";
  const list = h("div", { id: "agents-list" });
  const form = h("div", { id: "agent-form" });
  let alive = true;
  // Only the form of the latest click is drawn: a form still loading for an earlier click must
  // not replace it, and the previous form goes at once so nothing is typed into a stale one.
  let editing = 0;
  clear(
    root,
    h("div", { class: "row" }, h("h1", { class: "grow" }, "Agents"), admin ? h("button", { id: "agent-new", onclick: () => edit(null) }, "New agent") : null),
    admin ? null : h("p", { class: "muted" }, "Only tenant admins change assistants; you see them read-only."),
    h("div", { class: "split" }, list, form),
  );
  load();
  return () => (alive = false);

  async function load() {
    let page;
    try {
      page = await api("GET", "/agents");
    } catch (e) {
      clear(list, h("p", { class: "error" }, describe(e)));
      return;
    }
    if (!alive) return;
    clear(
      list,
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "Agent"), h("th", {}, "Model"), h("th", { class: "hide-narrow" }, "Profile"))),
          h(
            "tbody",
            {},
            ...(Array.isArray(page) ? page : page.items).map((a) =>
              h(
                "tr",
                { class: "clickable", dataset: { agent: a.id }, onclick: () => edit(a) },
                h("td", {}, h("strong", {}, a.name), h("div", { class: "small muted mono" }, a.id)),
                h("td", { class: "small" }, [a.provider || "server default", a.model].filter(Boolean).join(" / ")),
                h("td", { class: "hide-narrow small" }, a.profile),
              ),
            ),
          ),
        ),
      ),
    );
  }

  async function edit(a) {
    const mine = ++editing;
    clear(form, h("p", { class: "muted" }, "Loading…"));
    const creating = !a;
    a = a || { profile: "general", max_retries: 3, effective: {} };
    const eff = a.effective || {};
    const profiles = await profileIds();
    const connections = await connectionIds();
    if (!alive || mine !== editing) return;
    const ro = !admin;
    const f = {
      id: h("input", { id: "agent-id", value: a.id || "", disabled: !creating || ro, required: true, placeholder: "sre-oncall" }),
      name: h("input", { id: "agent-name", value: a.name || "", disabled: ro }),
      description: h("input", { id: "agent-description", value: a.description || "", disabled: ro }),
      system_prompt: h("textarea", { id: "agent-prompt", rows: 6, value: a.system_prompt || "", disabled: ro, placeholder: "empty: the profile's prompt" + (eff.system_prompt ? ":\n" + eff.system_prompt : "") }),
      provider: h("select", { id: "agent-provider", disabled: ro }, h("option", { value: "" }, "server default"), ...["scripted", "openai", "anthropic"].map((p) => h("option", { value: p }, p))),
      model_connection: h("select", { id: "agent-connection", disabled: ro }, h("option", { value: "" }, "the platform's model"), ...connections.map((c) => h("option", { value: c }, c))),
      model: h("input", { id: "agent-model", value: a.model || "", disabled: ro, placeholder: "provider default" }),
      tools: h("textarea", { id: "agent-tools", rows: 3, value: a.tools ? a.tools.join("\n") : "", disabled: ro, placeholder: "empty: the profile's tools (" + (eff.tools ? eff.tools.join(", ") : "every tool") + "); one name or pattern a line (files:*, read_file, github__*)" }),
      interrupt_on: h("textarea", { id: "agent-interrupt", rows: 2, value: (a.interrupt_on || []).join("\n"), disabled: ro, placeholder: "empty: the profile's (" + (eff.interrupt_on || []).join(", ") + "); tools that always need approval" }),
      auto_approve: h("input", { type: "checkbox", id: "agent-auto", checked: !!a.auto_approve, disabled: ro }),
      profile: h("select", { id: "agent-profile", disabled: ro }, ...profiles.map((p) => h("option", { value: p }, p))),
      recursion_limit: h("input", { id: "agent-recursion", type: "number", value: a.recursion_limit ?? "", disabled: ro, placeholder: eff.recursion_limit ? `profile's: ${eff.recursion_limit}` : "profile's" }),
      timeout_secs: h("input", { id: "agent-timeout", type: "number", value: a.timeout_secs ?? "", disabled: ro, placeholder: eff.timeout_secs ? `profile's: ${eff.timeout_secs}` : "profile's" }),
      max_retries: h("input", { id: "agent-retries", type: "number", value: a.max_retries, disabled: ro }),
    };
    f.provider.value = a.provider || "";
    f.model_connection.value = a.model_connection || "";
    f.profile.value = a.profile || "general";
    const err = h("p", { class: "error", role: "alert" });
    const lines = (t) => t.value.split(/[\n,]/).map((x) => x.trim()).filter(Boolean);
    clear(
      form,
      h(
        "form",
        {
          class: "card",
          onsubmit: async (e) => {
            e.preventDefault();
            const body = {
              name: f.name.value.trim() || undefined,
              description: f.description.value,
              system_prompt: f.system_prompt.value || undefined,
              provider: f.provider.value || null,
              model: f.model.value.trim() || null,
              tools: lines(f.tools).length ? lines(f.tools) : null,
              interrupt_on: lines(f.interrupt_on).length ? lines(f.interrupt_on) : null,
              auto_approve: f.auto_approve.checked,
              profile: f.profile.value,
              recursion_limit: f.recursion_limit.value === "" ? null : Number(f.recursion_limit.value),
              timeout_secs: f.timeout_secs.value === "" ? null : Number(f.timeout_secs.value),
              max_retries: Number(f.max_retries.value),
              model_connection: f.model_connection.value || null,
            };
            try {
              if (creating) await api("POST", "/agents", { id: f.id.value.trim(), ...body });
              else await api("PUT", "/agents/" + a.id, body);
              err.textContent = "";
              hideBanner();
              load();
              showBanner(`Agent ${creating ? f.id.value.trim() : a.id} saved.`, "info");
            } catch (x) {
              err.textContent = describe(x) + (x.details && x.details.field ? ` [${x.details.field}]` : "");
            }
          },
        },
        h("h2", {}, creating ? "New agent" : a.name),
        h("label", {}, "Id", f.id),
        h("label", {}, "Name", f.name),
        h("label", {}, "Description", f.description),
        h("label", {}, "System prompt", f.system_prompt),
        h("label", {}, "Model connection", f.model_connection),
        h("div", { class: "row" }, h("label", { class: "grow" }, "Provider", f.provider), h("label", { class: "grow" }, "Model", f.model)),
        h("label", {}, "Tools", f.tools),
        h("label", {}, "Always ask before", f.interrupt_on),
        h("label", { class: "check" }, f.auto_approve, "Auto-approve tool calls"),
        h("label", {}, "Profile", f.profile),
        h("div", { class: "row" }, h("label", { class: "grow" }, "Recursion limit", f.recursion_limit), h("label", { class: "grow" }, "Timeout, s", f.timeout_secs), h("label", { class: "grow" }, "Retries", f.max_retries)),
        ro
          ? null
          : h(
              "div",
              { class: "row" },
              h("button", { type: "submit", id: "agent-save" }, creating ? "Create" : "Save"),
              !creating && a.id !== "default"
                ? h("button", { type: "button", class: "danger", onclick: async () => {
                    if (!confirm(`Delete the agent ${a.id}?`)) return;
                    try {
                      await api("DELETE", "/agents/" + a.id);
                      clear(form);
                      load();
                    } catch (x) {
                      showBanner(describe(x));
                    }
                  } }, "Delete")
                : null,
            ),
        err,
      ),
    );
  }
}
