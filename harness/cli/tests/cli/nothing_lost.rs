//! Nothing lost, whatever the input: one row per way a careless or hostile input could make
//! kedge lose or damage data or end without a word, through the binary. Each row prepares a
//! directory (`{d}` in its arguments), runs kedge, and checks its status, its message, and that
//! no file outside what the row may change was touched (a link's target above all).
//!
//! Rows: writes through links (1), writers and the lock and the target's kind (2), fuzzing
//! bounded (3; the Ctrl-C test below), stored ids rechecked (4), libraries that crash or exit
//! while loading (5; the ggml test below), declared ranges (6), and the smaller ones (7).

use crate::{cpu_results, kedge};
use rstest::rstest;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const INCIDENT: &str = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1]}"#;
const VICTIM: &str = "a file outside the output directory\n";

/// Results of a CPU sweep (made once), and files made from them.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nothing-lost-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        let results = cpu_results(&d.join("sweep"));
        let text = std::fs::read_to_string(results).unwrap();
        std::fs::write(d.join("results.jsonl"), &text).unwrap();
        let first = text.lines().next().unwrap();
        std::fs::write(
            d.join("torn.jsonl"),
            format!("{text}{}", &first[..first.len() / 2]),
        )
        .unwrap();
        // Another id scheme: every stored id is not its case's.
        let foreign: String = text
            .lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                let id = v["id"].as_str().unwrap().to_string();
                v["id"] = format!("old-{id}").into();
                format!("{v}\n")
            })
            .collect();
        std::fs::write(d.join("foreign.jsonl"), foreign).unwrap();
        d
    })
}

/// The test plugins (harness/runner/tests/plugins/testplug.c) this table needs, built once;
/// `None` without gcc (outside CI).
fn plugins() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let gcc = Command::new("gcc").arg("--version").output();
        assert!(
            gcc.is_ok_and(|o| o.status.success()),
            "the plugin rows build their plugins with gcc: install it"
        );
        let root = crate::root();
        let d = fixtures().join("plugins");
        std::fs::create_dir_all(&d).unwrap();
        for def in ["GOOD", "WILD_TABLE", "EXIT_ON_LOAD"] {
            let out = Command::new("gcc")
                .args(["-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", "-I"])
                .arg(root.join("harness/include"))
                .arg(format!("-D{def}"))
                .arg(root.join("harness/runner/tests/plugins/testplug.c"))
                .arg("-o")
                .arg(d.join(format!("lib{def}.so")))
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // A library cut short, as a failed copy leaves it: mapping it faults (SIGBUS).
        let good = std::fs::read(d.join("libGOOD.so")).unwrap();
        std::fs::write(d.join("libTRUNCATED.so"), &good[..good.len().min(3000)]).unwrap();
        Some(d)
    })
    .as_deref()
}

/// A row's preparation in `{d}`; what it returns (a held lock) lives while kedge runs.
type Setup = fn(&Path) -> Option<File>;

fn copy(name: &str, to: &Path) {
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p).unwrap();
    }
    std::fs::copy(fixtures().join(name), to).unwrap();
}

fn inputs(d: &Path) {
    std::fs::write(d.join("victim.txt"), VICTIM).unwrap();
    for n in ["results.jsonl", "torn.jsonl", "foreign.jsonl"] {
        copy(n, &d.join(n));
    }
    std::fs::write(d.join("empty.jsonl"), "").unwrap();
    std::fs::create_dir_all(d.join("out")).unwrap();
}

fn link(target: &str, at: &Path) {
    std::os::unix::fs::symlink(target, at).unwrap();
}

