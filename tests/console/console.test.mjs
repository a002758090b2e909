// The web console in a real browser (Debian's chromium driven by playwright-core), against a real
// `agentry serve` started by tests/api/console.rs with its built-in scripted model. One scenario,
// in order: platform admin sets up a tenant; its admin chats with approvals (approve, edit,
// reject, reload mid-approval), reopens the session's history, manages MCP servers, filters
// runs, edits an agent; a revoked key fails cleanly; the server counts exactly one WebSocket
// per open chat. Screenshots of every page (wide and 390 px) go to $ARTIFACTS.
//
// Env: AGENTRY_BASE, AGENTRY_ADMIN_KEY, PLAYWRIGHT_CORE (its index.mjs), CHROMIUM, ARTIFACTS,
// NODE22 and EVERYTHING_JS (a stdio server), OAUTH_MCP_URL (an OAuth-protected MCP server whose
// authorization server approves at once: tests/support/oauth_fixture.py).

import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";

const BASE = process.env.AGENTRY_BASE;
const ADMIN = process.env.AGENTRY_ADMIN_KEY;
const ART = process.env.ARTIFACTS;
const { chromium } = await import(process.env.PLAYWRIGHT_CORE);
mkdirSync(ART, { recursive: true });

const T = 30_000; // generous waits: a shared 2-core machine
// A 2×2 PNG (red, green / blue, white).
const PNG_DATA_URI =
  "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC";
let step = "start";
const problems = [];
// Once a session holds the hostile message below, Chromium reports the blocked `onerror` while
// DOMPurify parses it (in an inert document): the CSP at work, nothing ran (asserted below).
let hostileShown = false;

function log(s) {
  step = s;
  console.log(`· ${s}`);
}

async function wsGauge() {
  const text = await (await fetch(BASE + "/metrics")).text();
  const m = text.match(/^agentry_ws_connections (\d+)/m);
  assert.ok(m, "the metrics have agentry_ws_connections");
  return Number(m[1]);
}

