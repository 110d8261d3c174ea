//! Attribution must not depend on luck: a batch of cases run in one sanitized worker gets the
//! same findings per case as each case run alone. Here the "sanitizer" is a shell wrapper that
//! writes compute-sanitizer XML the way the real tool does for kedge's workers (a marker `Api`
//! record with a `kedge_case_marker` host frame before each case, a `Precise` out-of-bounds
//! record for a case that reads past its end) around a fake worker, so the real supervisor,
//! XML parser and attribution run end to end without a GPU. The same comparison on the H200,
//! with the real compute-sanitizer, is in scripts/device-check.sh.

use kedge_core::{Case, CaseResult, DType, Detector, Tool, Under, Verdict};
use kedge_runner::run::supervisor::RunSummary;
use kedge_runner::run::{SanitizeSpec, Supervisor, SupervisorConfig, WorkerSpec};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const FAKE_SANITIZER: &str = r#"#!/usr/bin/env bash
# usage: fake-sanitizer.sh XML -- WORKER...   (seed 13 reads past its end; seed 666 also crashes;
# seed 77 reads past its end from every thread: records without end, no verdict; seed 88 takes
# the tool down before it writes a report)
xml="$1"; shift; shift
dir="$(dirname "$0")"
IFS= read -r spec
echo '<?xml version="1.0" encoding="utf-8"?>' > "$xml"
echo '<ComputeSanitizerOutput>' >> "$xml"
echo "========= COMPUTE-SANITIZER"
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"limits":%s}}\n' "$$" "$(cat "$dir/limits.json")"
while IFS= read -r line; do
  case "$line" in *'"warm_up"'*) continue ;; esac   # get ready: nothing to answer
  cat "$dir/marker.xml" >> "$xml"
  case "$line" in
    *'"seed":13'*|*'"seed":666'*) cat "$dir/oob.xml" >> "$xml" ;;
  esac
  case "$line" in
    *'"seed":666'*) exit 1 ;;   # dies mid-batch: the file is left without its closing tag
    *'"seed":77'*) while :; do cat "$dir/oob.xml" >> "$xml"; sleep 0.01; done ;;
    *'"seed":88'*) rm -f "$xml"; exit 1 ;;   # the tool dies before writing its report
  esac
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
echo '</ComputeSanitizerOutput>' >> "$xml"
"#;

/// A tool in two processes, as compute-sanitizer is: the worker in a child process, the
/// report written when that worker ends (killed or not), none if the tool itself is killed.
/// Seed 13 reads past its end; seed 99 never answers.
const FAKE_TOOL_AT_EXIT: &str = r#"#!/usr/bin/env bash
xml="$1"; shift; shift
dir="$(dirname "$0")"
part="$xml.part"
printf '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n' > "$part"
(
  IFS= read -r spec
  printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"limits":%s}}\n' "$BASHPID" "$(cat "$dir/limits.json")"
  while IFS= read -r line; do
    case "$line" in *'"warm_up"'*) continue ;; esac
    cat "$dir/marker.xml" >> "$part"
    case "$line" in *'"seed":13'*) cat "$dir/oob.xml" >> "$part" ;; esac
    case "$line" in *'"seed":99'*) exec sleep 60 ;; esac
    echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
  done
)
echo '</ComputeSanitizerOutput>' >> "$part"
mv "$part" "$xml"
"#;

const MARKER: &str = r#"  <record>
    <kind>Api</kind>
    <what>
      <text>Program hit CUDA_ERROR_INVALID_VALUE (error 1) due to &quot;invalid argument&quot; on CUDA API call to cuMemAlloc_v2.</text>
      <api>cuMemAlloc_v2</api>
      <error>CUDA_ERROR_INVALID_VALUE</error>
      <message>invalid argument</message>
      <result>1</result>
    </what>
    <hostStack>
      <saveLocation>error</saveLocation>
      <frame><func>cuMemAlloc_v2</func><pc>0x1</pc><module>libcuda.so.1</module></frame>
      <frame><func>kedge_case_marker</func><pc>0x2</pc><module>kedge</module></frame>
    </hostStack>
  </record>
