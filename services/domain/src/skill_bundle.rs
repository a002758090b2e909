//! Checking a skill upload before anything is stored: a zip archive or a list of files, in the
//! agent-framework folder format (`SKILL.md` with YAML front matter `name` and `description`,
//! then instructions, plus any files beside it).
//!
//! Refused, with nothing stored:
//! - an entry whose name is not UTF-8, is absolute (`/x`, `C:\x`, `\x`), has a `..`, `.` or
//!   empty component, a backslash or a control character, or is longer than
//!   [`MAX_PATH_BYTES`]: 422 `validation_error`, `details.entry` naming it;
//! - a symbolic link, an encrypted entry, two entries with the same path: 422;
//! - more than [`MAX_FILES`] files: 422;
//! - a file over [`MAX_FILE_BYTES`], or more than [`MAX_TOTAL_BYTES`] in all (counted as the
//!   archive is unpacked, so a zip that lies about its sizes gains nothing): 413
//!   `payload_too_large`, `details.limit_bytes`;
//! - no `SKILL.md` at the top, one that is not UTF-8, or whose front matter is missing, is not
//!   YAML, or lacks a valid `name` (a slug) or `description`: 422 naming the problem.
//!
//! A zip of a folder (`my-skill/SKILL.md`, `my-skill/…`) is taken as that folder's content.
//! macOS archive litter (`__MACOSX/`, `.DS_Store`) is skipped.

use std::collections::BTreeSet;
use std::io::Read;

use agentry_schema::error::ErrorCode;
use agentry_schema::ids::SkillName;
use agentry_store::skills::NewSkill;
use serde_json::json;

use crate::error::DomainError;

/// Files in one skill, `SKILL.md` included.
pub const MAX_FILES: usize = 100;
/// Bytes of one file.
pub const MAX_FILE_BYTES: u64 = 512 * 1024;
/// Bytes of every file together, unpacked.
pub const MAX_TOTAL_BYTES: u64 = 2 * 1024 * 1024;
/// Bytes of a file's relative path.
pub const MAX_PATH_BYTES: usize = 255;
/// Characters of the front matter's `description` (the Agent Skills format's limit).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The skill's main file.
pub const SKILL_MD: &str = "SKILL.md";

fn refused(entry: &str, reason: impl Into<String>) -> DomainError {
    let reason = reason.into();
    DomainError::new(
        ErrorCode::ValidationError,
        format!("the skill upload is refused: {entry:?}: {reason}; nothing was stored"),
    )
    .with_details(json!({ "field": "files", "entry": entry, "reason": reason }))
}

fn too_large(entry: Option<&str>, limit: u64, what: &str) -> DomainError {
    DomainError::new(
        ErrorCode::PayloadTooLarge,
        match entry {
            Some(e) => format!(
                "the skill upload is refused: {e:?} is larger than {limit} bytes ({what}); nothing was stored"
            ),
            None => format!(
                "the skill upload is refused: its files come to more than {limit} bytes ({what}); nothing was stored"
            ),
        },
    )
    .with_details(json!({ "limit_bytes": limit, "entry": entry, "limit": what }))
}

fn front_matter_error(reason: impl Into<String>) -> DomainError {
    let reason = reason.into();
    DomainError::new(ErrorCode::ValidationError, format!("SKILL.md: {reason}"))
        .with_details(json!({ "field": "SKILL.md", "reason": reason }))
}

/// A relative path as the skill stores it, or why not.
pub fn check_path(raw: &str) -> Result<String, String> {
    if raw.is_empty() {
        return Err("an empty path".into());
    }
    if raw.len() > MAX_PATH_BYTES {
        return Err(format!("the path is longer than {MAX_PATH_BYTES} bytes"));
    }
    if raw.chars().any(|c| c.is_control()) {
        return Err("the path has a control character".into());
    }
    if raw.contains('\\') {
        return Err("the path has a backslash (use `/`)".into());
    }
    if raw.starts_with('/') {
        return Err("an absolute path".into());
    }
    let bytes = raw.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Err("an absolute path (a drive letter)".into());
    }
    for part in raw.split('/') {
        if part != part.trim() {
            return Err("a path component starts or ends with white space".into());
        }
        match part {
            ".." => return Err("the path leaves the skill's folder (`..`)".into()),
            "." => return Err("the path has a `.` component".into()),
            "" => return Err("the path has an empty component (`//`)".into()),
            _ => {}
        }
    }
    Ok(raw.to_string())
}

/// What zip tools add that is no part of a skill.
fn is_litter(path: &str) -> bool {
    path.starts_with("__MACOSX/") || path == ".DS_Store" || path.ends_with("/.DS_Store")
}