/** Wait until the server counts `n` open WebSockets (a closed one is released asynchronously). */
async function expectSockets(n) {
  const until = Date.now() + T;
  let last;
  while (Date.now() < until) {
    last = await wsGauge();
    if (last === n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${step}: the server counts ${last} WebSockets, expected ${n}`);
}

async function newPage(browser, width = 1280, height = 860) {
  const ctx = await browser.newContext({ viewport: { width, height } });
  const page = await ctx.newPage();
  page.setDefaultTimeout(T);
  page.on("pageerror", (e) => problems.push(`${step}: page error: ${e.message}`));
  page.on("console", (m) => {
    const expected =
      /the server responded with a status of (401|404|409|422|403)/.test(m.text()) ||
      (hostileShown && m.text().startsWith("Executing inline event handler violates"));
    if (m.type() === "error" && !expected) {
      problems.push(`${step}: console error: ${m.text()}`);
    }
  });
  page.on("dialog", (d) => d.accept());
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: `${ART}/${name}.png`, fullPage: false });
}

async function login(page, key, remember = false) {
  await page.goto(BASE + "/");
  await page.fill("#login-key", key);
  if (remember) await page.check("#login-remember");
  await page.click("#login-form button[type=submit]");
}

async function noHorizontalScroll(page, what) {
  const w = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(w <= 392, `${what} is ${w}px wide at 390px: it scrolls sideways`);
  // Nor is anything cut off at the right edge (a box wider than the screen inside main).
  const wide = await page.evaluate(() =>
    [...document.querySelectorAll("main section > *, #session-list, .conversation, .card")]
      .filter((e) => e.offsetParent && e.getBoundingClientRect().right > 392)
      .map((e) => e.id || e.className),
  );
  assert.deepEqual(wide, [], `${what}: boxes wider than 390px`);
}

/**
 * Every approval or question card of the conversation: drawn inside the card of the tool call it
 * gated, above that call's result (live and on replay), and with no stray text such as `null`.
 */
async function checkCards(page, count, when) {
  const cards = await page.evaluate(() =>
    [...document.querySelectorAll(".msg.hitl")].map((c) => {
      const tool = c.closest(".msg.tool");
      const result = tool && tool.querySelector(":scope > .result");
      return {
        request: c.dataset.request,
        text: c.textContent,
        above: !!result && !!(c.compareDocumentPosition(result) & Node.DOCUMENT_POSITION_FOLLOWING),
        result: result ? result.textContent : null,
      };
    }),
  );
  assert.equal(cards.length, count, `${when}: ${JSON.stringify(cards)}`);
  for (const c of cards) {
    assert.ok(c.above, `${when}: the card ${c.request} is drawn above the result it gated: ${JSON.stringify(c)}`);
    assert.doesNotMatch(c.text, /\bnull\b|undefined/, `${when}: stray text in the card ${c.request}`);
  }
  // The approved, edited and answered ones have their results below them (the rejected one ran nothing).
  for (const i of [0, 1, 3, 4]) assert.ok(cards[i].result.includes("✓ result"), `${when}: card ${i} has its result: ${JSON.stringify(cards[i])}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});

try {
  // ---- log in: a bad key is refused with a message ----
  log("a bad key is refused");
  const page = await newPage(browser);
  await login(page, "agk_not_a_real_key_000000000000");
  await page.waitForSelector("#login-error:has-text('refused')");
  await shot(page, "01-login-refused");

  // ---- the platform admin creates a tenant, users and keys ----
  log("platform admin: tenant, users, keys");
  await login(page, ADMIN);
  await page.waitForSelector("text=Platform administration");
  const tenant = "acme-" + Math.random().toString(36).slice(2, 8);
  await page.click("summary:has-text('Create a tenant')");
  await page.fill("#tenant-name", tenant);
  await page.fill("[data-quota=max_users]", "10");
  await page.check("#tenant-stdio");
  await page.click("#tenant-create button[type=submit]");
  await page.waitForSelector(`#tenant-detail h2:has-text('${tenant}')`);
  await page.waitForSelector(`#tenants tr[data-tenant='${tenant}']`);
  await page.fill("#user-name", "alice");
  await page.selectOption("#user-role", "admin");
  await page.click("#user-create button[type=submit]");
  await page.waitForSelector("#users tr[data-user='alice']");
  await page.fill("#user-name", "bob");
  await page.selectOption("#user-role", "member");
  await page.click("#user-create button[type=submit]");
  await page.waitForSelector("#users tr[data-user='bob']");
  await page.waitForSelector("#key-user option:has-text('bob')", { state: "attached" });
  async function createKey(user, name) {
    await page.selectOption("#key-user", { label: user });
    await page.fill("#key-name", name);
    await page.click("#key-create button[type=submit]");
    await page.waitForSelector(`#keys tr[data-key='${name}']`);
    const key = (await page.textContent("#new-key-value")).trim();
    assert.match(key, /^agk_/, "the new key is shown once");
    return key;
  }
  const aliceKey = await createKey("alice", "alice-laptop");
  const bobKey = await createKey("bob", "bob-phone");
  await page.waitForSelector("#usage");
  await shot(page, "02-admin-platform");

  // ---- alice logs in (sessionStorage only) ----
  log("tenant admin logs in");
  await page.click("#logout");
  await login(page, aliceKey);
  await page.waitForSelector("#nav a[data-area=chat]");
  const stored = await page.evaluate(() => [sessionStorage.getItem("agentry.key"), localStorage.getItem("agentry.key")]);
  assert.deepEqual(stored, [aliceKey, null], "without remember the key is in sessionStorage only");

  // ---- chat with approvals ----
  log("chat: approve");
  await page.click("#new-chat");
  await page.fill("#message", '/tool write_file {"file_path": "a.txt", "content": "hello"}');
  await page.press("#message", "Enter");
  const card1 = page.locator(".hitl").last();
  await card1.locator("button.approve").waitFor();
  const argsText = await card1.textContent();
  assert.equal(argsText.split('"file_path"').length - 1, 1, `the arguments are shown once: ${argsText}`);
  assert.ok((await card1.locator("pre.args").textContent()).includes('\n  "content": "hello"'), "pretty arguments");
  await expectSockets(1);
  await card1.locator("button.approve").click();
  await card1.locator(".decision:has-text('Approved by you')").waitFor();
  await page.waitForSelector(".done-line[data-status=completed]");
  const sessionId = decodeURIComponent(page.url().split("#/chat/")[1]);
  assert.match(sessionId, /^[0-9a-f-]{36}$/);

  log("chat: edit");
  await page.fill("#message", '/tool write_file {"file_path": "b.txt", "content": "draft"}');
  await page.press("#message", "Enter");
  const card2 = page.locator(".hitl").nth(1);
  await card2.locator("button.edit").click();
  await card2.locator("textarea.edit-args").fill('{"file_path": "c.txt", "content": "edited"}');
  await card2.locator("button.approve-edited").click();
  await card2.locator(".decision:has-text('Approved with edited arguments')").waitFor();
  await page.waitForFunction(() => document.querySelectorAll(".done-line[data-status=completed]").length === 2);
  const results = await page.locator(".msg.tool").last().textContent();
  assert.ok(results.includes("c.txt"), `the edited arguments ran: ${results}`);

  log("chat: reject");
  await page.fill("#message", '/tool write_file {"file_path": "no.txt", "content": "x"}');
  await page.press("#message", "Enter");
  const card3 = page.locator(".hitl").nth(2);
  await card3.locator("input.reason").fill("not today");
  await card3.locator("button.reject").click();
  await card3.locator(".decision:has-text('Rejected by you: not today')").waitFor();
  await page.waitForSelector(".done-line[data-status=rejected]");

  log("chat: reload mid-approval, then decide");
  await page.fill("#message", '/tool edit_file {"file_path": "a.txt", "old_string": "hello", "new_string": "goodbye"}');
  await page.press("#message", "Enter");
  await page.locator(".hitl").nth(3).locator("button.approve").waitFor();
  assert.ok(await page.locator(".hitl").nth(3).locator(".diff .del:has-text('-hello')").count(), "edit_file shows its change as a diff");
  await page.reload();
  const card4 = page.locator(".hitl").nth(3);
  await card4.locator("button.approve").waitFor();
  await page.locator(".hitl").nth(0).locator(".decision:has-text('Approved by you')").waitFor();
  await page.locator(".hitl").nth(2).locator(".decision:has-text('not today')").waitFor();
  await expectSockets(1);
  await card4.locator("button.approve").click();
  await card4.locator(".decision:has-text('Approved by you')").waitFor();
  await page.waitForFunction(() => document.querySelectorAll(".done-line[data-status=completed]").length === 3);
  await page.locator(".diff .add:has-text('+goodbye')").first().waitFor();

  log("chat: a question with options as buttons");
  await page.fill("#message", '/tool ask_question {"question": "Favourite colour?", "question_type": "choice", "options": ["red", "blue"]}');
  await page.press("#message", "Enter");
  const q = page.locator(".hitl").nth(4);
  await q.locator("button[data-option=blue]").click();
  await q.locator(".decision:has-text('Answered by you: blue')").waitFor();
  await page.waitForFunction(() => document.querySelectorAll(".done-line[data-status=completed]").length === 4);

  log("chat: each approval and question card is drawn above the result it gated, with no stray text");
  await checkCards(page, 5, "live");

  log("chat: Markdown, and model output cannot run script");
  hostileShown = true;
  await page.fill("#message", "/echo # Notes\n\n**bold** and `code`\n\n```\nfn main() {}\n```\n\n```python\ndef report(x):\n    return \"done\"  # ok\n```\n\n![report](" + PNG_DATA_URI + ")\n\n<img src=x onerror=\"window.pwned=1\"><script>window.pwned=2</script>");
  await page.press("#message", "Enter");
  await page.waitForSelector(".msg.assistant h1:has-text('Notes')");
  assert.ok(await page.locator(".msg.assistant strong:has-text('bold')").count());
  assert.ok(await page.locator(".msg.assistant pre code:has-text('fn main')").count());
  // Fenced code is syntax-highlighted (the vendored highlight.js: classes, no inline style).
  const py = page.locator(".msg.assistant pre code.hljs[data-language=python]");
  await py.waitFor();
  assert.ok(await py.locator("span.hljs-keyword:has-text('def')").count(), "python keywords are highlighted");
  assert.ok(await py.locator("span.hljs-string").count(), "strings are highlighted");
  assert.equal(await py.locator("[style]").count(), 0);
  // A Markdown image (a data: URI, as a report tool would write it) is shown inline.
  const img = page.locator(".msg.assistant img[alt=report]");
  await img.waitFor();
  assert.ok(await img.evaluate((i) => i.complete && i.naturalWidth > 0), "the report image is drawn");
  assert.equal(await page.evaluate(() => window.pwned), undefined, "no script from model output ran");
  assert.equal(await page.locator(".msg.assistant [onerror]").count(), 0);
  // An image that would be fetched (here `src=x`) is not loaded: it is named as text.
  assert.equal(await page.locator(".msg.assistant img:not([src^='data:'])").count(), 0);
  await page.waitForSelector(".msg.assistant span:has-text('[image: no description — x]')");
  await shot(page, "03-chat");

  log("reopen the session: its history");
  await page.click("#new-chat");
  await expectSockets(0);
  await page.goto(BASE + "/#/chat");
  await page.fill("input[type=search]", "a.txt");
  await page.click(`#session-list a[data-session='${sessionId}']`);
  await page.waitForSelector(".msg.user:has-text('\"file_path\": \"a.txt\"')");
  await page.locator(".hitl").nth(1).locator(".decision:has-text('Approved with edited arguments')").waitFor();
  await page.locator(".hitl").nth(2).locator(".decision:has-text('Rejected by you: not today')").waitFor();
  await page.waitForSelector(".msg.assistant h1:has-text('Notes')");
  assert.equal(await page.locator(".done-line").count(), 6, "each run's end shown once");
  await page.locator(".hitl").nth(4).locator(".decision:has-text('Answered by you: blue')").waitFor();
  await checkCards(page, 5, "replayed");
  await expectSockets(1);
  // Switching sessions and pages never leaves a socket behind.
  await page.click("#new-chat");
  await page.goBack();
  await page.waitForSelector("#conn:has-text('live')");
  await expectSockets(1);
  await page.fill("#message", "after reopening");
  await page.press("#message", "Enter");
  await page.waitForSelector(".msg.assistant:has-text('You said: after reopening')");
  await shot(page, "04-chat-history");

  // ---- MCP servers ----
  log("MCP servers: add, status, delete");
  await page.click("#nav a[data-area=mcp]");
  await expectSockets(0);
  await page.waitForSelector("text=No MCP servers yet");
  await page.fill("#mcp-name", "peer");
  await page.fill("#mcp-url", BASE + "/mcp");
  await page.selectOption("#mcp-auth", "bearer");
  await page.fill("#mcp-secret", aliceKey);
  await page.click("#mcp-save");
  // An added server connects in the background at once: the page shows it connecting, then
  // connected, without a run and without a click (it polls while one is connecting).
  await page.waitForSelector("tr[data-server=peer] .pill.connected");
  await page.fill("#mcp-name", "broken");
  await page.fill("#mcp-url", "http://127.0.0.1:9/mcp");
  await page.click("#mcp-save");
  await page.waitForSelector("tr[data-server=broken]");
  // A run connects the user's servers: then the status is live.
  const run = await fetch(BASE + "/api/v1/chat", {
    method: "POST",
    headers: { authorization: "Bearer " + aliceKey, "content-type": "application/json" },
    body: JSON.stringify({ message: "hello servers" }),
  });
  assert.equal(run.status, 200, await run.text());
  await page.click("#mcp-refresh");
  await page.waitForSelector("tr[data-server=peer] .pill.connected");
  await page.waitForSelector("tr[data-server=broken] .pill.error");
  // The connected server lists the tools it discovered (this server's own /mcp offers read_file).
  await page.click("tr[data-server=peer] details.tools summary");
  await page.waitForSelector("tr[data-server=peer] details.tools li:has-text('peer__read_file')");
  assert.ok((await page.textContent("tr[data-server=broken] .last-error")).length > 0, "the last error is shown");
  // Secrets are write-only: editing shows ***, never the token.
  await page.click("tr[data-server=peer] button:has-text('Edit')");
  await page.waitForSelector("#mcp-form h2:has-text('Edit peer')");
  assert.equal(await page.inputValue("#mcp-secret"), "***");
  await page.click("tr[data-server=broken] button[data-delete=broken]");
  await page.waitForSelector("tr[data-server=broken]", { state: "detached" });
  await page.waitForSelector("tr[data-server=peer]");
  // A stdio server (the tenant has the stdio feature; alice is its admin): the reference
  // "everything" server, whose get-tiny-image tool returns an image content block.
  await page.click("#mcp-form button:has-text('Clear')");
  await page.waitForSelector("#mcp-form button#mcp-save:has-text('Add server')");
  await page.fill("#mcp-name", "everything");
  await page.selectOption("#mcp-transport", "stdio");
  await page.fill("#mcp-command", process.env.NODE22);
  await page.fill("#mcp-args", JSON.stringify([process.env.EVERYTHING_JS, "stdio"]));
  await page.click("#mcp-save");
  await page.waitForSelector("tr[data-server=everything]");

  log("MCP servers: an OAuth server, signed in through the browser");
  await page.fill("#mcp-name", "secure");
  await page.selectOption("#mcp-transport", "http");
  await page.fill("#mcp-url", process.env.OAUTH_MCP_URL);
  await page.selectOption("#mcp-auth", "oauth");
  assert.ok(await page.isVisible("#mcp-oauth-grant"), "the OAuth fields show for auth oauth");
  assert.ok(!(await page.isVisible("#mcp-secret")), "no token field for auth oauth");
  await page.click("#mcp-save");
  const signInButton = page.locator("[data-sign-in=secure] button:has-text('Sign in')");
  await signInButton.waitFor();
  // The authorization server's page opens in a new tab; it approves at once and sends the
  // browser to Agentry's callback, which says so.
  const [popup] = await Promise.all([page.context().waitForEvent("page"), signInButton.click()]);
  await popup.waitForSelector("text=Signed in", { timeout: T });
  await popup.close();
  // The page shows "signed in" by itself (it looks again while a sign-in it started waits).
  await page.waitForSelector("[data-sign-in=secure] .pill:has-text('signed in')");
  await page.waitForSelector("[data-sign-in=secure] button:has-text('Sign out')");
  // The signed-in server connects on the next run and lists its tools.
  const run2 = await fetch(BASE + "/api/v1/chat", {
    method: "POST",
    headers: { authorization: "Bearer " + aliceKey, "content-type": "application/json" },
    body: JSON.stringify({ message: "hello secure" }),
  });
  assert.equal(run2.status, 200, await run2.text());
  await page.click("#mcp-refresh");
  await page.waitForSelector("tr[data-server=secure] .pill.connected");
  await page.click("tr[data-server=secure] details.tools summary");
  await page.waitForSelector("tr[data-server=secure] details.tools li:has-text('secure__whoami')");
  await shot(page, "05-mcp");

  log("chat: an image a tool returned is shown inline");
  await page.click("#nav a[data-area=chat]");
  await page.click("#new-chat");
  await page.check("#new-auto");
  await page.fill("#message", "/tool everything__get-tiny-image {}");
  await page.press("#message", "Enter");
  // Auto-approve (a tenant admin's right): no approval card, the tool just runs.
  await page.waitForSelector(".done-line[data-status=completed]");
  assert.equal(await page.locator(".hitl").count(), 0, "auto-approve asked nobody");
  await page.waitForSelector("#conv-title:has-text('auto-approve')");
  const tiny = page.locator(".msg.tool img.tool-image");
  await tiny.waitFor();
  assert.ok(await tiny.evaluate((i) => i.complete && i.naturalWidth > 0), "the tool's image is drawn");
  assert.ok(!(await page.locator(".msg.tool pre").last().textContent()).includes("iVBOR"), "the base64 is not dumped as text");
  await shot(page, "05b-chat-tool-image");
  await page.click("#nav a[data-area=mcp]");
  await page.waitForSelector("tr[data-server=everything]");

  // ---- runs ----
  log("runs: filter and open one");
  await page.click("#nav a[data-area=runs]");
  await page.waitForSelector("#runs-list tr[data-run]");
  await page.selectOption("#runs-status", "rejected");
  await page.click("#runs-filter");
  await page.waitForFunction(() => document.querySelectorAll("#runs-list tr[data-run]").length === 1);
  await page.click("#runs-list tr[data-run]");
  await page.waitForSelector("#run .pill:has-text('rejected')");
  await page.waitForSelector("#run:has-text('not today')");
  await page.selectOption("#runs-status", "completed");
  await page.fill("#runs-session", sessionId);
  await page.click("#runs-filter");
  await page.waitForFunction(() => document.querySelectorAll("#runs-list tr[data-run]").length === 6);
  // The first run of the session (its input is unique), and wait for its own detail.
  await page.locator(`#runs-list tr[data-run]:has-text('"content": "hello"')`).click();
  await page.waitForSelector(`#run dd:has-text('"content": "hello"')`);
  await page.waitForSelector("#run .name:has-text('write_file')");
  await page.waitForSelector("#run:has-text('approved by')");
  await shot(page, "06-runs");

  // ---- agents ----
  log("agents: create one");
  await page.click("#nav a[data-area=agents]");
  await page.click("#agent-new");
  await page.fill("#agent-id", "helper");
  await page.fill("#agent-name", "Helper");
  await page.fill("#agent-prompt", "You are terse.");
  await page.click("#agent-save");
  await page.waitForSelector("#agents-list tr[data-agent=helper]");
  log("agents: edit one");
  await page.click("#agents-list tr[data-agent=helper]");
  await page.waitForFunction(() => document.querySelector("#agent-prompt")?.value === "You are terse.");
  await page.fill("#agent-name", "Helper Two");
  await page.fill("#agent-prompt", "You are very terse.");
  await page.check("#agent-auto");
  await page.click("#agent-save");
  await page.waitForSelector("#agents-list tr[data-agent=helper]:has-text('Helper Two')");
  const saved = await (await fetch(BASE + "/api/v1/agents/helper", { headers: { authorization: "Bearer " + aliceKey } })).json();
  assert.equal(saved.name, "Helper Two");
  assert.equal(saved.system_prompt, "You are very terse.");
  assert.equal(saved.auto_approve, true, "the edit reached the server");
  await shot(page, "07-agents");

  // ---- a revoked key fails cleanly and stops ----
  log("a revoked key fails cleanly");
  const bob = await newPage(browser);
  await login(bob, bobKey, true);
  assert.equal(await bob.evaluate(() => localStorage.getItem("agentry.key")), bobKey, "remember keeps the key in localStorage");
  await bob.click("#new-chat");
  // Cancel: a slow run stops on the server and says so.
  await bob.fill("#message", "/sleep 60000\nslow");
  await bob.press("#message", "Enter");
  await bob.waitForSelector("#cancel:not([disabled])");
  await bob.waitForSelector("#working:has-text('working')");
  await bob.click("#cancel");
  await bob.waitForSelector(".done-line[data-status=cancelled]");
  await bob.fill("#message", "hi from bob");
  await bob.press("#message", "Enter");
  await bob.waitForSelector(".msg.assistant:has-text('You said: hi from bob')");
  await expectSockets(1);
  let bobSockets = 0;
  bob.on("websocket", () => (bobSockets += 1));
  await page.click("#nav a[data-area=admin]");
  // The tenant admin sees the tenant's status and quotas (read-only) and its usage.
  await page.waitForSelector("#tenant-info .pill:has-text('active')");
  await page.waitForSelector("#tenant-quotas dd[data-quota=max_users]:has-text('10')");
  assert.equal(await page.locator("#tenant-info input, #tenant-info button").count(), 0, "the quotas are read-only");
  await page.waitForSelector("#usage:has-text('runs')");
  await page.click("#keys button[data-revoke=bob-phone]");
  await page.waitForSelector("#keys tr[data-key=bob-phone] .pill:has-text('revoked')");
  // An MCP virtual server: a bad pattern is refused with the field named; a good one is listed
  // with its URL, and an MCP client reaches it there.
  await page.waitForSelector("#virtual-list:has-text('None yet')");
  await page.fill("#virtual-name", "desk");
  await page.fill("#virtual-tools", "files:read_file\nno-colon");
  await page.click("#virtual-save");
  await page.waitForSelector("#virtual-form .error:has-text('tools[1]')");
  await page.fill("#virtual-tools", "files:read_file\nassistants:*");
  await page.click("#virtual-save");
  await page.waitForSelector(`#virtual-list tr[data-virtual=desk]:has-text('${BASE}/mcp/desk')`);
  const init = await fetch(BASE + "/mcp/desk", {
    method: "POST",
    headers: { authorization: "Bearer " + aliceKey, "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "console-test", version: "0" } } }),
  });
  assert.equal(init.status, 200, await init.text());
  await shot(page, "08-admin-tenant");
  await page.click("#virtual-list tr[data-virtual=desk] button:has-text('Delete')");
  await page.waitForSelector("#virtual-list:has-text('None yet')");
  // The server closes bob's socket (1008); the console asks for a key instead of reconnecting.
  await bob.waitForSelector("#login:not([hidden]) #login-error:has-text('refused')");
  await expectSockets(0);
  assert.equal(bobSockets, 0, "no reconnect with a revoked key");
  assert.equal(await bob.evaluate(() => localStorage.getItem("agentry.key")), null, "a refused key is forgotten");
  await shot(bob, "09-revoked");
  await bob.context().close();

  // ---- custom roles: named, assignable, and only the pages the role may use ----
  log("custom roles: assignable in the admin page");
  const alice = { authorization: "Bearer " + aliceKey, "content-type": "application/json" };
  const made = await fetch(BASE + "/api/v1/tenant/roles", {
    method: "POST",
    headers: alice,
    body: JSON.stringify({ name: "auditor", description: "reads the runs", tools: [], areas: ["audit"] }),
  });
  assert.equal(made.status, 201, await made.text());
  await page.click("#nav a[data-area=runs]");
  await page.click("#nav a[data-area=admin]");
  await page.waitForSelector("#users select[data-role-of=bob] option[value=auditor]", { state: "attached" });
  assert.equal(await page.inputValue("#users select[data-role-of=bob]"), "member");
  // The select shows the choice at once; the page draws the users again once the change is
  // stored. Typing into the add-user form before that redraw loses what was typed.
  const bobBefore = await page.$("#users select[data-role-of=bob]");
  await page.selectOption("#users select[data-role-of=bob]", "auditor");
  const roleOf = async (name) => {
    const users = await (await fetch(BASE + "/api/v1/tenant/users?limit=200", { headers: alice })).json();
    const u = users.items.find((x) => x.name === name);
    return u && (u.custom_role || u.role);
  };
  for (let i = 0; (await roleOf("bob")) !== "auditor"; i++) {
    assert.ok(i < 100, "bob got the custom role");
    await new Promise((r) => setTimeout(r, 100));
  }
  await page.waitForFunction(
    (before) => !before.isConnected && document.querySelector("#users select[data-role-of=bob]")?.value === "auditor",
    bobBefore,
  );
  await page.fill("#user-name", "carol");
  await page.selectOption("#user-role", "auditor");
  await page.click("#user-create button[type=submit]");
  await page.waitForSelector("#users select[data-role-of=carol]");
  assert.equal(await page.inputValue("#users select[data-role-of=carol]"), "auditor");
  assert.equal(await roleOf("carol"), "auditor");
  const carolKey = await createKey("carol", "carol-desk");

  log("custom roles: the holder sees the role's name and its pages only");
  const carol = await newPage(browser);
  await login(carol, carolKey);
  await carol.waitForSelector("#nav a[data-area=runs]");
  assert.deepEqual(await carol.$$eval("#nav a", (as) => as.map((a) => a.dataset.area)), ["runs"], "only the runs page (audit)");
  assert.match(await carol.textContent("#who"), /· auditor$/, "the custom role's name, not member");
  await carol.goto(BASE + "/#/chat");
  await carol.waitForSelector("#nav a[data-area=runs].active");
  await carol.waitForSelector("#runs-list");
  await shot(carol, "09b-custom-role");
  await carol.context().close();

  // ---- 390 px ----
  log("390 px wide");
  const narrow = await newPage(browser, 390, 844);
  await login(narrow, aliceKey);
  await narrow.waitForSelector("#nav a[data-area=chat]");
  await narrow.goto(BASE + "/#/chat/" + sessionId);
  await narrow.waitForSelector(".msg.assistant h1:has-text('Notes')");
  await noHorizontalScroll(narrow, "chat");
  await shot(narrow, "10-narrow-chat");
  await narrow.click("a.back");
  await narrow.waitForSelector("#session-list a");
  await noHorizontalScroll(narrow, "the session list");
  await shot(narrow, "11-narrow-sessions");
  for (const area of ["mcp", "runs", "agents", "admin"]) {
    await narrow.click(`#nav a[data-area=${area}]`);
    await narrow.waitForLoadState("networkidle");
    if (area === "admin") await narrow.waitForSelector("#keys table");
    await noHorizontalScroll(narrow, area);
    await shot(narrow, `12-narrow-${area}`);
  }
  await narrow.context().close();

  assert.deepEqual(problems, [], "no script error, no CSP violation");
  console.log("console: 1 passed, 0 failed");
} catch (e) {
  console.error(`FAILED at step "${step}": ${e.stack || e}`);
  if (problems.length) console.error(problems.join("\n"));
  process.exitCode = 1;
} finally {
  await browser.close();
}
