//! The `kedge` command line. Library errors are typed; here they are reported with the
//! context a user needs and mapped to the exit statuses in `kedge::exit` (see README).

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kedge::exit;
use kedge::select::Select;
use kedge::suite::Suite;
use kedge::supervisor::{Progress, Supervisor, SupervisorConfig, SupervisorError, Ticker};
use kedge_core::{engine, CaseResult, LimitsProfile, Registry, Verdict};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "kedge",
    version,
    about = "Kernel conformance and fuzzing harness: finds kernels that break at the edges"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print a device's limits: the live device, or a built-in profile (--profile).
    Limits {
        /// Built-in profile: h200, h100, gb10, rtx3090, ada-12gb.
        #[arg(long)]
        profile: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// List ops, impls, params and boundaries.
    List {
        #[arg(long, default_value = "h200")]
        profile: String,
        #[arg(short = 'o', long = "op")]
        op: Option<String>,
        #[command(flatten)]
        ext: Ext,
    },
    /// Check the launches impls plan against a limits profile; no GPU needed.
    Plan {
        #[command(flatten)]
        select: Select,
        /// Suite when no explicit case is given.
        #[arg(long, default_value = "default")]
        suite: Suite,
        #[arg(long, default_value = "h200")]
        profile: String,
        /// Only print cases whose plan breaks the profile.
        #[arg(long)]
        violations_only: bool,
        #[command(flatten)]
        ext: Ext,
    },
    /// Run cases on the GPU (each in a worker process) and print their verdict lines.
    Run {
        #[command(flatten)]
        select: Select,
        #[command(flatten)]
        exec: Exec,
        /// Append results to this file as well.
        #[arg(long)]
        results: Option<PathBuf>,
        #[command(flatten)]
        ext: Ext,
    },
    /// Run a suite: on a GPU the full checks; without one, the CPU-side checks only.
    Sweep {
        /// smoke, boundary, incidents, selftest or default (smoke + boundary).
        #[arg(default_value = "default")]
        suite: Suite,
        #[command(flatten)]
        select: Select,
        #[command(flatten)]
        exec: Exec,
        /// Output directory: results.jsonl and worker logs.
        #[arg(long, default_value = "kedge-out")]
        out: PathBuf,
        /// Continue an interrupted sweep: keep results.jsonl, skip finished cases.
        #[arg(long)]
        resume: bool,
        /// Profile for the CPU-side checks when no GPU is present.
        #[arg(long, default_value = "h200")]
        profile: String,
        /// Run only the CPU-side checks even if a GPU is present.
        #[arg(long)]
        cpu: bool,
        /// Run shard K of N (1-based); `kedge report` merges the shards' results.
        #[arg(long, value_name = "K/N")]
        shard: Option<kedge::shard::Shard>,
        /// GPUs to spread the sweep over, e.g. 0,1 (default: every GPU the driver shows;
        /// `--device N` is the list N). Each GPU has its own workers and pulls cases from one
        /// queue; a GPU lost mid-sweep hands its unfinished cases to the others.
        #[arg(long, value_name = "LIST", conflicts_with = "device")]
        devices: Option<kedge::schedule::DeviceList>,
        #[command(flatten)]
        ext: Ext,
    },
    /// Reports from results.jsonl files (shards are merged): report.md, report.json, junit.xml.
    Report {
        #[arg(required = true)]
        results: Vec<PathBuf>,
        #[arg(long, default_value = "kedge-out")]
        out: PathBuf,
    },
    /// Exit 0 only when every failure in the results is a known one (in the baseline).
    Gate {
        /// Known failures: JSON lines {"id":..,"verdict":..,"case":{..}}.
        #[arg(long, required_unless_present = "write_baseline")]
        baseline: Option<PathBuf>,
        #[arg(required = true)]
        results: Vec<PathBuf>,
        /// Write the results' failures as a new baseline to this file instead of gating.
        #[arg(long)]
        write_baseline: Option<PathBuf>,
    },
    /// Shrink a failing case (keeping its verdict and detector), find the transition from
    /// both sides, and print the repro.
    Minimize(MinimizeArgs),
    /// Print a case's repro: test-backend-ops line(s) and command, kedge one-liner, and a
    /// standalone .cu file with its nvcc command.
    Repro(ReproArgs),
    /// Calibration: every planted bug must be found by its detector, every fixed impl must
    /// pass, every incident must say what it must.
    Selftest(SelftestArgs),
    /// Boundary-biased random cases; failures are shrunk and appended to
    /// corpora/fuzz-finds.jsonl.
    Fuzz(FuzzArgs),
    /// Wall time of sweeps side by side (from their sweep-summary.json files), as Markdown.
    Perf {
        #[arg(required = true)]
        summaries: Vec<PathBuf>,
    },
    /// (internal) A worker: reads case lines on stdin, writes verdict lines on stdout.
    #[command(hide = true)]
    Worker {
        #[arg(long, default_value_t = 0)]
        device: usize,
        #[command(flatten)]
        ext: Ext,
    },
}

/// Impls from outside kedge: a plugin shared library, or a CUDA source file for NVRTC.
#[derive(Debug, Clone, Default, clap::Args)]
struct Ext {
    /// A shared library implementing kedge.h (repeatable). Its impls are named `plugin:<name>`.
    #[arg(long = "plugin", value_name = "PATH")]
    plugins: Vec<PathBuf>,
    /// A CUDA source file with a kernel following kedge's published row-op ABI (see kedge.h).
    #[arg(long, value_name = "FILE.cu", requires = "entry")]
    kernel: Option<PathBuf>,
    /// The kernel's `extern "C"` entry name.
    #[arg(long, value_name = "NAME")]
    entry: Option<String>,
    /// The op the kernel implements (default: the single -o OP).
    #[arg(long, value_name = "OP")]
    kernel_op: Option<String>,
    /// Grid mapping for the source kernel: ggml (grid = rows, channels, samples) or clamped.
    #[arg(long, default_value = "clamped")]
    geometry: String,
    /// Threads per block for the source kernel.
    #[arg(long, default_value_t = 256)]
    block: u32,
}

impl Ext {
    /// The same flags, for workers (they build the same registry).
    fn to_args(&self, op: Option<&str>) -> Vec<String> {
        let mut v = Vec::new();
        for p in &self.plugins {
            v.push("--plugin".into());
            v.push(p.display().to_string());
        }
        if let (Some(k), Some(e)) = (&self.kernel, &self.entry) {
            v.extend([
                "--kernel".into(),
                k.display().to_string(),
                "--entry".into(),
                e.clone(),
            ]);
            v.extend([
                "--geometry".into(),
                self.geometry.clone(),
                "--block".into(),
                self.block.to_string(),
            ]);
            if let Some(o) = self.kernel_op.as_deref().or(op) {
                v.extend(["--kernel-op".into(), o.to_string()]);
            }
        }
        v
    }

