//! The parser and the attribution against compute-sanitizer XML captured on the H200
//! (compute-sanitizer 2025.3.1, driver 580.159.04) by kedge's own sanitized workers:
//! - a memcheck worker that ran 6 clean rms_norm cases, then the calibration impl that reads
//!   one f32 past its input (7 `kedge_case_marker` API records, one Precise record, the
//!   LAUNCH_FAILED records after the kernel was aborted, and 0-byte leak records at exit);
//! - an initcheck worker (one case per worker: initcheck reports no API errors, so no markers)
//!   running the zoo's planted uninitialized global read;
//! - a racecheck worker running the zoo's planted missing `__syncthreads`.
//!
//! Host paths inside the files were replaced by WORKDIR / kedge.

use kedge::sanitizer::{analyze_run, Tool};
use kedge_core::{Detector, Verdict};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sanitizer")
        .join(name)
}

#[test]
fn memcheck_batch_attributes_the_read_to_the_seventh_case_only() {
    let run = analyze_run(
        &fixture("h200-memcheck-batch-markers.xml"),
        Tool::Memcheck,
        7,
        None,
    )
    .unwrap();
    assert_eq!(run.markers, 7);
    assert!(!run.truncated);
    for (i, cf) in run.per_case.iter().enumerate().take(6) {
        assert_eq!(cf.verdict(), None, "case {i} was clean");
    }
    let last = &run.per_case[6];
    assert_eq!(last.verdict(), Some((Verdict::OobRead, Detector::Memcheck)));
    let f = &last.primary[0];
    assert_eq!(f.kernel.as_deref(), Some("rms_norm_planted_read_past_end"));
    assert_eq!(f.size, Some(4));
    assert_eq!(f.count, 1);
    // The LAUNCH_FAILED API errors after the abort are kept, as consequences.
    assert!(last
        .secondary
        .iter()
        .any(|s| s.text.contains("CUDA_ERROR_LAUNCH_FAILED")));
}

#[test]
fn initcheck_and_racecheck_records_give_their_verdicts() {
    let ic = analyze_run(
        &fixture("h200-initcheck-uninit-read.xml"),
        Tool::Initcheck,
        1,
        None,
    )
    .unwrap();
    assert_eq!(ic.markers, 0, "initcheck records no API errors: no markers");
    // With no markers every record is in the preamble; kedge then runs one case per worker
    // and gives them to that case (harness/src/main.rs, sanitize_spec).
    let all = if ic.per_case[0].primary.is_empty() {
        &ic.preamble
    } else {
        &ic.per_case[0]
    };
    assert_eq!(
        all.verdict(),
        Some((Verdict::UninitRead, Detector::Initcheck))
    );
    assert!(all.primary.iter().any(
        |f| f.kernel.as_deref() == Some("zoo_rows_uninit_global_read")
            || f.text.contains("Uninitialized")
    ));

    let rc = analyze_run(
        &fixture("h200-racecheck-race.xml"),
        Tool::Racecheck,
        1,
        None,
    )
    .unwrap();
    let all = if rc.per_case[0].primary.is_empty() {
        &rc.preamble
    } else {
        &rc.per_case[0]
    };
    assert_eq!(all.verdict(), Some((Verdict::Race, Detector::Racecheck)));
}
