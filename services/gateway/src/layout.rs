//! The code's shape, checked: no import circle between the modules of `services/gateway` or
//! `actors`, no protocol adapter of the gateway (`protocols/`) importing another, and one
//! integration-test binary per crate (each links the crate's whole tree, so every extra one
//! costs CI a link).
//!
//! A module is a source file (`auth/mod.rs` is `auth`, `protocols/sse.rs` is `protocols::sse`). File
//! A depends on file B when A names a path into B: `use crate::…`, `crate::…` and `super::…` in
//! code (comments and `#[cfg(test)] mod tests` are not read), or a child module by its name. A
//! module and its own submodules (parent ↔ child) are one unit and are not counted. A circle is
//! a set of modules that reach each other; the test names each one with the files it runs
//! through.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

/// Import circles in `actors` still to be untied: none (issue 25 item 3 untied the last three:
/// the run's dependencies, the session / tenant / live-sessions knot, the engine and the
/// cluster watcher). An entry here is a set of modules that may reach each other; the test
/// fails while one matches no circle.
const ACTORS_KNOWN_CIRCLES: &[&[&str]] = &[];

/// Import circles in the gateway still to be cut: none.
const GATEWAY_KNOWN_CIRCLES: &[&[&str]] = &[];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn module_of(root: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments and without its `#[cfg(test)] mod tests`.
fn code_of(src: &str) -> String {
    let lines: Vec<&str> = src.lines().collect();
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        if t == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|n| n.trim_start().starts_with("mod tests"))
        {
            break;
        }
        if t.starts_with("//") {
            continue;
        }
        let code = line.find("//").map_or(*line, |at| &line[..at]);
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// `a::{b, c::{d, e as f}}` → `[a, b]`, `[a, c, d]`, `[a, c, e]`.
fn expand_use(prefix: &[String], tree: &str, out: &mut Vec<Module>) {
    let mut depth = 0;
    let mut part = String::new();
    let mut parts = Vec::new();
    for ch in tree.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if ch == ',' && depth == 0 {
            parts.push(std::mem::take(&mut part));
        } else {
            part.push(ch);
        }
    }
    parts.push(part);
    for p in parts {
        let p = p.trim();
        if p.is_empty() {
            continue;
        }
        if let (Some(open), Some(close)) = (p.find('{'), p.rfind('}'))
            && open < close
        {
            let mut head = prefix.to_vec();
            head.extend(
                p[..open]
                    .split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
            expand_use(&head, &p[open + 1..close], out);
        } else {
            let p = p.split(" as ").next().unwrap_or(p);
            let mut path = prefix.to_vec();
            path.extend(
                p.split("::")
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path of the form `word::word::…` in the code, as its segments.
fn paths_in(code: &str) -> Vec<Module> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts =
            is_ident(chars[i]) && (i == 0 || !(is_ident(chars[i - 1]) || chars[i - 1] == ':'));
        if !starts {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            segs.push(chars[s..j].iter().collect::<String>());
            if j + 2 < chars.len()
                && chars[j] == ':'
                && chars[j + 1] == ':'
                && is_ident(chars[j + 2])
            {
                j += 2;
            } else {
                break;
            }
        }
        if segs.len() > 1 {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

/// Each module of the crate under `src` and the modules it depends on.
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let children: BTreeSet<&str> = modules
            .keys()
            .filter(|k| k.len() == module.len() + 1 && k.starts_with(module))
            .map(|k| k.last().unwrap().as_str())
            .collect();
        let mut paths = paths_in(&code);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("use ") {
            let before = rest[..at].chars().next_back();
            let tail = &rest[at + 4..];
            if before.is_none_or(|c| !is_ident(c))
                && let Some(end) = tail.find(';')
            {
                let tree: String = tail[..end].split_whitespace().collect::<Vec<_>>().join(" ");
                expand_use(&[], &tree, &mut paths);
            }
            rest = tail;
        }
        let mut targets = BTreeSet::new();
        for path in paths {
            let absolute: Module = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => {
                    let mut base = module.clone();
                    let mut p = path.as_slice();
                    while p.first().is_some_and(|s| s == "super") {
                        base.pop();
                        p = &p[1..];
                    }
                    base.extend(p.iter().cloned());
                    base
                }
                "self" => module.iter().chain(&path[1..]).cloned().collect(),
                first if children.contains(first) => module.iter().chain(&path).cloned().collect(),
                _ => continue,
            };
            let target = (0..=absolute.len())
                .rev()
                .map(|n| absolute[..n].to_vec())
                .find(|m| modules.contains_key(m));
            if let Some(target) = target
                // A module and its own submodules are one unit.
                && !target.starts_with(module)
                && !module.starts_with(&target)
            {
                targets.insert(target);
            }
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<BTreeSet<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<BTreeSet<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.edges[v] {
            let Some((w, _)) = s.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.insert(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

fn name(m: &Module) -> String {
    if m.is_empty() {
        "(crate root)".into()
    } else {
        m.join("::")
    }
}

/// Which of a circle's modules name which others (what to cut).
fn describe(edges: &BTreeMap<Module, BTreeSet<Module>>, circle: &BTreeSet<Module>) -> String {
    circle
        .iter()
        .map(|m| {
            let to: Vec<String> = edges[m]
                .iter()
                .filter(|t| circle.contains(*t))
                .map(name)
                .collect();
            format!("{} → {}", name(m), to.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The circles of `src` that fit in none of `known`, and the `known` ones no circle fills any more.
fn check_circles(src: &str, known: &[&[&str]]) {
    let edges = graph(&repo().join(src));
    assert!(edges.len() > 20, "the modules of {src} were not found");
    let known: Vec<BTreeSet<Module>> = known
        .iter()
        .map(|c| {
            c.iter()
                .map(|m| m.split("::").map(String::from).collect())
                .collect()
        })
        .collect();
    let found = circles(&edges);
    let new: Vec<String> = found
        .iter()
        .filter(|c| !known.iter().any(|k| c.is_subset(k)))
        .map(|c| describe(&edges, c))
        .collect();
    assert!(
        new.is_empty(),
        "import circles between the modules of {src} (pass what is needed down, or move the \
         shared piece below both):\n{}",
        new.join("\n")
    );
    let untied: Vec<String> = known
        .iter()
        .filter(|k| !found.iter().any(|c| c.is_subset(k)))
        .map(|k| k.iter().map(name).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(
        untied.is_empty(),
        "these known circles of {src} are untied: delete them from the list in {}:\n{}",
        file!(),
        untied.join("\n")
    );
}

#[test]
fn the_gateway_has_no_import_circle() {
    check_circles("services/gateway/src", GATEWAY_KNOWN_CIRCLES);
}

#[test]
fn actors_has_no_import_circle() {
    check_circles("actors/src", ACTORS_KNOWN_CIRCLES);
}

/// The adapters' shared module in `protocols/`: every adapter may use it, it uses none.
const PROTOCOLS_SHARED: &str = "common";

/// `protocols::<a>…` → `protocols::<b>…` edges between two different adapters (neither the
/// shared module as the target).
fn cross_adapter_imports(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<String> {
    let adapter = |m: &Module| match m.as_slice() {
        [top, name, ..] if top == "protocols" => Some(name.clone()),
        _ => None,
    };
    let mut out = Vec::new();
    for (from, targets) in edges {
        let Some(a) = adapter(from) else { continue };
        for to in targets {
            if let Some(b) = adapter(to)
                && b != a
                && b != PROTOCOLS_SHARED
            {
                out.push(format!("{} → {}", name(from), name(to)));
            }
        }
    }
    out
}

#[test]
fn no_protocol_adapter_imports_another() {
    let edges = graph(&repo().join("services/gateway/src"));
    let adapters: BTreeSet<&str> = edges
        .keys()
        .filter(|m| m.len() >= 2 && m[0] == "protocols")
        .map(|m| m[1].as_str())
        .collect();
    assert!(
        adapters.len() >= 5 && adapters.contains(PROTOCOLS_SHARED),
        "the protocol adapters were not found: {adapters:?}"
    );
    let cross = cross_adapter_imports(&edges);
    assert!(
        cross.is_empty(),
        "a protocol adapter imports another (move what both need to protocols/{PROTOCOLS_SHARED}.rs \
         or below the gateway):\n{}",
        cross.join("\n")
    );
}

/// The adapter check sees an adapter importing another, and allows the shared module.
#[test]
fn the_adapter_check_finds_a_cross_import() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("protocols/b")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod protocols;\n").unwrap();
    std::fs::write(
        src.join("protocols/mod.rs"),
        "pub mod a;\npub mod b;\npub mod common;\n",
    )
    .unwrap();
    std::fs::write(src.join("protocols/common.rs"), "pub fn f() {}\n").unwrap();
    std::fs::write(
        src.join("protocols/a.rs"),
        "use crate::protocols::common::f;\n",
    )
    .unwrap();
    std::fs::write(src.join("protocols/b/mod.rs"), "pub mod inner;\n").unwrap();
    std::fs::write(
        src.join("protocols/b/inner.rs"),
        "use super::super::common;\n",
    )
    .unwrap();
    assert_eq!(cross_adapter_imports(&graph(src)), Vec::<String>::new());
    std::fs::write(
        src.join("protocols/b/inner.rs"),
        "fn g() { crate::protocols::a::h() }\n",
    )
    .unwrap();
    assert_eq!(
        cross_adapter_imports(&graph(src)),
        vec!["protocols::b::inner → protocols::a".to_string()]
    );
}

/// The checker sees a circle when there is one (so the two tests above can fail).
#[test]
fn the_circle_check_finds_a_circle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\npub mod c;\n").unwrap();
    std::fs::write(
        src.join("a/mod.rs"),
        "pub mod inner;\nuse crate::{b::{B as _}, c};\n",
    )
    .unwrap();
    // A child naming its parent is not a circle.
    std::fs::write(src.join("a/inner.rs"), "use super::X;\n").unwrap();
    // A path in a comment or in the unit tests is not a dependency.
    std::fs::write(
        src.join("b.rs"),
        "// crate::a::A\nfn f() { crate::a::inner::g() }\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n",
    )
    .unwrap();
    std::fs::write(src.join("c.rs"), "pub fn f() {}\n").unwrap();
    let edges = graph(src);
    let found = circles(&edges);
    let a: Module = vec!["a".into()];
    let b: Module = vec!["b".into()];
    let inner: Module = vec!["a".into(), "inner".into()];
    assert_eq!(edges[&b], BTreeSet::from([inner.clone()]));
    assert!(found.is_empty(), "{found:?}");
    // b → a::inner → (b) closes a circle through a's subtree.
    std::fs::write(src.join("a/inner.rs"), "pub fn g() { crate::b::f() }\n").unwrap();
    let found = circles(&graph(src));
    assert_eq!(found, vec![BTreeSet::from([b, inner])], "{found:?}");
    let _ = a;
}

/// One integration-test binary per crate: `tests/<name>/main.rs` (the gateway's is the
/// workspace's `tests/api`), never loose `tests/*.rs` files, each of which is a binary of its own.
#[test]
fn each_crate_has_at_most_one_integration_test_binary() {
    let root = repo();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let members: Vec<String> = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap()
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() > 10, "{members:?}");
    let mut too_many = Vec::new();
    for dir in members.iter().map(String::as_str).chain(["."]) {
        let tests = root.join(dir).join("tests");
        let Ok(entries) = std::fs::read_dir(&tests) else {
            continue;
        };
        let binaries: Vec<String> = entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "rs") || p.join("main.rs").is_file())
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        if binaries.len() > 1 {
            too_many.push(format!("{dir}/tests: {binaries:?}"));
        }
    }
    assert!(
        too_many.is_empty(),
        "more than one integration-test binary (make each further file a module of the \
         crate's tests/<name>/main.rs):\n{}",
        too_many.join("\n")
    );
}