fn plain(d: &Path) -> Option<File> {
    inputs(d);
    None
}
fn lock_link(d: &Path) -> Option<File> {
    inputs(d);
    link("../victim.txt", &d.join("out/.kedge.lock"));
    None
}
fn results_link(d: &Path) -> Option<File> {
    inputs(d);
    link("../victim.txt", &d.join("out/results.jsonl"));
    None
}
fn results_hard_link(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::hard_link(d.join("results.jsonl"), d.join("out/results.jsonl")).unwrap();
    None
}
fn report_link(d: &Path) -> Option<File> {
    inputs(d);
    link("../victim.txt", &d.join("out/report.md"));
    None
}
fn workers_link(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::create_dir_all(d.join("elsewhere")).unwrap();
    link("../elsewhere", &d.join("out/workers"));
    None
}
fn out_is_link(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::remove_dir(d.join("out")).unwrap();
    std::fs::create_dir_all(d.join("real")).unwrap();
    link("real", &d.join("out"));
    None
}
fn results_in_out(d: &Path) -> Option<File> {
    inputs(d);
    copy("results.jsonl", &d.join("out/other.jsonl"));
    None
}
fn out_locked(d: &Path) -> Option<File> {
    inputs(d);
    let p = d.join("out/.kedge.lock");
    std::fs::write(&p, "pid 4242: kedge sweep\n").unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    // SAFETY: flock on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
    Some(f)
}
fn plan_in_out(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::write(d.join("out/plan.jsonl"), format!("{INCIDENT}\n")).unwrap();
    None
}
fn repro_in_out(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::write(d.join("out/repro.txt"), format!("{INCIDENT}\n")).unwrap();
    None
}
fn foreign_in_out(d: &Path) -> Option<File> {
    inputs(d);
    copy("foreign.jsonl", &d.join("out/results.jsonl"));
    None
}
fn old_report(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::write(d.join("out/report.md"), "the report before\n").unwrap();
    None
}
fn a_dir(d: &Path) -> Option<File> {
    inputs(d);
    std::fs::create_dir_all(d.join("adir")).unwrap();
    None
}

/// Every file under `d` (links as their target text), but lock files and what `may_change`
/// names (relative paths: a directory and all under it).
fn snapshot(d: &Path, may_change: &[&str]) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(d).unwrap().to_path_buf();
            if may_change.iter().any(|m| rel.starts_with(m))
                || p.file_name().is_some_and(|n| n == ".kedge.lock")
            {
                continue;
            }
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                out.insert(
                    rel,
                    format!("link to {:?}", std::fs::read_link(&p).unwrap()),
                );
            } else if t.is_dir() {
                out.insert(rel, "dir".into());
                stack.push(p);
            } else {
                out.insert(
                    rel,
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into(),
                );
            }
        }
    }
    out
}