    /// The registry: built-in ops plus this invocation's external impls.
    fn registry(&self, op: Option<&str>) -> Result<Registry> {
        let mut reg = kedge_ops::registry();
        for p in &self.plugins {
            let added = kedge::plugin::register(&mut reg, p, None)
                .map_err(|e| BadInput(format!("plugin {}: {e}", p.display())))?;
            for (op, name) in added {
                eprintln!("kedge: plugin {}: impl {name} of {op} (launch contract not checked: the plugin launches its own kernels)", p.display());
            }
        }
        if let (Some(file), Some(entry)) = (&self.kernel, &self.entry) {
            let op = self.kernel_op.as_deref().or(op).ok_or_else(|| {
                BadInput(
                    "--kernel needs the op it implements: --kernel-op OP or a single -o OP".into(),
                )
            })?;
            let g: kedge::source_impl::Geometry = self.geometry.parse().map_err(BadInput)?;
            let mut spec = kedge::source_impl::SourceSpec::new(op, file, entry, g);
            spec.block = self.block;
            let added = kedge::source_impl::add_source_impl(&mut reg, &spec)
                .map_err(|e| BadInput(format!("kernel {}: {e}", file.display())))?;
            eprintln!(
                "kedge: source kernel {}: impl {} of {}",
                file.display(),
                added.name,
                added.op
            );
        }
        Ok(reg)
    }
}

/// The single -o OP, if exactly one was given.
fn single_op(select: &Select) -> Option<String> {
    let v = kedge::select::split(&select.op);
    (v.len() == 1).then(|| v[0].clone())
}

#[derive(Debug, Clone, clap::Args)]
struct Exec {
    /// Run workers under compute-sanitizer tools, comma separated: memcheck, initcheck,
    /// racecheck, synccheck. Each tool runs the whole selection once.
    #[arg(long, value_name = "TOOL[,TOOL]")]
    sanitize: Option<String>,
    /// Extra compute-sanitizer options, overriding kedge's defaults: "--padding 0 --print-limit 20".
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    sanitizer_args: Option<String>,
    /// Cases per sanitized worker (its XML is read when it ends).
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Leave out cases with more elements than this. `sweep` defaults to 2^28: the 2^31-element
    /// index-width cases need 16 GiB of device memory and about 40 GiB of host memory; give
    /// `--max-elements 0` to run everything.
    #[arg(long)]
    max_elements: Option<u64>,
    /// Seconds a case may run before its worker is killed (verdict `timeout`).
    #[arg(long, default_value_t = 120)]
    timeout: u64,
    /// GPU (ordinal) the workers use; default 0 (`sweep`: every GPU, see --devices).
    #[arg(long, value_name = "N")]
    device: Option<u32>,
}

impl Exec {
    /// The same options, on GPU `gpu`.
    fn on_gpu(&self, gpu: u32) -> Exec {
        Exec {
            device: Some(gpu),
            ..self.clone()
        }
    }
}

fn main() {
    let cli = Cli::parse();
    let code = match dispatch(cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kedge: error: {e:#}");
            classify(&e)
        }
    };
    std::process::exit(code);
}

/// Map an error to its exit status.
fn classify(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if cause
            .downcast_ref::<kedge::select::CaseSelectError>()
            .is_some()
            || cause.downcast_ref::<kedge_core::CaseError>().is_some()
        {
            return exit::BAD_INPUT;
        }
        if let Some(s) = cause.downcast_ref::<SupervisorError>() {
            return match s {
                SupervisorError::NoGpu(_) => exit::NO_GPU,
                _ => exit::ENVIRONMENT,
            };
        }
        if cause
            .downcast_ref::<kedge_core::device::DeviceError>()
            .is_some()
        {
            return exit::NO_GPU;
        }
        if cause
            .downcast_ref::<kedge::results::ResultsError>()
            .is_some()
            || cause.downcast_ref::<kedge::gate::GateError>().is_some()
        {
            return exit::BAD_INPUT;
        }
        if cause
            .downcast_ref::<kedge::sanitizer::SanitizerError>()
            .is_some()
        {
            return exit::ENVIRONMENT;
        }
        if cause.downcast_ref::<BadInput>().is_some() {
            return exit::BAD_INPUT;
        }
    }
    exit::ENVIRONMENT
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadInput(String);

fn profile(name: &str) -> Result<LimitsProfile> {
    LimitsProfile::builtin(name).ok_or_else(|| {
        BadInput(format!(
            "unknown profile '{name}' (built in: {})",
            LimitsProfile::BUILTIN.join(", ")
        ))
        .into()
    })
}

fn incidents_path() -> Option<PathBuf> {
    let candidates = [
        PathBuf::from("corpora/incidents.jsonl"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../corpora/incidents.jsonl"),
    ];
    candidates.into_iter().find(|p| p.exists())
}

fn dispatch(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::Limits { profile: p, json } => cmd_limits(p, json),
        Cmd::List {
            profile: p,
            op,
            ext,
        } => {
            let reg = ext.registry(op.as_deref())?;
            cmd_list(&reg, &profile(&p)?, op)
        }
        Cmd::Plan {
            select,
            suite,
            profile: p,
            violations_only,
            ext,
        } => {
            let reg = ext.registry(single_op(&select).as_deref())?;
            cmd_plan(&reg, &select, suite, &profile(&p)?, violations_only)
        }
        Cmd::Run {
            select,
            exec,
            results,
            ext,
        } => {
            let reg = ext.registry(single_op(&select).as_deref())?;
            let wargs = ext.to_args(single_op(&select).as_deref());
            cmd_run(&reg, &select, &exec, &wargs, results.as_deref())
        }
        Cmd::Sweep {
            suite,
            select,
            exec,
            out,
            resume,
            profile: p,
            cpu,
            shard,
            devices,
            ext,
        } => {
            let reg = ext.registry(single_op(&select).as_deref())?;
            let wargs = ext.to_args(single_op(&select).as_deref());
            cmd_sweep(
                &reg,
                suite,
                &select,
                &exec,
                &wargs,
                &out,
                resume,
                &profile(&p)?,
                cpu,
                shard,
                devices.as_ref(),
            )
        }
        Cmd::Minimize(a) => cmd_minimize(&a),
        Cmd::Repro(a) => cmd_repro(&a),
        Cmd::Selftest(a) => cmd_selftest(&a),
        Cmd::Fuzz(a) => cmd_fuzz(&a),
        Cmd::Report { results, out } => cmd_report(&results, &out),
        Cmd::Perf { summaries } => cmd_perf(&summaries),
        Cmd::Gate {
            baseline,
            results,
            write_baseline,
        } => cmd_gate(baseline.as_deref(), &results, write_baseline.as_deref()),
        Cmd::Worker { device, ext } => match ext.registry(None) {
            Ok(reg) => Ok(kedge::worker::main(&reg, device)),
            Err(e) => {
                // The supervisor reads stdout: say why this worker cannot start.
                let msg = kedge::worker::WorkerMsg::Fatal {
                    message: format!("{e:#}"),
                    no_driver: false,
                };
                println!("{}", serde_json::to_string(&msg)?);
                Ok(exit::BAD_INPUT)
            }
        },
    }
}

