use kedge_runner::gate::Baseline;
use kedge_runner::provenance::{check_baseline, ResultsRun};
use kedge_runner::report::ReportOptions;
use kedge_runner::results::{OutDir, ResultSet, REPORT_FILES};
use kedge_runner::workflow::sweep::{write_reports, SweepSummary};
use kedge_runner::{note, Error, Status};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// results.jsonl files (shards are merged; the same case run again keeps its last line).
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Known failures (a gate baseline): their failures are marked known in report.md and
    /// summary.md and skipped in junit.xml with the reason; known failures that now pass are
    /// listed.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Where report.md, summary.md, report.json and junit.xml go.
    #[arg(long, default_value = "kedge-out")]
    out: PathBuf,
}

/// Where each results file ran, from the `sweep-summary.json` beside it (when there is one).
fn devices(results: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    for r in results {
        let p = r
            .parent()
            .unwrap_or(Path::new("."))
            .join("sweep-summary.json");
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        match serde_json::from_str::<SweepSummary>(&text) {
            Ok(s) => {
                for run in s.runs {
                    let line = format!("{}: {}", run.under, run.device);
                    if !out.contains(&line) {
                        out.push(line);
                    }
                }
            }
            Err(e) => note!(
                "{}: not read ({e}); the report names no device from it",
                p.display()
            ),
        }
    }
    out
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let set = ResultSet::load(&a.results)?;
    for t in &set.torn {
        note!("{t}");
    }
    // The shards are one run (one profile, mode and suite), and the baseline is of it.
    let run = ResultsRun::load(&a.results)?;
    let (baseline, provenance) = match &a.baseline {
        Some(p) => {
            let b = Baseline::load(p)?;
            let lines = check_baseline(p, b.run.as_ref(), &run)?;
            (Some(b), lines)
        }
        None => (None, run.describe().into_iter().collect()),
    };
    for line in &provenance {
        note!("{line}");
    }
    let reg = kedge_ops::registry();
    let devices = devices(&a.results);
    let out = OutDir::open(&a.out)?
        .reading(a.results.iter().chain(&a.baseline).map(PathBuf::as_path))
        .writes(&REPORT_FILES)?;
    write_reports(
        &out,
        &set,
        &ReportOptions {
            baseline: baseline.as_ref(),
            registry: Some(&reg),
            devices: &devices,
            provenance: &provenance,
            ..ReportOptions::default()
        },
    )?;
    note!(
        "{} results -> {}/report.md, summary.md, report.json, junit.xml",
        set.results.len(),
        out.path().display()
    );
    Ok(Status::Ok)
}