/// Files of an upload, checked one by one and together.
struct Collected {
    files: Vec<(String, Vec<u8>)>,
    seen: BTreeSet<String>,
    /// Paths in lower case: two that differ only in case are one file on many file systems
    /// (and under MySQL's collation).
    folded: BTreeSet<String>,
    total: u64,
}

impl Collected {
    fn new() -> Self {
        Collected {
            files: Vec::new(),
            seen: BTreeSet::new(),
            folded: BTreeSet::new(),
            total: 0,
        }
    }

    fn add(&mut self, path: String, content: Vec<u8>) -> Result<(), DomainError> {
        if !self.seen.insert(path.clone()) {
            return Err(refused(&path, "two entries have this path"));
        }
        if !self.folded.insert(path.to_lowercase()) {
            return Err(refused(
                &path,
                "another entry has this path in other letter case",
            ));
        }
        if self.files.len() >= MAX_FILES {
            return Err(refused(
                &path,
                format!("a skill has at most {MAX_FILES} files"),
            ));
        }
        self.total += content.len() as u64;
        if self.total > MAX_TOTAL_BYTES {
            return Err(too_large(None, MAX_TOTAL_BYTES, "all files together"));
        }
        self.files.push((path, content));
        Ok(())
    }
}

/// Read at most `limit` bytes of `r`; more is [`too_large`].
fn read_capped(r: impl Read, entry: &str, limit: u64) -> Result<Vec<u8>, DomainError> {
    let mut out = Vec::new();
    r.take(limit + 1)
        .read_to_end(&mut out)
        .map_err(|e| refused(entry, format!("the entry cannot be read: {e}")))?;
    if out.len() as u64 > limit {
        return Err(too_large(Some(entry), limit, "one file"));
    }
    Ok(out)
}

/// Unpack and check a zip archive.
pub fn from_zip(bytes: &[u8]) -> Result<NewSkill, DomainError> {
    let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| {
        DomainError::new(
            ErrorCode::ValidationError,
            format!("the body is not a zip archive: {e}"),
        )
        .with_details(json!({ "field": "body", "reason": e.to_string() }))
    })?;
    if archive.has_duplicate_names() {
        return Err(refused(
            "(archive)",
            "two entries have the same name in the archive's directory",
        ));
    }
    let mut collected = Collected::new();
    for i in 0..archive.len() {
        let entry = archive.by_index_raw(i).map_err(|e| {
            refused(
                &format!("entry {i}"),
                format!("the entry cannot be read: {e}"),
            )
        })?;
        let raw = entry.name_raw().to_vec();
        let name = match std::str::from_utf8(&raw) {
            Ok(n) => n.to_string(),
            Err(_) => {
                return Err(refused(
                    &String::from_utf8_lossy(&raw),
                    "the entry's name is not valid UTF-8",
                ));
            }
        };
        let is_dir = entry.is_dir();
        let trimmed = name.strip_suffix('/').unwrap_or(&name);
        let path = check_path(trimmed).map_err(|r| refused(&name, r))?;
        if entry.is_symlink() {
            return Err(refused(&name, "a symbolic link"));
        }
        if entry.encrypted() {
            return Err(refused(&name, "an encrypted entry"));
        }
        if is_dir || is_litter(&path) {
            continue;
        }
        drop(entry);
        let entry = archive
            .by_index(i)
            .map_err(|e| refused(&name, format!("the entry cannot be unpacked: {e}")))?;
        let content = read_capped(entry, &name, MAX_FILE_BYTES)?;
        collected.add(path, content)?;
    }
    finish(collected)
}

/// Check files given one by one (the JSON form of an upload).
pub fn from_files(files: Vec<(String, Vec<u8>)>) -> Result<NewSkill, DomainError> {
    let mut collected = Collected::new();
    for (raw, content) in files {
        let path = check_path(&raw).map_err(|r| refused(&raw, r))?;
        if content.len() as u64 > MAX_FILE_BYTES {
            return Err(too_large(Some(&raw), MAX_FILE_BYTES, "one file"));
        }
        collected.add(path, content)?;
    }
    finish(collected)
}

