//! `/openapi.json` against what the server really does:
//! 1. every (method, route) the test suite reached is documented (nothing served undocumented),
//! 2. every documented (method, path, status) was produced by some request of the suite,
//! 3. every documented path answers other methods with 405 and an `Allow` listing exactly the
//!    documented ones ([`crate::edge::wrong_methods`]).
//!
//! What was reached comes from the servers' own `/metrics` (method, route pattern, status).

use std::collections::BTreeSet;

use serde_json::Value;

type Seen = BTreeSet<(String, String, u16)>;

/// Routes that are not part of the REST API and so not in the document: the documentation UI
/// itself (HTML), the web console's scripts and styles (`/assets/{name}`, docs/console.md), and
/// `/mcp` with its virtual servers (`/mcp/{name}`), whose contract is the MCP Streamable HTTP
/// transport (JSON-RPC; docs/mcp.md), tested by `mcp_server.rs`, the official conformance
/// scenarios (`mcp_conformance.rs`) and the authorization matrix.
const UI_ROUTES: [&str; 5] = [
    "/docs",
    "/docs/{_}",
    "/assets/{name}",
    "/mcp",
    "/mcp/{virtual_server}",
];

pub fn documented(doc: &Value) -> (BTreeSet<(String, String)>, Seen) {
    let mut ops = BTreeSet::new();
    let mut statuses = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let m = method.to_uppercase();
            ops.insert((m.clone(), path.clone()));
            for status in op["responses"].as_object().unwrap().keys() {
                statuses.insert((m.clone(), path.clone(), status.parse().unwrap()));
            }
        }
    }
    (ops, statuses)
}

/// `exempt`: documented responses a developer's run could not produce (a skipped database).
pub fn check(doc: &Value, seen: &Seen, exempt: &Seen) {
    let (ops, statuses) = documented(doc);
    let api_methods = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let undocumented: Vec<String> = seen
        .iter()
        .filter(|(m, route, status)| {
            api_methods.contains(&m.as_str())
                && route != "unmatched"
                && !UI_ROUTES.contains(&route.as_str())
                && *status != 405
                && !ops.contains(&(m.clone(), route.clone()))
        })
        .map(|(m, r, s)| format!("{m} {r} ({s})"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "served but not in /openapi.json:\n{}",
        undocumented.join("\n")
    );
    let never_seen: Vec<String> = statuses
        .iter()
        .filter(|s| !seen.contains(*s) && !exempt.contains(*s))
        .map(|(m, p, s)| format!("{m} {p} → {s}"))
        .collect();
    assert!(
        never_seen.is_empty(),
        "{} documented responses were never produced by the tests:\n{}",
        never_seen.len(),
        never_seen.join("\n")
    );
    // And the suite reached every documented operation at all.
    for (m, p) in &ops {
        assert!(
            seen.iter().any(|(sm, sp, _)| sm == m && sp == p),
            "{m} {p} never called"
        );
    }
}
