//! Where results come from, and whether two sets of them can be compared: every verdict of a
//! sweep carries its run's `RunInfo` (kedge's build, the limits profile, the run mode, where
//! the impls came from, the suite), and a baseline records the one it was made from.
//!
//! - One run is one profile, one mode, one suite: results that mix them (shards of two
//!   suites, a native and a guard sweep in one file) are refused, naming both sides.
//! - A baseline judges only results of its own profile, mode and suite. Another build of the
//!   same impls (kedge at another commit, a ggml pull request gated against its base commit)
//!   is the normal case: it is said ("baseline from X, results from Y"), not refused.
//! - `--resume` continues only results of the same run: the same profile, mode, suite and
//!   kedge build.
//!
//! Results and baselines written before kedge recorded this carry none of it: they are still
//! read, and what cannot be checked is said.

use crate::external::ExternalSpec;
use crate::select::{MaxElements, Selection, Suite};
use kedge_core::{Case, Registry, RunInfo, SuiteInfo, Under};
use serde::Deserialize;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use thiserror::Error;

/// Results or a baseline that cannot be compared (bad input: exit 2). Each names both sides.
#[derive(Debug, Error)]
pub enum ProvenanceError {
    /// One set of results with two values of what must be one.
    #[error("the results mix two {what}s: {first} and {second}; one run is one {what}: report and gate each run on its own (against a baseline of its {what})")]
    Mixed {
        /// What differs: `profile`, `mode` or `suite`.
        what: &'static str,
        /// The first value met, with the file and line it is on.
        first: String,
        /// The other value, with its file and line.
        second: String,
    },
    /// Some results carry run metadata and some do not: not one run.
    #[error("the results mix runs of two kedges: {with} carries run metadata and {without} does not (written by a kedge older than run metadata); report and gate each on its own")]
    MixedOld {
        /// The first line with run metadata, as FILE:LINE.
        with: String,
        /// The first line without, as FILE:LINE.
        without: String,
    },
    /// A baseline of another profile, mode or suite.
    #[error("{baseline}: the baseline is of {what} {expected}, the results of {what} {got}: a baseline judges only results of its own {what}; gate against a baseline made from results like these (kedge gate --update BASELINE RESULTS)")]
    Mismatch {
        /// The baseline file.
        baseline: PathBuf,
        /// What differs: `profile`, `mode` or `suite`.
        what: &'static str,
        /// The baseline's value.
        expected: String,
        /// The results' value.
        got: String,
    },
    /// `--resume` into results of another run.
    #[error("{path} holds results of another run ({differences}): --resume would mix the two runs in one file; pass --force to start over, or give another --out")]
    ResumeMismatch {
        /// The results file.
        path: PathBuf,
        /// What differs, each side named ("profile h200 here, b200 now"), `; `-separated.
        differences: String,
    },
    /// `--resume` into results that carry no run metadata.
    #[error("{path} holds results without run metadata (written by an older kedge), so they cannot be checked to be of this sweep; pass --force to start over, or give another --out")]
    ResumeUnknown {
        /// The results file.
        path: PathBuf,
    },
    /// A results file that cannot be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file as given.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
}

/// Two runs' suites are the same when they are the same cases: the same count and digest of
/// ids (their names may spell the same selection differently: `-b CPU`, `--impl ggml:CPU`).
fn same_suite(a: &Option<SuiteInfo>, b: &Option<SuiteInfo>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.cases == b.cases && a.digest == b.digest,
        (None, None) => true,
        _ => false,
    }
}

static BUILD: OnceLock<(String, String)> = OnceLock::new();

/// Record the kedge build this process is (the binary knows its commit; see harness/cli/build.rs).
/// Later calls change nothing.
pub fn set_build(version: &str, commit: &str) {
    let _ = BUILD.set((version.to_string(), commit.to_string()));
}

/// This process's kedge: its version and commit (`unknown` unless `set_build` said).
fn build() -> (String, String) {
    BUILD
        .get()
        .cloned()
        .unwrap_or_else(|| (env!("CARGO_PKG_VERSION").to_string(), "unknown".to_string()))
}

/// A run's mode: what ran the cases (`cpu`, `native`, tools; several joined with `+`) and the
/// allocation modes asked for (`exact` when none was), as `native/exact`.
pub(crate) fn mode(runs: &[Under], allocs: Option<&str>) -> String {
    let mut names: Vec<&str> = Vec::new();
    for u in runs {
        if !names.contains(&u.name()) {
            names.push(u.name());
        }
    }
    if names.is_empty() {
        names.push("none");
    }
    let allocs = allocs
        .map(|a| {
            a.split(',')
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .collect::<Vec<_>>()
                .join(",")
        })
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| "exact".into());
    format!("{}/{allocs}", names.join("+"))
}

