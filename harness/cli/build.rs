//! Embeds the commit kedge is built from (`KEDGE_COMMIT`), so `kedge --version` and every
//! result say which kedge made them. In order: the `KEDGE_COMMIT` environment variable (a
//! build from an archive that knows its commit), `git rev-parse HEAD` in a checkout (with
//! `-dirty` where tracked files differ from it), the
//! `.cargo_vcs_info.json` cargo writes into a packaged crate, else `unknown`.
//!
//! Also sets `cfg(kedge_have_ggml)` for the tests that drive a real ggml build
//! (harness/build-support/cuda_tools.rs).

// Shared with the other crates' build scripts (each packaged crate has its own copy or link).
// A link to harness/build-support/cuda_tools.rs, so the packaged crate has its own copy.
include!("cuda_tools.rs");

use std::path::Path;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The commit and the files whose change means another one.
fn commit(dir: &Path) -> (String, Vec<String>) {
    if let Ok(c) = std::env::var("KEDGE_COMMIT") {
        if !c.trim().is_empty() {
            return (c.trim().to_string(), Vec::new());
        }
    }
    if let Some(c) = git(dir, &["rev-parse", "HEAD"]) {
        // HEAD, the branch it names and the packed refs: a new commit or a checkout changes one.
        let mut watch = Vec::new();
        for p in ["HEAD", "packed-refs"] {
            if let Some(path) = git(dir, &["rev-parse", "--git-path", p]) {
                watch.push(path);
            }
        }
        if let Some(r) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
            if let Some(path) = git(dir, &["rev-parse", "--git-path", &r]) {
                watch.push(path);
            }
        }
        // A tree with changes to tracked files is not that commit: `-dirty`, as `git describe
        // --dirty` says it. So any change to what the repository tracks (the index, or a file
        // under one of its top-level entries) runs this again.
        if let Some(path) = git(dir, &["rev-parse", "--git-path", "index"]) {
            watch.push(path);
        }
        if let (Some(top), Some(names)) = (
            git(dir, &["rev-parse", "--show-toplevel"]),
            git(dir, &["ls-tree", "--name-only", "HEAD"]),
        ) {
            watch.extend(
                names
                    .lines()
                    .map(|n| Path::new(&top).join(n).display().to_string()),
            );
        }
        let dirty = git(dir, &["status", "--porcelain", "--untracked-files=no"]).is_some();
        let c = if dirty { format!("{c}-dirty") } else { c };
        let watch = watch
            .into_iter()
            .map(|p| {
                let p = Path::new(&p);
                if p.is_absolute() {
                    p.to_path_buf()
                } else {
                    dir.join(p)
                }
            })
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .collect();
        return (c, watch);
    }
    let vcs = dir.join(".cargo_vcs_info.json");
    if let Ok(text) = std::fs::read_to_string(&vcs) {
        // {"git": {"sha1": "..."}, "path_in_vcs": "harness"}
        if let Some(at) = text.find("\"sha1\"") {
            let rest = &text[at + 6..];
            let hex: String = rest
                .chars()
                .skip_while(|c| !c.is_ascii_hexdigit())
                .take_while(char::is_ascii_hexdigit)
                .collect();
            if hex.len() >= 7 {
                return (hex, vec![vcs.display().to_string()]);
            }
        }
    }
    ("unknown".to_string(), Vec::new())
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    println!("cargo::rerun-if-env-changed=KEDGE_COMMIT");
    println!("cargo::rerun-if-changed=build.rs");
    let (c, watch) = commit(&dir);
    for w in watch {
        println!("cargo::rerun-if-changed={w}");
    }
    println!("cargo::rustc-env=KEDGE_COMMIT={c}");
    ggml_probe();
}