"#;

fn setup(dir: &Path) -> std::path::PathBuf {
    let limits =
        serde_json::to_string(&kedge_core::LimitsProfile::builtin("h200").unwrap()).unwrap();
    std::fs::write(dir.join("limits.json"), limits).unwrap();
    std::fs::write(dir.join("marker.xml"), MARKER).unwrap();
    // The Precise record of the real fixture captured on an H200.
    let fixture = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/sanitizer/memcheck-oob-read-exact-alloc.xml"
    ))
    .expect("the memcheck fixture");
    let start = fixture.find("<record>").unwrap();
    let end = fixture.find("</record>").unwrap() + "</record>".len();
    std::fs::write(dir.join("oob.xml"), format!("  {}\n", &fixture[start..end])).unwrap();
    let p = dir.join("fake-sanitizer.sh");
    std::fs::write(&p, FAKE_SANITIZER).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// `setup`, with `script` as the tool instead of the fake sanitizer: its path.
fn setup_tool(dir: &Path, script: &str) -> std::path::PathBuf {
    setup(dir);
    let p = dir.join("fake-tool.sh");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn run(dir: &Path, wrapper: &Path, cases: &[Case], batch: usize) -> Vec<CaseResult> {
    let tool = Tool::Memcheck;
    let spec = SanitizeSpec {
        tool,
        prefix: vec![wrapper.display().to_string(), "{xml}".into(), "--".into()],
        attribute: Box::new(move |xml: &Path, started: usize| {
            let parsed = kedge_runner::sanitizer::parse_xml_file(xml).map_err(|e| e.to_string())?;
            let att = kedge_runner::sanitizer::attribute(&parsed.records, started);
            Ok(att
                .per_case
                .iter()
                .map(|r| kedge_runner::sanitizer::case_findings(r, tool))
                .collect())
        }),
        batch,
        record_cap: None,
    };
    let mut sup = Supervisor::new(SupervisorConfig {
        exe: "unused-by-the-fake".into(),
        spec: WorkerSpec::default(),
        timeout: Duration::from_secs(10),
        ready_timeout: Duration::from_secs(10),
        sanitize: Some(spec),
        work_dir: dir.join(format!("w{batch}")),
        keep_worker: false,
    });
    let mut out = Vec::new();
    sup.run(cases, &mut |r| {
        out.push(r);
        Ok(())
    })
    .unwrap();
    out
}

fn case(seed: u64) -> Case {
    let mut c = Case::new("rms_norm", "clamped", DType::F32, [64, 2, 1, 1]);
    c.seed = seed;
    c
}

/// A supervisor around the fake sanitizer with kedge's own attribution: `batch` cases per
/// worker, records past `record_cap` bytes cut, a case killed after `timeout_s`.
fn supervisor(
    dir: &Path,
    wrapper: &Path,
    batch: usize,
    record_cap: Option<u64>,
    timeout_s: u64,
) -> Supervisor {
    let tool = Tool::Memcheck;
    Supervisor::new(SupervisorConfig {
        exe: "unused-by-the-fake".into(),
        spec: WorkerSpec::default(),
        timeout: Duration::from_secs(timeout_s),
        ready_timeout: Duration::from_secs(10),
        sanitize: Some(SanitizeSpec {
            tool,
            prefix: vec![wrapper.display().to_string(), "{xml}".into(), "--".into()],
            attribute: kedge_runner::run::attribution(tool),
            batch,
            record_cap,
        }),
        work_dir: dir.join("w"),
        keep_worker: false,
    })
}

/// Run the cases of these seeds through `sup`: every result in the order it came, and the run's
/// summary.
fn run_seeds(sup: &mut Supervisor, seeds: &[u64]) -> (Vec<CaseResult>, RunSummary) {
    let cases: Vec<Case> = seeds.iter().copied().map(case).collect();
    let mut out = Vec::new();
    let summary = sup
        .run(&cases, &mut |r| {
            out.push(r);
            Ok(())
        })
        .expect("the run goes on");
    (out, summary)
}

/// Each result's seed, verdict and detector, in order.
fn verdicts(out: &[CaseResult]) -> Vec<(u64, Verdict, Detector)> {
    out.iter()
        .map(|r| (r.case.seed, r.verdict, r.detector))
        .collect()
}

#[test]
fn batch_attribution_equals_one_case_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    let cases: Vec<Case> = [1, 13, 2, 3, 13, 666, 4, 5].into_iter().map(case).collect();
    // Distinct ids for the two seed-13 cases: different shapes.
    let mut cases = cases;
    cases[4].ne = [32, 2, 1, 1];
    let batched = run(dir.path(), &wrapper, &cases, 16);
    let alone = run(dir.path(), &wrapper, &cases, 1);
    assert_eq!(batched.len(), cases.len());
    assert_eq!(alone.len(), cases.len());
    let key = |r: &CaseResult| {
        (
            r.case.clone(),
            r.verdict,
            r.detector,
            r.findings
                .iter()
                .map(|f| (f.text.clone(), f.count))
                .collect::<Vec<_>>(),
        )
    };
    for (b, a) in batched.iter().zip(&alone) {
        assert_eq!(key(b), key(a), "case {}", b.case.label());
    }
    for r in &batched {
        match r.case.seed {
            13 | 666 => {
                assert_eq!(r.verdict, Verdict::OobRead, "{}", r.detail);
                assert_eq!(r.detector, Detector::Memcheck);
                assert_eq!(r.findings[0].kernel.as_deref(), Some("copy_shift"));
            }
            _ => assert_eq!(r.verdict, Verdict::Pass, "{}: {}", r.case.label(), r.detail),
        }
        assert_eq!(r.under, Under::Tool(Tool::Memcheck));
    }
    // The crash (seed 666) also left its supervisor verdict in `also`.
    let crashed = batched.iter().find(|r| r.case.seed == 666).unwrap();
    assert!(
        crashed.also.contains(&Detector::Supervisor),
        "{:?}",
        crashed.also
    );
}

