//! The CI recipes as CI runs them: every `examples/ci/*.yml` parses as YAML and has the jobs
//! and steps its header describes, and every `kedge` command line in it (and in the Slurm
//! recipe of `docs/ci.md`) parses with kedge's own command-line parser, after the shell's
//! quoting and variables and GitHub's `${{ }}` expressions are expanded as the runner would.
//! Then the workflows run, as written, on this machine (`ci_runner`): the GPU workflow's
//! commands in CPU mode against the shipped baseline (and a baseline missing a known failure
//! fails its gate), and the CPU workflow on a ggml build's CPU backend.

use crate::ci_runner::{self, matrix_entries, Options, Outcome};
use crate::root;
use clap::Parser;
use kedge::Cli;
use std::collections::BTreeMap;
use std::path::PathBuf;
use yaml_rust2::{Yaml, YamlLoader};

type Env = BTreeMap<String, String>;

fn workflows() -> Vec<(PathBuf, Yaml)> {
    let dir = root().join("examples/ci");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).expect("examples/ci") {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("yml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let mut docs = YamlLoader::load_from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not YAML: {e}", p.display()));
        assert_eq!(docs.len(), 1, "{}: one document", p.display());
        out.push((p, docs.remove(0)));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no examples/ci/*.yml");
    out
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

fn env_of(y: &Yaml, env: &mut Env, matrix: &Env) {
    if let Some(h) = y["env"].as_hash() {
        for (k, v) in h {
            env.insert(text(k), expressions(&text(v), matrix));
        }
    }
}

/// `${{ matrix.X }}` from `matrix`; `${{ ... }}` of anything else stays a placeholder word.
fn expressions(s: &str, matrix: &Env) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${{") {
        out.push_str(&rest[..i]);
        let Some(j) = rest[i..].find("}}") else {
            panic!("unclosed expression in {s}");
        };
        let expr = rest[i + 3..i + j].trim();
        match expr.strip_prefix("matrix.") {
            Some(k) => out.push_str(
                matrix
                    .get(k)
                    .unwrap_or_else(|| panic!("{expr}: no such matrix key")),
            ),
            None => out.push_str("EXPR"),
        }
        rest = &rest[i + j + 2..];
    }
    out.push_str(rest);
    out
}

/// A variable's value: `NAME` or `NAME:-default`.
fn lookup(spec: &str, env: &Env, line: &str) -> String {
    let (name, default) = match spec.split_once(":-") {
        Some((n, d)) => (n, Some(d)),
        None => (spec, None),
    };
    match (env.get(name), default) {
        (Some(v), _) if !v.is_empty() || default.is_none() => v.clone(),
        (_, Some(d)) => d.to_string(),
        (None, None) => panic!("${name} is not set for: {line}"),
        (Some(v), _) => v.clone(),
    }
}

/// The words of one shell line: quotes removed, `$NAME`, `${NAME}` and `${NAME:-x}` expanded
/// (not inside single quotes), an unquoted expansion to nothing dropped, globs kept as typed.
fn shell_words(line: &str, env: &Env) -> Vec<String> {
    let mut words = Vec::new();
    let mut w = String::new();
    let (mut in_word, mut quoted) = (false, false);
    let mut chars = line.chars().peekable();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') => quote = None,
            (Some('\''), c) => w.push(c),
            (Some('"'), '"') => quote = None,
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
                quoted = true;
            }
            (None, '\\') => {
                if let Some(n) = chars.next() {
                    w.push(n);
                    in_word = true;
                }
            }
            (_, '$') => {
                let mut spec = String::new();
                if chars.peek() == Some(&'{') {
                    chars.next();
                    for n in chars.by_ref() {
                        if n == '}' {
                            break;
                        }
                        spec.push(n);
                    }
                } else {
                    while let Some(&n) = chars.peek() {
                        if n.is_ascii_alphanumeric() || n == '_' {
                            spec.push(n);
                            chars.next();
                        } else {
                            break;
                        }
                    }
                }
                if spec.is_empty() {
                    w.push('$');
                } else if let Some((name, word)) = spec.split_once(":+") {
                    // `${NAME:+WORDS}`: WORDS, split into words, when NAME is set and not empty.
                    if env.get(name).is_some_and(|v| !v.is_empty()) {
                        if in_word && (quoted || !w.is_empty()) {
                            words.push(std::mem::take(&mut w));
                        }
                        words.extend(shell_words(word, env));
                        in_word = false;
                        quoted = false;
                    }
                    continue;
                } else {
                    w.push_str(&lookup(&spec, env, line));
                }
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word && (quoted || !w.is_empty()) {
                    words.push(std::mem::take(&mut w));
                }
                w.clear();
                in_word = false;
                quoted = false;
            }
            (_, c) => {
                w.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "unclosed quote in: {line}");
    if in_word && (quoted || !w.is_empty()) {
        words.push(w);
    }
    words
}

/// The `kedge` command lines of a shell script, expanded: continuation lines joined,
/// comments skipped, `NAME=VALUE ...` lines setting variables for later lines.
fn kedge_lines(script: &str, env: &Env) -> Vec<Vec<String>> {
    let mut env = env.clone();
    let mut out = Vec::new();
    let mut logical = String::new();
    for raw in script.lines() {
        let t = raw.trim();
        if let Some(cont) = t.strip_suffix('\\') {
            logical.push_str(cont);
            logical.push(' ');
            continue;
        }
        logical.push_str(t);
        let line = std::mem::take(&mut logical);
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let is_assignment = |w: &str| {
            w.split_once('=').is_some_and(|(n, _)| {
                !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
        };
        let first = line.split_whitespace().next().unwrap_or("");
        if is_assignment(first) && !first.contains("$(") {
            let raw_words: Vec<&str> = line.split_whitespace().collect();
            if raw_words.iter().all(|w| is_assignment(w)) {
                for w in shell_words(&line, &env) {
                    if let Some((n, v)) = w.split_once('=') {
                        env.insert(n.to_string(), v.to_string());
                    }
                }
                continue;
            }
        }
        if first == "kedge" {
            // The command ends at a control operator (`cmd || status=$?`).
            let words: Vec<String> = shell_words(&line, &env)
                .into_iter()
                .take_while(|w| !matches!(w.as_str(), "||" | "&&" | ";" | "|"))
                .collect();
            out.push(words);
        }
    }
    out
}

/// Parse a kedge command line with the real parser; its subcommand's name.
fn parses(words: &[String], origin: &str) -> &'static str {
    match Cli::try_parse_from(words) {
        Ok(cli) => cli.command_name(),
        Err(e) => panic!("{origin}: `{}` does not parse:\n{e}", words.join(" ")),
    }
}

fn runner_env() -> Env {
    [
        ("RUNNER_TEMP", "/tmp/runner"),
        ("GITHUB_PATH", "/tmp/runner/path"),
        ("GITHUB_STEP_SUMMARY", "/tmp/runner/summary.md"),
        ("GITHUB_WORKSPACE", "/tmp/runner/work"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// One job's steps with the matrix entry `matrix`: (step, its name, its expanded env).
fn steps<'a>(wf: &'a Yaml, job: &'a Yaml, matrix: &Env) -> Vec<(&'a Yaml, String, Env)> {
    let mut base = runner_env();
    env_of(wf, &mut base, matrix);
    env_of(job, &mut base, matrix);
    job["steps"]
        .as_vec()
        .expect("a job has steps")
        .iter()
        .map(|s| {
            let mut env = base.clone();
            env_of(s, &mut env, matrix);
            let name = text(&s["name"]);
            let name = if name.is_empty() {
                text(&s["uses"])
            } else {
                name
            };
            (s, name, env)
        })
        .collect()
}

#[test]
fn every_kedge_line_of_every_ci_example_parses_with_the_real_cli() {
    for (path, wf) in workflows() {
        let origin = path.display().to_string();
        assert!(!wf["on"].is_badvalue(), "{origin}: no `on:`");
        let jobs = wf["jobs"]
            .as_hash()
            .unwrap_or_else(|| panic!("{origin}: no jobs"));
        let mut checked = 0;
        for (name, job) in jobs {
            for matrix in matrix_entries(job) {
                for (step, step_name, env) in steps(&wf, job, &matrix) {
                    let script = text(&step["run"]);
                    for words in kedge_lines(&script, &env) {
                        parses(
                            &words,
                            &format!("{origin}: job {} step {step_name}", text(name)),
                        );
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 0, "{origin}: no kedge command line");
    }
}

/// The GPU workflow: a matrix of shards that each install kedge, sweep their shard, write
/// their summary and upload their output; then a job that merges them, reports against the
/// committed baseline, writes the summary into the run's page and gates with annotations.
#[test]
fn the_gpu_workflow_shards_the_sweep_and_merges_report_and_gate() {
    let (path, wf) = workflows()
        .into_iter()
        .find(|(p, _)| p.ends_with("kedge-gpu.yml"))
        .expect("examples/ci/kedge-gpu.yml");
    let origin = path.display().to_string();
    let sweep = &wf["jobs"]["sweep"];
    let merge = &wf["jobs"]["merge"];
    assert!(
        !sweep.is_badvalue() && !merge.is_badvalue(),
        "{origin}: jobs sweep and merge"
    );
    let labels: Vec<String> = sweep["runs-on"]
        .as_vec()
        .expect("runs-on is a label list")
        .iter()
        .map(text)
        .collect();
    assert!(
        labels.contains(&"self-hosted".to_string()) && labels.contains(&"gpu".to_string()),
        "{labels:?}"
    );
    assert_eq!(text(&merge["needs"]), "sweep");
    let shards = sweep["strategy"]["matrix"]["shard"]
        .as_vec()
        .expect("a shard matrix");
    let n = shards.len();
    assert!(n >= 2, "the example spreads over several runners");
    assert_eq!(
        text(&wf["env"]["SHARDS"]),
        n.to_string(),
        "SHARDS must be the matrix size"
    );

    // Each shard: install, sweep its own shard K/N into its own directory, upload it.
    let mut seen_shards = Vec::new();
    for matrix in matrix_entries(sweep) {
        let steps = steps(&wf, sweep, &matrix);
        let scripts: Vec<String> = steps.iter().map(|(s, _, _)| text(&s["run"])).collect();
        assert!(
            scripts
                .iter()
                .any(|s| s.contains("cargo build --release --locked -p kedge")),
            "{origin}: a step builds kedge"
        );
        assert!(
            steps.iter().any(|(s, _, _)| {
                text(&s["uses"]).starts_with("actions/cache")
                    && text(&s["with"]["key"]).contains("hashFiles('Cargo.lock')")
            }),
            "{origin}: a cargo cache keyed by the lock file"
        );
        assert!(
            steps.iter().any(|(s, _, _)| {
                text(&s["uses"]).starts_with("actions/cache")
                    && text(&s["with"]["key"]).contains("steps.ggml.outputs.key")
            }) && scripts
                .iter()
                .any(|s| s.contains("build-ggml.sh --print-key")),
            "{origin}: a ggml cache keyed by its commit and flags"
        );
        let mut sweeps = 0;
        for (step, _, env) in &steps {
            for words in kedge_lines(&text(&step["run"]), env) {
                if parses(&words, &origin) != "sweep" {
                    continue;
                }
                sweeps += 1;
                let at = words.iter().position(|w| w == "--shard").expect("--shard");
                seen_shards.push(words[at + 1].clone());
                let out = words.iter().position(|w| w == "--out").expect("--out");
                assert_eq!(
                    words[out + 1],
                    format!("kedge-out/shard-{}", matrix["shard"])
                );
            }
        }
        assert_eq!(sweeps, 1, "{origin}: one sweep per shard");
        assert!(
            steps.iter().any(
                |(s, _, _)| text(&s["uses"]).starts_with("actions/upload-artifact")
                    && text(&s["with"]["path"]).contains("kedge-out/shard-")
            ),
            "{origin}: each shard uploads its output directory"
        );
        assert!(
            scripts
                .iter()
                .any(|s| s.contains("summary.md") && s.contains("$GITHUB_STEP_SUMMARY")),
            "{origin}: each shard writes its summary"
        );
    }
    let want: Vec<String> = (1..=n).map(|k| format!("{k}/{n}")).collect();
    assert_eq!(seen_shards, want, "every shard exactly once");

    // The merge: download, report with the baseline, summary into the page, gate for GitHub.
    let steps = steps(&wf, merge, &Env::new());
    assert!(steps
        .iter()
        .any(|(s, _, _)| text(&s["uses"]).starts_with("actions/download-artifact")));
    let mut commands = Vec::new();
    for (step, _, env) in &steps {
        for words in kedge_lines(&text(&step["run"]), env) {
            commands.push((parses(&words, &origin), words));
        }
    }
    let report = commands
        .iter()
        .find(|(c, _)| *c == "report")
        .expect("kedge report in the merge");
    assert!(report.1.contains(&"--baseline".to_string()));
    assert!(report.1.iter().any(|w| w == "shards/*/results.jsonl"));
    let gate = commands
        .iter()
        .find(|(c, _)| *c == "gate")
        .expect("kedge gate in the merge");
    let fmt = gate
        .1
        .iter()
        .position(|w| w == "--format")
        .expect("--format");
    assert_eq!(gate.1[fmt + 1], "github");
    assert!(gate.1.contains(&"--baseline".to_string()));
    assert!(steps.iter().any(|(s, _, _)| {
        let r = text(&s["run"]);
        r.contains("kedge-out/summary.md") && r.contains("$GITHUB_STEP_SUMMARY")
    }));
}