/// Speed belongs in reports, not in timed tests: this renders what sweeps measured.
fn cmd_perf(summaries: &[PathBuf]) -> Result<i32> {
    println!(
        "| run | allocation | suite | cases | wall | per case | failures | workers | device |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---|");
    for p in summaries {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let runs: Vec<serde_json::Value> = serde_json::from_str(&text)
            .map_err(|e| BadInput(format!("{}: not a sweep-summary.json: {e}", p.display())))?;
        for r in runs {
            let cases = r["cases"].as_u64().unwrap_or(0);
            let wall = r["wall_s"].as_f64().unwrap_or(0.0);
            let per = if cases > 0 {
                wall * 1e3 / cases as f64
            } else {
                0.0
            };
            println!(
                "| {} | {} | {} | {cases} | {wall:.1} s | {per:.0} ms | {} | {} | {} |",
                r["under"].as_str().unwrap_or("?"),
                r["allocs"].as_str().unwrap_or("?"),
                r["suite"].as_str().unwrap_or("?"),
                r["failures"].as_u64().unwrap_or(0),
                r["workers"].as_u64().unwrap_or(0),
                r["device"].as_str().unwrap_or("?"),
            );
        }
    }
    Ok(exit::OK)
}

fn cmd_report(results: &[PathBuf], out: &Path) -> Result<i32> {
    let set = kedge::results::ResultSet::load(results)?;
    write_reports(&set, out)?;
    Ok(exit::OK)
}

/// report.md (a person reads it first), report.json (machines), junit.xml (CI systems).
fn write_reports(set: &kedge::results::ResultSet, out: &Path) -> Result<()> {
    let r = kedge::report::render_all(set)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    for (name, text) in [
        ("report.md", &r.markdown),
        ("report.json", &r.json),
        ("junit.xml", &r.junit),
    ] {
        let p = out.join(name);
        std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    }
    eprintln!(
        "kedge: {} results -> {}/report.md, report.json, junit.xml",
        set.results.len(),
        out.display()
    );
    Ok(())
}

fn cmd_gate(baseline: Option<&Path>, results: &[PathBuf], write: Option<&Path>) -> Result<i32> {
    let set = kedge::results::ResultSet::load(results)?;
    if let Some(w) = write {
        let b = kedge::gate::Baseline::from_results(&set.results);
        std::fs::write(w, b.to_jsonl()).with_context(|| format!("writing {}", w.display()))?;
        eprintln!(
            "kedge: baseline of known failures written to {}",
            w.display()
        );
        return Ok(exit::OK);
    }
    let path = baseline.ok_or_else(|| BadInput("--baseline FILE is required".into()))?;
    let b = kedge::gate::Baseline::load(path)?;
    let outcome = kedge::gate::gate(&b, &set.results);
    print!("{}", outcome.render());
    Ok(outcome.exit_code())
}

fn cmd_limits(p: Option<String>, json: bool) -> Result<i32> {
    let prof = match p {
        Some(name) => profile(&name)?,
        None => {
            let dev = kedge_core::device::Device::open(0).context(
                "reading the live device's limits (use --profile NAME for a built-in profile)",
            )?;
            dev.limits.clone()
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&prof)?);
    } else {
        print!("{}", prof.render());
    }
    Ok(exit::OK)
}

fn cmd_list(reg: &Registry, prof: &LimitsProfile, op: Option<String>) -> Result<i32> {
    for o in reg.ops() {
        if let Some(f) = &op {
            if !f.split(',').any(|x| x == o.name()) {
                continue;
            }
        }
        println!("{} — {}", o.name(), o.about());
        println!(
            "  dtypes: {}",
            o.dtypes()
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for p in o.params() {
            println!(
                "  param {} (default {}): {}",
                p.name,
                p.default_value(),
                p.about
            );
        }
        for i in reg.impls_of(*o) {
            println!(
                "  impl {:<24} [{}] {}",
                i.name(),
                i.role().name(),
                i.about()
            );
        }
        for b in o.boundaries(prof) {
            println!(
                "  boundary {} at {} (probes {:?}) — reach: {}",
                b.label,
                b.at,
                b.probe_values(),
                b.reach.0
            );
        }
    }
    Ok(exit::OK)
}

fn cmd_plan(
    reg: &Registry,
    select: &Select,
    suite: Suite,
    prof: &LimitsProfile,
    violations_only: bool,
) -> Result<i32> {
    let cases = select.cases(reg, suite, prof, incidents_path().as_deref())?;
    let mut broken = 0;
    for c in &cases {
        let r = engine::check_on_cpu(reg, c, prof, false);
        let bad = !r.violations.is_empty() || !r.buffer_violations.is_empty();
        broken += bad as usize;
        if violations_only && !bad {
            continue;
        }
        let (op, imp) = reg.resolve(c)?;
        let _ = op;
        println!("{}", c.label());
        if let Ok(plan) = imp.plan(c, prof) {
            for l in &plan.launches {
                println!("  launch {l}");
            }
            for b in &plan.buffers {
                println!(
                    "  buffer {} ({} bytes): {}",
                    kedge_core::launch::human_bytes(b.bytes),
                    kedge_core::launch::grouped(b.bytes),
                    b.name
                );
            }
            for u in &plan.unchecked {
                println!("  not checked: {u}");
            }
        }
        if bad {
            for v in &r.violations {
                println!("  VIOLATION {v} (profile {})", prof.name);
            }
            for v in &r.buffer_violations {
                println!("  VIOLATION {} {v}", c.imp);
            }
        } else if r.verdict == Verdict::Unsupported {
            println!("  unsupported: {}", r.detail);
        } else {
            println!("  ok: fits profile {}", prof.name);
        }
    }
    eprintln!(
        "{} cases planned against {}: {broken} break its limits",
        cases.len(),
        prof.name
    );
    Ok(if broken > 0 { exit::FAILURES } else { exit::OK })
}

/// The compute-sanitizer wrapping for one tool: kedge's defaults, the user's overrides, and
/// the parser that attributes each worker's records to its cases.
fn sanitize_spec(
    tool: kedge::sanitizer::Tool,
    exec: &Exec,
) -> Result<kedge::supervisor::SanitizeSpec> {
    use kedge::sanitizer as san;
    let path = san::find_sanitizer()?;
    let mut cfg = san::SanitizerConfig::new(tool);
    if let Some(a) = &exec.sanitizer_args {
        cfg.apply_args(a).map_err(|e| BadInput(e.to_string()))?;
    }
    let mut prefix = vec![path.display().to_string()];
    prefix.extend(
        cfg.args(Path::new("{xml}"))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned()),
    );
    prefix.push("--".into());
    Ok(kedge::supervisor::SanitizeSpec {
        tool: tool.name().to_string(),
        prefix,
        attribute: Box::new(move |xml: &Path, started: usize| {
            let mut run = san::analyze_run(xml, tool, started, None)
                .map_err(|e| format!("reading {}: {e}", xml.display()))?;
            // No marker at all (a sanitizer set up to hide API errors, say): with one case in
            // the worker every record is still its own; with more, they cannot be split.
            if run.markers == 0 && !run.preamble.is_empty() {
                if started == 1 {
                    let pre = std::mem::take(&mut run.preamble);
                    run.per_case[0].primary.extend(pre.primary);
                    run.per_case[0].secondary.extend(pre.secondary);
                } else {
                    return Err(format!(
                        "{}: no kedge_case_marker records, so its records cannot be attributed to the {started} cases of this worker; rerun with --batch 1",
                        xml.display()
                    ));
                }
            }
            Ok(run.per_case)
        }),
        // Attribution splits a worker's records at kedge_case_marker API-error records. Only
        // memcheck reports API errors (seen on the H200: an initcheck worker's XML held 68
        // Initcheck records and no marker), so the other tools run one case per worker.
        batch: if tool == san::Tool::Memcheck {
            exec.batch.max(1)
        } else {
            1
        },
    })
}

