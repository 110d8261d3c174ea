//! How long a slot waits for its workers, on this machine, no GPU, with a script speaking the
//! worker protocol that takes `START` seconds to say it is ready and `CASE` seconds a case:
//!
//! - when cases end their workers in runs (it dies, SIGSEGV, on the cases the pattern marks),
//!   with one standby and with more (`Supervisor::set_standbys`);
//! - under a sanitizer, batches of 16 cases, the worker taking `EXIT` seconds to end after its
//!   batch (the tool tearing it down and writing its report), with the slot waiting for it and
//!   with that overlapping the next batch (`Supervisor::set_overlap_read_out`).
//!
//! ```text
//! cargo run --release -p kedge-runner --example standby_bench -- [START] [CASE] [CASES] [DIES] [EXIT]
//! ```
//!
//! `DIES` is a pattern of `x` (the case ends its worker) and `.` (it passes), repeated over the
//! cases: `xx.` ends two workers in three cases, as the H200's tier of ggml's 2^31-element
//! unary cases did (449 of 784). The figures are this machine's: a GPU's worker start-up
//! (0.84 s median on the H200, more beside other starts) is measured in a sweep's summary.

use kedge_core::{Case, DType, LimitsProfile};
use kedge_runner::external::ExternalSpec;
use kedge_runner::run::{SanitizeSpec, Supervisor, SupervisorConfig, WorkerSpec};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: &str| args.get(i).cloned().unwrap_or_else(|| d.to_string());
    let start: f64 = arg(0, "0.4").parse()?;
    let case_s: f64 = arg(1, "0.1").parse()?;
    let n: u64 = arg(2, "60").parse()?;
    let dies = arg(3, "xx.");
    let exit_s: f64 = arg(4, "1.0").parse()?;
    if dies.is_empty() || dies.chars().any(|c| c != 'x' && c != '.') {
        return Err("DIES is a pattern of `x` and `.`".into());
    }
    let dir = tempfile::tempdir()?;
    let limits = serde_json::to_string(&LimitsProfile::builtin("h200").ok_or("no h200 profile")?)?;
    std::fs::write(dir.path().join("limits.json"), limits)?;
    let exe = dir.path().join("worker.sh");
    std::fs::write(
        &exe,
        format!(
            r#"#!/usr/bin/env bash
IFS= read -r spec
sleep {start}
printf '{{"ready":{{"device":"fake","driver_version":0,"pid":%s,"limits":%s,"startup_s":{start}}}}}\n' "$$" "$(cat "$(dirname "$0")/limits.json")"
while IFS= read -r line; do
  sleep {case_s}
  case "$line" in *'"seed":'*'666'*) kill -SEGV $$ ;; esac
  echo '{{"result":{{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake","under":"native","ms":0.0}}}}'
done
"#
        ),
    )?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
    let pattern: Vec<char> = dies.chars().collect();
    // A seed ending in 666 ends its worker; the others pass.
    let cases: Vec<Case> = (0..n)
        .map(|i| {
            let mut c = Case::new("rms_norm", "clamped", DType::F32, [64, 2, 1, 1]);
            let dies = pattern[i as usize % pattern.len()] == 'x';
            c.seed = if dies { i * 1000 + 666 } else { i * 1000 + 1 };
            c
        })
        .collect();
    let ended = cases.iter().filter(|c| c.seed % 1000 == 666).count();
    println!(
        "{n} cases, {ended} ending their worker ({dies} repeated); start {start} s, case {case_s} s"
    );
    println!("| standbys | wall | waited for workers | workers |");
    println!("|---:|---:|---:|---:|");
    for standbys in [1, 2, 3, 4] {
        let mut sup = supervisor(exe.clone(), None, dir.path().join(format!("w{standbys}")));
        sup.set_standbys(standbys);
        let t0 = Instant::now();
        let summary = sup.run(&cases, &mut |_| Ok(()))?;
        println!(
            "| {standbys} | {:.1} s | {:.1} s | {} |",
            t0.elapsed().as_secs_f64(),
            sup.waited().as_secs_f64(),
            summary.workers_started
        );
    }
    // Under a sanitizer: no case ends its worker, every batch does.
    let tool = dir.path().join("tool.sh");
    std::fs::write(
        &tool,
        format!(
            r#"#!/usr/bin/env bash
xml="$1"; shift; shift
IFS= read -r spec
sleep {start}
printf '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n' > "$xml"
printf '{{"ready":{{"device":"fake","driver_version":0,"pid":%s,"limits":%s,"startup_s":{start}}}}}\n' "$$" "$(cat "$(dirname "$0")/limits.json")"
while IFS= read -r line; do
  case "$line" in *'"warm_up"'*) continue ;; esac
  sleep {case_s}
  echo '{{"result":{{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake","under":"native","ms":0.0}}}}'
done
sleep {exit_s}
echo '</ComputeSanitizerOutput>' >> "$xml"
"#
        ),
    )?;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))?;
    let clean: Vec<Case> = (0..n)
        .map(|i| {
            let mut c = Case::new("rms_norm", "clamped", DType::F32, [64, 2, 1, 1]);
            c.seed = i * 1000 + 1;
            c
        })
        .collect();
    println!();
    println!("{n} cases under a sanitizer, 16 a worker; exit {exit_s} s after each batch");
    println!("| the next batch while a worker exits | wall | waited for workers | workers |");
    println!("|---|---:|---:|---:|");
    for overlap in [false, true] {
        let t = kedge_core::Tool::Memcheck;
        let sanitize = SanitizeSpec {
            tool: t,
            prefix: vec![tool.display().to_string(), "{xml}".into(), "--".into()],
            attribute: kedge_runner::run::attribution(t),
            batch: 16,
            record_cap: None,
        };
        let work_dir = dir.path().join(format!("s{overlap}"));
        let mut sup = supervisor("unused".into(), Some(sanitize), work_dir);
        sup.set_overlap_read_out(overlap);
        let t0 = Instant::now();
        let summary = sup.run(&clean, &mut |_| Ok(()))?;
        println!(
            "| {} | {:.1} s | {:.1} s | {} |",
            if overlap { "runs" } else { "waits" },
            t0.elapsed().as_secs_f64(),
            sup.waited().as_secs_f64(),
            summary.workers_started
        );
    }
    Ok(())
}

/// A supervisor of `exe` (the fake worker, or under `sanitize` the fake tool around it), its
/// files in `work_dir`.
fn supervisor(
    exe: std::path::PathBuf,
    sanitize: Option<SanitizeSpec>,
    work_dir: std::path::PathBuf,
) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        exe,
        spec: WorkerSpec::new(0, ExternalSpec::default()),
        timeout: Duration::from_secs(30),
        ready_timeout: Duration::from_secs(30),
        sanitize,
        work_dir,
        keep_worker: false,
    })
}