/// The Slurm recipe of `docs/ci.md`: every `kedge` line of its job-array script parses.
#[test]
fn the_slurm_recipe_parses() {
    let guide = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let blocks: Vec<&str> = guide
        .split("```")
        .skip(1)
        .step_by(2)
        .filter(|b| b.contains("#SBATCH"))
        .collect();
    assert!(!blocks.is_empty(), "docs/ci.md: no Slurm recipe (#SBATCH)");
    let env: Env = [
        ("SLURM_ARRAY_TASK_ID", "1"),
        ("SLURM_ARRAY_TASK_COUNT", "4"),
        ("SLURM_ARRAY_JOB_ID", "7"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut names = Vec::new();
    for b in blocks {
        for words in kedge_lines(b, &env) {
            names.push(parses(&words, "docs/ci.md Slurm recipe"));
        }
    }
    for want in ["sweep", "report", "gate"] {
        assert!(
            names.contains(&want),
            "docs/ci.md Slurm recipe: no kedge {want}: {names:?}"
        );
    }
}

#[test]
fn shell_words_follow_the_shell() {
    let env: Env = [("A", "x y"), ("E", "")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        shell_words(
            r#"kedge run --case '{"a": 1}' "$A" $E ${B:-d} p/*.jsonl"#,
            &env
        ),
        vec![
            "kedge",
            "run",
            "--case",
            r#"{"a": 1}"#,
            "x y",
            "d",
            "p/*.jsonl"
        ]
    );
    assert_eq!(
        kedge_lines(
            "K=3 N=4\nkedge sweep --shard \"$K/$N\" \\\n  --out o || status=$?",
            &env
        ),
        vec![vec!["kedge", "sweep", "--shard", "3/4", "--out", "o"]]
    );
}

/// A directory holding the kedge under test, for the steps that would build it.
fn kedge_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_kedge"))
        .parent()
        .expect("the binary's directory")
        .to_path_buf()
}

fn step_output<'a>(
    r: &'a ci_runner::RunReport,
    job: &'a str,
    name: &'a str,
) -> Vec<&'a ci_runner::StepRun> {
    r.steps_of(job).filter(|s| s.name == name).collect()
}