/// A sanitizer that writes no marker records (set up to hide API errors, say): a batch's
/// records cannot be split between its cases, so the supervisor runs that batch again one
/// case per worker, with kedge's own attribution, and says so. The sweep never stops for it.
#[test]
fn an_unattributable_batch_runs_again_one_case_per_worker() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    std::fs::write(dir.path().join("marker.xml"), "").unwrap();
    let mut sup = supervisor(dir.path(), &wrapper, 16, None, 10);
    let (out, summary) = run_seeds(&mut sup, &[1, 13, 2]);
    assert_eq!(out.len(), 3);
    assert_eq!(summary.ran, 3);
    // One worker for the batch, then one per case.
    assert_eq!(summary.workers_started, 4);
    for r in &out {
        assert!(r.detail.contains("run alone"), "{}", r.detail);
        if r.case.seed == 13 {
            assert_eq!(
                (r.verdict, r.detector),
                (Verdict::OobRead, Detector::Memcheck)
            );
        } else {
            assert_eq!(r.verdict, Verdict::Pass, "{}", r.detail);
        }
    }
}

/// Only the cases of the batch that could not be split say they ran alone: the cases after it
/// also run one per worker, but their records were never in doubt.
#[test]
fn only_the_unsplit_batch_says_it_ran_alone() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    std::fs::write(dir.path().join("marker.xml"), "").unwrap();
    let mut sup = supervisor(dir.path(), &wrapper, 2, None, 10);
    let (out, _) = run_seeds(&mut sup, &[1, 13, 2]);
    assert_eq!(
        verdicts(&out),
        vec![
            (1, Verdict::Pass, Detector::None),
            (13, Verdict::OobRead, Detector::Memcheck),
            (2, Verdict::Pass, Detector::None),
        ]
    );
    let said: Vec<_> = out.iter().map(|r| r.detail.contains("run alone")).collect();
    assert_eq!(said, vec![true, true, false], "{out:#?}");
}

