//! The sanitizer parser and attribution on the real fixture and on `synthetic-*` fixtures.

use kedge_core::judge::result::Finding;
use kedge_core::{Detector, Verdict};
use kedge_runner::sanitizer::{
    attribute, case_findings, enrich_from_text, findings_to_verdict, parse_text, parse_xml,
    parse_xml_file, Direction, Record, RecordClass, RecordKind, SanitizerError, Tool,
};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sanitizer")
        .join(name)
}

fn read(name: &str) -> String {
    std::fs::read_to_string(fixture(name)).unwrap()
}

const REAL: &str = "memcheck-oob-read-exact-alloc.xml";

#[test]
fn real_fixture_parses_into_typed_records() {
    let p = parse_xml_file(&fixture(REAL)).unwrap();
    assert!(!p.truncated);
    assert_eq!(p.records.len(), 10);
    let r = &p.records[0];
    assert_eq!(r.kind, RecordKind::Precise);
    assert_eq!(r.level.as_deref(), Some("Error"));
    assert_eq!(
        r.text,
        "Invalid __global__ read of size 4 bytes is out of bounds"
    );
    assert_eq!(r.space.as_deref(), Some("__global__"));
    assert_eq!(r.size, Some(4));
    assert_eq!(r.direction, Some(Direction::Read));
    assert_eq!(r.error.as_deref(), Some("out of bounds"));
    assert_eq!(r.address.as_deref(), Some("0x48ea000fa0"));
    assert_eq!(r.kernel.as_deref(), Some("copy_shift"));
    assert_eq!(r.pc.as_deref(), Some("0xe0"));
    assert_eq!(r.thread, Some([999, 0, 0]));
    assert_eq!(r.block, Some([0, 0, 0]));
    assert_eq!(r.host_frames[0], "cuLaunchKernel");
    assert_eq!(r.host_frames[1], "probe::main::hde264413ed10d051");
    // A frame without <func> (libc) is left out, not an empty string.
    assert!(r.host_frames.iter().all(|f| !f.is_empty()));
    assert!(r.api.is_none());
    // The real XML does not carry "N bytes after the nearest allocation".
    assert!(r.allocation.is_none());

    let a = &p.records[1];
    assert_eq!(a.kind, RecordKind::Api);
    let api = a.api.as_ref().unwrap();
    assert_eq!(api.api, "cuStreamSynchronize");
    assert_eq!(api.error, "CUDA_ERROR_LAUNCH_FAILED");
    assert_eq!(api.message.as_deref(), Some("unspecified launch failure"));
    assert_eq!(api.result, Some(719));
    // Entities (`&quot;`) are resolved.
    assert!(
        a.text.contains("due to \"unspecified launch failure\""),
        "{}",
        a.text
    );
    assert!(!a.is_marker());
    let apis: Vec<&str> = p.records[1..]
        .iter()
        .map(|r| r.api.as_ref().unwrap().api.as_str())
        .collect();
    assert_eq!(
        apis,
        [
            "cuStreamSynchronize",
            "cuMemcpyDtoHAsync_v2",
            "cuMemFreeAsync",
            "cuEventDestroy_v2",
            "cuEventDestroy_v2",
            "cuMemFreeAsync",
            "cuEventDestroy_v2",
            "cuEventDestroy_v2",
            "cuModuleUnload"
        ]
    );
}

#[test]
fn real_fixture_is_one_oob_read_with_the_launch_failures_secondary() {
    let p = parse_xml_file(&fixture(REAL)).unwrap();
    // A single-case run whose worker called no marker: everything is the preamble; treat
    // the whole file as one case the way a supervisor would for a marker-less run.
    let f = case_findings(&p.records, Tool::Memcheck);
    assert_eq!(f.primary.len(), 1, "{:#?}", f.primary);
    let oob = &f.primary[0];
    assert_eq!(oob.verdict, Verdict::OobRead);
    assert_eq!(oob.tool, Detector::Memcheck);
    assert_eq!(oob.kernel.as_deref(), Some("copy_shift"));
    assert_eq!(oob.size, Some(4));
    assert_eq!(oob.thread, Some([999, 0, 0]));
    assert_eq!(oob.count, 1);
    // Nine LAUNCH_FAILED records over five distinct API calls, all consequences.
    assert!(f
        .secondary
        .iter()
        .all(|s| s.verdict == Verdict::DeviceFault));
    assert_eq!(f.secondary.iter().map(|s| s.count).sum::<u64>(), 9);
    assert_eq!(f.secondary.len(), 5);
    assert_eq!(f.verdict(), Some((Verdict::OobRead, Detector::Memcheck)));
}