/// The sanitizer tools asked for (`None`: run natively).
fn tools(exec: &Exec) -> Result<Vec<Option<kedge::sanitizer::Tool>>> {
    match &exec.sanitize {
        None => Ok(vec![None]),
        Some(s) => Ok(kedge::sanitizer::Tool::parse_list(s)
            .map_err(|e| BadInput(e.to_string()))?
            .into_iter()
            .map(Some)
            .collect()),
    }
}

fn supervisor(
    exec: &Exec,
    ext_args: &[String],
    work_dir: &Path,
    tool: Option<kedge::sanitizer::Tool>,
) -> Result<Supervisor> {
    Ok(Supervisor::new(worker_config(
        exec, ext_args, work_dir, tool,
    )?))
}

fn worker_config(
    exec: &Exec,
    ext_args: &[String],
    work_dir: &Path,
    tool: Option<kedge::sanitizer::Tool>,
) -> Result<SupervisorConfig> {
    let mut cfg = supervisor_config(exec, work_dir)?;
    cfg.worker_args.extend(ext_args.iter().cloned());
    if let Some(t) = tool {
        cfg.sanitize = Some(sanitize_spec(t, exec)?);
    }
    Ok(cfg)
}

fn cmd_run(
    reg: &Registry,
    select: &Select,
    exec: &Exec,
    ext_args: &[String],
    results: Option<&Path>,
) -> Result<i32> {
    let cases = select.cases(
        reg,
        Suite::Smoke,
        &profile("h200")?,
        incidents_path().as_deref(),
    )?;
    if !kedge_core::device::driver_present() {
        return Err(kedge_core::device::DeviceError::NoDriver)
            .context("kedge run needs a GPU; `kedge plan` checks launches without one");
    }
    let mut writer = match results {
        Some(p) => Some(
            kedge::results::ResultsWriter::open(p, true)
                .with_context(|| format!("opening {}", p.display()))?,
        ),
        None => None,
    };
    let work = std::env::temp_dir().join(format!("kedge-run-{}", std::process::id()));
    let mut failures = 0;
    for tool in tools(exec)? {
        let mut sup = supervisor(exec, ext_args, &work, tool)?;
        sup.run(&cases, &mut |r: CaseResult| {
            failures += r.verdict.is_failure() as usize;
            println!("{}", r.to_line());
            if let Some(w) = writer.as_mut() {
                w.write(&r)?;
            }
            Ok(())
        })?;
    }
    Ok(if failures > 0 {
        exit::FAILURES
    } else {
        exit::OK
    })
}

#[allow(clippy::too_many_arguments)]
fn cmd_sweep(
    reg: &Registry,
    suite: Suite,
    select: &Select,
    exec: &Exec,
    ext_args: &[String],
    out: &Path,
    resume: bool,
    prof: &LimitsProfile,
    cpu: bool,
    shard: Option<kedge::shard::Shard>,
    devices: Option<&kedge::schedule::DeviceList>,
) -> Result<i32> {
    let gpu = !cpu && kedge_core::device::driver_present();
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let results_path = out.join("results.jsonl");
    if !gpu {
        // CPU-side checks only.
        let mut cases = select.cases(reg, suite, prof, incidents_path().as_deref())?;
        if let Some(sh) = shard {
            cases = sh.select(cases);
        }
        eprintln!(
            "kedge: {}: running the CPU-side checks only (launch plans against profile {}, f64 references); GPU checks SKIPPED for {} cases",
            if cpu { "--cpu given" } else { "no CUDA driver on this machine" },
            prof.name,
            cases.len()
        );
        if let Some(d) = devices {
            eprintln!("kedge: --devices {d} not used: nothing runs on a GPU");
        }
        let done = if resume {
            kedge::results::finished_ids(&results_path, "cpu")
        } else {
            Default::default()
        };
        let mut w = kedge::results::ResultsWriter::open(&results_path, resume)
            .with_context(|| format!("opening {}", results_path.display()))?;
        let mut violations = 0;
        for c in cases.iter().filter(|c| !done.contains(&c.id())) {
            let with_ref = reg
                .op(&c.op)
                .map(|op| op.reference_work(c))
                .unwrap_or(u64::MAX)
                <= CPU_REFERENCE_LIMIT;
            let mut r = engine::check_on_cpu(reg, c, prof, with_ref);
            if !with_ref && r.verdict == Verdict::Skipped {
                r.detail.push_str(&format!("; reference not computed on the CPU (over {CPU_REFERENCE_LIMIT} multiply-adds); device run skipped"));
            }
            violations +=
                matches!(r.verdict, Verdict::LaunchError | Verdict::ResourceLimit) as usize;
            w.write(&r)
                .with_context(|| format!("writing {}", results_path.display()))?;
        }
        eprintln!(
            "kedge: {} cases checked on the CPU: {violations} plans break the {} limits (launch-error by the launch contract, resource-limit by the allocation contract); results in {}",
            cases.len(),
            prof.name,
            results_path.display()
        );
        eprintln!("kedge: GPU checks skipped: no kernel ran, no allocation mode or sanitizer was exercised (exit status {})", exit::GPU_SKIPPED);
        drop(w);
        write_reports(
            &kedge::results::ResultSet::load(std::slice::from_ref(&results_path))?,
            out,
        )?;
        return Ok(exit::GPU_SKIPPED);
    }
    // On the GPU: cases are generated for the live device's limits, read by a worker.
    let fleet = sweep_gpus(exec, devices, ext_args, &out.join("workers"))?;
    let live = &fleet.limits;
    let mut cases = select.cases(reg, suite, live, incidents_path().as_deref())?;
    if let Some(sh) = shard {
        cases = sh.select(cases);
    }
    let max = exec.max_elements.unwrap_or(SWEEP_MAX_ELEMENTS);
    if max > 0 {
        let before = cases.len();
        cases.retain(|c| largest_tensor_elements(reg, c) <= max);
        if cases.len() < before {
            eprintln!(
                "kedge: {} cases over {max} elements left out (--max-elements 0 runs them)",
                before - cases.len()
            );
        }
    }
    let mut w = kedge::results::ResultsWriter::open(&results_path, resume)
        .with_context(|| format!("opening {}", results_path.display()))?;
    let mut failures = 0;
    let mut runs = Vec::new();
    for tool in tools(exec)? {
        let under = tool.map(|t| t.name()).unwrap_or("native");
        let done = if resume {
            kedge::results::finished_ids(&results_path, under)
        } else {
            Default::default()
        };
        let todo: Vec<_> = cases
            .iter()
            .filter(|c| !done.contains(&c.id()))
            .cloned()
            .collect();
        if resume {
            eprintln!(
                "kedge: resuming {under}: {} cases already finished, {} to run",
                done.len(),
                todo.len()
            );
        }
        // One worker pool per GPU, its logs (and sanitizer XML) in a folder of its own.
        let mut pools = Vec::new();
        for &g in &fleet.gpus {
            let dir = out.join("workers").join(under).join(format!("gpu{g}"));
            let mut cfg = worker_config(&exec.on_gpu(g), ext_args, &dir, tool)?;
            cfg.progress = Progress::Off;
            cfg.keep_worker = true;
            pools.push((g, Supervisor::new(cfg)));
        }
        // One case per pull keeps the GPUs level (a native worker stays alive between pulls);
        // a sanitized worker's XML is read when it ends, so there a pull is one worker's batch.
        let opts = kedge::schedule::Options {
            batch: pools
                .first()
                .and_then(|(_, s)| s.cases_per_worker())
                .unwrap_or(1),
            max_failures: GPU_MAX_FAILURES,
        };
        let t0 = std::time::Instant::now();
        let mut tool_failures = 0;
        let mut written = 0;
        let ticker = Ticker::new(Progress::auto(), todo.len());
        let res = kedge::schedule::run(&todo, &mut pools, opts, |f| {
            let mut r = f.output;
            r.gpu = Some(f.device);
            tool_failures += r.verdict.is_failure() as usize;
            w.write(&r)?;
            written += 1;
            ticker.case(written, &r);
            Ok(())
        });
        ticker.finish();
        let gpu_list = fleet.gpu_list();
        let sched = res.map_err(|e| {
            let left = match &e {
                kedge::schedule::ScheduleError::AllLost { not_run, .. } => {
                    format!("; not run: {}", name_cases(&todo, not_run))
                }
                _ => String::new(),
            };
            anyhow::Error::new(e).context(format!(
                "the {under} sweep on GPUs {gpu_list} stopped; its {written} results so far are kept in {} (`kedge sweep --resume` with the same options runs the rest){left}",
                results_path.display()
            ))
        })?;
        let wall = t0.elapsed().as_secs_f64();
        failures += tool_failures;
        for d in sched.lost() {
            eprintln!(
                "kedge: {under}: gpu {} lost after {} cases ({}); the other GPUs ran its unfinished cases",
                d.device,
                d.ran,
                d.lost.as_deref().unwrap_or_default()
            );
        }
        let started: Vec<usize> = pools.iter().map(|(_, s)| s.workers_started()).collect();
        let workers: usize = started.iter().sum();
        let replaced: usize = started.iter().map(|n| n.saturating_sub(1)).sum();
        // Stop the kept workers now rather than with the next tool's pools running.
        drop(pools);
        let per_gpu = sched
            .devices
            .iter()
            .map(|d| format!("gpu {}: {}", d.device, d.ran))
            .collect::<Vec<_>>()
            .join(", ");
        eprintln!(
            "kedge: {under}: {} cases on {} (driver {}; {per_gpu}) in {wall:.1} s: {tool_failures} failures; {workers} workers ({replaced} replaced); results in {}",
            sched.ran(),
            fleet.device,
            fleet.driver_version,
            results_path.display()
        );
        runs.push(serde_json::json!({
            "under": under,
            "allocs": select.alloc.clone().unwrap_or_else(|| "exact".into()),
            "suite": format!("{suite:?}").to_lowercase(),
            "cases": sched.ran(),
            "failures": tool_failures,
            "wall_s": wall,
            "workers": workers,
            "device": fleet.device,
            "driver_version": fleet.driver_version,
            "gpus": fleet.gpus,
            "per_gpu": sched.devices.iter().map(|d| serde_json::json!({
                "gpu": d.device,
                "cases": d.ran,
                "lost": d.lost,
            })).collect::<Vec<_>>(),
        }));
    }
    let sum_path = out.join("sweep-summary.json");
    std::fs::write(&sum_path, serde_json::to_string_pretty(&runs)?)
        .with_context(|| format!("writing {}", sum_path.display()))?;
    drop(w);
    write_reports(
        &kedge::results::ResultSet::load(std::slice::from_ref(&results_path))?,
        out,
    )?;
    Ok(if failures > 0 {
        exit::FAILURES
    } else {
        exit::OK
    })
}

