// The REST client of the console: one place that sends the key, turns every failure into an
// ApiError with the server's {error_code, message, details}, and tells the app when the key is
// refused (so no page keeps retrying with a key that cannot work).

const KEY = "agentry.key";
let key = null;
let onAuthLost = () => {};

export class ApiError extends Error {
  constructor(status, body, retryAfter) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.code = (body && body.error_code) || (status === 0 ? "network" : `http_${status}`);
    this.details = (body && body.details) || {};
    this.retryAfter = retryAfter ? Number(retryAfter) : null;
  }
}

export function storedKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY);
}

export function setKey(k, remember) {
  key = k;
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
  if (k) (remember ? localStorage : sessionStorage).setItem(KEY, k);
}

export function getKey() {
  return key;
}

export function whenAuthLost(f) {
  onAuthLost = f;
}

/** `api("GET", "/sessions")` → the JSON body (null for 204); throws ApiError. */
export async function api(method, path, body) {
  const headers = { authorization: "Bearer " + key };
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch("/api/v1" + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, { error_code: "network", message: "the server cannot be reached (" + e.message + ")" });
  }
  if (res.status === 204) return null;
  const text = await res.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { error_code: "bad_response", message: text.slice(0, 200) };
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data, res.headers.get("retry-after"));
    if (res.status === 401 || err.code === "tenant_suspended") onAuthLost(err);
    throw err;
  }
  return data;
}

/** All pages of a list endpoint (at most `max` items). */
export async function all(path, max = 2000) {
  const items = [];
  const sep = path.includes("?") ? "&" : "?";
  for (let offset = 0; offset < max; ) {
    const page = await api("GET", `${path}${sep}limit=200&offset=${offset}`);
    items.push(...page.items);
    offset += page.items.length;
    if (page.items.length === 0 || offset >= page.total) break;
  }
  return items;
}

/** What to tell a person about an error: what happened and what to do. */
export function describe(err) {
  if (!(err instanceof ApiError)) return String(err && err.message ? err.message : err);
  const wait = err.retryAfter ? ` Try again in ${err.retryAfter} s.` : "";
  switch (err.code) {
    case "unauthorized":
      return "The key was refused: it is unknown, expired or revoked, or its user is disabled. Log in with a valid key.";
    case "tenant_suspended":
      return "This tenant is suspended: ask the platform administrator.";
    case "quota_exceeded":
      return `Quota reached (${err.details.quota || "limit"}): ${err.message}.${wait}`;
    case "database_unavailable":
    case "service_unavailable":
      return `The server is temporarily unavailable: ${err.message}.${wait}`;
    case "network":
      return "The server cannot be reached. Check that it is running.";
    default:
      return `${err.message} (${err.code})`;
  }
}