/// `SKILL.md` at the top (or every file in one folder that has it), its front matter parsed.
fn finish(mut c: Collected) -> Result<NewSkill, DomainError> {
    if !c.seen.contains(SKILL_MD) {
        // A zipped folder: `dir/SKILL.md` with everything else under `dir/`.
        let folders: BTreeSet<&str> = c
            .files
            .iter()
            .map(|(p, _)| p.split('/').next().unwrap_or(""))
            .collect();
        let single = (folders.len() == 1)
            .then(|| folders.iter().next().map(|f| f.to_string()))
            .flatten()
            .filter(|f| c.seen.contains(&format!("{f}/{SKILL_MD}")));
        match single {
            Some(folder) => {
                let prefix = format!("{folder}/");
                for (p, _) in &mut c.files {
                    *p = p[prefix.len()..].to_string();
                }
            }
            None => {
                return Err(front_matter_error(
                    "the upload has no SKILL.md at its top (nor in a single folder holding every file)",
                ));
            }
        }
    }
    c.files.sort_by(|a, b| a.0.cmp(&b.0));
    let skill_md = c
        .files
        .iter()
        .find(|(p, _)| p == SKILL_MD)
        .map(|(_, b)| b.clone())
        .unwrap_or_default();
    let text = String::from_utf8(skill_md)
        .map_err(|_| front_matter_error("the file is not valid UTF-8 text"))?;
    let (name, description, instructions) = parse_skill_md(&text)?;
    Ok(NewSkill {
        name,
        description,
        instructions,
        files: c.files,
    })
}

