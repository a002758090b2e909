// Small DOM helpers shared by the pages: element building (text only, never innerHTML with
// server data), Markdown through marked + DOMPurify, pretty JSON, diffs, the banner.

import { marked } from "/assets/marked.esm.js";
import DOMPurify from "/assets/purify.es.mjs";
import hljs from "/assets/highlight.esm.js";

// Highlighting only ever reads a block's text and writes escaped spans with classes (styled by
// /assets/highlight.css): no inline style, nothing the CSP refuses.
hljs.configure({ ignoreUnescapedHTML: true });
/** Blocks longer than this are left plain: highlighting is for reading, not for megabytes. */
const HIGHLIGHT_MAX = 50_000;

/** h("div", {class: "x", onclick: f}, "text", child, …) */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (["value", "checked", "disabled", "selected", "open"].includes(k)) el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Model output as Markdown: parsed by marked, sanitized by DOMPurify (no script, no handlers). */
export function markdown(text) {
  const div = h("div", { class: "md" });
  const html = marked.parse(String(text || ""), { gfm: true, breaks: true, async: false });
  div.innerHTML = DOMPurify.sanitize(html, { FORBID_ATTR: ["style"], FORBID_TAGS: ["style", "form"] });
  for (const a of div.querySelectorAll("a")) {
    a.target = "_blank";
    a.rel = "noopener noreferrer";
  }
  // Images inline only when they travel with the text (a data: URI of a raster image, as a
  // report tool writes them); any other source would be fetched from elsewhere (the CSP refuses
  // it) or from this server without a key: shown as text instead.
  for (const img of div.querySelectorAll("img")) {
    const src = img.getAttribute("src") || "";
    if (/^data:image\/(png|jpeg|gif|webp);base64,/i.test(src)) continue;
    img.replaceWith(h("span", { class: "muted small" }, `[image: ${img.getAttribute("alt") || "no description"}${src ? " — " + src.slice(0, 120) : ""}]`));
  }
  for (const code of div.querySelectorAll("pre code")) highlight(code);
  return div;
}

/** Syntax-highlight one code block: by its fenced language when highlight.js knows it, else by
 * guessing among the common languages; unknown or huge blocks stay plain text. */
export function highlight(code) {
  const text = code.textContent;
  if (text.length > HIGHLIGHT_MAX) return;
  const lang = [...code.classList].find((c) => c.startsWith("language-"))?.slice(9);
  const result = lang && hljs.getLanguage(lang) ? hljs.highlight(text, { language: lang, ignoreIllegals: true }) : hljs.highlightAuto(text);
  code.innerHTML = result.value; // escaped by highlight.js: only <span class="hljs-…">
  code.classList.add("hljs");
  if (result.language) code.dataset.language = result.language;
}

export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

/** A unified diff with added and removed lines marked. */
export function diff(text) {
  const box = h("div", { class: "diff" });
  for (const line of String(text).split("\n")) {
    let cls = "";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    else if (line.startsWith("@@")) cls = "hunk";
    box.append(h("span", { class: cls }, line || " "));
  }
  return box;
}

export function pill(text, cls) {
  return h("span", { class: "pill " + (cls || text) }, text);
}

export function when(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return isNaN(d) ? String(ts) : d.toLocaleString();
}

const banner = () => document.getElementById("banner");

/** A message across the top: an error (default) or information. Cleared by `hideBanner`. */
export function showBanner(text, kind = "error") {
  const b = banner();
  b.textContent = text;
  b.className = kind;
  b.hidden = false;
}

export function hideBanner() {
  banner().hidden = true;
}

/** A field that parses as a JSON object (or is empty → `{}`); throws with the field's name. */
export function jsonField(name, text, kind = "object") {
  const t = text.trim();
  if (!t) return kind === "array" ? [] : {};
  let v;
  try {
    v = JSON.parse(t);
  } catch (e) {
    throw new Error(`${name}: not valid JSON (${e.message})`);
  }
  const ok = kind === "array" ? Array.isArray(v) : v && typeof v === "object" && !Array.isArray(v);
  if (!ok) throw new Error(`${name}: must be a JSON ${kind}`);
  return v;
}
