//! A GitHub Actions workflow's jobs run on this machine as a runner runs them, so the CI
//! examples are run as written (the CLI tests, and `cargo run -p kedge --example ci_local` on a
//! GPU box). Every `run:` step is the workflow's own script, run by `bash -eo pipefail` in a
//! fresh checkout per job (links to the repository's files) with the workflow's, job's and
//! step's `env`, `$GITHUB_OUTPUT`, `$GITHUB_PATH` and `$GITHUB_STEP_SUMMARY`; `if:` conditions,
//! `needs`, the matrix and `${{ }}` expressions (matrix, env, steps' outputs, runner.os,
//! hashFiles) are evaluated. The actions kedge's workflows use are stood in for:
//! `actions/checkout` (the checkout is already there), `actions/cache` (a directory per key,
//! restored before and saved after the job), `actions/upload-artifact` and
//! `actions/download-artifact` (a directory per artifact). Two things differ from a hosted
//! run, both said in the report: steps that build kedge with cargo are replaced by a kedge
//! already built (`Options::kedge_dir` on PATH), and `Options::restore` can put a directory
//! (a ggml build) where a job's cache would restore it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use yaml_rust2::{Yaml, YamlLoader};

pub type Env = BTreeMap<String, String>;

/// What to run, and where.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub workflow: PathBuf,
    /// The repository the checkouts link to.
    pub repo: PathBuf,
    /// Where the run lives: each job's checkout, artifacts, caches, step files.
    pub state: PathBuf,
    /// Workflow-level `env` values to set (as a repository adapting the workflow would).
    pub env: Env,
    /// More environment for every step (offline archives, library paths).
    pub extra_env: Env,
    /// A directory holding a built `kedge`: steps whose script builds kedge with cargo are not
    /// run; this directory is put on PATH instead.
    pub kedge_dir: Option<PathBuf>,
    /// (PATH in the checkout, DIR): DIR linked at PATH in every job's checkout before its
    /// steps, as a cache hit would restore it.
    pub restore: Vec<(String, PathBuf)>,
    /// Only these jobs (ids), in the workflow's order; empty: every job.
    pub jobs: Vec<String>,
    /// Print each step's output as it runs.
    pub echo: bool,
}

/// How a step ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The script's exit status, or why an action failed.
    Failure(String),
    /// Not run, and why (its `if:`, a kedge build replaced).
    Skipped(String),
}

/// One step as it ran.
#[derive(Debug, Clone)]
pub struct StepRun {
    /// `job` or `job (matrix values)`.
    pub job: String,
    pub name: String,
    pub outcome: Outcome,
    /// stdout and stderr together.
    pub output: String,
    pub seconds: f64,
}

/// Everything that ran.
#[derive(Debug, Clone, Default)]
pub struct RunReport {
    pub steps: Vec<StepRun>,
    /// Each job's `$GITHUB_STEP_SUMMARY`, by job label.
    pub summaries: BTreeMap<String, String>,
    /// Job labels that failed.
    pub failed: Vec<String>,
    /// Where the artifacts are (one directory each).
    pub artifacts: PathBuf,
    /// Each job's checkout, by job label.
    pub checkouts: BTreeMap<String, PathBuf>,
}

impl RunReport {
    pub fn passed(&self) -> bool {
        self.failed.is_empty()
    }
    /// The steps of jobs whose label starts with `job`.
    pub fn steps_of<'a>(&'a self, job: &'a str) -> impl Iterator<Item = &'a StepRun> + 'a {
        self.steps.iter().filter(move |s| s.job.starts_with(job))
    }
    /// One line per step.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for st in &self.steps {
            let o = match &st.outcome {
                Outcome::Success => "ok".to_string(),
                Outcome::Failure(w) => format!("FAILED ({w})"),
                Outcome::Skipped(w) => format!("skipped ({w})"),
            };
            s.push_str(&format!(
                "{:<24} {:<48} {o} [{:.1} s]\n",
                st.job, st.name, st.seconds
            ));
        }
        if self.failed.is_empty() {
            s.push_str("every job passed\n");
        } else {
            s.push_str(&format!("failed jobs: {}\n", self.failed.join(", ")));
        }
        s
    }
}

fn text(y: &Yaml) -> String {
    match y {
        Yaml::String(s) => s.clone(),
        Yaml::Integer(i) => i.to_string(),
        Yaml::Real(r) => r.clone(),
        Yaml::Boolean(b) => b.to_string(),
        _ => String::new(),
    }
}

