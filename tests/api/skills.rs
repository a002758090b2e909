//! Skills (issue 16, item 3; docs/agents.md "Skills"): upload as a zip or as JSON files, list,
//! fetch and delete over REST, per tenant (admins write) and per user; hostile archives (`..`,
//! absolute paths, symbolic links, duplicates, non-UTF-8 names, oversize) refused with nothing
//! stored; the system prompt lists each visible skill's name and description; `load_skill`
//! returns the instructions and `read_skill_file` a file; the assistant's `skills` selects
//! (all, none, a list); another tenant's skills are invisible everywhere.

use std::io::Write;

use agentry_fake_model::{FakeModelServer, FakeReply};
use reqwest::Method;
use serde_json::{Value, json};
use zip::write::SimpleFileOptions;

use crate::ctx::{ADMIN_KEY, Ctx, Resp, TenantFx};

pub fn skill_md(name: &str, description: &str, body: &str) -> String {
    format!("---\nname: {name}\ndescription: {description}\nlicense: MIT\n---\n\n{body}")
}

/// A zip of `entries` (name, content), deflated.
pub fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(content).unwrap();
    }
    w.finish().unwrap().into_inner()
}

async fn upload_zip(ctx: &Ctx, method: Method, path: &str, key: &str, zip: Vec<u8>) -> Resp {
    ctx.send(
        ctx.request(method, path, Some(key))
            .header("content-type", "application/zip")
            .body(zip),
    )
    .await
}

/// Bytes that do not compress (xorshift), so a zip of them is as large as they are.
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

fn files_body(files: &[(&str, &str)]) -> Value {
    json!({"files": files.iter().map(|(p, c)| json!({"path": p, "content": c})).collect::<Vec<_>>()})
}

