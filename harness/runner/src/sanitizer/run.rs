//! What the supervisor calls after a sanitized worker exits: the saved XML (and the text it
//! printed, when kept) → findings per case → merged into each case's `CaseResult`.

use super::attribute::is_kernel_access;
use super::{
    attribute, case_findings, enrich_from_text, parse_text, parse_xml_file, CaseFindings,
    SanitizerError, Tool,
};
use kedge_core::judge::result::Finding;
use kedge_core::{CaseResult, Detector, Verdict};
use std::path::Path;

/// One sanitized worker's records, attributed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SanitizedRun {
    tool: Option<Tool>,
    /// `per_case[k]`: findings of the k-th case this worker started.
    pub per_case: Vec<CaseFindings>,
    /// Findings before the first marker (worker start-up): belong to no case; report them
    /// with the run.
    pub preamble: CaseFindings,
    /// The XML was cut off (worker or sanitizer killed): records before the cut are here.
    pub truncated: bool,
    /// Marker records seen; fewer than the cases started means later cases never began
    /// (or their records were lost with a cut-off file).
    pub markers: usize,
}

impl SanitizedRun {
    /// Cases ran but no marker was recorded while other records were: the marker frames were
    /// not symbolized (a stripped worker binary?) or `--report-api-errors` was off, so no
    /// record can be pinned on a case. Re-run those cases one per worker instead.
    pub fn markers_missing(&self) -> bool {
        self.markers == 0 && !self.per_case.is_empty() && !self.preamble.is_empty()
    }
}

/// Parse `xml` (saved by `--xml --save`), take allocation hints from `text` (the sanitizer's
/// printed output) when given, and attribute to the `n_cases_started` cases in the order the
/// worker ran them.
pub fn analyze_run(
    xml: &Path,
    tool: Tool,
    n_cases_started: usize,
    text: Option<&str>,
) -> Result<SanitizedRun, SanitizerError> {
    let mut parsed = parse_xml_file(xml)?;
    if let Some(t) = text {
        enrich_from_text(&mut parsed.records, &parse_text(t));
    }
    let a = attribute(&parsed.records, n_cases_started);
    Ok(SanitizedRun {
        tool: Some(tool),
        per_case: a.per_case.iter().map(|r| case_findings(r, tool)).collect(),
        preamble: case_findings(&a.preamble, tool),
        truncated: parsed.truncated,
        markers: a.markers,
    })
}

/// One sentence for `CaseResult::detail` from the finding that decided the verdict.
fn finding_detail(f: &Finding) -> String {
    let mut s = format!("{}: {}", f.tool, f.text);
    if let Some(k) = &f.kernel {
        s.push_str(&format!(" in {k}"));
    }
    if let Some(a) = &f.allocation {
        s.push_str(&format!("; {a}"));
    }
    if f.count > 1 {
        s.push_str(&format!(" ({} records)", f.count));
    }
    s
}