/// What `${{ }}` expressions see.
struct Ctx<'a> {
    env: &'a Env,
    matrix: &'a Env,
    /// steps.<id>.outputs.<key>
    outputs: &'a BTreeMap<String, Env>,
    workspace: &'a Path,
    temp: &'a Path,
    /// A step of this job failed.
    failed: bool,
}

impl Ctx<'_> {
    fn value(&self, expr: &str) -> String {
        let e = expr.trim();
        if let Some(lit) = e.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
            return lit.to_string();
        }
        if let Some(k) = e.strip_prefix("matrix.") {
            return self.matrix.get(k).cloned().unwrap_or_default();
        }
        if let Some(k) = e.strip_prefix("env.") {
            return self.env.get(k).cloned().unwrap_or_default();
        }
        if let Some(rest) = e.strip_prefix("steps.") {
            let mut parts = rest.splitn(3, '.');
            let (id, _, key) = (parts.next(), parts.next(), parts.next());
            return id
                .and_then(|id| self.outputs.get(id))
                .and_then(|o| key.and_then(|k| o.get(k)))
                .cloned()
                .unwrap_or_default();
        }
        match e {
            "runner.os" => return "Linux".into(),
            "runner.temp" => return self.temp.display().to_string(),
            "github.workspace" => return self.workspace.display().to_string(),
            _ => {}
        }
        if let Some(args) = e
            .strip_prefix("hashFiles(")
            .and_then(|x| x.strip_suffix(')'))
        {
            return self.hash_files(args);
        }
        if e.starts_with("github.") {
            return "local".into();
        }
        panic!("expression `{e}` is not one this runner evaluates")
    }

    /// hashFiles('a', 'b'): the SHA-256 of the files' contents (what matters for a cache key:
    /// the same files, the same key).
    fn hash_files(&self, args: &str) -> String {
        let mut all = Vec::new();
        for a in args.split(',') {
            let p = a.trim().trim_matches('\'');
            if let Ok(b) = std::fs::read(self.workspace.join(p)) {
                all.extend(b);
            }
        }
        let out = Command::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().expect("stdin").write_all(&all)?;
                c.wait_with_output()
            })
            .expect("sha256sum runs");
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_string()
    }

    /// A string with its `${{ }}` expressions replaced.
    fn expand(&self, s: &str) -> String {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find("${{") {
            out.push_str(&rest[..i]);
            let j = rest[i..].find("}}").expect("an expression is closed");
            out.push_str(&self.value(&rest[i + 3..i + j]));
            rest = &rest[i + j + 2..];
        }
        out.push_str(rest);
        out
    }

    /// An `if:` condition: `&&` of status functions and `==`/`!=` comparisons. Without a
    /// status function, `success()` is implied, as on GitHub.
    fn condition(&self, cond: &str) -> bool {
        let c = cond.trim();
        let c = c
            .strip_prefix("${{")
            .and_then(|x| x.strip_suffix("}}"))
            .unwrap_or(c);
        let mut status_named = false;
        let mut ok = true;
        for term in c.split("&&").map(str::trim) {
            ok &= match term {
                "always()" | "!cancelled()" => {
                    status_named = true;
                    true
                }
                "cancelled()" => {
                    status_named = true;
                    false
                }
                "success()" => {
                    status_named = true;
                    !self.failed
                }
                "failure()" => {
                    status_named = true;
                    self.failed
                }
                t => {
                    if let Some((a, b)) = t.split_once("!=") {
                        self.value(a) != self.value(b)
                    } else if let Some((a, b)) = t.split_once("==") {
                        self.value(a) == self.value(b)
                    } else {
                        panic!("condition `{t}` is not one this runner evaluates")
                    }
                }
            };
        }
        ok && (status_named || !self.failed)
    }
}

/// Each matrix entry of a job (one empty entry without a matrix); list-valued keys only.
pub fn matrix_entries(job: &Yaml) -> Vec<Env> {
    let Some(m) = job["strategy"]["matrix"].as_hash() else {
        return vec![Env::new()];
    };
    let mut entries = vec![Env::new()];
    for (k, v) in m {
        let Some(values) = v.as_vec() else { continue };
        let mut next = Vec::new();
        for e in &entries {
            for x in values {
                let mut e = e.clone();
                e.insert(text(k), text(x));
                next.push(e);
            }
        }
        entries = next;
    }
    entries
}