/// A kernel whose every thread reads out of bounds makes the sanitizer write records for
/// minutes. Past the cap, kedge stops that worker, judges the records so far (the case's own:
/// they follow its marker) and goes on with the batch in a new worker.
#[test]
fn a_flood_of_records_is_cut_and_judged() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    let mut sup = supervisor(dir.path(), &wrapper, 16, Some(64 << 10), 60);
    let t0 = std::time::Instant::now();
    let (out, _) = run_seeds(&mut sup, &[1, 77, 2, 13]);
    assert!(
        t0.elapsed() < Duration::from_secs(50),
        "stopped by the cap, not the timeout"
    );
    assert_eq!(
        verdicts(&out),
        vec![
            (1, Verdict::Pass, Detector::None),
            (77, Verdict::OobRead, Detector::Memcheck),
            (2, Verdict::Pass, Detector::None),
            (13, Verdict::OobRead, Detector::Memcheck),
        ]
    );
    let flood = &out[1];
    assert!(
        flood.detail.contains("stopped by kedge"),
        "{}",
        flood.detail
    );
    assert!(
        flood.also.contains(&Detector::Supervisor),
        "{:?}",
        flood.also
    );
    assert!(flood.findings[0].count > 1, "{:?}", flood.findings[0]);
}

/// A tool that ends before writing its report (killed with its worker) costs that batch its
/// sanitizer report, never the sweep and never a verdict given without the tool: the case
/// the worker ended with keeps its verdict and says the report is missing; the cases that
/// finished before it run again in a fresh worker, whose report judges them.
#[test]
fn a_missing_report_runs_the_finished_cases_again() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    let mut sup = supervisor(dir.path(), &wrapper, 16, None, 10);
    let (out, summary) = run_seeds(&mut sup, &[1, 13, 88, 2]);
    assert_eq!(
        verdicts(&out),
        vec![
            (88, Verdict::DeviceFault, Detector::Supervisor),
            // Run again in a new worker, with its report: 13's read past its end is seen,
            // which the lost report would have hidden behind a pass.
            (1, Verdict::Pass, Detector::None),
            (13, Verdict::OobRead, Detector::Memcheck),
            (2, Verdict::Pass, Detector::None),
        ]
    );
    assert!(
        out[0].detail.contains("no memcheck report"),
        "{}",
        out[0].detail
    );
    for r in &out[1..3] {
        assert!(
            r.detail.contains("run again in a fresh worker"),
            "{}",
            r.detail
        );
        assert!(!r.detail.contains("no memcheck report"), "{}", r.detail);
    }
    assert!(!out[3].detail.contains("run again"), "{}", out[3].detail);
    assert_eq!(summary.ran, 4, "each case counted once");
}

/// A case that hangs under the tool is stopped by its timeout, and only its worker is killed:
/// the tool writes its report of the batch so far, which judges the cases before it (13's read
/// past its end is seen in that report, not in a second run).
#[test]
fn a_timeout_under_the_tool_keeps_the_report_of_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup_tool(dir.path(), FAKE_TOOL_AT_EXIT);
    let mut sup = supervisor(dir.path(), &wrapper, 16, None, 2);
    let (out, _) = run_seeds(&mut sup, &[13, 99, 1]);
    assert_eq!(
        verdicts(&out),
        vec![
            (13, Verdict::OobRead, Detector::Memcheck),
            (99, Verdict::Timeout, Detector::Supervisor),
            (1, Verdict::Pass, Detector::None),
        ]
    );
    for r in &out {
        assert!(!r.detail.contains("no memcheck report"), "{}", r.detail);
        assert!(!r.detail.contains("run again"), "{}", r.detail);
    }
}