/// Merge a case's sanitizer findings into the worker's (or supervisor's) result for it.
///
/// The findings are attached (primary then secondary). The sanitizer's verdict replaces the
/// result's when it is more severe, and also when it names a bad access and the result is
/// the `device-fault` that access caused (memcheck aborts the kernel, so the worker only saw
/// a dead context), or when it names the kernel whose hardware exception the worker saw as
/// a `device-fault` at its next sync; the displaced detector goes to `also`. Otherwise the
/// sanitizer's tool goes to `also`.
pub(crate) fn merge_into_result(result: &mut CaseResult, findings: &CaseFindings) {
    result.findings.extend(findings.all());
    let Some((verdict, tool)) = findings.verdict() else {
        return;
    };
    let Some(decider) = findings
        .primary
        .iter()
        .filter(|f| f.verdict == verdict && f.tool == tool)
        .max_by_key(|f| f.count)
    else {
        return;
    };
    // A hardware exception memcheck pinned on a kernel (an `Imprecise` record) says where the
    // fault the worker only saw at its next sync happened: the sanitizer becomes the detector.
    let names_faulting_kernel = verdict == Verdict::DeviceFault
        && decider.kernel.is_some()
        && result.verdict == Verdict::DeviceFault
        && result.detector == Detector::DeviceSync;
    // A case kedge stopped (no verdict in time, or records past the cap) while the sanitizer
    // reported out-of-bounds accesses: the accesses are what went wrong. (A race does not
    // say why a case hung: that timeout stays.)
    let stopped = result.verdict == Verdict::Timeout
        && result.detector == Detector::Supervisor
        && matches!(verdict, Verdict::OobRead | Verdict::OobWrite);
    let explains_fault = (is_kernel_access(verdict) && result.verdict == Verdict::DeviceFault)
        || stopped
        || names_faulting_kernel;
    let worse = verdict.severity() > result.verdict.severity();
    if explains_fault || worse || !result.verdict.is_failure() {
        let old = result.detector;
        if old != Detector::None && old != tool && !result.also.contains(&old) {
            result.also.push(old);
        }
        result.verdict = verdict;
        result.detector = tool;
        let why_stopped = stopped.then(|| std::mem::take(&mut result.detail));
        result.detail = finding_detail(decider);
        if let Some(w) = why_stopped {
            result.detail.push_str(&format!(" ({w})"));
        }
    } else if result.detector != tool && !result.also.contains(&tool) {
        result.also.push(tool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, DType};

    fn finding(v: Verdict, tool: Detector, kernel: Option<&str>) -> Finding {
        Finding {
            tool,
            verdict: v,
            kind: None,
            text: format!("{v} record"),
            kernel: kernel.map(String::from),
            size: None,
            address: None,
            thread: None,
            block: None,
            allocation: None,
            count: 3,
        }
    }

    fn result(v: Verdict, d: Detector) -> CaseResult {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, 1, 1]);
        CaseResult::new(&c, v, d, "worker's detail")
    }

    #[test]
    fn oob_read_explains_the_workers_device_fault() {
        let mut r = result(Verdict::DeviceFault, Detector::DeviceSync);
        let f = CaseFindings {
            primary: vec![finding(Verdict::OobRead, Detector::Memcheck, Some("k"))],
            secondary: vec![finding(Verdict::DeviceFault, Detector::Memcheck, None)],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(r.verdict, Verdict::OobRead);
        assert_eq!(r.detector, Detector::Memcheck);
        assert_eq!(r.also, vec![Detector::DeviceSync]);
        assert_eq!(r.findings.len(), 2);
        assert_eq!(r.detail, "memcheck: oob-read record in k (3 records)");
    }

    #[test]
    fn an_imprecise_exception_in_a_named_kernel_takes_over_the_workers_device_fault() {
        // The worker saw a device-fault through `worker`; memcheck reports an imprecise
        // hardware exception, in `kernel` if it could name one.
        let merged = |worker: Detector, kernel: Option<&str>| {
            let mut r = result(Verdict::DeviceFault, worker);
            let f = CaseFindings {
                primary: vec![finding(Verdict::DeviceFault, Detector::Memcheck, kernel)],
                secondary: vec![],
            };
            merge_into_result(&mut r, &f);
            r
        };
        let r = merged(Detector::DeviceSync, Some("nvjet"));
        assert_eq!(
            (r.verdict, r.detector),
            (Verdict::DeviceFault, Detector::Memcheck)
        );
        assert_eq!(r.also, vec![Detector::DeviceSync]);
        assert!(r.detail.contains("in nvjet"), "{}", r.detail);
        // Without a kernel name the sanitizer adds nothing the worker did not know.
        let r = merged(Detector::DeviceSync, None);
        assert_eq!(r.detector, Detector::DeviceSync);
        assert_eq!(r.also, vec![Detector::Memcheck]);
        // A guard page is the more specific account of the same fault: it stays.
        assert_eq!(
            merged(Detector::GuardPage, Some("nvjet")).detector,
            Detector::GuardPage
        );
    }

    #[test]
    fn bad_accesses_explain_a_case_kedge_stopped() {
        let mut r = result(Verdict::Timeout, Detector::Supervisor);
        r.detail = "stopped by kedge: the sanitizer kept reporting after 40 MiB".into();
        let f = CaseFindings {
            primary: vec![finding(Verdict::OobRead, Detector::Memcheck, Some("k"))],
            secondary: vec![],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(
            (r.verdict, r.detector),
            (Verdict::OobRead, Detector::Memcheck)
        );
        assert_eq!(r.also, vec![Detector::Supervisor]);
        assert!(
            r.detail
                .ends_with("(stopped by kedge: the sanitizer kept reporting after 40 MiB)"),
            "{}",
            r.detail
        );
        // An API error is no account of why a case hung: the timeout stays.
        let mut r = result(Verdict::Timeout, Detector::Supervisor);
        let f = CaseFindings {
            primary: vec![finding(Verdict::LaunchError, Detector::Memcheck, None)],
            secondary: vec![],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(
            (r.verdict, r.detector),
            (Verdict::Timeout, Detector::Supervisor)
        );
    }

    #[test]
    fn pass_becomes_the_sanitizer_verdict() {
        let mut r = result(Verdict::Pass, Detector::None);
        let f = CaseFindings {
            primary: vec![finding(Verdict::OobWrite, Detector::Memcheck, Some("k"))],
            secondary: vec![],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(
            (r.verdict, r.detector),
            (Verdict::OobWrite, Detector::Memcheck)
        );
        assert!(r.also.is_empty());
    }

    #[test]
    fn a_worse_worker_verdict_stays_and_names_the_tool_as_also() {
        let mut r = result(Verdict::Timeout, Detector::Supervisor);
        let f = CaseFindings {
            primary: vec![finding(Verdict::Race, Detector::Racecheck, Some("k"))],
            secondary: vec![],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(r.verdict, Verdict::Timeout);
        assert_eq!(r.also, vec![Detector::Racecheck]);
        assert_eq!(r.detail, "worker's detail");
    }

    #[test]
    fn no_failing_finding_changes_nothing_but_the_list() {
        let mut r = result(Verdict::Pass, Detector::None);
        let f = CaseFindings {
            primary: vec![],
            secondary: vec![finding(Verdict::Pass, Detector::Memcheck, None)],
        };
        merge_into_result(&mut r, &f);
        assert_eq!(r.verdict, Verdict::Pass);
        assert_eq!(r.findings.len(), 1);
    }

    #[test]
    fn analyze_run_on_the_batch_fixture() {
        let dir =
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sanitizer");
        let text = std::fs::read_to_string(dir.join("synthetic-memcheck-oob-read.txt")).unwrap();
        let run = analyze_run(
            &dir.join("synthetic-memcheck-batch-markers.xml"),
            Tool::Memcheck,
            3,
            Some(&text),
        )
        .unwrap();
        assert_eq!(run.markers, 3);
        assert!(!run.truncated);
        assert!(!run.markers_missing());
        assert!(run.per_case[0].is_empty() && run.per_case[1].is_empty());
        let f = &run.per_case[2];
        assert_eq!(f.verdict(), Some((Verdict::OobRead, Detector::Memcheck)));
        assert!(f.primary[0]
            .allocation
            .as_deref()
            .unwrap()
            .starts_with("1 bytes after"));
        let mut r = result(Verdict::DeviceFault, Detector::DeviceSync);
        merge_into_result(&mut r, f);
        assert_eq!(r.verdict, Verdict::OobRead);
        assert!(r.detail.contains("copy_shift"), "{}", r.detail);
        assert!(
            r.detail.contains("1 bytes after the nearest allocation"),
            "{}",
            r.detail
        );
    }
}