/// A fresh checkout of `repo` at `at`: a link to each of its top-level entries but `target`
/// and `.git` (the steps write their own outputs beside them).
pub fn checkout(repo: &Path, at: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(at)?;
    for e in std::fs::read_dir(repo)? {
        let e = e?;
        let name = e.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        std::os::unix::fs::symlink(e.path(), at.join(&name))?;
    }
    Ok(())
}

/// Copy a file, link or directory tree (links stay links).
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(from)?;
        if let Some(p) = to.parent() {
            std::fs::create_dir_all(p)?;
        }
        let _ = std::fs::remove_file(to);
        return std::os::unix::fs::symlink(target, to);
    }
    if meta.is_dir() {
        std::fs::create_dir_all(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            copy_tree(&e.path(), &to.join(e.file_name()))?;
        }
        return Ok(());
    }
    if let Some(p) = to.parent() {
        std::fs::create_dir_all(p)?;
    }
    std::fs::copy(from, to).map(|_| ())
}

fn env_map(y: &Yaml, ctx: &Ctx<'_>, into: &mut Env) {
    if let Some(h) = y["env"].as_hash() {
        for (k, v) in h {
            into.insert(text(k), ctx.expand(&text(v)));
        }
    }
}

/// Does this script build kedge with cargo (replaced by `Options::kedge_dir`)?
fn builds_kedge(script: &str) -> bool {
    script.lines().any(|l| {
        let l = l.trim_start();
        !l.starts_with('#') && (l.starts_with("cargo build") || l.starts_with("cargo install"))
    })
}

/// A cache's paths: a list, one a line; only paths inside the checkout are kept (a hosted
/// runner's home directory is not this machine's to fill).
fn cache_paths(with: &Yaml) -> Vec<String> {
    text(&with["path"])
        .lines()
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with('~') && !p.starts_with('/'))
        .map(str::to_string)
        .collect()
}