/// Run kedge with extra environment and, optionally, a file-size limit (bytes).
fn kedge_with(args: &[String], env: &[(&str, &str)], fsize: Option<u64>) -> (i32, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kedge"));
    cmd.args(args).current_dir(crate::root());
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(limit) = fsize {
        // SAFETY: setrlimit in the child before exec; no allocation, no locks.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::rlimit {
                    rlim_cur: limit,
                    rlim_max: limit,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &r) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().expect("run kedge");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

const NO_ENV: &[(&str, &str)] = &[];
const OUT: &[&str] = &["out"];
const NOTHING: &[&str] = &[];

#[rstest]
// 1. Writes do not follow links: the lock, results (--force, --resume, a hard link), a report,
//    the workers' tree. A linked output directory itself is the user's choice.
#[case::lock_is_a_link(lock_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out"], NO_ENV, None, NOTHING, 5, "out/.kedge.lock is a symbolic link")]
#[case::report_lock_is_a_link(lock_link, &["report", "{d}/results.jsonl", "--out", "{d}/out"], NO_ENV, None, NOTHING, 5, "out/.kedge.lock is a symbolic link")]
#[case::force_through_results_link(results_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out", "--force"], NO_ENV, None, NOTHING, 5, "out/results.jsonl is a symbolic link")]
#[case::resume_through_results_link(results_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out", "--resume"], NO_ENV, None, NOTHING, 5, "out/results.jsonl is a symbolic link")]
#[case::results_hard_linked(results_hard_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out", "--force"], NO_ENV, None, NOTHING, 5, "has 2 hard links")]
#[case::report_through_link(report_link, &["report", "{d}/results.jsonl", "--out", "{d}/out"], NO_ENV, None, NOTHING, 5, "out/report.md is a symbolic link")]
#[case::workers_tree_is_a_link(workers_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out"], NO_ENV, None, NOTHING, 5, "out/workers is a symbolic link")]
#[case::linked_out_dir_is_allowed(out_is_link, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out"], NO_ENV, None, &["real"], 4, "GPU checks skipped")]
// 2. Every writer: the lock of the directory it writes into, never its own input, never a
//    target of another kind; no baseline from what the gate rejects.
#[case::baseline_over_its_input(plain, &["gate", "--write-baseline", "{d}/results.jsonl", "{d}/results.jsonl"], NO_ENV, None, NOTHING, 2, "results.jsonl is one of this command's inputs")]
#[case::baseline_over_results(results_in_out, &["gate", "--write-baseline", "{d}/out/other.jsonl", "{d}/results.jsonl"], NO_ENV, None, NOTHING, 2, "other.jsonl is a results file (kedge verdict lines), not a gate baseline")]
#[case::baseline_into_a_locked_dir(out_locked, &["gate", "--write-baseline", "{d}/out/known.jsonl", "{d}/results.jsonl"], NO_ENV, None, NOTHING, 5, "is in use by another kedge (pid 4242: kedge sweep)")]
#[case::baseline_from_torn(plain, &["gate", "--write-baseline", "{d}/out/known.jsonl", "{d}/torn.jsonl"], NO_ENV, None, NOTHING, 2, "cut off mid-write, which the gate rejects")]
#[case::baseline_from_empty(plain, &["gate", "--write-baseline", "{d}/out/known.jsonl", "{d}/empty.jsonl"], NO_ENV, None, NOTHING, 2, "no results in them, which the gate rejects")]
#[case::baseline_is_a_directory(a_dir, &["gate", "--write-baseline", "{d}/adir", "{d}/results.jsonl"], NO_ENV, None, NOTHING, 2, "adir is a directory, not a file")]
#[case::baseline_written(plain, &["gate", "--write-baseline", "{d}/out/known.jsonl", "{d}/results.jsonl"], NO_ENV, None, OUT, 0, "written to")]
#[case::finds_into_results(plain, &["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", "{d}/results.jsonl"], NO_ENV, None, NOTHING, 2, "results.jsonl is a results file (kedge verdict lines), not a fuzz finds corpus")]
#[case::finds_into_a_locked_dir(out_locked, &["fuzz", "--cpu", "-o", "rms_norm", "--cases", "60", "--finds", "{d}/out/f.jsonl"], NO_ENV, None, NOTHING, 5, "is in use by another kedge")]
#[case::sweep_over_its_corpus(plan_in_out, &["sweep", "--cpu", "--corpus", "{d}/out/plan.jsonl", "--out", "{d}/out", "--force"], NO_ENV, None, NOTHING, 2, "plan.jsonl is one of this command's inputs")]
#[case::minimize_over_its_input(repro_in_out, &["minimize", "--cpu", "{d}/out/repro.txt", "--out", "{d}/out"], NO_ENV, None, NOTHING, 2, "repro.txt is one of this command's inputs")]
#[case::run_results_through_link(results_link, &["run", "-o", "rms_norm", "--impl", "clamped", "--ne", "64", "--results", "{d}/out/results.jsonl"], NO_ENV, None, NOTHING, 5, "out/results.jsonl is a symbolic link")]
#[case::run_results_over_a_plan(plan_in_out, &["run", "-o", "rms_norm", "--impl", "clamped", "--ne", "64", "--results", "{d}/out/plan.jsonl"], NO_ENV, None, NOTHING, 2, "plan.jsonl is a corpus of case lines, not a results file")]
#[case::report_beside_its_input(plain, &["report", "{d}/results.jsonl", "--out", "{d}"], NO_ENV, None, &["report.md", "summary.md", "report.json", "junit.xml"], 0, "report.md")]
// 3. Fuzzing: --cases 0 asks for nothing (the bounded, interruptible run is the test below).
#[case::fuzz_no_cases(plain, &["fuzz", "--cpu", "--cases", "0", "--finds", "{d}/out/f.jsonl"], NO_ENV, None, NOTHING, 2, "0 is below 1, the smallest value allowed")]
// 4. Stored ids are recomputed from their cases wherever results are read.
#[case::resume_foreign_ids(foreign_in_out, &["sweep", "boundary", "--cpu", "-o", "rms_norm", "--out", "{d}/out", "--resume"], NO_ENV, None, NOTHING, 2, "whose stored id is not the id of their case (line 1: stored old-")]
#[case::gate_foreign_ids(plain, &["gate", "--baseline", "corpora/known-failures.jsonl", "{d}/foreign.jsonl"], NO_ENV, None, NOTHING, 2, "whose stored id is not the id of their case")]
#[case::report_foreign_ids(plain, &["report", "{d}/foreign.jsonl", "--out", "{d}/out"], NO_ENV, None, NOTHING, 2, "whose stored id is not the id of their case")]
// 5. Libraries: opened first in a child; a crash or an exit there names the file.
#[case::truncated_plugin_list(plain, &["list", "-o", "rms_norm", "--plugin", "{p}/libTRUNCATED.so"], NO_ENV, None, NOTHING, 2, "libTRUNCATED.so: loading it killed the process with SIGBUS")]
#[case::truncated_plugin_plan(plain, &["plan", "-o", "rms_norm", "--plugin", "{p}/libTRUNCATED.so"], NO_ENV, None, NOTHING, 2, "libTRUNCATED.so: loading it killed the process with SIGBUS")]
#[case::wild_table_plugin_sweep(plain, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--plugin", "{p}/libWILD_TABLE.so", "--out", "{d}/out"], NO_ENV, None, OUT, 2, "libWILD_TABLE.so: loading it killed the process with SIGSEGV")]
#[case::plugin_exits_on_load(plain, &["list", "--plugin", "{p}/libEXIT_ON_LOAD.so"], NO_ENV, None, NOTHING, 2, "libEXIT_ON_LOAD.so: the library ended the process (exit status 0) while it was being loaded")]
#[case::good_plugin_still_loads(plain, &["list", "-o", "rms_norm", "--plugin", "{p}/libGOOD.so"], NO_ENV, None, NOTHING, 0, "plugin:testplug")]
// 6. Numbers have declared ranges; a key twice is refused; thread counts are clamped.
#[case::jobs_zero(plain, &["sweep", "smoke", "--cpu", "--jobs", "0", "--out", "{d}/out"], NO_ENV, None, NOTHING, 2, "'--jobs <N>': 0 is outside the range 1..=256")]
#[case::run_jobs_zero(plain, &["run", "-o", "rms_norm", "-j", "0"], NO_ENV, None, NOTHING, 2, "0 is outside the range 1..=256")]
#[case::batch_zero(plain, &["sweep", "smoke", "--cpu", "--batch", "0", "--out", "{d}/out"], NO_ENV, None, NOTHING, 2, "'--batch <BATCH>': 0 is outside the range 1..=4096")]
#[case::timeout_zero(plain, &["run", "-o", "rms_norm", "--timeout", "0"], NO_ENV, None, NOTHING, 2, "'--timeout <SECONDS>': 0 is outside the range 1..=604800")]
#[case::minimize_budget_zero(plain, &["minimize", "--cpu", "--budget", "0", INCIDENT], NO_ENV, None, NOTHING, 2, "'--budget <BUDGET>': 0 is outside the range 1..=1000000")]
#[case::fuzz_budget_zero(plain, &["fuzz", "--cpu", "--budget", "0", "--finds", "{d}/out/f.jsonl"], NO_ENV, None, NOTHING, 2, "0 is outside the range 1..=1000000")]
#[case::negative_eps_flag(plain, &["plan", "-o", "rms_norm", "--impl", "ggml", "--ne", "64", "--param", "eps=-1"], NO_ENV, None, NOTHING, 2, "parameter 'eps': -1 is outside [0, inf)")]
#[case::negative_eps_case(plain, &["plan", "--case", r#"{"op":"norm","impl":"ggml","dtype":"f32","ne":[64,1,1,1],"params":{"eps":-0.5}}"#], NO_ENV, None, NOTHING, 2, "-0.5 is outside [0, inf)")]
#[case::empty_shard(plain, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--shard", "7/1000", "--out", "{d}/out"], NO_ENV, None, OUT, 2, "shard 7/1000 holds none of the")]
#[case::duplicate_key(plain, &["plan", "--case", r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"ne":[64,1,65536,1]}"#], NO_ENV, None, NOTHING, 2, "the key \"ne\" appears twice")]
#[case::duplicate_param(plain, &["plan", "--case", r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1],"params":{"eps":1e-6,"eps":1e-5}}"#], NO_ENV, None, NOTHING, 2, "the key \"eps\" appears twice")]
#[case::duplicate_key_minimize(plain, &["minimize", "--cpu", r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,65536,1],"ne":[64,1,2,1]}"#], NO_ENV, None, NOTHING, 2, "appears twice")]
#[case::rayon_threads_clamped(plain, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "{d}/out"], &[("RAYON_NUM_THREADS", "100000")], None, OUT, 4, "RAYON_NUM_THREADS=100000 is more than the")]
// 7. A directory for a file, a device for a directory, a file-size limit, atomic reports.
#[case::minimize_a_directory(a_dir, &["minimize", "--cpu", "{d}/adir"], NO_ENV, None, NOTHING, 2, "adir is a directory, not a file")]
#[case::plugin_a_directory(a_dir, &["plan", "--plugin", "{d}/adir"], NO_ENV, None, NOTHING, 2, "it is a directory, not a file")]
#[case::report_a_directory(a_dir, &["report", "{d}/adir", "--out", "{d}/out"], NO_ENV, None, NOTHING, 2, "Is a directory")]
#[case::corpus_a_directory(a_dir, &["plan", "--corpus", "{d}/adir"], NO_ENV, None, NOTHING, 2, "Is a directory")]
#[case::out_dev_null(plain, &["sweep", "smoke", "--cpu", "-o", "rms_norm", "--out", "/dev/null"], NO_ENV, None, NOTHING, 5, "/dev/null: it is a character device, not a directory")]
#[case::file_size_limit(plain, &["sweep", "boundary", "--cpu", "-o", "rms_norm", "--out", "{d}/out"], NO_ENV, Some(512), OUT, 5, "File too large")]
#[case::report_whole_or_not_at_all(old_report, &["report", "{d}/results.jsonl", "--out", "{d}/out"], NO_ENV, Some(512), NOTHING, 5, "File too large")]
#[allow(clippy::too_many_arguments)]
fn nothing_lost(
    #[case] setup: Setup,
    #[case] args: &[&str],
    #[case] env: &[(&str, &str)],
    #[case] fsize: Option<u64>,
    #[case] may_change: &[&str],
    #[case] want: i32,
    #[case] says: &str,
) {
    let needs_plugins = args.iter().any(|a| a.contains("{p}"));
    let p = match (needs_plugins, plugins()) {
        (true, None) => return,
        (_, p) => p.map(|p| p.display().to_string()).unwrap_or_default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let _held = setup(d);
    let args: Vec<String> = args
        .iter()
        .map(|a| {
            a.replace("{d}", &d.display().to_string())
                .replace("{p}", &p)
        })
        .collect();
    let before = snapshot(d, may_change);
    let (rc, text) = kedge_with(&args, env, fsize);
    let shown = format!("kedge {}\n{text}", args.join(" "));
    assert_eq!(rc, want, "{shown}");
    assert!(text.contains(says), "expected '{says}' in\n{shown}");
    assert!(!text.contains("panicked"), "{shown}");
    assert_eq!(snapshot(d, may_change), before, "files changed: {shown}");
    if d.join("victim.txt").exists() {
        assert_eq!(
            std::fs::read_to_string(d.join("victim.txt")).unwrap(),
            VICTIM
        );
    }
}

/// A fuzz run of a trillion cases holds one chunk at a time and writes each find as it is
/// made: stopped with Ctrl-C, it ends 130 and its finds file holds whole find lines.
#[test]
fn an_endless_fuzz_run_is_stopped_with_its_finds_written() {
    let dir = tempfile::tempdir().unwrap();
    let finds = dir.path().join("finds.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kedge"))
        .args(["fuzz", "--cpu", "--cases", "1000000000000", "--finds"])
        .arg(&finds)
        .current_dir(crate::root())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while std::fs::read_to_string(&finds).map_or(0, |t| t.lines().count()) < 2 {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(300),
            "no finds written in 300 s"
        );
        assert!(child.try_wait().unwrap().is_none(), "fuzz ended by itself");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // SAFETY: a signal to the child this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("fuzz: stopped after"), "{err}");
    assert!(err.contains("new finds written to"), "{err}");
    let text = std::fs::read_to_string(&finds).unwrap();
    assert!(text.ends_with('\n'), "a find line was cut off:\n{text}");
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(v["case"].is_object() && v["verdict"].is_string(), "{line}");
    }
    // The finds are a corpus kedge reads back.
    let (rc, _, err) = kedge(&["plan", "--corpus", finds.to_str().unwrap()]);
    assert!(rc == 0 || rc == 1, "{err}");
}

/// A ggml build with a truncated library: loading it in the child faults; kedge names the
/// library and stays up.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_truncated_ggml_library_is_named_not_a_crash() {
    let build = std::env::var("KEDGE_GGML_DIR")
        .expect("this test needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ggml");
    std::fs::create_dir_all(&copy).unwrap();
    let mut lib_dir = PathBuf::from(&build);
    if !lib_dir.join("libggml-base.so").exists() && lib_dir.join("lib").is_dir() {
        lib_dir = lib_dir.join("lib");
    }
    // Every name of libggml-base (the file and its soname links) cut short, as a failed
    // copy leaves a library; the rest copied whole.
    for e in std::fs::read_dir(&lib_dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("libggml") || !name.contains(".so") {
            continue;
        }
        let bytes = std::fs::read(e.path()).unwrap();
        let keep = if name.starts_with("libggml-base.so") {
            bytes.len().min(4096)
        } else {
            bytes.len()
        };
        std::fs::write(copy.join(&name), &bytes[..keep]).unwrap();
    }
    let cut = "libggml-base.so";
    let (rc, _, err) = kedge(&["list", "--ggml", copy.to_str().unwrap()]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains(&format!("{cut}: loading it killed the process with SIGBUS")),
        "{err}"
    );
}
