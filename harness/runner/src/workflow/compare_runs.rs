//! `kedge compare-runs`: the wall time of sweeps side by side, from their
//! `sweep-summary.json` files, as a Markdown table. Speed belongs in reports, not in timed
//! tests.

use super::sweep::SweepSummary;
use crate::errors::{Error, InputError};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Read sweep summaries.
pub fn read(paths: &[PathBuf]) -> Result<Vec<(PathBuf, SweepSummary)>, Error> {
    paths
        .iter()
        .map(|p| {
            let text = std::fs::read_to_string(p).map_err(|source| InputError::Read {
                path: p.clone(),
                source,
            })?;
            let s: SweepSummary =
                serde_json::from_str(&text).map_err(|e| InputError::NotASummary {
                    path: p.clone(),
                    msg: e.to_string(),
                })?;
            Ok((p.clone(), s))
        })
        .collect()
}

/// One row per run of every summary.
pub fn render(summaries: &[(PathBuf, SweepSummary)]) -> String {
    let mut s = String::from(
        "| run | allocation | suite | cases | wall | per case | failures | workers | device |\n|---|---|---|---:|---:|---:|---:|---:|---|\n",
    );
    for (_, sum) in summaries {
        for r in &sum.runs {
            let ran = if r.ran_now > 0 { r.ran_now } else { r.cases };
            let per = if ran > 0 {
                r.wall_s * 1e3 / ran as f64
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.1} s | {per:.0} ms | {} | {} | {} |",
                r.under, r.allocs, r.suite, r.cases, r.wall_s, r.failures, r.workers, r.device
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_typed_and_older_rows_still_read() {
        let old = r#"[{"under":"native","allocs":"exact","suite":"default","cases":10,"failures":2,"wall_s":5.0,"workers":1,"device":"NVIDIA H200","driver_version":580,"gpus":[0],"per_gpu":[{"gpu":0,"cases":10,"lost":null}]}]"#;
        let s: SweepSummary = serde_json::from_str(old).unwrap();
        assert_eq!(s.runs[0].cases, 10);
        let t = render(&[("a".into(), s)]);
        assert!(
            t.contains("| native | exact | default | 10 | 5.0 s | 500 ms | 2 | 1 | NVIDIA H200 |"),
            "{t}"
        );
        assert!(serde_json::from_str::<SweepSummary>(r#"[{"under":"native"}]"#).is_err());
    }
}
