// The console's shell: log in with a key, ask the server who it belongs to (/me), show the
// areas that caller may use, and route `#/area/...` to one page at a time. A page is
// `mount(root, ctx, params) → unmount()`; unmounting closes whatever the page opened (its
// WebSocket), so moving between pages never leaves a socket behind.

import { api, describe, setKey, storedKey, whenAuthLost, ApiError } from "/assets/api.js";
import { h, clear, showBanner, hideBanner } from "/assets/ui.js";
import * as chat from "/assets/chat.js";
import * as mcp from "/assets/mcp.js";
import * as runs from "/assets/runs.js";
import * as agents from "/assets/agents.js";
import * as admin from "/assets/admin.js";

const $ = (id) => document.getElementById(id);

// A custom role may use only the REST areas it lists (`me.areas`; the built-in roles use them
// all): a page whose API the role may not use is not shown.
const may = (me, area) => me.kind === "tenant" && (!Array.isArray(me.areas) || me.areas.includes(area));
const AREAS = [
  { id: "chat", label: "Chat", page: chat, who: (me) => may(me, "chat") },
  { id: "mcp", label: "MCP servers", page: mcp, who: (me) => may(me, "mcp_servers") },
  { id: "runs", label: "Runs", page: runs, who: (me) => may(me, "audit") },
  { id: "agents", label: "Agents", page: agents, who: (me) => may(me, "agents") },
  { id: "admin", label: "Admin", page: admin, who: (me) => me.kind === "platform_admin" || me.role === "admin" },
];

let me = null;
let unmount = null;
let root = null;

function showLogin(message) {
  stopPage();
  me = null;
  $("nav").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  if (root) root.remove();
  root = null;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("login-key").focus();
}

function stopPage() {
  if (unmount) {
    try {
      unmount();
    } catch (e) {
      console.error(e);
    }
  }
  unmount = null;
}

async function logIn(key, remember) {
  setKey(key, remember);
  try {
    me = await api("GET", "/me");
  } catch (e) {
    setKey(null);
    showLogin(describe(e));
    return;
  }
  $("login").hidden = true;
  $("login-error").textContent = "";
  hideBanner();
  $("logout").hidden = false;
  $("who").textContent =
    me.kind === "platform_admin" ? "platform admin" : `${me.tenant_name} · ${me.custom_role || me.role}`;
  const areas = AREAS.filter((a) => a.who(me));
  if (!areas.length) {
    clear($("nav"));
    stopPage();
    if (root) root.remove();
    root = h("section", { class: "card", id: "no-area" }, `The role ${me.custom_role || me.role} may use none of the console's pages (chat, MCP servers, runs, agents). A tenant admin can change it.`);
    $("page").append(root);
    return;
  }
  clear($("nav"), ...areas.map((a) => h("a", { href: "#/" + a.id, dataset: { area: a.id } }, a.label)));
  $("nav").hidden = false;
  route();
}

function route() {
  if (!me) return;
  const areas = AREAS.filter((a) => a.who(me));
  if (!areas.length) return;
  const [id, ...params] = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const area = areas.find((a) => a.id === id) || areas[0];
  if (area.id !== id) {
    location.replace("#/" + area.id);
    return;
  }
  for (const a of $("nav").querySelectorAll("a")) a.classList.toggle("active", a.dataset.area === area.id);
  // The same page with other params (another session) may keep its state.
  if (root && root.dataset.area === area.id && area.page.update) {
    area.page.update(params);
    return;
  }
  stopPage();
  hideBanner();
  if (root) root.remove();
  root = h("section", { dataset: { area: area.id }, class: "area-" + area.id });
  $("page").append(root);
  document.title = `${area.label} · Agentry`;
  unmount = area.page.mount(root, { me }, params) || null;
}

whenAuthLost((err) => {
  // A key that the server refuses will not start working by itself: stop everything and ask.
  setKey(null);
  showLogin(describe(err));
});

window.addEventListener("hashchange", route);
window.addEventListener("unhandledrejection", (e) => {
  if (e.reason instanceof ApiError && (e.reason.status === 401 || e.reason.code === "tenant_suspended")) return;
  showBanner(describe(e.reason));
});

$("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = $("login-key").value.trim();
  $("login-key").value = "";
  logIn(key, $("login-remember").checked);
});
$("logout").addEventListener("click", () => {
  setKey(null);
  location.hash = "";
  showLogin("");
});

const saved = storedKey();
if (saved) logIn(saved, localStorage.getItem("agentry.key") === saved);
else showLogin("");