/// A tool whose worker takes its time to end once its batch is done (compute-sanitizer tears
/// the worker down and writes its report then): it ends as soon as another worker has taken a
/// case, or after a second, and says which in `exits`. Each case taken is a line of `taken`.
const FAKE_TOOL_SLOW_EXIT: &str = r#"#!/usr/bin/env bash
xml="$1"; shift; shift
dir="$(dirname "$0")"
IFS= read -r spec
printf '<?xml version="1.0" encoding="utf-8"?>\n<ComputeSanitizerOutput>\n' > "$xml"
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"limits":%s}}\n' "$$" "$(cat "$dir/limits.json")"
while IFS= read -r line; do
  case "$line" in *'"warm_up"'*) continue ;; esac
  echo "$$" >> "$dir/taken"
  cat "$dir/marker.xml" >> "$xml"
  case "$line" in *'"seed":13'*) cat "$dir/oob.xml" >> "$xml" ;; esac
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
how=waited
for _ in $(seq 20); do
  if [ "$(tail -1 "$dir/taken")" != "$$" ]; then how=overlapped; break; fi
  sleep 0.05
done
echo '</ComputeSanitizerOutput>' >> "$xml"
echo "$how" >> "$dir/exits"
"#;

/// A sanitized worker's exit (the tool tearing it down, writing its report) overlaps the next
/// worker's batch: the slot does not wait for it. Its report still judges its own cases, and
/// the results come in the order of the cases. Where the supervisor is told not to overlap (a
/// tier of big cases), each worker has ended before the next one takes a case.
#[test]
fn a_sanitized_workers_exit_overlaps_the_next_batch() {
    for overlap in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let wrapper = setup_tool(dir.path(), FAKE_TOOL_SLOW_EXIT);
        let mut sup = supervisor(dir.path(), &wrapper, 2, None, 10);
        sup.set_overlap_read_out(overlap);
        let (out, summary) = run_seeds(&mut sup, &[1, 13, 2, 3, 4, 5]);
        assert_eq!(
            verdicts(&out),
            vec![
                (1, Verdict::Pass, Detector::None),
                (13, Verdict::OobRead, Detector::Memcheck),
                (2, Verdict::Pass, Detector::None),
                (3, Verdict::Pass, Detector::None),
                (4, Verdict::Pass, Detector::None),
                (5, Verdict::Pass, Detector::None),
            ]
        );
        assert_eq!((summary.ran, summary.workers_started), (6, 3));
        let exits = std::fs::read_to_string(dir.path().join("exits")).unwrap();
        let exits: Vec<&str> = exits.lines().collect();
        let want = if overlap {
            // The last worker has no one after it.
            vec!["overlapped", "overlapped", "waited"]
        } else {
            vec!["waited"; 3]
        };
        assert_eq!(exits, want, "overlap {overlap}");
        // The slot's time as the supervisor saw it: each exit not overlapped is a second of
        // waiting (the fake lingers that long), counted as reading out, not as case time.
        let t = sup.slot_time();
        let waited_exits = want.iter().filter(|w| **w == "waited").count() as u32;
        assert!(
            t.read_out >= Duration::from_millis(950) * waited_exits,
            "overlap {overlap}: {t:?}"
        );
        assert!(t.cases > Duration::ZERO, "{t:?}");
        assert!(t.cases < Duration::from_millis(950), "{t:?}");
    }
}

/// A report read while the next worker ran its batch can set cases to run again: that batch's
/// cases come after them, so its results (all held for its own report) are dropped and its
/// cases run again after them, each once, judged by the report of the worker that ran them.
#[test]
fn a_report_that_sets_cases_again_drops_the_batch_run_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let wrapper = setup(dir.path());
    let mut sup = supervisor(dir.path(), &wrapper, 2, None, 10);
    let (out, summary) = run_seeds(&mut sup, &[1, 88, 13, 2]);
    assert_eq!(
        verdicts(&out),
        vec![
            (88, Verdict::DeviceFault, Detector::Supervisor),
            (1, Verdict::Pass, Detector::None),
            (13, Verdict::OobRead, Detector::Memcheck),
            (2, Verdict::Pass, Detector::None),
        ]
    );
    assert_eq!(summary.ran, 4, "each case counted once");
    for r in &out[2..] {
        assert!(!r.detail.contains("run again"), "{}", r.detail);
    }
}
