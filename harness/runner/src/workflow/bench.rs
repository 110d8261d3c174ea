//! `kedge bench`: kernel timing. Every case is judged first (a fast wrong kernel is no good),
//! then timed after a warm-up: CUDA events around the impl's launches, the median of the
//! repetitions and their spread, the bytes the case's tensors move and GB/s, and that rate
//! against the device's copy bandwidth measured by the same worker. Impls of one op on the same
//! shape are shown side by side, so a fix comes with its cost.

use crate::errors::{Error, Status};
use crate::events::Event;
use crate::external::ExternalSpec;
use crate::results::OutDir;
use crate::run::{BenchSpec, EngineOptions, Executor, Gpus, RunEngine};
use crate::select::{profile, Selection};
use kedge_core::{CaseResult, Verdict};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What to time, and how.
#[derive(Debug, Clone)]
pub struct BenchRequest {
    /// The cases: given, or named in `OP(vars)` form, or else the smoke suite's.
    pub selection: Selection,
    /// Impls from outside kedge to time beside kedge's (plugins, source kernels, a ggml
    /// build).
    pub external: ExternalSpec,
    /// Worker options; a bench runs one worker whatever `jobs` says.
    pub engine: EngineOptions,
    /// The GPU's ordinal.
    pub device: u32,
    /// Untimed runs before the timed ones.
    pub warmup: u32,
    /// Timed runs: the median, min and max are over these.
    pub reps: u32,
    /// Where bench.jsonl and bench.md go, if anywhere.
    pub out: Option<PathBuf>,
}

/// What a bench measured.
#[derive(Debug, Clone)]
pub struct BenchOutcome {
    /// Every result, its times in `observed.bench`.
    pub results: Vec<CaseResult>,
    /// The timing table (`render`).
    pub markdown: String,
    /// The files written (bench.jsonl, bench.md), when an output directory was given.
    pub written: Vec<PathBuf>,
    /// 1 when a case failed (its timing is not shown as if it were good).
    pub status: Status,
}

/// Judge and time the request's cases on one GPU, one worker (timings of cases sharing a GPU
/// would measure each other); the output directory is checked and locked before anything runs.
pub fn bench(req: &BenchRequest) -> Result<BenchOutcome, Error> {
    let ev = &req.engine.events;
    let (reg, added) = req.external.registry()?;
    for x in added {
        ev.emit(Event::ImplsAdded { note: x.note });
    }
    let out = match &req.out {
        Some(dir) => Some(
            OutDir::open(dir)?
                .reading(req.selection.corpus.as_deref())
                .writes(&["bench.jsonl", "bench.md"])?,
        ),
        None => None,
    };
    let suite = super::run::suite_of(&req.selection);
    let mut cases = req
        .selection
        .cases(&reg, suite, &profile("h200")?, None, ev)?;
    let mut opts = req.engine.clone();
    opts.jobs = 1;
    let engine = RunEngine::builder("bench")
        .external(req.external.clone())
        .options(opts)
        .bench(BenchSpec {
            warmup: req.warmup,
            reps: req.reps,
        })
        .gpus(Gpus::One(req.device))
        .build()?;
    if !req.selection.is_explicit() {
        cases = req
            .selection
            .cases(&reg, suite, engine.limits(), None, ev)?;
    }
    let mut results = Vec::new();
    engine.executor(None)?.run(&cases, &mut |r| {
        results.push(r);
        Ok(())
    })?;
    let markdown = render(&results);
    let mut written = Vec::new();
    if let Some(out) = &out {
        let lines: String = results
            .iter()
            .map(|r| format!("{}\n", r.to_line()))
            .collect();
        written.push(out.write("bench.jsonl", &lines)?);
        written.push(out.write("bench.md", &markdown)?);
    }
    ev.finish()?;
    let failures = results.iter().filter(|r| r.verdict.is_failure()).count();
    Ok(BenchOutcome {
        status: Status::failed_if(failures > 0),
        results,
        markdown,
        written,
    })
}

