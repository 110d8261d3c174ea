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

use kedge_core::{Detector, Verdict};
use kedge_runner::sanitizer::{analyze_run, Tool};
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

/// A stripped kedge binary (packagers strip; `profile.release.strip = true` does) leaves the
/// host frames without names: the parser drops unnamed frames, so no frame says
/// `kedge_case_marker`. The marker is still its call and error: the same attribution.
#[test]
fn a_stripped_binary_attributes_the_same_way() {
    let xml = std::fs::read_to_string(fixture("h200-memcheck-batch-markers.xml")).unwrap();
    assert!(xml.contains("<func>kedge_case_marker</func>"));
    let stripped: String = xml
        .lines()
        .filter(|l| !l.trim_start().starts_with("<func>"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stripped.xml");
    std::fs::write(&path, stripped).unwrap();
    let run = analyze_run(&path, Tool::Memcheck, 7, None).unwrap();
    assert_eq!(run.markers, 7);
    for (i, cf) in run.per_case.iter().enumerate().take(6) {
        assert_eq!(cf.verdict(), None, "case {i} was clean");
    }
    assert_eq!(
        run.per_case[6].verdict(),
        Some((Verdict::OobRead, Detector::Memcheck))
    );
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
    // and gives them to that case (harness/cli/src/main.rs, sanitize_spec).
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

/// A memcheck worker of the fp8_gemm boundary sweep (commit dd2acc6): 12 cases passed, the
/// 13th (`bucketed-short`, M = 257 in bucket 512, 783,360 bytes read past its staging) made
/// cuBLASLt's Hopper GEMM kernel fault. memcheck reports no precise out-of-bounds access for
/// it, only `Imprecise` records (hardware exception "Warp illegal address"); 1,216 of them in
/// the original file, 3 kept here.
#[test]
fn memcheck_names_the_cublaslt_kernel_of_an_imprecise_fault() {
    let run = analyze_run(
        &fixture("h200-memcheck-cublaslt-imprecise.xml"),
        Tool::Memcheck,
        13,
        None,
    )
    .unwrap();
    assert_eq!(run.markers, 13);
    for (i, cf) in run.per_case.iter().enumerate().take(12) {
        assert_eq!(cf.verdict(), None, "case {i} was clean");
    }
    let last = &run.per_case[12];
    assert_eq!(
        last.verdict(),
        Some((Verdict::DeviceFault, Detector::Memcheck))
    );
    let f = &last.primary[0];
    assert_eq!(
        f.kernel.as_deref(),
        Some("nvjet_sm90_qqtst_64x24_128x16_2x4_h_bz_algo2_TNT")
    );
    assert!(f.text.contains("Warp illegal address"), "{}", f.text);
    assert_eq!(f.count, 3, "the three records are one finding");
    assert_eq!(f.address, None, "imprecise: memcheck has no address");
}

/// A synccheck worker of the smoke suite (rms_norm, softmax, cumsum, zoo_rows): clean, so the
/// file is the empty root element, which must parse as no records rather than an error.
#[test]
fn a_clean_synccheck_run_is_no_records() {
    let run = analyze_run(
        &fixture("h200-synccheck-clean.xml"),
        Tool::Synccheck,
        1,
        None,
    )
    .unwrap();
    assert!(run.per_case.iter().all(|c| c.is_empty()));
    assert!(run.preamble.is_empty());
    assert!(!run.truncated);
}