#[test]
fn launch_failures_alone_are_a_primary_device_fault() {
    let p = parse_xml_file(&fixture(REAL)).unwrap();
    // Without the kernel record nothing explains the dead context: the API error is primary.
    let f = case_findings(&p.records[1..], Tool::Memcheck);
    assert_eq!(
        f.verdict(),
        Some((Verdict::DeviceFault, Detector::Memcheck))
    );
    assert!(f.secondary.is_empty());
}

#[test]
fn text_output_gives_how_far_past_which_allocation() {
    let t = parse_text(&read("synthetic-memcheck-oob-read.txt"));
    assert_eq!(t.len(), 2, "{t:#?}");
    assert_eq!(t[0].header, "Invalid __global__ read of size 4 bytes");
    assert_eq!(t[0].kernel.as_deref(), Some("copy_shift"));
    assert_eq!(t[0].size, Some(4));
    assert_eq!(t[0].direction, Some(Direction::Read));
    assert_eq!(t[0].thread, Some([999, 0, 0]));
    assert_eq!(t[0].address.as_deref(), Some("0x48ea000fa0"));
    let h = t[0].allocation.as_ref().unwrap();
    assert_eq!((h.distance, h.after, h.size), (1, true, 4000));
    assert_eq!(h.base, "0x48ea000000");
    assert!(t[1]
        .header
        .starts_with("Program hit CUDA_ERROR_LAUNCH_FAILED"));

    let mut p = parse_xml_file(&fixture(REAL)).unwrap();
    assert_eq!(enrich_from_text(&mut p.records, &t), 1);
    let f = case_findings(&p.records, Tool::Memcheck);
    assert_eq!(
        f.primary[0].allocation.as_deref(),
        Some("1 bytes after the nearest allocation at 0x48ea000000 of size 4000 bytes")
    );
}

#[test]
fn allocation_sentence_inside_xml_is_used() {
    let doc = "<ComputeSanitizerOutput><record><kind>Precise</kind><what>\
        <text>Invalid __global__ read of size 4 bytes</text><size>4</size>\
        <direction>read</direction><address>0x10</address>\
        <auxText>and is 4 bytes after the nearest allocation at 0x0 of size 12 bytes</auxText>\
        </what><where><func>k</func></where></record></ComputeSanitizerOutput>";
    let p = parse_xml(doc).unwrap();
    let h = p.records[0].allocation.as_ref().unwrap();
    assert_eq!((h.distance, h.size), (4, 12));
}

#[test]
fn batch_fixture_attributes_the_fault_to_the_third_case() {
    let p = parse_xml_file(&fixture("synthetic-memcheck-batch-markers.xml")).unwrap();
    assert!(!p.truncated);
    let a = attribute(&p.records, 3);
    assert_eq!(a.markers, 3);
    assert!(a.preamble.is_empty());
    assert!(a.per_case[0].is_empty() && a.per_case[1].is_empty());
    assert!(a.per_case.iter().flatten().all(|r| !r.is_marker()));
    let f = case_findings(&a.per_case[2], Tool::Memcheck);
    assert_eq!(f.verdict(), Some((Verdict::OobRead, Detector::Memcheck)));
    assert_eq!(f.secondary.len(), 3);
}

#[test]
fn truncated_file_returns_the_records_before_the_cut() {
    let p = parse_xml_file(&fixture("synthetic-memcheck-truncated.xml")).unwrap();
    assert!(p.truncated);
    // Three markers and the out-of-bounds record are whole; the API record was cut.
    assert_eq!(p.records.len(), 4);
    let a = attribute(&p.records, 3);
    let f = case_findings(&a.per_case[2], Tool::Memcheck);
    assert_eq!(f.verdict(), Some((Verdict::OobRead, Detector::Memcheck)));
}