/// The timing table of a set of bench results, as Markdown: one section per shape (op, dtype,
/// ne, params), one row per impl, with each impl's time against the section's first.
fn render(results: &[CaseResult]) -> String {
    let mut groups: BTreeMap<String, Vec<&CaseResult>> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for r in results {
        let mut c = r.case.clone();
        c.imp.clear();
        let key = c.to_line();
        if !groups.contains_key(&key) {
            order.push(key.clone());
        }
        groups.entry(key).or_default().push(r);
    }
    let copy = results
        .iter()
        .filter_map(|r| r.observed.bench.as_ref().and_then(|b| b.copy_gb_per_s))
        .next();
    let mut s = String::new();
    let _ = writeln!(s, "# kedge bench");
    let _ = writeln!(s);
    match copy {
        Some(c) => {
            let _ = writeln!(
                s,
                "Device copy bandwidth (device-to-device, read + write bytes): {c:.0} GB/s, measured in the same run."
            );
        }
        None => {
            let _ = writeln!(s, "Device copy bandwidth: not measured.");
        }
    }
    let _ = writeln!(
        s,
        "Times: CUDA events around the impl's launches after a warm-up (a library: host wall time around its compute call); median of the repetitions, min and max beside it."
    );
    for key in order {
        let rows = &groups[&key];
        let c = &rows[0].case;
        let _ = writeln!(s);
        let mut label = format!(
            "## {} {} ne={}",
            c.op,
            c.dtype,
            kedge_core::model::shape::fmt_ne(&c.ne)
        );
        for (k, v) in &c.params {
            let _ = write!(label, " {k}={v}");
        }
        let _ = writeln!(s, "{label}");
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| impl | verdict | median | min..max | bytes | GB/s | of copy | TFLOP/s | vs first |"
        );
        let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
        let first = rows
            .iter()
            .find_map(|r| r.observed.bench.as_ref().filter(|b| b.not_timed.is_none()))
            .map(|b| b.median_ms);
        for r in rows {
            row_line(&mut s, r, first);
        }
    }
    s
}

/// One impl's row of a shape's table: its time and throughput, or why it was not timed.
fn row_line(s: &mut String, r: &CaseResult, first: Option<f64>) {
    let verdict = if r.verdict == Verdict::Pass {
        "pass".to_string()
    } else {
        format!("{} ({})", r.verdict, r.detector)
    };
    match r.observed.bench.as_ref().filter(|b| b.not_timed.is_none()) {
        Some(b) => {
            let of_copy = b
                .copy_gb_per_s
                .filter(|c| *c > 0.0)
                .map(|c| format!("{:.0} %", 100.0 * b.gb_per_s / c))
                .unwrap_or_else(|| "-".into());
            let tf = b
                .tflop_per_s
                .map(|t| format!("{t:.1}"))
                .unwrap_or_else(|| "-".into());
            let vs = first
                .filter(|f| *f > 0.0)
                .map(|f| format!("{:.2}x", b.median_ms / f))
                .unwrap_or_else(|| "-".into());
            let _ = writeln!(
                s,
                "| {} | {verdict} | {:.4} ms | {:.4}..{:.4} | {} | {:.1} | {of_copy} | {tf} | {vs} |",
                r.case.imp,
                b.median_ms,
                b.min_ms,
                b.max_ms,
                kedge_core::contract::plan::human_bytes(b.bytes),
                b.gb_per_s
            );
        }
        None => {
            let why = r
                .observed
                .bench
                .as_ref()
                .and_then(|b| b.not_timed.clone())
                .unwrap_or_else(|| "not timed".into());
            let _ = writeln!(
                s,
                "| {} | {verdict} | not timed: {} | | | | | | |",
                r.case.imp,
                why.replace('|', "/")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::judge::result::Bench;
    use kedge_core::{Case, DType, Detector};

    fn timed(imp: &str, median: f64) -> CaseResult {
        let c = Case::new("rms_norm", imp, DType::F32, [64, 1, 65535, 1]);
        let mut r = CaseResult::new(&c, Verdict::Pass, Detector::None, "");
        r.observed.bench = Some(Bench {
            times_ms: vec![median],
            median_ms: median,
            min_ms: median,
            max_ms: median,
            bytes: 2 * 64 * 65535 * 4,
            gb_per_s: (2.0 * 64.0 * 65535.0 * 4.0) / (median * 1e-3) / 1e9,
            flops: None,
            tflop_per_s: None,
            method: "cuda-events".into(),
            copy_gb_per_s: Some(4000.0),
            not_timed: None,
        });
        r
    }

    #[test]
    fn impls_of_one_shape_side_by_side() {
        let a = timed("ggml", 0.010);
        let b = timed("clamped", 0.011);
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, 65536, 1]);
        let mut f = CaseResult::new(&c, Verdict::LaunchError, Detector::Driver, "refused");
        f.observed.bench = Some(Bench {
            not_timed: Some("the judged run gave launch-error (driver)".into()),
            ..a.observed.bench.clone().unwrap()
        });
        let md = render(&[a, b, f]);
        assert!(md.contains("4000 GB/s"), "{md}");
        assert!(md.contains("## rms_norm f32 ne=[64,1,65535,1]"), "{md}");
        assert!(md.contains("| ggml | pass | 0.0100 ms"), "{md}");
        assert!(md.contains("| clamped | pass | 0.0110 ms"), "{md}");
        assert!(md.contains("1.10x"), "{md}");
        assert!(md.contains("launch-error (driver) | not timed"), "{md}");
    }
}