/// Failed batches in a row (a worker that would not start or could not open its GPU) after
/// which a sweep gives a GPU up.
const GPU_MAX_FAILURES: usize = 3;

/// The GPUs a sweep runs on, and what its cases are built for.
struct Fleet {
    gpus: Vec<u32>,
    limits: LimitsProfile,
    device: String,
    driver_version: i32,
}

impl Fleet {
    fn gpu_list(&self) -> String {
        self.gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `--devices`, else `--device`, else every GPU the driver shows (counted by a probe worker:
/// the supervisor never initializes CUDA itself). Every GPU is probed first, because the cases
/// are built for one set of limits: a listed GPU that cannot start a worker, or whose limits
/// differ from the first's, stops the sweep here; when the GPUs were not listed, such a GPU is
/// left out with a warning (a machine's display GPU should not stop its sweep).
fn sweep_gpus(
    exec: &Exec,
    devices: Option<&kedge::schedule::DeviceList>,
    ext_args: &[String],
    dir: &Path,
) -> Result<Fleet> {
    let probe = |gpu: u32| -> Result<kedge::supervisor::RunSummary> {
        let dir = dir.join(format!("probe-gpu{gpu}"));
        let mut sup = supervisor(&exec.on_gpu(gpu), ext_args, &dir, None)?;
        sup.probe()
            .with_context(|| format!("starting a worker on gpu {gpu}"))
    };
    let listed: Option<Vec<u32>> = match (devices, exec.device) {
        (Some(l), _) => Some(l.ordinals().to_vec()),
        (None, Some(d)) => Some(vec![d]),
        (None, None) => None,
    };
    let first = listed
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(0);
    let s0 = probe(first)?;
    let limits = s0.limits.clone().context("the worker reported no limits")?;
    let explicit = listed.is_some();
    let candidates = listed.unwrap_or_else(|| match s0.device_count {
        Some(n) if n > 0 => (0..n).filter_map(|g| u32::try_from(g).ok()).collect(),
        // The driver could not count: the GPU the probe opened.
        _ => vec![first],
    });
    let probe = &probe;
    let others: Vec<(u32, Result<kedge::supervisor::RunSummary>)> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .filter(|&&g| g != first)
            .map(|&g| (g, s.spawn(move || probe(g))))
            .collect();
        handles
            .into_iter()
            .map(|(g, h)| (g, h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))))
            .collect()
    });
    // `first` leads the candidates, and `others` keeps their order.
    let mut gpus = vec![first];
    for (g, r) in others {
        let unfit = match r {
            Ok(s) if s.limits.as_ref() == Some(&limits) => None,
            Ok(s) => Some(anyhow::Error::new(BadInput(format!(
                "gpu {g} ({}) has other limits than gpu {first} ({}): a sweep builds its cases for one GPU's limits; sweep each kind of GPU on its own (--devices)",
                s.device.unwrap_or_default(),
                limits.device
            )))),
            Err(e) => Some(e),
        };
        match unfit {
            None => gpus.push(g),
            Some(e) if explicit => return Err(e),
            Some(e) => eprintln!("kedge: gpu {g} left out: {e:#}"),
        }
    }
    Ok(Fleet {
        gpus,
        device: s0.device.unwrap_or_default(),
        driver_version: s0.driver_version.unwrap_or_default(),
        limits,
    })
}

/// The first few cases of `which` by label, and how many more.
fn name_cases(cases: &[Case], which: &[usize]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = which
        .iter()
        .take(SHOWN)
        .filter_map(|&i| cases.get(i).map(Case::label))
        .collect();
    if which.len() > SHOWN {
        names.push(format!("and {} more", which.len() - SHOWN));
    }
    names.join(", ")
}