/// The suite's name with the flags that shape its cases, as typed: `default -o rms_norm
/// --impl ggml:CPU`. The shard is not among them: every shard is of the same suite.
pub(crate) fn suite_name(
    suite: Suite,
    sel: &Selection,
    max: MaxElements,
    over: Option<u64>,
) -> String {
    let mut words: Vec<String> = Vec::new();
    if !sel.cases.is_empty() || sel.ne.is_some() {
        words.push("given cases".into());
    }
    if let Some(c) = &sel.corpus {
        let name = c
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| c.display().to_string());
        words.push(format!("corpus {name}"));
    }
    if words.is_empty() {
        words.push(suite.to_string());
    }
    if !sel.ops.is_empty() {
        words.push(format!("-o {}", sel.ops.join(",")));
    }
    if !sel.impls.is_empty() {
        words.push(format!("--impl {}", sel.impls.join(",")));
    }
    if let Some(d) = &sel.dtype {
        words.push(format!("--dtype {d}"));
    }
    for p in &sel.params {
        words.push(format!("--param {p}"));
    }
    if let Some(f) = &sel.filter {
        words.push(format!("--filter '{f}'"));
    }
    if sel.include_planted {
        words.push("--include-planted".into());
    }
    if let Some(s) = sel.seed {
        words.push(format!("--seed {s}"));
    }
    if let Some(a) = &sel.allocs {
        words.push(format!("--alloc {a}"));
    }
    if let Some(n) = max.limit() {
        words.push(format!("--max-elements {n}"));
    }
    if let Some(n) = over {
        words.push(format!("--over-elements {n}"));
    }
    words.join(" ")
}

/// Where the impls of `cases` come from: `kedge`, `plugin FILE`, `source FILE`, `ggml VERSION
/// (COMMIT)`, kedge first.
pub(crate) fn impl_sources(reg: &Registry, cases: &[Case], ext: &ExternalSpec) -> Vec<String> {
    let mut kedge = false;
    let mut others: BTreeSet<String> = BTreeSet::new();
    let file = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| p.display().to_string())
    };
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    for c in cases {
        if !seen.insert((c.op.as_str(), c.imp.as_str())) {
            continue;
        }
        let backend = reg
            .op(&c.op)
            .and_then(|op| reg.imp(op, &c.imp))
            .ok()
            .and_then(|i| i.backend().map(|b| b.library()));
        if let Some(lib) = backend {
            others.insert(format!("{} {} ({})", lib.name, lib.version, lib.commit));
        } else if c.imp.starts_with("plugin:") {
            for p in &ext.plugins {
                others.insert(format!("plugin {}", file(p)));
            }
        } else if c.imp.starts_with("source:") {
            for s in &ext.sources {
                others.insert(format!("source {}", file(&s.file)));
            }
        } else {
            kedge = true;
        }
    }
    kedge
        .then(|| "kedge".to_string())
        .into_iter()
        .chain(others)
        .collect()
}

/// The metadata of a sweep about to run.
pub(crate) fn sweep_info(
    profile: &str,
    mode: String,
    impls: Vec<String>,
    suite: SuiteInfo,
) -> RunInfo {
    let (kedge, commit) = build();
    RunInfo {
        kedge,
        commit,
        profile: profile.to_string(),
        mode,
        impls,
        suite: Some(suite),
    }
}

/// Only the run metadata of a result line.
#[derive(Deserialize)]
struct RunOnly {
    #[serde(default)]
    run: Option<RunInfo>,
}

/// What a set of results files says about the run(s) that wrote them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResultsRun {
    /// Their run metadata (the first line's), when they carry it.
    pub(crate) info: Option<RunInfo>,
    /// The builds that wrote them, when more than one did (shards of one suite run by two
    /// kedge or ggml builds).
    pub(crate) builds: Vec<String>,
    /// Result lines read.
    pub(crate) lines: usize,
}

impl ResultsRun {
    /// Read the run metadata of every line of `paths` (lines that are not results are left to
    /// `ResultSet::load` to report) and check they are one run: one profile, one mode, one
    /// suite, and either every line with metadata or none.
    pub fn load(paths: &[PathBuf]) -> Result<ResultsRun, ProvenanceError> {
        let mut texts = Vec::new();
        for p in paths {
            let text = std::fs::read_to_string(p).map_err(|source| ProvenanceError::Io {
                path: p.clone(),
                source,
            })?;
            texts.push((p.display().to_string(), text));
        }
        let refs: Vec<(&str, &str)> = texts
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        ResultsRun::from_texts(&refs)
    }