fn safe_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Run the workflow.
pub fn run(opts: &Options) -> Result<RunReport, String> {
    let text_wf = std::fs::read_to_string(&opts.workflow)
        .map_err(|e| format!("{}: {e}", opts.workflow.display()))?;
    let mut docs = YamlLoader::load_from_str(&text_wf)
        .map_err(|e| format!("{}: not YAML: {e}", opts.workflow.display()))?;
    let wf = docs.remove(0);
    let jobs = wf["jobs"].as_hash().ok_or("the workflow has no jobs")?;
    let artifacts = opts.state.join("artifacts");
    let caches = opts.state.join("cache");
    std::fs::create_dir_all(&artifacts).map_err(|e| e.to_string())?;
    let mut report = RunReport {
        artifacts: artifacts.clone(),
        ..RunReport::default()
    };
    let empty_outputs = BTreeMap::new();
    let mut order: Vec<(String, &Yaml)> = Vec::new();
    // `needs` first: repeat until every job is placed.
    while order.len() < jobs.len() {
        let before = order.len();
        for (k, job) in jobs {
            let id = text(k);
            if order.iter().any(|(o, _)| *o == id) {
                continue;
            }
            let needs: Vec<String> = match &job["needs"] {
                Yaml::Array(a) => a.iter().map(text).collect(),
                Yaml::BadValue => Vec::new(),
                n => vec![text(n)],
            };
            if needs.iter().all(|n| order.iter().any(|(o, _)| o == n)) {
                order.push((id, job));
            }
        }
        if order.len() == before {
            return Err("the jobs' needs form a cycle".into());
        }
    }
    for (id, job) in order {
        if !opts.jobs.is_empty() && !opts.jobs.contains(&id) {
            continue;
        }
        for (mi, matrix) in matrix_entries(job).into_iter().enumerate() {
            let label = if matrix.is_empty() {
                id.clone()
            } else {
                let vals: Vec<String> = matrix.values().cloned().collect();
                format!("{id} ({})", vals.join(", "))
            };
            let ws = opts.state.join("jobs").join(format!("{id}-{mi}"));
            let _ = std::fs::remove_dir_all(&ws);
            checkout(&opts.repo, &ws).map_err(|e| format!("checkout for {label}: {e}"))?;
            let temp = ws.join(".runner-temp");
            std::fs::create_dir_all(&temp).map_err(|e| e.to_string())?;
            for (path, dir) in &opts.restore {
                let at = ws.join(path);
                let _ = std::fs::remove_file(&at);
                std::os::unix::fs::symlink(dir, &at).map_err(|e| e.to_string())?;
            }
            report.checkouts.insert(label.clone(), ws.clone());
            let mut env = Env::new();
            {
                let ctx = Ctx {
                    env: &env.clone(),
                    matrix: &matrix,
                    outputs: &empty_outputs,
                    workspace: &ws,
                    temp: &temp,
                    failed: false,
                };
                env_map(&wf, &ctx, &mut env);
            }
            for (k, v) in &opts.env {
                env.insert(k.clone(), v.clone());
            }
            {
                let snapshot = env.clone();
                let ctx = Ctx {
                    env: &snapshot,
                    matrix: &matrix,
                    outputs: &empty_outputs,
                    workspace: &ws,
                    temp: &temp,
                    failed: false,
                };
                let cond = text(&job["if"]);
                if !cond.is_empty() && !ctx.condition(&cond) {
                    continue;
                }
                env_map(job, &ctx, &mut env);
            }
            let mut outputs: BTreeMap<String, Env> = BTreeMap::new();
            let mut path_prefix: Vec<String> = Vec::new();
            let mut summary = String::new();
            let mut failed = false;
            let mut saves: Vec<(PathBuf, Vec<String>)> = Vec::new();
            let steps = job["steps"].as_vec().ok_or("a job has steps")?;
            for (si, step) in steps.iter().enumerate() {
                let t0 = std::time::Instant::now();
                let mut senv = env.clone();
                let snapshot = env.clone();
                let ctx = Ctx {
                    env: &snapshot,
                    matrix: &matrix,
                    outputs: &outputs,
                    workspace: &ws,
                    temp: &temp,
                    failed,
                };
                env_map(step, &ctx, &mut senv);
                let name = match text(&step["name"]) {
                    n if n.is_empty() => text(&step["uses"]),
                    n => ctx.expand(&n),
                };
                let cond = text(&step["if"]);
                let should = if cond.is_empty() {
                    !failed
                } else {
                    ctx.condition(&cond)
                };
                let mut record = |outcome: Outcome, output: String| {
                    if opts.echo {
                        eprintln!("== {label}: {name}: {outcome:?}");
                    }
                    report.steps.push(StepRun {
                        job: label.clone(),
                        name: name.clone(),
                        outcome,
                        output,
                        seconds: t0.elapsed().as_secs_f64(),
                    });
                };
                if !should {
                    record(Outcome::Skipped(format!("if: {cond}")), String::new());
                    continue;
                }
                let uses = text(&step["uses"]);
                let with = &step["with"];
                let step_id = text(&step["id"]);
                if uses.starts_with("actions/checkout") {
                    record(Outcome::Success, "the job's checkout".into());
                } else if uses.starts_with("actions/cache") {
                    let key = ctx.expand(&text(&with["key"]));
                    let dir = caches.join(safe_name(&key));
                    let paths = cache_paths(with);
                    let hit = !key.is_empty() && dir.is_dir();
                    let mut note = String::new();
                    if hit {
                        for p in &paths {
                            let from = dir.join(p);
                            if std::fs::symlink_metadata(&from).is_ok() {
                                let to = ws.join(p);
                                let _ = std::fs::remove_file(&to);
                                copy_tree(&from, &to).map_err(|e| e.to_string())?;
                            }
                        }
                        note = format!("cache hit: {key}");
                    } else if !key.is_empty() {
                        saves.push((dir, paths));
                        note = format!("cache miss: {key} (saved at the end of the job)");
                    }
                    if !step_id.is_empty() {
                        outputs
                            .entry(step_id)
                            .or_default()
                            .insert("cache-hit".into(), hit.to_string());
                    }
                    record(Outcome::Success, note);
                } else if uses.starts_with("actions/upload-artifact") {
                    let aname = ctx.expand(&text(&with["name"]));
                    let from = ws.join(ctx.expand(&text(&with["path"])));
                    let to = artifacts.join(&aname);
                    let _ = std::fs::remove_dir_all(&to);
                    if std::fs::symlink_metadata(&from).is_err() {
                        if text(&with["if-no-files-found"]) == "error" {
                            failed = true;
                            record(
                                Outcome::Failure(format!("no files at {}", from.display())),
                                String::new(),
                            );
                        } else {
                            record(Outcome::Success, "nothing to upload".into());
                        }
                        continue;
                    }
                    copy_tree(&from, &to).map_err(|e| e.to_string())?;
                    record(Outcome::Success, format!("artifact {aname}"));
                } else if uses.starts_with("actions/download-artifact") {
                    let dest = ws.join(ctx.expand(&text(&with["path"])));
                    let pattern = ctx.expand(&text(&with["pattern"]));
                    let single = ctx.expand(&text(&with["name"]));
                    let mut got = Vec::new();
                    for e in std::fs::read_dir(&artifacts).map_err(|e| e.to_string())? {
                        let e = e.map_err(|e| e.to_string())?;
                        let n = e.file_name().to_string_lossy().into_owned();
                        let matches = if !single.is_empty() {
                            n == single
                        } else {
                            match pattern.split_once('*') {
                                Some((a, b)) => n.starts_with(a) && n.ends_with(b),
                                None => n == pattern,
                            }
                        };
                        if matches {
                            let to = if single.is_empty() {
                                dest.join(&n)
                            } else {
                                dest.clone()
                            };
                            copy_tree(&e.path(), &to).map_err(|e| e.to_string())?;
                            got.push(n);
                        }
                    }
                    got.sort();
                    record(Outcome::Success, format!("artifacts {}", got.join(", ")));
                } else if !uses.is_empty() {
                    record(
                        Outcome::Skipped(format!("{uses}: not stood in for")),
                        String::new(),
                    );
                } else {
                    let script = text(&step["run"]);
                    if let (Some(k), true) = (&opts.kedge_dir, builds_kedge(&script)) {
                        path_prefix.insert(0, k.display().to_string());
                        record(
                            Outcome::Skipped(format!(
                                "builds kedge: the kedge in {} is used",
                                k.display()
                            )),
                            String::new(),
                        );
                        continue;
                    }
                    let files = opts.state.join("steps");
                    std::fs::create_dir_all(&files).map_err(|e| e.to_string())?;
                    let stem = format!("{id}-{mi}-{si}");
                    let sh = files.join(format!("{stem}.sh"));
                    let gh_out = files.join(format!("{stem}.output"));
                    let gh_path = files.join(format!("{stem}.path"));
                    let gh_sum = files.join(format!("{stem}.summary"));
                    for f in [&gh_out, &gh_path, &gh_sum] {
                        std::fs::write(f, "").map_err(|e| e.to_string())?;
                    }
                    std::fs::write(&sh, &script).map_err(|e| e.to_string())?;
                    let mut path = path_prefix.clone();
                    path.push(std::env::var("PATH").unwrap_or_default());
                    let mut cmd = Command::new("bash");
                    cmd.args(["--noprofile", "--norc", "-eo", "pipefail"])
                        .arg(&sh)
                        .current_dir(&ws)
                        .envs(&opts.extra_env)
                        .envs(&senv)
                        .env("PATH", path.join(":"))
                        .env("GITHUB_WORKSPACE", &ws)
                        .env("GITHUB_OUTPUT", &gh_out)
                        .env("GITHUB_PATH", &gh_path)
                        .env("GITHUB_STEP_SUMMARY", &gh_sum)
                        .env("GITHUB_ACTIONS", "true")
                        .env("RUNNER_TEMP", &temp)
                        .env("RUNNER_OS", "Linux");
                    let out = cmd.output().map_err(|e| format!("bash: {e}"))?;
                    let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
                    output.push_str(&String::from_utf8_lossy(&out.stderr));
                    if opts.echo {
                        eprint!("{output}");
                    }
                    for line in std::fs::read_to_string(&gh_out).unwrap_or_default().lines() {
                        if let (Some((k, v)), false) = (line.split_once('='), step_id.is_empty()) {
                            outputs
                                .entry(step_id.clone())
                                .or_default()
                                .insert(k.to_string(), v.to_string());
                        }
                    }
                    for line in std::fs::read_to_string(&gh_path)
                        .unwrap_or_default()
                        .lines()
                    {
                        if !line.trim().is_empty() {
                            path_prefix.insert(0, line.trim().to_string());
                        }
                    }
                    summary.push_str(&std::fs::read_to_string(&gh_sum).unwrap_or_default());
                    if out.status.success() {
                        record(Outcome::Success, output);
                    } else {
                        failed = true;
                        record(
                            Outcome::Failure(format!(
                                "exit status {}",
                                out.status.code().unwrap_or(-1)
                            )),
                            output,
                        );
                    }
                }
            }
            for (dir, paths) in saves {
                for p in paths {
                    let from = ws.join(&p);
                    if std::fs::symlink_metadata(&from).is_ok() {
                        copy_tree(&from, &dir.join(&p)).map_err(|e| e.to_string())?;
                    }
                }
                std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            }
            report.summaries.insert(label.clone(), summary);
            if failed {
                report.failed.push(label);
            }
        }
    }
    Ok(report)
}