/// Largest case a GPU sweep runs unless told otherwise (`--max-elements`).
const SWEEP_MAX_ELEMENTS: u64 = 1 << 28;

/// Elements of a case's largest tensor: what `--max-elements` bounds. (The product of `ne` is
/// not a size for every op: fp8_gemm's ne = [K, M, N] multiplies to the GEMM's work, 2.8e9
/// at the incident's shape, whose largest tensor holds 4.7e6 elements.) A case whose tensors
/// cannot be described counts as the product of its `ne`.
fn largest_tensor_elements(reg: &Registry, c: &kedge_core::Case) -> u64 {
    let product = || {
        c.ne.iter()
            .map(|&x| x.max(0) as u64)
            .fold(1u64, u64::saturating_mul)
    };
    match reg.op(&c.op).and_then(|op| op.tensors(c)) {
        Ok(specs) => specs
            .iter()
            .map(|t| {
                t.ne.iter()
                    .map(|&x| x.max(0) as u64)
                    .fold(1u64, u64::saturating_mul)
            })
            .max()
            .unwrap_or_else(product),
        Err(_) => product(),
    }
}

/// References above this many elements are not computed by a CPU-only sweep (it would need
/// tens of GiB); the GPU sweep computes them.
const CPU_REFERENCE_LIMIT: u64 = 1 << 26;

/// Start a worker with no cases, just to read the live limits.
fn probe_limits(sup: &mut Supervisor) -> Result<LimitsProfile> {
    let s = sup.probe()?;
    s.limits.context("the worker reported no limits")
}

// ---- minimize / repro / selftest / fuzz (issue 6) -------------------------------------------
// Kept together so merges with the other subcommands stay simple.

use kedge_core::Case;

#[derive(Debug, Clone, clap::Args)]
struct MinimizeArgs {
    /// A case (JSON line), a verdict line from results.jsonl (its case and outcome), or a file
    /// whose first line is either.
    input: String,
    /// Use the CPU-side checks as the predicate (launch contract against --profile): finds
    /// launch-limit failures without a GPU.
    #[arg(long)]
    cpu: bool,
    /// Profile for --cpu and for the repro's limit comment.
    #[arg(long, default_value = "h200")]
    profile: String,
    /// Most predicate runs (each is one case run; cached, never repeated).
    #[arg(long, default_value_t = 400)]
    budget: usize,
    #[command(flatten)]
    exec: Exec,
    /// Write minimize.json (every probe), repro.txt and repro.cu here.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
struct ReproArgs {
    /// A case (JSON line), a verdict line (its verdict is named in the comment), or a file
    /// whose first line is either.
    input: String,
    #[arg(long, default_value = "h200")]
    profile: String,
    /// Write repro.txt and repro.cu here (the .cu is also printed).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Debug, Clone, clap::Args)]
struct SelftestArgs {
    /// Only the CPU part (incident plans and references); no GPU runs.
    #[arg(long)]
    cpu: bool,
    /// Sanitizer tools to run the planned cases under (comma separated).
    #[arg(long, default_value = "memcheck,initcheck,racecheck")]
    tools: String,
    /// Only these ops (comma separated).
    #[arg(short = 'o', long = "op")]
    op: Option<String>,
    /// Profile the boundary cases are generated for without a GPU.
    #[arg(long, default_value = "h200")]
    profile: String,
    #[command(flatten)]
    exec: Exec,
    /// results.jsonl and selftest.md go here.
    #[arg(long, default_value = "kedge-selftest")]
    out: PathBuf,
}

#[derive(Debug, Clone, clap::Args)]
struct FuzzArgs {
    /// Op(s), comma separated (default: all).
    #[arg(short = 'o', long = "op")]
    op: Option<String>,
    /// Impl(s), comma separated (default: all, planted calibration impls excluded).
    #[arg(long = "impl")]
    imp: Option<String>,
    /// Allocation modes to draw from.
    #[arg(long, default_value = "exact,guard")]
    alloc: String,
    #[arg(long, default_value_t = 200)]
    cases: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CPU-side checks only (launch contract against --profile).
    #[arg(long)]
    cpu: bool,
    #[arg(long, default_value = "h200")]
    profile: String,
    /// Predicate runs per failure when shrinking it.
    #[arg(long, default_value_t = 200)]
    budget: usize,
    /// Shrink at most this many failures (the rest are listed, not shrunk).
    #[arg(long, default_value_t = 20)]
    max_shrinks: usize,
    #[command(flatten)]
    exec: Exec,
    /// Where finds are appended.
    #[arg(long, default_value = "corpora/fuzz-finds.jsonl")]
    finds: PathBuf,
}

/// A case, or a verdict line's case and result, from an argument or the first line of a file.
fn read_case_or_result(input: &str, reg: &Registry) -> Result<(Case, Option<CaseResult>)> {
    let text = if Path::new(input).is_file() {
        let t = std::fs::read_to_string(input).with_context(|| format!("reading {input}"))?;
        t.lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or_else(|| BadInput(format!("{input} has no case line")))?
            .to_string()
    } else {
        input.to_string()
    };
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| BadInput(format!("not a JSON case or verdict line: {e}")))?;
    let (case, result) = if v.get("verdict").is_some() && v.get("case").is_some() {
        let r: CaseResult =
            serde_json::from_value(v).map_err(|e| BadInput(format!("not a verdict line: {e}")))?;
        (r.case.clone(), Some(r))
    } else if let Some(c) = v.get("case") {
        // An incident or fuzz-find line.
        let c: Case =
            serde_json::from_value(c.clone()).map_err(|e| BadInput(format!("bad case: {e}")))?;
        (c, None)
    } else {
        (Case::parse_line(1, &text)?, None)
    };
    Ok((case.validate(reg)?, result))
}

/// The compute-sanitizer wrapping for a tool named by its detector (selftest, minimize).
fn sanitize_spec_for(
    d: kedge_core::Detector,
    exec: &Exec,
) -> Result<kedge::supervisor::SanitizeSpec> {
    let tool = kedge::sanitizer::Tool::parse_list(d.name()).map_err(|e| BadInput(e.to_string()))?;
    let tool = tool
        .into_iter()
        .next()
        .ok_or_else(|| BadInput(format!("{d} is not a sanitizer tool")))?;
    sanitize_spec(tool, exec)
}

/// A supervisor-backed predicate: each probe runs one case in a fresh worker (natively, or
/// under `tool`). Invalid candidates are answered `unsupported` without running.
fn gpu_predicate<'a>(
    reg: &'a Registry,
    sup: &'a mut Supervisor,
) -> impl FnMut(&Case) -> std::result::Result<CaseResult, SupervisorError> + 'a {
    move |c: &Case| {
        let c = match c.validate(reg) {
            Ok(c) => c,
            Err(e) => {
                return Ok(CaseResult::new(
                    c,
                    Verdict::Unsupported,
                    kedge_core::Detector::Impl,
                    format!("bad input: {e}"),
                ))
            }
        };
        let mut got = None;
        sup.run(std::slice::from_ref(&c), &mut |r| {
            got = Some(r);
            Ok(())
        })?;
        got.ok_or_else(|| SupervisorError::Sanitizer("the worker returned no verdict".into()))
    }
}