    /// As `load`, from text; `name` is used in messages.
    fn from_texts(texts: &[(&str, &str)]) -> Result<ResultsRun, ProvenanceError> {
        let mut out = ResultsRun::default();
        // (where, info) of the first line with metadata, and of the first without.
        let mut first: Option<(String, RunInfo)> = None;
        let mut first_without: Option<String> = None;
        for (name, text) in texts {
            for (i, line) in text.lines().enumerate() {
                let t = line.trim();
                if t.is_empty() || t.starts_with('#') {
                    continue;
                }
                let Ok(r) = serde_json::from_str::<RunOnly>(t) else {
                    continue;
                };
                out.lines += 1;
                let at = format!("{name}:{}", i + 1);
                let Some(info) = r.run else {
                    first_without.get_or_insert(at);
                    continue;
                };
                match &first {
                    None => first = Some((at, info)),
                    Some((at0, i0)) => {
                        for (what, a, b) in [
                            ("profile", &i0.profile, &info.profile),
                            ("mode", &i0.mode, &info.mode),
                        ] {
                            if a != b {
                                return Err(ProvenanceError::Mixed {
                                    what,
                                    first: format!("{a} ({at0})"),
                                    second: format!("{b} ({at})"),
                                });
                            }
                        }
                        if !same_suite(&i0.suite, &info.suite) {
                            let s = |x: &Option<SuiteInfo>| {
                                x.as_ref()
                                    .map(|s| s.to_string())
                                    .unwrap_or_else(|| "none (single cases)".into())
                            };
                            return Err(ProvenanceError::Mixed {
                                what: "suite",
                                first: format!("{} ({at0})", s(&i0.suite)),
                                second: format!("{} ({at})", s(&info.suite)),
                            });
                        }
                        let b = info.build();
                        if b != i0.build() && !out.builds.contains(&b) {
                            if out.builds.is_empty() {
                                out.builds.push(i0.build());
                            }
                            out.builds.push(b);
                        }
                    }
                }
            }
        }
        if let (Some((at, _)), Some(without)) = (&first, &first_without) {
            return Err(ProvenanceError::MixedOld {
                with: at.clone(),
                without: without.clone(),
            });
        }
        out.info = first.map(|(_, i)| i);
        Ok(out)
    }

    /// The build(s) that wrote the results, in words.
    fn build_words(&self) -> Option<String> {
        if !self.builds.is_empty() {
            return Some(self.builds.join(" and "));
        }
        self.info.as_ref().map(RunInfo::build)
    }

    /// A line for people: what the results are and what made them.
    pub fn describe(&self) -> Option<String> {
        let i = self.info.as_ref()?;
        Some(format!(
            "results: {}; from {}",
            i.what(),
            self.build_words().unwrap_or_default()
        ))
    }
}

/// Check a baseline's run against the results': a profile, mode or suite of its own is refused
/// (exit 2, both sides named). Returns what a person reads: where each side came from, and
/// what could not be checked.
pub fn check_baseline(
    path: &Path,
    baseline: Option<&RunInfo>,
    results: &ResultsRun,
) -> Result<Vec<String>, ProvenanceError> {
    let mut lines = Vec::new();
    match (baseline, &results.info) {
        (Some(b), Some(r)) => {
            let mismatch = |what, expected: String, got: String| ProvenanceError::Mismatch {
                baseline: path.to_path_buf(),
                what,
                expected,
                got,
            };
            if b.profile != r.profile {
                return Err(mismatch("profile", b.profile.clone(), r.profile.clone()));
            }
            if b.mode != r.mode {
                return Err(mismatch("mode", b.mode.clone(), r.mode.clone()));
            }
            match (&b.suite, &r.suite) {
                (Some(bs), Some(rs)) if !same_suite(&b.suite, &r.suite) => {
                    return Err(mismatch("suite", bs.to_string(), rs.to_string()));
                }
                (Some(bs), None) => lines.push(format!(
                    "the results are single cases, not a suite: not checked against the baseline's suite {bs}"
                )),
                _ => {}
            }
            let rb = results.build_words().unwrap_or_default();
            if b.build() == rb {
                lines.push(format!(
                    "baseline and results: {}; both from {rb}",
                    b.what()
                ));
            } else {
                lines.push(format!(
                    "baseline and results: {}; baseline from {}, results from {rb}",
                    b.what(),
                    b.build()
                ));
            }
        }
        (None, Some(r)) => lines.push(format!(
            "{} records no profile, mode or suite (a baseline of an older kedge): the results ({}) are not checked against it; `kedge gate --update {} RESULTS` rewrites it with them",
            path.display(),
            r.what(),
            path.display()
        )),
        (Some(b), None) if results.lines > 0 => lines.push(format!(
            "the results carry no run metadata (written by an older kedge): not checked against the baseline's {}",
            b.what()
        )),
        _ => {}
    }
    Ok(lines)
}