/// The GPU workflow's own commands, in CPU mode: kedge's own kernels (no ggml), their CPU side
/// (`--cpu`, sweep status 4 let through), gated against the shipped baseline of the CPU plan.
/// Two shards, merged, reported (summary.md into the step summary), uploaded, gated. Then the
/// merge again against a baseline that lacks one known failure: its gate fails, naming it.
#[test]
fn the_gpu_workflow_runs_as_written_in_cpu_mode_and_its_gate_holds() {
    let state = tempfile::tempdir().expect("tempdir");
    let env: ci_runner::Env = [
        ("KEDGE_BACKEND", ""),
        ("KEDGE_SWEEP_ARGS", "--cpu"),
        ("KEDGE_SWEEP_OK", "0 1 4"),
        // The whole suite (a scheduled run's), which the CPU plan's baseline is of.
        ("KEDGE_MAX_ELEMENTS", ""),
        ("KEDGE_BASELINE", "corpora/known-failures.jsonl"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut opts = Options {
        workflow: root().join("examples/ci/kedge-gpu.yml"),
        repo: root(),
        state: state.path().to_path_buf(),
        env,
        kedge_dir: Some(kedge_dir()),
        ..Options::default()
    };
    let r = ci_runner::run(&opts).expect("the workflow runs");
    assert!(r.passed(), "{}", r.render());
    // Every step of both shards and the merge ran, but building kedge (the kedge under test
    // stands in) and ggml (no backend asked for).
    for s in &r.steps {
        match &s.outcome {
            Outcome::Success => {}
            Outcome::Skipped(why) => assert!(
                why.contains("builds kedge") || why.contains("env.KEDGE_BACKEND != ''"),
                "{}: {} skipped: {why}",
                s.job,
                s.name
            ),
            Outcome::Failure(w) => panic!("{}: {} failed: {w}\n{}", s.job, s.name, s.output),
        }
    }
    let sweeps = step_output(&r, "sweep", "Sweep");
    assert_eq!(sweeps.len(), 2);
    for s in &sweeps {
        assert!(s.output.contains("kedge sweep exited 4"), "{}", s.output);
    }
    let sum = &r.summaries["sweep (1)"];
    assert!(sum.starts_with("# kedge summary"), "{sum}");
    let merge = &r.summaries["merge"];
    assert!(merge.starts_with("# kedge summary"), "{merge}");
    assert!(
        merge.contains("baseline and results: profile h200, mode cpu/exact, suite default ("),
        "{merge}"
    );
    let gate = &step_output(&r, "merge", "Gate")[0].output;
    assert!(gate.contains("gate: PASS"), "{gate}");
    assert!(gate.contains("::notice title=kedge gate PASS::"), "{gate}");
    assert!(r.artifacts.join("kedge-report/report.md").is_file());
    for k in [1, 2] {
        assert!(r
            .artifacts
            .join(format!("kedge-shard-{k}/results.jsonl"))
            .is_file());
    }

    // The same shards against a baseline without one of its known failures: that failure is
    // new, and the merge job fails at its gate.
    let shipped = std::fs::read_to_string(root().join("corpora/known-failures.jsonl")).unwrap();
    let dropped = shipped
        .lines()
        .find(|l| l.starts_with("{\"id\""))
        .expect("a known failure");
    let id: String = serde_json::from_str::<serde_json::Value>(dropped).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let fewer = state.path().join("fewer.jsonl");
    std::fs::write(&fewer, shipped.replace(&format!("{dropped}\n"), "")).unwrap();
    opts.env
        .insert("KEDGE_BASELINE".into(), fewer.display().to_string());
    opts.jobs = vec!["merge".into()];
    let r = ci_runner::run(&opts).expect("the merge runs");
    assert_eq!(r.failed, ["merge"], "{}", r.render());
    let gate = step_output(&r, "merge", "Gate")[0];
    assert!(
        matches!(gate.outcome, Outcome::Failure(_)),
        "{}",
        r.render()
    );
    assert!(
        gate.output.contains(&format!("NEW     {id} ")),
        "{}",
        gate.output
    );
    assert!(
        gate.output.contains("::error title=kedge%3A new failure"),
        "{}",
        gate.output
    );
    assert!(
        r.artifacts.join("kedge-report/report.md").is_file(),
        "the report is uploaded even so"
    );
}

/// The CPU workflow as written: a ggml build's CPU backend (the pinned snapshot; the job's
/// cache is stood in for by the build in KEDGE_GGML_DIR) swept in two shards, every case run
/// for real (sweep status 0), merged, reported and gated against the committed baseline.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn the_cpu_workflow_runs_as_written() {
    let ggml = std::path::PathBuf::from(crate::ggml::build_dir());
    let state = tempfile::tempdir().expect("tempdir");
    let opts = Options {
        workflow: root().join("examples/ci/kedge-cpu.yml"),
        repo: root(),
        state: state.path().to_path_buf(),
        kedge_dir: Some(kedge_dir()),
        restore: vec![("ggml-build".into(), ggml)],
        ..Options::default()
    };
    let r = ci_runner::run(&opts).expect("the workflow runs");
    assert!(r.passed(), "{}", r.render());
    let builds = step_output(&r, "sweep", "Build ggml");
    assert_eq!(builds.len(), 2);
    for b in builds {
        assert!(
            b.output.contains("already holds this build"),
            "{}",
            b.output
        );
    }
    for s in step_output(&r, "sweep", "Sweep") {
        assert!(s.output.contains("kedge sweep exited 0"), "{}", s.output);
    }
    let gate = &step_output(&r, "merge", "Gate")[0].output;
    assert!(gate.contains("gate: PASS"), "{gate}");
    assert!(
        gate.contains("baseline and results: profile h200, mode native/exact, suite default --impl ggml:CPU ("),
        "{gate}"
    );
    assert!(gate.contains("ggml 0.21.0 (d99724f)"), "{gate}");
}