fn cpu_predicate<'a>(
    reg: &'a Registry,
    prof: &'a LimitsProfile,
) -> impl FnMut(&Case) -> std::result::Result<CaseResult, std::convert::Infallible> + 'a {
    move |c: &Case| {
        Ok(match c.validate(reg) {
            Ok(c) => engine::check_on_cpu(reg, &c, prof, false),
            Err(e) => CaseResult::new(
                c,
                Verdict::Unsupported,
                kedge_core::Detector::Impl,
                format!("bad input: {e}"),
            ),
        })
    }
}

fn param_defaults(op: &dyn kedge_core::Op) -> kedge_core::Params {
    op.params()
        .iter()
        .map(|p| (p.name.to_string(), p.default_value()))
        .collect()
}

fn write_out(dir: &Path, name: &str, text: &str) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let p = dir.join(name);
    std::fs::write(&p, text).with_context(|| format!("writing {}", p.display()))?;
    eprintln!("kedge: wrote {}", p.display());
    Ok(())
}

fn print_repro(
    reg: &Registry,
    case: &Case,
    prof: &LimitsProfile,
    result: Option<&CaseResult>,
    transition: Option<&kedge::minimize::Transition>,
    out: Option<&Path>,
) -> Result<()> {
    use kedge::repro::{self, ReproInput, SourceMode};
    let r = repro::build(&ReproInput {
        reg,
        case,
        profile: prof,
        result,
        transition,
        sources: SourceMode::Embed,
    })?;
    let text = repro::render(&r);
    print!("{text}");
    if let Some(dir) = out {
        write_out(dir, "repro.txt", &text)?;
        if let repro::CuRepro::Available { source, .. } = &r.cu {
            write_out(dir, "repro.cu", source)?;
        }
    }
    Ok(())
}