/// `--resume` into `path`: its results must be of this run (`now`), or none at all.
pub(crate) fn check_resume(path: &Path, now: &RunInfo) -> Result<(), ProvenanceError> {
    if !path.exists() {
        return Ok(());
    }
    let stored = ResultsRun::load(&[path.to_path_buf()])?;
    let Some(s) = stored.info.clone() else {
        if stored.lines > 0 {
            return Err(ProvenanceError::ResumeUnknown {
                path: path.to_path_buf(),
            });
        }
        return Ok(());
    };
    let mut diff = Vec::new();
    if s.profile != now.profile {
        diff.push(format!("profile {} here, {} now", s.profile, now.profile));
    }
    if s.mode != now.mode {
        diff.push(format!("mode {} here, {} now", s.mode, now.mode));
    }
    if !same_suite(&s.suite, &now.suite) {
        let w = |x: &Option<SuiteInfo>| {
            x.as_ref()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "none".into())
        };
        diff.push(format!("suite {} here, {} now", w(&s.suite), w(&now.suite)));
    }
    if (&s.kedge, &s.commit) != (&now.kedge, &now.commit) || !stored.builds.is_empty() {
        diff.push(format!(
            "written by {}, this is {}",
            stored.build_words().unwrap_or_default(),
            now.build()
        ));
    }
    if diff.is_empty() {
        Ok(())
    } else {
        Err(ProvenanceError::ResumeMismatch {
            path: path.to_path_buf(),
            differences: diff.join("; "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{CaseResult, DType, Detector, Tool, Verdict};

    fn info(profile: &str, mode: &str, suite: &str, commit: &str) -> RunInfo {
        RunInfo {
            kedge: "0.1.0".into(),
            commit: commit.into(),
            profile: profile.into(),
            mode: mode.into(),
            impls: vec!["kedge".into()],
            // Another suite is other cases: the ids follow the name here.
            suite: Some(SuiteInfo::of(suite, [suite, "b"])),
        }
    }

    fn line(ne2: i64, run: Option<RunInfo>) -> String {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]);
        let mut r = CaseResult::new(&c, Verdict::Pass, Detector::None, "");
        r.run = run;
        r.to_line() + "\n"
    }

    #[test]
    fn the_mode_is_what_ran_and_the_allocation() {
        assert_eq!(mode(&[Under::Native], None), "native/exact");
        assert_eq!(mode(&[Under::Native], Some("guard")), "native/guard");
        assert_eq!(
            mode(
                &[Under::Tool(Tool::Memcheck), Under::Tool(Tool::Initcheck)],
                Some("exact, guard")
            ),
            "memcheck+initcheck/exact,guard"
        );
        assert_eq!(
            mode(&[Under::Cpu, Under::Native, Under::Cpu], None),
            "cpu+native/exact"
        );
    }

    #[test]
    fn one_run_passes_and_a_mix_names_both_sides() {
        let a = info("h200", "native/exact", "default", "c1");
        let text = format!("{}{}", line(1, Some(a.clone())), line(2, Some(a.clone())));
        let r = ResultsRun::from_texts(&[("a.jsonl", &text)]).unwrap();
        assert_eq!(r.info.as_ref(), Some(&a));
        assert_eq!(r.lines, 2);
        assert!(r.builds.is_empty());

        let guard = info("h200", "native/guard", "default", "c1");
        let e = ResultsRun::from_texts(&[("a.jsonl", &text), ("b.jsonl", &line(3, Some(guard)))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mix two modes: native/exact (a.jsonl:1) and native/guard (b.jsonl:1)"),
            "{e}"
        );
        let other = info("h200", "native/exact", "smoke", "c1");
        let e = ResultsRun::from_texts(&[("a.jsonl", &text), ("b.jsonl", &line(3, Some(other)))])
            .unwrap_err()
            .to_string();
        assert!(e.contains("mix two suites: default (2 cases"), "{e}");
        assert!(e.contains("smoke (2 cases"), "{e}");
        let e = ResultsRun::from_texts(&[("a.jsonl", &text), ("old.jsonl", &line(3, None))])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.jsonl:1 carries run metadata and old.jsonl:1 does not"),
            "{e}"
        );
        // Shards of one suite from two builds: said, not refused.
        let b = info("h200", "native/exact", "default", "c2");
        let r =
            ResultsRun::from_texts(&[("a.jsonl", &text), ("b.jsonl", &line(3, Some(b)))]).unwrap();
        assert_eq!(
            r.build_words().unwrap(),
            "kedge 0.1.0 (c1) and kedge 0.1.0 (c2)"
        );
        // Old results alone read as they are.
        let r = ResultsRun::from_texts(&[("old.jsonl", &line(3, None))]).unwrap();
        assert_eq!((r.info, r.lines), (None, 1));
    }

    #[test]
    fn a_baseline_judges_only_its_own_profile_mode_and_suite() {
        let p = Path::new("known.jsonl");
        let b = info("h200", "native/exact", "default", "c1");
        let results = |i: RunInfo| ResultsRun {
            info: Some(i),
            builds: Vec::new(),
            lines: 1,
        };
        let same = check_baseline(p, Some(&b), &results(b.clone())).unwrap();
        assert_eq!(
            same,
            [
                "baseline and results: profile h200, mode native/exact, suite default (2 cases, "
                    .to_string()
                    + &b.suite.as_ref().unwrap().digest
                    + "); both from kedge 0.1.0 (c1)"
            ]
        );
        let mut pr = b.clone();
        pr.commit = "c2".into();
        pr.impls.push("ggml 0.21.0 (abcdef0)".into());
        let lines = check_baseline(p, Some(&b), &results(pr)).unwrap();
        assert!(
            lines[0].ends_with("baseline from kedge 0.1.0 (c1), results from kedge 0.1.0 (c2), ggml 0.21.0 (abcdef0)"),
            "{lines:?}"
        );
        for (what, other) in [
            ("profile", info("h100", "native/exact", "default", "c1")),
            ("mode", info("h200", "memcheck/exact", "default", "c1")),
            ("suite", info("h200", "native/exact", "smoke", "c1")),
        ] {
            let e = check_baseline(p, Some(&b), &results(other))
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("known.jsonl: the baseline is of {what} ")),
                "{e}"
            );
            assert!(e.contains(&format!(", the results of {what} ")), "{e}");
        }
        // Old on either side: said, not refused.
        let l = check_baseline(p, None, &results(b.clone())).unwrap();
        assert!(l[0].contains("records no profile, mode or suite"), "{l:?}");
        let l = check_baseline(
            p,
            Some(&b),
            &ResultsRun {
                lines: 3,
                ..ResultsRun::default()
            },
        )
        .unwrap();
        assert!(l[0].contains("carry no run metadata"), "{l:?}");
    }

    #[test]
    fn a_suite_is_its_cases_whatever_its_name() {
        let a = info("h200", "native/exact", "default -b CPU", "c1");
        let mut b = a.clone();
        // The same cases asked for another way.
        b.suite.as_mut().unwrap().name = "default --impl ggml:CPU".into();
        let text = format!("{}{}", line(1, Some(a.clone())), line(2, Some(b)));
        assert!(ResultsRun::from_texts(&[("a.jsonl", &text)]).is_ok());
        let mut c = a.clone();
        c.suite = Some(SuiteInfo::of("default -b CPU", ["a", "b", "c"]));
        assert!(!same_suite(&a.suite, &c.suite));
        assert!(same_suite(&None, &None) && !same_suite(&a.suite, &None));
    }

    #[test]
    fn resume_continues_only_the_same_run() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("results.jsonl");
        let now = info("h200", "native/exact", "default", "c1");
        assert!(check_resume(&p, &now).is_ok(), "no file: nothing to check");
        std::fs::write(&p, line(1, Some(now.clone()))).unwrap();
        assert!(check_resume(&p, &now).is_ok());
        let mut later = now.clone();
        later.commit = "c2".into();
        let e = check_resume(&p, &later).unwrap_err().to_string();
        assert!(
            e.contains("written by kedge 0.1.0 (c1), this is kedge 0.1.0 (c2)"),
            "{e}"
        );
        assert!(e.contains("pass --force to start over"), "{e}");
        let e = check_resume(&p, &info("rtx3090", "native/exact", "default", "c1"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("profile h200 here, rtx3090 now"), "{e}");
        std::fs::write(&p, line(1, None)).unwrap();
        let e = check_resume(&p, &now).unwrap_err().to_string();
        assert!(e.contains("without run metadata"), "{e}");
    }
}