/// Split `SKILL.md` into its front matter's `name` and `description` and the instructions.
pub fn parse_skill_md(text: &str) -> Result<(SkillName, String, String), DomainError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(front_matter_error(
            "the file must start with YAML front matter: a line `---`, `name:` and `description:`, then `---`",
        ));
    }
    let mut yaml = String::new();
    let mut closed = false;
    let mut consumed = first.len();
    for line in lines.by_ref() {
        consumed += line.len();
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err(front_matter_error(
            "the front matter is not closed by a line `---`",
        ));
    }
    let value: yaml_serde::Value = yaml_serde::from_str(&yaml)
        .map_err(|e| front_matter_error(format!("the front matter is not valid YAML: {e}")))?;
    let yaml_serde::Value::Mapping(map) = value else {
        return Err(front_matter_error(
            "the front matter must be a YAML mapping with `name` and `description`",
        ));
    };
    let field = |key: &str| -> Result<String, DomainError> {
        match map.get(key) {
            None | Some(yaml_serde::Value::Null) => Err(front_matter_error(format!(
                "the front matter has no `{key}`"
            ))),
            Some(yaml_serde::Value::String(s)) if !s.trim().is_empty() => Ok(s.trim().to_string()),
            Some(_) => Err(front_matter_error(format!(
                "the front matter's `{key}` must be a non-empty string"
            ))),
        }
    };
    let name = field("name")?;
    let name = SkillName::try_from(name.as_str())
        .map_err(|e| front_matter_error(format!("the front matter's `name` is not valid: {e}")))?;
    let description = field("description")?;
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        return Err(front_matter_error(format!(
            "the front matter's `description` is longer than {MAX_DESCRIPTION_CHARS} characters"
        )));
    }
    let instructions = text[consumed..]
        .trim_start_matches(['\r', '\n'])
        .to_string();
    Ok((name, description, instructions))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    const MD: &str = "---\nname: pdf-forms\ndescription: Fill PDF forms.\nlicense: MIT\n---\n\n# Filling forms\nRun scripts/fill.py.\n";

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (name, content) in entries {
            w.start_file(*name, SimpleFileOptions::default()).unwrap();
            w.write_all(content).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    /// Replace every occurrence of `from` (a file name, in the local and central headers).
    fn patch_names(zip: &mut [u8], from: &[u8], to: &[u8]) {
        assert_eq!(from.len(), to.len());
        let mut i = 0;
        while let Some(pos) = zip[i..].windows(from.len()).position(|w| w == from) {
            zip[i + pos..i + pos + from.len()].copy_from_slice(to);
            i += pos + from.len();
        }
    }

    fn code_and_entry(e: &DomainError) -> (ErrorCode, Option<&str>) {
        (e.code, e.details["entry"].as_str())
    }

    #[test]
    fn a_good_zip_and_a_zipped_folder() {
        let s = from_zip(&zip_of(&[
            ("SKILL.md", MD.as_bytes()),
            ("scripts/fill.py", b"print(1)"),
        ]))
        .unwrap();
        assert_eq!(s.name.as_str(), "pdf-forms");
        assert_eq!(s.description, "Fill PDF forms.");
        assert_eq!(s.instructions, "# Filling forms\nRun scripts/fill.py.\n");
        let paths: Vec<&str> = s.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["SKILL.md", "scripts/fill.py"]);
        let s = from_zip(&zip_of(&[
            ("pdf-forms/", b""),
            ("pdf-forms/SKILL.md", MD.as_bytes()),
            ("pdf-forms/a.txt", b"a"),
            ("__MACOSX/pdf-forms/._a.txt", b"junk"),
        ]))
        .unwrap();
        let paths: Vec<&str> = s.files.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["SKILL.md", "a.txt"]);
    }

    #[test]
    fn escaping_paths_are_refused() {
        for bad in [
            "../evil.sh",
            "a/../../evil",
            "/etc/passwd",
            "C:/x",
            "a\\b",
            "a//b",
            "./a",
        ] {
            let e = from_zip(&zip_of(&[("SKILL.md", MD.as_bytes()), (bad, b"x")])).unwrap_err();
            assert_eq!(
                code_and_entry(&e),
                (ErrorCode::ValidationError, Some(bad)),
                "{bad}"
            );
        }
    }

    #[test]
    fn symlinks_duplicates_and_bad_names_are_refused() {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        w.start_file("SKILL.md", SimpleFileOptions::default())
            .unwrap();
        w.write_all(MD.as_bytes()).unwrap();
        w.add_symlink("link", "/etc/passwd", SimpleFileOptions::default())
            .unwrap();
        let e = from_zip(&w.finish().unwrap().into_inner()).unwrap_err();
        assert_eq!(
            code_and_entry(&e),
            (ErrorCode::ValidationError, Some("link"))
        );
        assert!(e.message.contains("symbolic link"), "{}", e.message);

        // Duplicates inside a zip (a zip writer refuses to make them: patch a name).
        let mut dup = zip_of(&[
            ("SKILL.md", MD.as_bytes()),
            ("a.txt", b"1"),
            ("b.txt", b"2"),
        ]);
        patch_names(&mut dup, b"b.txt", b"a.txt");
        let e = from_zip(&dup).unwrap_err();
        assert!(e.message.contains("same name"), "{}", e.message);

        let mut bad = zip_of(&[("SKILL.md", MD.as_bytes()), ("aXb", b"1")]);
        patch_names(&mut bad, b"aXb", b"a\xffb");
        let e = from_zip(&bad).unwrap_err();
        assert!(e.message.contains("UTF-8"), "{}", e.message);

        let e = from_files(vec![
            ("SKILL.md".into(), MD.into()),
            ("a".into(), b"1".to_vec()),
            ("a".into(), b"2".to_vec()),
        ])
        .unwrap_err();
        assert_eq!(code_and_entry(&e), (ErrorCode::ValidationError, Some("a")));
    }

    #[test]
    fn sizes_and_counts_are_capped() {
        let big = vec![b'x'; MAX_FILE_BYTES as usize + 1];
        let e = from_zip(&zip_of(&[("SKILL.md", MD.as_bytes()), ("big", &big)])).unwrap_err();
        assert_eq!(
            code_and_entry(&e),
            (ErrorCode::PayloadTooLarge, Some("big"))
        );
        let chunk = vec![b'x'; MAX_FILE_BYTES as usize];
        let mut files = vec![("SKILL.md".to_string(), MD.as_bytes().to_vec())];
        for i in 0..5 {
            files.push((format!("f{i}"), chunk.clone()));
        }
        let e = from_files(files).unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
        let mut files = vec![("SKILL.md".to_string(), MD.as_bytes().to_vec())];
        for i in 0..MAX_FILES {
            files.push((format!("f{i}"), b"x".to_vec()));
        }
        let e = from_files(files).unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationError);
        assert!(e.message.contains("at most"), "{}", e.message);
    }

    #[test]
    fn front_matter_problems_are_named() {
        for (md, needle) in [
            ("# no front matter", "must start with YAML front matter"),
            ("---\nname: a\ndescription: b\n", "not closed"),
            ("---\ndescription: b\n---\nx", "no `name`"),
            ("---\nname: a\n---\nx", "no `description`"),
            (
                "---\nname: Bad Name\ndescription: b\n---\n",
                "`name` is not valid",
            ),
            ("---\nname: [a\ndescription: b\n---\n", "not valid YAML"),
            ("---\n- a\n---\n", "YAML mapping"),
            ("---\nname: a\ndescription: 3\n---\n", "non-empty string"),
        ] {
            let e = from_files(vec![("SKILL.md".into(), md.into())]).unwrap_err();
            assert_eq!(e.code, ErrorCode::ValidationError, "{md}");
            assert!(e.message.contains(needle), "{md}: {}", e.message);
        }
        let e = from_files(vec![("README.md".into(), MD.into())]).unwrap_err();
        assert!(e.message.contains("no SKILL.md"), "{}", e.message);
        let e = from_zip(b"not a zip").unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationError);
    }
}