#[test]
fn every_cut_of_the_real_fixture_is_handled_without_panic() {
    let full = read(REAL);
    let mut last = 0;
    for cut in (0..full.len()).step_by(7).chain([full.len()]) {
        // Cut on a char boundary (the fixture is ASCII, but stay honest).
        if !full.is_char_boundary(cut) {
            continue;
        }
        let p = parse_xml(&full[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert_eq!(p.truncated, cut < full.trim_end().len(), "cut at {cut}");
        assert!(p.records.len() >= last, "records went down at {cut}");
        assert_eq!(
            p.records.len(),
            full[..cut].matches("</record>").count(),
            "cut at {cut}"
        );
        last = p.records.len();
    }
    assert_eq!(last, 10);
}

#[test]
fn truncated_bytes_that_are_not_utf8_are_not_fatal() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("cut.xml");
    let mut bytes = read(REAL).into_bytes();
    bytes.truncate(3000);
    bytes.extend_from_slice(&[0xE2, 0x82]); // half of a 3-byte character
    std::fs::write(&path, bytes).unwrap();
    let p = parse_xml_file(&path).unwrap();
    assert!(p.truncated);
    assert!(matches!(
        parse_xml_file(&d.path().join("missing.xml")),
        Err(SanitizerError::Io { .. })
    ));
}

#[test]
fn malformed_xml_is_a_typed_error_with_line() {
    let mut s = read(REAL);
    s = s.replacen("</level>", "</levle>", 1);
    match parse_xml(&s) {
        Err(SanitizerError::Malformed { line, msg, .. }) => {
            // Line 5 of the file: `<level>Error</levle>` of the first record.
            assert_eq!(line, 5, "{msg}");
            assert!(msg.contains("levle"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn initcheck_fixture_folds_two_threads_into_one_uninit_read() {
    let p = parse_xml_file(&fixture("synthetic-initcheck-uninit-read.xml")).unwrap();
    let a = attribute(&p.records, 2);
    assert_eq!(a.markers, 2);
    let f = case_findings(&a.per_case[0], Tool::Initcheck);
    assert_eq!(f.primary.len(), 1);
    assert_eq!(f.primary[0].count, 2);
    assert_eq!(f.primary[0].verdict, Verdict::UninitRead);
    assert_eq!(f.primary[0].kernel.as_deref(), Some("rms_norm_f32"));
    assert_eq!(
        f.verdict(),
        Some((Verdict::UninitRead, Detector::Initcheck))
    );
    assert!(case_findings(&a.per_case[1], Tool::Initcheck).is_empty());
}

#[test]
fn racecheck_fixture_is_a_race_in_the_second_case() {
    let p = parse_xml_file(&fixture("synthetic-racecheck-hazard.xml")).unwrap();
    let a = attribute(&p.records, 2);
    assert!(a.per_case[0].is_empty());
    let r = &a.per_case[1][0];
    assert_eq!(r.kind, RecordKind::Hazard);
    assert_eq!(r.field("hazard/type"), Some("RAW"));
    assert_eq!(r.space.as_deref(), Some("__shared__"));
    let f = case_findings(&a.per_case[1], Tool::Racecheck);
    assert_eq!(f.verdict(), Some((Verdict::Race, Detector::Racecheck)));
}

#[test]
fn synccheck_fixture_is_a_sync_error() {
    let p = parse_xml_file(&fixture("synthetic-synccheck-barrier.xml")).unwrap();
    let a = attribute(&p.records, 1);
    let f = case_findings(&a.per_case[0], Tool::Synccheck);
    assert_eq!(f.verdict(), Some((Verdict::SyncError, Detector::Synccheck)));
    assert_eq!(f.primary[0].kernel.as_deref(), Some("cumsum_f32"));
    assert_eq!(f.primary[0].thread, Some([5, 0, 0]));
}

// ---- attribution: batch == alone ----------------------------------------------------------

/// `<record>` blocks of a fixture, as XML text.
fn record_blocks(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find("<record>") {
        let j = rest[i..].find("</record>").unwrap() + i + "</record>".len();
        out.push(rest[i..j].to_string());
        rest = &rest[j..];
    }
    out
}

fn wrap(body: &str) -> String {
    format!("<?xml version=\"1.0\"?>\n<ComputeSanitizerOutput>\n{body}</ComputeSanitizerOutput>\n")
}

fn marker_block() -> String {
    let batch = read("synthetic-memcheck-batch-markers.xml");
    let m = record_blocks(&batch).remove(0);
    assert!(m.contains("kedge_case_marker"));
    m
}

/// Findings per case when the cases' records are run as one batch, and when each case runs
/// alone in its own worker (marker 0 then its records).
fn batch_and_alone(cases: &[String], tool: Tool) -> (Vec<Vec<Finding>>, Vec<Vec<Finding>>) {
    let m = marker_block();
    let batch_doc = wrap(&cases.iter().map(|c| format!("{m}{c}")).collect::<String>());
    let batch = parse_xml(&batch_doc).unwrap();
    let a = attribute(&batch.records, cases.len());
    assert_eq!(a.markers, cases.len());
    let in_batch = a
        .per_case
        .iter()
        .map(|rs| case_findings(rs, tool).all())
        .collect();
    let alone = cases
        .iter()
        .map(|c| {
            let p = parse_xml(&wrap(&format!("{m}{c}"))).unwrap();
            let a = attribute(&p.records, 1);
            case_findings(&a.per_case[0], tool).all()
        })
        .collect();
    (in_batch, alone)
}

#[test]
fn memcheck_batch_attributes_exactly_as_each_case_alone() {
    let real = record_blocks(&read(REAL));
    let faulting_case = real.concat(); // the OOB read and the API errors after it
    let cases = vec![String::new(), String::new(), faulting_case];
    let (batch, alone) = batch_and_alone(&cases, Tool::Memcheck);
    assert_eq!(batch, alone);
    assert!(batch[0].is_empty() && batch[1].is_empty());
    assert_eq!(findings_to_verdict(&batch[2]).unwrap().0, Verdict::OobRead);
}

#[test]
fn non_fatal_tool_batch_attributes_exactly_as_each_case_alone() {
    let race = record_blocks(&read("synthetic-racecheck-hazard.xml"))
        .into_iter()
        .find(|b| b.contains("<kind>Hazard</kind>"))
        .unwrap();
    let other_kernel = race.replace("softmax_f32", "cumsum_f32");
    let cases = vec![
        race.clone(),
        String::new(),
        format!("{race}{race}{other_kernel}"),
        String::new(),
        other_kernel,
    ];
    let (batch, alone) = batch_and_alone(&cases, Tool::Racecheck);
    assert_eq!(batch, alone);
    let counts: Vec<Vec<u64>> = batch
        .iter()
        .map(|f| f.iter().map(|x| x.count).collect())
        .collect();
    assert_eq!(counts, vec![vec![1], vec![], vec![2, 1], vec![], vec![1]]);
}

#[test]
fn records_before_the_first_marker_are_preamble_and_after_the_last_go_to_the_last_case() {
    let p = parse_xml_file(&fixture(REAL)).unwrap();
    let m = parse_xml(&wrap(&marker_block())).unwrap().records.remove(0);
    let api = p.records[1].clone();
    let oob = p.records[0].clone();
    let recs: Vec<Record> = vec![api.clone(), m.clone(), m.clone(), oob.clone(), api.clone()];
    let a = attribute(&recs, 2);
    assert_eq!(a.preamble, vec![api.clone()]);
    assert!(a.per_case[0].is_empty());
    assert_eq!(a.per_case[1], vec![oob.clone(), api.clone()]);
    // More markers than cases the supervisor counted: nothing is dropped.
    let recs = vec![m.clone(), m.clone(), oob.clone(), m.clone(), api.clone()];
    let a = attribute(&recs, 2);
    assert_eq!(a.markers, 3);
    assert_eq!(a.per_case[1], vec![oob, api]);
    // Zero cases started: all preamble.
    let a = attribute(&recs, 0);
    assert!(a.per_case.is_empty());
    assert_eq!(a.preamble.len(), 2);
}

#[test]
fn marker_records_are_never_findings() {
    let m = parse_xml(&wrap(&marker_block())).unwrap().records.remove(0);
    assert!(m.is_marker());
    assert_eq!(RecordClass::of(&m, Tool::Memcheck), RecordClass::Marker);
    assert!(case_findings(&[m.clone(), m], Tool::Memcheck).is_empty());
}

#[test]
fn leak_records_are_kept_but_fail_nothing() {
    let doc = wrap(
        "<record><kind>Leak</kind><what><text>Leaked 4000 bytes at 0x7f00 </text>\
         <size>4000</size></what></record>",
    );
    let p = parse_xml(&doc).unwrap();
    let f = case_findings(&p.records, Tool::Memcheck);
    assert!(f.primary.is_empty());
    assert_eq!(f.secondary.len(), 1);
    assert_eq!(f.verdict(), None);
}

#[test]
fn api_errors_that_are_not_faults_are_primary() {
    let doc = wrap(
        "<record><kind>Api</kind><what><text>Program hit CUDA_ERROR_INVALID_VALUE on cuLaunchKernel</text>\
         <api>cuLaunchKernel</api><error>CUDA_ERROR_INVALID_VALUE</error><result>1</result></what></record>\
         <record><kind>Api</kind><what><api>cuMemAlloc_v2</api><error>CUDA_ERROR_OUT_OF_MEMORY</error>\
         <result>2</result></what></record>",
    );
    let p = parse_xml(&doc).unwrap();
    let f = case_findings(&p.records, Tool::Memcheck);
    let v: Vec<Verdict> = f.primary.iter().map(|x| x.verdict).collect();
    assert_eq!(v, [Verdict::LaunchError, Verdict::ResourceLimit]);
    assert_eq!(
        f.primary[1].text,
        "cuMemAlloc_v2 returned CUDA_ERROR_OUT_OF_MEMORY"
    );
    assert_eq!(
        f.verdict(),
        Some((Verdict::LaunchError, Detector::Memcheck))
    );
}

#[test]
fn most_severe_finding_wins() {
    let mk = |v: Verdict, tool: Detector| Finding {
        tool,
        verdict: v,
        kind: None,
        text: String::new(),
        kernel: None,
        size: None,
        address: None,
        thread: None,
        block: None,
        allocation: None,
        count: 1,
    };
    assert_eq!(findings_to_verdict(&[]), None);
    assert_eq!(
        findings_to_verdict(&[mk(Verdict::Pass, Detector::Memcheck)]),
        None
    );
    assert_eq!(
        findings_to_verdict(&[
            mk(Verdict::Race, Detector::Racecheck),
            mk(Verdict::OobWrite, Detector::Memcheck),
            mk(Verdict::UninitRead, Detector::Initcheck),
            mk(Verdict::OobRead, Detector::Memcheck),
        ]),
        Some((Verdict::OobWrite, Detector::Memcheck))
    );
    assert_eq!(
        findings_to_verdict(&[
            mk(Verdict::OobRead, Detector::Memcheck),
            mk(Verdict::DeviceFault, Detector::Memcheck),
        ]),
        Some((Verdict::OobRead, Detector::Memcheck)),
        "an API device-fault is the consequence of the access, not a worse finding"
    );
    let mut kernel_fault = mk(Verdict::DeviceFault, Detector::Memcheck);
    kernel_fault.kernel = Some("k".into());
    assert_eq!(
        findings_to_verdict(&[mk(Verdict::OobRead, Detector::Memcheck), kernel_fault]),
        Some((Verdict::DeviceFault, Detector::Memcheck)),
        "an imprecise fault inside a kernel is its own finding"
    );
    assert_eq!(
        findings_to_verdict(&[mk(Verdict::DeviceFault, Detector::Memcheck)]),
        Some((Verdict::DeviceFault, Detector::Memcheck))
    );
}

#[test]
fn write_direction_gives_oob_write() {
    let s = read(REAL).replacen(
        "<direction>read</direction>",
        "<direction>write</direction>",
        1,
    );
    let p = parse_xml(&s).unwrap();
    assert_eq!(
        case_findings(&p.records, Tool::Memcheck).verdict(),
        Some((Verdict::OobWrite, Detector::Memcheck))
    );
}

#[test]
fn a_marker_in_a_dead_context_is_still_a_marker() {
    // After a fault, the marker's cuMemAlloc returns LAUNCH_FAILED instead of INVALID_VALUE;
    // the frame, not the error, makes it a marker.
    let m = marker_block()
        .replace("CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_LAUNCH_FAILED")
        .replace("<result>1</result>", "<result>719</result>");
    let p = parse_xml(&wrap(&m)).unwrap();
    assert!(p.records[0].is_marker());
    assert!(case_findings(&p.records, Tool::Memcheck).is_empty());
    // Without the marker frame the same record is a device fault.
    let not_marker = m.replace("kedge_case_marker", "some_other_fn");
    let p = parse_xml(&wrap(&not_marker)).unwrap();
    assert_eq!(
        case_findings(&p.records, Tool::Memcheck).verdict(),
        Some((Verdict::DeviceFault, Detector::Memcheck))
    );
}