fn cmd_minimize(a: &MinimizeArgs) -> Result<i32> {
    use kedge::minimize::{minimize_and_transition, render_log, Outcome, ShrinkConfig};
    let reg = kedge_ops::registry();
    let prof = profile(&a.profile)?;
    let (case, given) = read_case_or_result(&a.input, &reg)?;
    let op = reg.op(&case.op)?;
    let cfg = ShrinkConfig {
        param_defaults: param_defaults(op),
        max_probes: a.budget,
        ..ShrinkConfig::default()
    };
    let boundaries = op.boundaries(&prof);
    let report = if a.cpu {
        // A GPU result's outcome (driver) differs from the CPU's (launch-contract): only the
        // case is taken from it.
        if let Some(r) = &given {
            eprintln!(
                "kedge: --cpu: shrinking on the launch contract; the given result ({} / {}) is not compared",
                r.verdict, r.detector
            );
        }
        minimize_and_transition(&case, None, &boundaries, cfg, cpu_predicate(&reg, &prof))
            .map_err(|e| anyhow::anyhow!("{e}"))?
    } else {
        if !kedge_core::device::driver_present() {
            return Err(kedge_core::device::DeviceError::NoDriver).context(
                "kedge minimize needs a GPU; --cpu shrinks launch-limit failures without one",
            );
        }
        let under = given
            .as_ref()
            .map(|r| r.under.clone())
            .unwrap_or_else(|| "native".into());
        let tool = kedge::selftest::TOOLS
            .iter()
            .copied()
            .find(|d| d.name() == under);
        let work = std::env::temp_dir().join(format!("kedge-minimize-{}", std::process::id()));
        let mut sup_cfg = supervisor_config(&a.exec, &work)?;
        if let Some(t) = tool {
            sup_cfg.sanitize = Some(sanitize_spec_for(t, &a.exec)?);
        }
        let mut sup = Supervisor::new(sup_cfg);
        let given_outcome = given.as_ref().map(Outcome::of);
        minimize_and_transition(
            &case,
            given_outcome,
            &boundaries,
            cfg,
            gpu_predicate(&reg, &mut sup),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
    };
    println!("# probes ({} runs)", report.probes.len());
    print!("{}", render_log(&report.probes));
    let m = &report.minimized;
    println!();
    println!(
        "# minimized: {} -> {}",
        kedge_core::shape::fmt_ne(&m.original.ne),
        kedge_core::shape::fmt_ne(&m.case.ne)
    );
    println!("{}", m.case.to_line());
    println!(
        "outcome: {}{}",
        m.outcome,
        if m.budget_exhausted {
            " (probe budget ran out: may shrink further)"
        } else {
            ""
        }
    );
    let transition = match &report.transition {
        Some(t) => {
            println!("{t}");
            match t {
                kedge::minimize::TransitionFinding::Found(t) => Some(&**t),
                _ => None,
            }
        }
        None => {
            println!("no transition: no dimension was blocked by a changed outcome");
            None
        }
    };
    println!();
    if let Some(dir) = &a.out {
        write_out(
            dir,
            "minimize.json",
            &serde_json::to_string_pretty(&report)?,
        )?;
    }
    print_repro(
        &reg,
        &m.case,
        &prof,
        Some(&m.result),
        transition,
        a.out.as_deref(),
    )?;
    Ok(exit::OK)
}

fn cmd_repro(a: &ReproArgs) -> Result<i32> {
    let reg = kedge_ops::registry();
    let prof = profile(&a.profile)?;
    let (case, result) = read_case_or_result(&a.input, &reg)?;
    print_repro(&reg, &case, &prof, result.as_ref(), None, a.out.as_deref())?;
    Ok(exit::OK)
}

fn supervisor_config(exec: &Exec, work_dir: &Path) -> Result<SupervisorConfig> {
    let exe = std::env::current_exe().context("finding the kedge binary to start workers")?;
    Ok(SupervisorConfig {
        exe,
        worker_args: vec!["--device".into(), exec.device.unwrap_or(0).to_string()],
        timeout: Duration::from_secs(exec.timeout),
        ready_timeout: Duration::from_secs(180),
        sanitize: None,
        work_dir: work_dir.to_path_buf(),
        progress: Progress::auto(),
        keep_worker: false,
    })
}

fn cmd_selftest(a: &SelftestArgs) -> Result<i32> {
    use kedge::selftest::{judge, render, PlanOptions, SelftestPlan, Under};
    let reg = kedge_ops::registry();
    let tools: Vec<kedge_core::Detector> = kedge::select::split(&Some(a.tools.clone()))
        .iter()
        .map(|t| {
            kedge::selftest::TOOLS
                .iter()
                .copied()
                .find(|d| d.name() == t)
                .ok_or_else(|| BadInput(format!("unknown sanitizer tool '{t}' (known: memcheck, initcheck, racecheck, synccheck)")))
        })
        .collect::<std::result::Result<_, _>>()?;
    let incidents = match incidents_path() {
        Some(p) => kedge::corpus::read_expectations(&p)?,
        None => Vec::new(),
    };
    let gpu = !a.cpu && kedge_core::device::driver_present();
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let mut sup = if gpu {
        Some(supervisor(&a.exec, &[], &a.out.join("workers"), None)?)
    } else {
        None
    };
    let limits = match sup.as_mut() {
        Some(s) => probe_limits(s)?,
        None => profile(&a.profile)?,
    };
    let opts = PlanOptions {
        fixed_tools: tools.clone(),
        ops: kedge::select::split(&a.op),
        seed: 1,
        max_fixed_elements: a.exec.max_elements,
    };
    let plan = SelftestPlan::build(&reg, &limits, &incidents, &opts);
    for r in &plan.rejected {
        eprintln!("kedge: selftest: an op declared a case it rejects: {r}");
    }
    let results_path = a.out.join("results.jsonl");
    let mut w = kedge::results::ResultsWriter::open(&results_path, false)
        .with_context(|| format!("opening {}", results_path.display()))?;
    let mut results: Vec<CaseResult> = Vec::new();
    let mut not_run: Vec<String> = Vec::new();
    for (under, cases) in plan.groups() {
        match under {
            Under::Cpu => {
                for c in &cases {
                    let r = engine::check_on_cpu(&reg, c, &limits, true);
                    w.write(&r)?;
                    results.push(r);
                }
            }
            Under::Native => match sup.as_mut() {
                Some(s) => {
                    s.run(&cases, &mut |r| {
                        w.write(&r)?;
                        results.push(r);
                        Ok(())
                    })?;
                }
                None => not_run.push(format!("{} native cases (no GPU)", cases.len())),
            },
            Under::Tool(t) => match (gpu, sanitize_spec_for(t, &a.exec).ok()) {
                (true, Some(spec)) => {
                    let mut s = Supervisor::new(SupervisorConfig {
                        sanitize: Some(spec),
                        ..supervisor_config(&a.exec, &a.out.join(format!("workers-{}", t.name())))?
                    });
                    s.run(&cases, &mut |r| {
                        w.write(&r)?;
                        results.push(r);
                        Ok(())
                    })?;
                }
                (false, _) => not_run.push(format!("{} {} cases (no GPU)", cases.len(), t.name())),
                (true, None) => not_run.push(format!(
                    "{} {} cases (compute-sanitizer not found)",
                    cases.len(),
                    t.name()
                )),
            },
        }
    }
    let table = judge(&plan, &results);
    let text = format!(
        "# kedge selftest\n\ndevice: {}{}\nruns: {} results ({} planned case runs)\n{}\n{}",
        limits.device,
        if gpu {
            String::new()
        } else {
            format!(" (profile {}; no GPU used)", limits.name)
        },
        results.len(),
        plan.runs.len(),
        if not_run.is_empty() {
            String::new()
        } else {
            format!("not run: {}\n", not_run.join("; "))
        },
        render(&table)
    );
    print!("{text}");
    write_out(&a.out, "selftest.md", &text)?;
    Ok(if !table.ok() {
        exit::FAILURES
    } else if !table.complete() {
        exit::GPU_SKIPPED
    } else {
        exit::OK
    })
}

fn cmd_fuzz(a: &FuzzArgs) -> Result<i32> {
    use kedge::fuzzcases::{generate, known_finds, FuzzFind, FuzzSpec};
    use kedge::minimize::{minimize_and_transition, ShrinkConfig};
    let reg = kedge_ops::registry();
    let ops: Vec<&'static dyn kedge_core::Op> = match &a.op {
        None => reg.ops().to_vec(),
        Some(_) => kedge::select::split(&a.op)
            .iter()
            .map(|o| reg.op(o))
            .collect::<std::result::Result<_, _>>()?,
    };
    let mut impls = kedge::select::split(&a.imp);
    if impls.is_empty() {
        // Planted calibration impls would only refind their planted bugs.
        for op in &ops {
            for i in reg.impls_of(*op) {
                if !matches!(i.role(), kedge_core::ImplRole::Planted { .. }) {
                    impls.push(i.name().to_string());
                }
            }
        }
    }
    let allocs = kedge::select::parse_allocs(&Some(a.alloc.clone()))?;
    let gpu = !a.cpu && kedge_core::device::driver_present();
    if !a.cpu && !gpu {
        return Err(kedge_core::device::DeviceError::NoDriver)
            .context("kedge fuzz needs a GPU; --cpu fuzzes the launch contract without one");
    }
    let work = std::env::temp_dir().join(format!("kedge-fuzz-{}", std::process::id()));
    let mut sup = if gpu {
        Some(supervisor(&a.exec, &[], &work, None)?)
    } else {
        None
    };
    let limits = match sup.as_mut() {
        Some(s) => probe_limits(s)?,
        None => profile(&a.profile)?,
    };
    let spec = FuzzSpec {
        impls,
        allocs,
        // Generated cases stay small unless --max-elements says otherwise.
        max_elements: a.exec.max_elements.unwrap_or(1 << 26),
    };
    let cases = generate(&reg, &limits, &ops, &spec, a.cases, a.seed);
    eprintln!("kedge: fuzz: {} cases (seed {})", cases.len(), a.seed);
    let mut results = Vec::new();
    match sup.as_mut() {
        Some(s) => {
            s.run(&cases, &mut |r| {
                results.push(r);
                Ok(())
            })?;
        }
        None => {
            for c in &cases {
                results.push(engine::check_on_cpu(&reg, c, &limits, false));
            }
        }
    }
    let mut known = known_finds(&a.finds);
    let mut new_finds = 0;
    let failures: Vec<&CaseResult> = results.iter().filter(|r| r.verdict.is_failure()).collect();
    eprintln!("kedge: fuzz: {} failures", failures.len());
    for (k, r) in failures.into_iter().enumerate() {
        if k >= a.max_shrinks {
            println!(
                "not shrunk (--max-shrinks {}): {}",
                a.max_shrinks,
                r.to_line()
            );
            continue;
        }
        let op = reg.op(&r.case.op)?;
        let cfg = ShrinkConfig {
            param_defaults: param_defaults(op),
            max_probes: a.budget,
            ..ShrinkConfig::default()
        };
        let given = Some(kedge::minimize::Outcome::of(r));
        let report = match sup.as_mut() {
            Some(s) => minimize_and_transition(
                &r.case,
                given,
                &op.boundaries(&limits),
                cfg,
                gpu_predicate(&reg, s),
            )
            .map_err(|e| anyhow::anyhow!("{e}")),
            None => minimize_and_transition(
                &r.case,
                given,
                &op.boundaries(&limits),
                cfg,
                cpu_predicate(&reg, &limits),
            )
            .map_err(|e| anyhow::anyhow!("{e}")),
        };
        let report = match report {
            Ok(x) => x,
            Err(e) => {
                eprintln!("kedge: fuzz: could not shrink {}: {e}", r.case.label());
                continue;
            }
        };
        let find = FuzzFind::new(
            &r.case,
            &report.minimized.case,
            report.minimized.outcome,
            &r.under,
            report.transition.as_ref(),
            &report.minimized.result.detail,
        );
        if !known.insert(find.key()) {
            continue;
        }
        if let Some(dir) = a.finds.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&a.finds)
            .with_context(|| format!("opening {}", a.finds.display()))?;
        use std::io::Write as _;
        writeln!(f, "{}", serde_json::to_string(&find)?)?;
        new_finds += 1;
        println!(
            "find: {} {} ({}){}",
            find.case.label(),
            find.verdict,
            find.detector,
            find.transition
                .as_ref()
                .map(|t| format!("; {t}"))
                .unwrap_or_default()
        );
    }
    eprintln!(
        "kedge: fuzz: {new_finds} new finds appended to {}",
        a.finds.display()
    );
    Ok(if new_finds > 0 {
        exit::FAILURES
    } else {
        exit::OK
    })
}