async fn names(ctx: &Ctx, path: &str, key: &str) -> Vec<String> {
    ctx.ok(Method::GET, path, key, None, 200)
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

/// REST: every route and every documented answer (the completeness test runs this).
pub async fn skills_flow(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let b = ctx.tenant().await;
    let admin = &t.admin.key;
    let member = &t.member.key;
    let me = &t.member.user_id;
    // Upload as a zip of a folder, with a script and a binary file.
    let zip = zip_of(&[
        ("release-notes/", b""),
        (
            "release-notes/SKILL.md",
            skill_md(
                "release-notes",
                "Write release notes from merged pull requests.",
                "# Release notes\n1. List the merged PRs.\n2. Group them.\n",
            )
            .as_bytes(),
        ),
        (
            "release-notes/scripts/collect.sh",
            b"#!/bin/sh\ngit log --merges\n",
        ),
        (
            "release-notes/logo.png",
            &[0x89, b'P', b'N', b'G', 0xff, 0x00, 0xfe],
        ),
    ]);
    let r = upload_zip(ctx, Method::POST, "/api/v1/skills", admin, zip.clone()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        (
            r.body["name"].as_str(),
            r.body["scope"].as_str(),
            r.body["file_count"].as_u64()
        ),
        (Some("release-notes"), Some("tenant"), Some(3))
    );
    assert_eq!(
        r.headers["location"].to_str().unwrap(),
        "/api/v1/skills/release-notes"
    );
    // The same name again: 409; a PUT replaces (200), a PUT of a new name creates (201).
    let r = upload_zip(ctx, Method::POST, "/api/v1/skills", admin, zip.clone()).await;
    assert_eq!((r.status, r.code()), (409, "conflict"), "{}", r.body);
    let r = upload_zip(
        ctx,
        Method::PUT,
        "/api/v1/skills/release-notes",
        admin,
        zip.clone(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = ctx
        .call(
            Method::PUT,
            "/api/v1/skills/triage",
            Some(admin),
            Some(&files_body(&[(
                "SKILL.md",
                &skill_md(
                    "triage",
                    "Triage incoming bug reports.",
                    "Label, then assign.\n",
                ),
            )])),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    // A PUT whose SKILL.md names another skill: 422.
    let r = upload_zip(
        ctx,
        Method::PUT,
        "/api/v1/skills/other-name",
        admin,
        zip.clone(),
    )
    .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("SKILL.md"))
    );
    // Fetch: the instructions and the file listing; a file, text and binary.
    let d = ctx
        .ok(
            Method::GET,
            "/api/v1/skills/release-notes",
            member,
            None,
            200,
        )
        .await;
    assert_eq!(
        d["description"],
        "Write release notes from merged pull requests."
    );
    assert!(
        d["instructions"]
            .as_str()
            .unwrap()
            .starts_with("# Release notes"),
        "{d}"
    );
    let paths: Vec<&str> = d["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["SKILL.md", "logo.png", "scripts/collect.sh"]);
    let f = ctx
        .send(ctx.request(
            Method::GET,
            "/api/v1/skills/release-notes/file?path=scripts/collect.sh",
            Some(member),
        ))
        .await;
    assert_eq!(f.status, 200);
    assert_eq!(f.body, "#!/bin/sh\ngit log --merges\n");
    assert!(
        f.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        f.headers
    );
    let f = ctx
        .send(ctx.request(
            Method::GET,
            "/api/v1/skills/release-notes/file?path=logo.png",
            Some(member),
        ))
        .await;
    assert_eq!(
        (f.status, f.headers["content-type"].to_str().unwrap()),
        (200, "application/octet-stream")
    );
    for (path, status) in [
        ("/api/v1/skills/release-notes/file?path=nope.txt", 404),
        ("/api/v1/skills/nope/file?path=SKILL.md", 404),
        ("/api/v1/skills/release-notes/file?path=../x", 400),
        ("/api/v1/skills/release-notes/file", 400),
        ("/api/v1/skills/Bad!/file?path=SKILL.md", 400),
    ] {
        let r = ctx.call(Method::GET, path, Some(member), None).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
    }
    assert_eq!(
        names(ctx, "/api/v1/skills", member).await,
        ["release-notes", "triage"]
    );

    // A member cannot write tenant skills: 403, and nothing changes.
    let r = upload_zip(ctx, Method::POST, "/api/v1/skills", member, zip.clone()).await;
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    let r = upload_zip(
        ctx,
        Method::PUT,
        "/api/v1/skills/release-notes",
        member,
        zip.clone(),
    )
    .await;
    assert_eq!(r.status, 403);
    let r = ctx
        .call(Method::DELETE, "/api/v1/skills/triage", Some(member), None)
        .await;
    assert_eq!(r.status, 403);
    // The platform admin key has no tenant: 403 everywhere.
    for (m, p) in [
        (Method::GET, "/api/v1/skills".to_string()),
        (Method::GET, "/api/v1/skills/triage".to_string()),
        (
            Method::GET,
            "/api/v1/skills/triage/file?path=SKILL.md".to_string(),
        ),
        (Method::GET, format!("/api/v1/users/{me}/skills")),
        (Method::GET, format!("/api/v1/users/{me}/skills/x")),
        (Method::DELETE, format!("/api/v1/users/{me}/skills/x")),
        (
            Method::GET,
            format!("/api/v1/users/{me}/skills/x/file?path=SKILL.md"),
        ),
    ] {
        let r = ctx.call(m.clone(), &p, Some(ADMIN_KEY), None).await;
        assert_eq!(r.status, 403, "{m} {p}: {}", r.body);
    }
    for (m, p) in [
        (Method::POST, format!("/api/v1/users/{me}/skills")),
        (Method::PUT, format!("/api/v1/users/{me}/skills/x")),
    ] {
        let r = upload_zip(ctx, m.clone(), &p, ADMIN_KEY, zip.clone()).await;
        assert_eq!(r.status, 403, "{m} {p}: {}", r.body);
    }
    // No key: 401.
    let r = ctx.call(Method::GET, "/api/v1/skills", None, None).await;
    assert_eq!(r.status, 401);

    // A user's own skills: theirs to write; another member's are "not found".
    let mine = format!("/api/v1/users/{me}/skills");
    let r = ctx
        .call(
            Method::POST,
            &mine,
            Some(member),
            Some(&files_body(&[
                (
                    "SKILL.md",
                    &skill_md("my-notes", "Keep my notes tidy.", "Sort by date.\n"),
                ),
                ("templates/note.md", "# {{title}}\n"),
            ])),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        (r.body["scope"].as_str(), r.body["user_id"].as_str()),
        (Some("user"), Some(me.as_str()))
    );
    let r = ctx
        .call(
            Method::POST,
            &mine,
            Some(member),
            Some(&files_body(&[(
                "SKILL.md",
                &skill_md("my-notes", "again", "x"),
            )])),
        )
        .await;
    assert_eq!(r.status, 409);
    let r = upload_zip(
        ctx,
        Method::PUT,
        &format!("{mine}/my-notes"),
        member,
        zip_of(&[(
            "SKILL.md",
            skill_md("my-notes", "Keep my notes tidy (v2).", "Sort.\n").as_bytes(),
        )]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = upload_zip(
        ctx,
        Method::PUT,
        &format!("{mine}/scratch"),
        member,
        zip_of(&[(
            "SKILL.md",
            skill_md("scratch", "Scratch.", "x\n").as_bytes(),
        )]),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(names(ctx, &mine, member).await, ["my-notes", "scratch"]);
    let d = ctx
        .ok(Method::GET, &format!("{mine}/my-notes"), member, None, 200)
        .await;
    assert_eq!(d["description"], "Keep my notes tidy (v2).");
    let f = ctx
        .send(ctx.request(
            Method::GET,
            &format!("{mine}/scratch/file?path=SKILL.md"),
            Some(member),
        ))
        .await;
    assert_eq!(f.status, 200);
    // The tenant admin manages any user's; the second member sees none of them.
    assert_eq!(names(ctx, &mine, admin).await, ["my-notes", "scratch"]);
    let other = &t.member2.key;
    for (m, p) in [
        (Method::GET, mine.clone()),
        (Method::GET, format!("{mine}/my-notes")),
        (Method::GET, format!("{mine}/my-notes/file?path=SKILL.md")),
        (Method::DELETE, format!("{mine}/my-notes")),
    ] {
        let r = ctx.call(m.clone(), &p, Some(other), None).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.body);
    }
    for m in [Method::POST, Method::PUT] {
        let p = if m == Method::POST {
            mine.clone()
        } else {
            format!("{mine}/my-notes")
        };
        let r = upload_zip(ctx, m.clone(), &p, other, zip.clone()).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.body);
    }
    // Bad ids: 400.
    for (m, p) in [
        (Method::GET, "/api/v1/users/not-a-uuid/skills".to_string()),
        (Method::GET, format!("{mine}/Bad!")),
        (Method::DELETE, format!("{mine}/Bad!")),
        (Method::GET, format!("{mine}/Bad!/file?path=SKILL.md")),
        (Method::GET, "/api/v1/skills/Bad!".to_string()),
        (Method::DELETE, "/api/v1/skills/Bad!".to_string()),
    ] {
        let r = ctx.call(m.clone(), &p, Some(admin), None).await;
        assert_eq!(r.status, 400, "{m} {p}: {}", r.body);
    }
    for (m, p) in [
        (Method::POST, "/api/v1/users/not-a-uuid/skills".to_string()),
        (Method::PUT, format!("{mine}/Bad!")),
        (Method::PUT, "/api/v1/skills/Bad!".to_string()),
    ] {
        let r = upload_zip(ctx, m.clone(), &p, admin, zip.clone()).await;
        assert_eq!(r.status, 400, "{m} {p}: {}", r.body);
    }
    // Not JSON: 400; neither zip nor JSON: 415.
    for (m, p) in [
        (Method::POST, "/api/v1/skills".to_string()),
        (Method::PUT, "/api/v1/skills/triage".to_string()),
        (Method::POST, mine.clone()),
        (Method::PUT, format!("{mine}/scratch")),
    ] {
        let r = ctx
            .send(
                ctx.request(m.clone(), &p, Some(admin))
                    .header("content-type", "application/json")
                    .body("{\"files\": ["),
            )
            .await;
        assert_eq!((r.status, r.code()), (400, "invalid_json"), "{m} {p}");
        let r = ctx
            .send(
                ctx.request(m.clone(), &p, Some(admin))
                    .header("content-type", "text/plain")
                    .body("hello"),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (415, "unsupported_media_type"),
            "{m} {p}"
        );
        // Over the body limit (the test server's is 16 KiB): 413.
        let big = noise(40_000);
        let r = upload_zip(ctx, m.clone(), &p, admin, zip_of(&[("SKILL.md", &big)])).await;
        assert_eq!((r.status, r.code()), (413, "payload_too_large"), "{m} {p}");
        // A hostile archive: 422.
        let r = upload_zip(
            ctx,
            m.clone(),
            &p,
            admin,
            zip_of(&[
                ("SKILL.md", skill_md("triage", "x", "x").as_bytes()),
                ("../evil.sh", b"rm -rf /"),
            ]),
        )
        .await;
        assert_eq!(
            (r.status, r.details()["entry"].as_str()),
            (422, Some("../evil.sh")),
            "{m} {p}"
        );
    }
    // Unknown user: 404.
    let ghost = uuid::Uuid::new_v4();
    for (m, p) in [
        (Method::GET, format!("/api/v1/users/{ghost}/skills")),
        (Method::GET, format!("/api/v1/users/{ghost}/skills/x")),
        (Method::DELETE, format!("/api/v1/users/{ghost}/skills/x")),
        (
            Method::GET,
            format!("/api/v1/users/{ghost}/skills/x/file?path=SKILL.md"),
        ),
    ] {
        let r = ctx.call(m.clone(), &p, Some(admin), None).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.body);
    }

    // Another tenant sees none of A's skills, even by name, even its admin.
    let bk = &b.admin.key;
    assert!(names(ctx, "/api/v1/skills", bk).await.is_empty());
    for p in [
        "/api/v1/skills/release-notes".to_string(),
        "/api/v1/skills/release-notes/file?path=SKILL.md".to_string(),
        format!("{mine}/my-notes"),
    ] {
        let r = ctx.call(Method::GET, &p, Some(bk), None).await;
        assert_eq!(r.status, 404, "{p}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::DELETE,
            "/api/v1/skills/release-notes",
            Some(bk),
            None,
        )
        .await;
    assert_eq!(r.status, 404);
    // B's own skill of the same name is B's.
    let r = upload_zip(ctx, Method::POST, "/api/v1/skills", bk, zip.clone()).await;
    assert_eq!(r.status, 201, "{}", r.body);
    assert_eq!(
        ctx.ok(
            Method::GET,
            "/api/v1/skills/release-notes",
            member,
            None,
            200
        )
        .await["files"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    // Delete: 204, then 404.
    for p in [
        "/api/v1/skills/triage".to_string(),
        format!("{mine}/scratch"),
    ] {
        let r = ctx.call(Method::DELETE, &p, Some(admin), None).await;
        assert_eq!(r.status, 204, "{p}");
        let r = ctx.call(Method::DELETE, &p, Some(admin), None).await;
        assert_eq!(r.status, 404, "{p}");
        let r = ctx.call(Method::GET, &p, Some(admin), None).await;
        assert_eq!(r.status, 404, "{p}");
    }
}

/// The skills as they are after an upload: what `GET /skills` shows.
async fn tenant_skill_names(ctx: &Ctx, t: &TenantFx) -> Vec<String> {
    names(ctx, "/api/v1/skills", &t.admin.key).await
}

/// Hostile or broken uploads are refused with a clear 422 (or 413) and store nothing.
pub async fn hostile_uploads_store_nothing(ctx: &Ctx) {
    let t = ctx.tenant().await;
    let admin = &t.admin.key;
    let md = skill_md("evil", "Looks harmless.", "Nothing to see.\n");
    let ok = md.as_bytes();
    // A symbolic link entry.
    let symlink = {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        w.start_file("SKILL.md", SimpleFileOptions::default())
            .unwrap();
        w.write_all(ok).unwrap();
        w.add_symlink("passwd", "/etc/passwd", SimpleFileOptions::default())
            .unwrap();
        w.finish().unwrap().into_inner()
    };
    // A name that is not UTF-8, and two entries of one name: a zip writer makes neither, so
    // the names are patched in (local and central headers alike).
    let patched = |from: &[u8], to: &[u8]| {
        let mut raw = zip_of(&[
            ("SKILL.md", ok),
            ("a.txt", b"1"),
            (std::str::from_utf8(from).unwrap(), b"2"),
        ]);
        let mut i = 0;
        while let Some(pos) = raw[i..].windows(from.len()).position(|w| w == from) {
            raw[i + pos..i + pos + from.len()].copy_from_slice(to);
            i += pos + from.len();
        }
        raw
    };
    let not_utf8 = patched(b"aXb.txt", b"a\xffb.txt");
    let duplicate = patched(b"b.txt", b"a.txt");
    // 600 KiB of zeros deflate to a few hundred bytes: under the body limit, over the
    // per-file limit once unpacked.
    let bomb = zip_of(&[("SKILL.md", ok), ("zeros.bin", &vec![0u8; 600 * 1024])]);
    assert!(bomb.len() < 16 * 1024, "{}", bomb.len());
    let many: Vec<(String, Vec<u8>)> = (0..101)
        .map(|i| (format!("f{i}.txt"), b"x".to_vec()))
        .collect();
    let many_zip = {
        let mut entries: Vec<(&str, &[u8])> = vec![("SKILL.md", ok)];
        entries.extend(many.iter().map(|(n, c)| (n.as_str(), c.as_slice())));
        zip_of(&entries)
    };
    let cases: Vec<(&str, Vec<u8>, u16, &str)> = vec![
        (
            "dot-dot",
            zip_of(&[("SKILL.md", ok), ("../../etc/cron.d/x", b"x")]),
            422,
            "`..`",
        ),
        (
            "nested dot-dot",
            zip_of(&[("SKILL.md", ok), ("a/../../x", b"x")]),
            422,
            "`..`",
        ),
        (
            "absolute",
            zip_of(&[("SKILL.md", ok), ("/etc/passwd", b"x")]),
            422,
            "absolute",
        ),
        (
            "drive",
            zip_of(&[("SKILL.md", ok), ("C:/x", b"x")]),
            422,
            "absolute",
        ),
        (
            "backslash",
            zip_of(&[("SKILL.md", ok), ("..\\x", b"x")]),
            422,
            "backslash",
        ),
        ("symlink", symlink, 422, "symbolic link"),
        ("duplicate", duplicate, 422, "same name"),
        (
            "case duplicate",
            zip_of(&[("SKILL.md", ok), ("a.txt", b"1"), ("A.TXT", b"2")]),
            422,
            "letter case",
        ),
        ("not utf-8", not_utf8, 422, "UTF-8"),
        ("too many files", many_zip, 422, "at most 100 files"),
        ("unpacks too large", bomb, 413, "larger than"),
        (
            "no SKILL.md",
            zip_of(&[("README.md", ok)]),
            422,
            "no SKILL.md",
        ),
        (
            "no front matter",
            zip_of(&[("SKILL.md", b"# Just text\n")]),
            422,
            "front matter",
        ),
        (
            "no description",
            zip_of(&[("SKILL.md", b"---\nname: evil\n---\nx")]),
            422,
            "no `description`",
        ),
        (
            "bad name",
            zip_of(&[("SKILL.md", b"---\nname: Evil Skill\ndescription: x\n---\nx")]),
            422,
            "`name` is not valid",
        ),
        (
            "bad yaml",
            zip_of(&[("SKILL.md", b"---\nname: [evil\ndescription: x\n---\nx")]),
            422,
            "not valid YAML",
        ),
        (
            "not a zip",
            b"PK\x03\x04 certainly not".to_vec(),
            422,
            "not a zip",
        ),
    ];
    for (what, body, status, needle) in cases {
        let r = upload_zip(ctx, Method::POST, "/api/v1/skills", admin, body).await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        assert!(
            r.message().contains(needle),
            "{what}: {needle:?} not in {:?}",
            r.message()
        );
    }
    // JSON uploads are checked the same way.
    for (what, files) in [
        ("dot-dot", vec![("SKILL.md", md.as_str()), ("../x", "x")]),
        ("absolute", vec![("SKILL.md", md.as_str()), ("/x", "x")]),
        (
            "duplicate",
            vec![("SKILL.md", md.as_str()), ("SKILL.md", "x")],
        ),
    ] {
        let r = ctx
            .call(
                Method::POST,
                "/api/v1/skills",
                Some(admin),
                Some(&files_body(&files)),
            )
            .await;
        assert_eq!(r.status, 422, "{what}: {}", r.body);
    }
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/skills",
            Some(admin),
            Some(&json!({"files": [{"path": "SKILL.md", "content": "%%%", "encoding": "base64"}]})),
        )
        .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("files[0].content"))
    );
    assert!(
        tenant_skill_names(ctx, &t).await.is_empty(),
        "something was stored"
    );
    let stored: Vec<(String,)> = {
        use sea_orm::{ConnectionTrait, Statement};
        let rows = ctx
            .db
            .query_all_raw(Statement::from_string(
                ctx.db.get_database_backend(),
                "SELECT path FROM skill_files WHERE skill = 'evil'".to_string(),
            ))
            .await
            .unwrap();
        rows.iter()
            .map(|r| (r.try_get::<String>("", "path").unwrap(),))
            .collect()
    };
    assert!(stored.is_empty(), "files were stored: {stored:?}");
    // Base64 works for binary files.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/skills",
            Some(admin),
            Some(&json!({"files": [
                {"path": "SKILL.md", "content": md},
                {"path": "bin/blob", "content": "AAEC/w==", "encoding": "base64"},
            ]})),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
}

/// The user message the model got in request `index`, and the tool messages after it.
fn tool_results(fake: &FakeModelServer, index: usize) -> Vec<Value> {
    let reqs = fake.requests();
    reqs[index].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            serde_json::from_str(m["content"].as_str().unwrap()).unwrap_or(m["content"].clone())
        })
        .collect()
}

async fn chat(ctx: &Ctx, key: &str, assistant: &str, message: &str) -> Value {
    let r = ctx
        .ok(
            Method::POST,
            "/api/v1/chat",
            key,
            Some(json!({"message": message, "assistant_id": assistant})),
            200,
        )
        .await;
    let events = r["events"].as_array().unwrap();
    assert_eq!(events.last().unwrap()["data"]["status"], "completed", "{r}");
    r
}

/// Progressive disclosure end to end: the prompt lists names and descriptions only;
/// `load_skill` returns the body; `read_skill_file` a file; the assistant's selection and the
/// tenant boundary hold in the prompt and in the tools.
pub async fn skills_reach_the_model(ctx: &Ctx, fake: &FakeModelServer) {
    let t = ctx.tenant().await;
    let b = ctx.tenant().await;
    let body = "# Incident report\nSECRET-STEP: page the on-call first.\n";
    let r = upload_zip(
        ctx,
        Method::POST,
        "/api/v1/skills",
        &t.admin.key,
        zip_of(&[
            (
                "SKILL.md",
                skill_md("incident-report", "Write an incident report.", body).as_bytes(),
            ),
            ("template.md", b"## Timeline\n## Impact\n"),
            ("scripts/gather.sh", b"#!/bin/sh\necho gathered\n"),
            ("img.bin", &[0, 159, 146, 150]),
        ]),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.body);
    let mine = format!("/api/v1/users/{}/skills", t.member.user_id);
    ctx.ok(
        Method::POST,
        &mine,
        &t.member.key,
        Some(files_body(&[(
            "SKILL.md",
            &skill_md("my-style", "Answer in my house style.", "Be terse.\n"),
        )])),
        201,
    )
    .await;
    // Tenant B has a skill the A users must never see.
    ctx.ok(
        Method::POST,
        "/api/v1/skills",
        &b.admin.key,
        Some(files_body(&[(
            "SKILL.md",
            &skill_md("b-secret", "Tenant B only.", "B-BODY\n"),
        )])),
        201,
    )
    .await;

    // The listing in the prompt: names and descriptions, never the body.
    let before = fake.requests().len();
    fake.push(FakeReply::text("ok"));
    chat(ctx, &t.member.key, "default", "hello").await;
    let (prompt, tools) = crate::profiles::prompt_and_tools(fake, before);
    assert!(
        prompt.contains("- incident-report: Write an incident report."),
        "{prompt}"
    );
    assert!(
        prompt.contains("- my-style: Answer in my house style."),
        "{prompt}"
    );
    assert!(
        !prompt.contains("SECRET-STEP"),
        "the body leaked into the prompt: {prompt}"
    );
    assert!(
        !prompt.contains("b-secret"),
        "tenant B's skill in A's prompt: {prompt}"
    );
    assert!(
        tools.iter().any(|t| t == "load_skill") && tools.iter().any(|t| t == "read_skill_file")
    );
    // The second member does not see the first one's skill.
    let before = fake.requests().len();
    fake.push(FakeReply::text("ok"));
    chat(ctx, &t.member2.key, "default", "hello").await;
    let (prompt, _) = crate::profiles::prompt_and_tools(fake, before);
    assert!(
        prompt.contains("incident-report") && !prompt.contains("my-style"),
        "{prompt}"
    );

    // load_skill returns the instructions and the files; read_skill_file reads one, and says
    // a binary one is binary; another tenant's skill is not found.
    let before = fake.requests().len();
    fake.push(FakeReply::tool_call(
        "c1",
        "load_skill",
        json!({"name": "incident-report"}),
    ));
    fake.push(FakeReply::tool_call(
        "c2",
        "read_skill_file",
        json!({"name": "incident-report", "path": "template.md"}),
    ));
    fake.push(FakeReply::tool_call(
        "c3",
        "read_skill_file",
        json!({"name": "incident-report", "path": "img.bin"}),
    ));
    fake.push(FakeReply::tool_call(
        "c4",
        "load_skill",
        json!({"name": "b-secret"}),
    ));
    fake.push(FakeReply::tool_call(
        "c5",
        "read_skill_file",
        json!({"name": "incident-report", "path": "../../etc/passwd"}),
    ));
    fake.push(FakeReply::text("done"));
    let r = chat(ctx, &t.member.key, "default", "write the incident report").await;
    let results = tool_results(fake, fake.requests().len() - 1);
    assert_eq!(results.len(), 5, "{results:?}");
    assert_eq!(
        results[0]["instructions"],
        body.trim_start_matches('\n'),
        "{}",
        results[0]
    );
    let files: Vec<&str> = results[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["img.bin", "scripts/gather.sh", "template.md"]);
    assert_eq!(
        results[1]["content"], "## Timeline\n## Impact\n",
        "{}",
        results[1]
    );
    assert_eq!(
        (
            results[2]["binary"].as_bool(),
            results[2]["content"].is_null()
        ),
        (Some(true), true)
    );
    let text = |v: &Value| v.to_string();
    assert!(
        text(&results[3]).contains("no skill named"),
        "{}",
        results[3]
    );
    assert!(!text(&results[3]).contains("B-BODY"));
    assert!(text(&results[4]).contains("has no file"), "{}", results[4]);
    // Nothing was executed: the only tools that ran are the skill tools.
    let ran: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event_type"] == "tool_call")
        .filter_map(|e| e["data"]["tool_name"].as_str())
        .collect();
    assert_eq!(ran.len(), 5, "{ran:?}");
    assert!(ran.iter().all(|n| n.contains("skill")), "{ran:?}");
    assert!(fake.requests().len() - before >= 6);

    // Selection: none → no listing, and load_skill finds nothing; a list → only those.
    for (id, skills) in [("no-skills", json!([])), ("only-mine", json!(["my-style"]))] {
        ctx.ok(
            Method::POST,
            "/api/v1/agents",
            &t.admin.key,
            Some(json!({"id": id, "skills": skills})),
            201,
        )
        .await;
        let a = ctx
            .ok(
                Method::GET,
                &format!("/api/v1/agents/{id}"),
                &t.admin.key,
                None,
                200,
            )
            .await;
        assert_eq!(a["skills"], skills);
    }
    let before = fake.requests().len();
    fake.push(FakeReply::tool_call(
        "n1",
        "load_skill",
        json!({"name": "incident-report"}),
    ));
    fake.push(FakeReply::text("none"));
    chat(ctx, &t.member.key, "no-skills", "hi").await;
    let (prompt, _) = crate::profiles::prompt_and_tools(fake, before);
    assert!(!prompt.contains("Skills you can load"), "{prompt}");
    let results = tool_results(fake, fake.requests().len() - 1);
    assert!(text(&results[0]).contains("no skill named"), "{results:?}");

    let before = fake.requests().len();
    fake.push(FakeReply::tool_call(
        "l1",
        "load_skill",
        json!({"name": "incident-report"}),
    ));
    fake.push(FakeReply::tool_call(
        "l2",
        "load_skill",
        json!({"name": "my-style"}),
    ));
    fake.push(FakeReply::text("listed"));
    chat(ctx, &t.member.key, "only-mine", "hi").await;
    let (prompt, _) = crate::profiles::prompt_and_tools(fake, before);
    assert!(
        prompt.contains("- my-style:") && !prompt.contains("incident-report"),
        "{prompt}"
    );
    let results = tool_results(fake, fake.requests().len() - 1);
    assert!(text(&results[0]).contains("no skill named"), "{results:?}");
    assert_eq!(results[1]["instructions"], "Be terse.\n", "{results:?}");
    // A bad selection is refused, naming the entry.
    let r = ctx
        .call(
            Method::POST,
            "/api/v1/agents",
            Some(&t.admin.key),
            Some(&json!({"id": "bad-skills", "skills": ["ok", "Not A Slug"]})),
        )
        .await;
    assert_eq!(
        (r.status, r.details()["field"].as_str()),
        (422, Some("skills[1]"))
    );
}
