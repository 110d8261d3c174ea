//! The supervisor against real subprocesses: a worker that crashes (SIGSEGV) and one that
//! hangs are killed and replaced, their cases get `device-fault` / `timeout`, and every other
//! case still gets its verdict. The worker here is a small shell script speaking the worker
//! protocol, so the test needs no GPU; the real worker is exercised on a GPU (the ignored GPU tests, scripts/device-check.sh).

use crate::common;
use kedge_core::{Case, CaseResult, DType, Detector, Verdict};
use kedge_runner::external::ExternalSpec;
use kedge_runner::run::{Supervisor, SupervisorConfig, WorkerSpec};
use kedge_runner::summary::{StartUp, StartupParts, WorkerStart};
use std::time::Duration;

const FAKE_WORKER: &str = r#"#!/usr/bin/env bash
# Speaks kedge's worker protocol. seed 666: crash with SIGSEGV; seed 777: hang (in the
# reference, its phase file says).
# The first line is the worker spec; the test checks what it said.
IFS= read -r spec; echo "$spec" >> "$(dirname "$0")/specs"
# compute-sanitizer prints a banner on stdout before the worker speaks: so does this.
echo "========= COMPUTE-SANITIZER"
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"limits":%s}}\n' "$$" "$(cat "$(dirname "$0")/limits.json")"
while IFS= read -r line; do
  case "$line" in
    *'"seed":666'*) kill -SEGV $$ ;;
    *'"seed":777'*)
      # Hang in kedge's own reference, saying so where the spec asks (as the real worker's
      # phase thread does).
      pf=$(printf '%s' "$spec" | sed -n 's/.*"phase_file":"\([^"]*\)".*/\1/p')
      [ -n "$pf" ] && printf '{"phase":"reference","since_ms":%s}\n' "$(date +%s%3N)" > "$pf"
      sleep 600 ;;
    *'"seed":555'*)
      # A sticky fault: announce retirement, give the verdict, linger a moment (as a
      # sanitizer-wrapped worker does while the tool writes its report), then exit.
      echo '{"retiring":{"reason":"context dead"}}'
      echo '{"result":{"id":"x","case":'"$line"',"verdict":"device-fault","detector":"device-sync","detail":"fake fault","under":"native","ms":0.0}}'
      sleep 0.5; exit 86 ;;
  esac
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
"#;

fn fake_worker(dir: &std::path::Path) -> std::path::PathBuf {
    common::install_fake_worker(dir, FAKE_WORKER)
}

/// A native supervisor of `exe` in `dir`, keeping no worker between runs.
fn native(
    dir: &std::path::Path,
    exe: std::path::PathBuf,
    spec: WorkerSpec,
    timeout: Duration,
    ready_timeout: Duration,
) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        exe,
        spec,
        timeout,
        ready_timeout,
        sanitize: None,
        work_dir: dir.join("w"),
        keep_worker: false,
    })
}

/// `native` with a plain spec (GPU 0, no libraries) and ten seconds for a case and a start.
fn plain(dir: &std::path::Path, exe: std::path::PathBuf) -> Supervisor {
    native(
        dir,
        exe,
        WorkerSpec::new(0, ExternalSpec::default()),
        Duration::from_secs(10),
        Duration::from_secs(10),
    )
}

fn case(seed: u64) -> Case {
    let mut c = Case::new("rms_norm", "clamped", DType::F32, [64, 2, 1, 1]);
    c.seed = seed;
    c
}

#[test]
fn crash_and_hang_cost_one_worker_each_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_worker(dir.path());
    let mut ext = ExternalSpec::default();
    ext.plugins.push("/plugins/libmine.so".into());
    let spec = WorkerSpec::new(2, ext);
    let mut sup = native(
        dir.path(),
        exe,
        spec.clone(),
        Duration::from_millis(1500),
        Duration::from_secs(10),
    );
    let cases = vec![
        case(1),
        case(2),
        case(666),
        case(3),
        case(777),
        case(4),
        case(555),
        case(5),
    ];
    let mut got: Vec<CaseResult> = Vec::new();
    let summary = sup.run(&cases, &mut |r| {
        got.push(r);
        Ok(())
    });
    let summary = summary.unwrap_or_else(|e| {
        panic!(
            "{e}: {}",
            std::fs::read_to_string(dir.path().join("w/worker-0.log")).unwrap_or_default()
        )
    });
    assert_eq!(
        got.len(),
        cases.len(),
        "every case gets exactly one verdict"
    );
    for (c, r) in cases.iter().zip(&got) {
        assert_eq!(&r.case, c, "verdicts come back in order");
    }
    let by_seed = |s: u64| got.iter().find(|r| r.case.seed == s).unwrap();
    assert_eq!(by_seed(666).verdict, Verdict::DeviceFault);
    assert_eq!(by_seed(666).detector, Detector::Supervisor);
    assert!(
        by_seed(666).detail.contains("signal 11"),
        "{}",
        by_seed(666).detail
    );
    assert_eq!(by_seed(777).verdict, Verdict::Timeout);
    // The timeout says whose work was taking the time: kedge's reference, not the impl.
    let hung = by_seed(777);
    assert!(
        hung.detail.contains("killed in `reference` after")
            && hung
                .detail
                .contains("kedge's own host work, not the impl's"),
        "{}",
        hung.detail
    );
    assert_eq!(hung.facts["killed_in"]["phase"], "reference");
    assert!(hung.facts["killed_in"]["seconds"].as_f64().unwrap() >= 1.0);
    // The retiring worker's own verdict is kept; the case after it goes to a new worker
    // (not to the one that is exiting, which would charge it a death it did not cause).
    assert_eq!(by_seed(555).verdict, Verdict::DeviceFault);
    assert_eq!(by_seed(555).detector, Detector::DeviceSync);
    for s in [1, 2, 3, 4, 5] {
        assert_eq!(
            by_seed(s).verdict,
            Verdict::Pass,
            "case {s}: {}",
            by_seed(s).detail
        );
    }
    // First worker, one after the crash, one after the hang, one after the retirement.
    assert_eq!(summary.workers_started, 4);
    assert_eq!(summary.workers_replaced, 3);
    // Once a worker had to be replaced, the next one starts ahead of need: the second and
    // third replacements were standbys started while cases ran, and one more stands by at
    // the end (five processes for four workers; the last may not have read its spec yet).
    assert_eq!(sup.workers_started(), 4);
    assert_eq!(sup.standing_by(), kedge_runner::run::MAX_STANDBYS);
    // Every worker got the typed spec first: its GPU and the plugins of the command line.
    // Each standby's also names the cases to get ready for, before it says it is ready:
    // distinct ones from those after the case its predecessor was given.
    let specs = std::fs::read_to_string(dir.path().join("specs")).unwrap();
    let n = specs.lines().count();
    assert!(n == 4 || n == 5, "{n} specs read");
    let mut warmed = 0;
    let mut phase_files = std::collections::BTreeSet::new();
    for line in specs.lines() {
        let mut got = serde_json::from_str::<WorkerSpec>(line).unwrap();
        for c in &got.warm_up {
            assert!(cases.contains(c), "{line}");
            warmed += 1;
        }
        got.warm_up.clear();
        // Each worker keeps its phase in a file of its own, beside its log.
        let pf = got
            .phase_file
            .take()
            .expect("every worker is given a phase file");
        assert!(pf.starts_with(dir.path().join("w")), "{}", pf.display());
        assert!(phase_files.insert(pf));
        assert_eq!(got, spec);
    }
    assert!(warmed >= 2, "{specs}");
}

#[test]
fn guard_mode_stands_a_worker_by_from_the_start() {
    // Every read past a guard page ends its worker, so a sweep in guard mode starts the
    // first replacement with the first worker; the same cases in exact mode do not.
    for (alloc, want) in [
        (kedge_core::AllocMode::Exact, 0),
        (
            kedge_core::AllocMode::Guard,
            kedge_runner::run::MAX_STANDBYS,
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let exe = fake_worker(dir.path());
        let mut sup = plain(dir.path(), exe);
        let cases: Vec<Case> = (1..4)
            .map(|s| {
                let mut c = case(s);
                c.alloc = alloc;
                c
            })
            .collect();
        let mut got = 0;
        let summary = sup
            .run(&cases, &mut |_| {
                got += 1;
                Ok(())
            })
            .unwrap();
        assert_eq!(got, 3);
        assert_eq!(summary.workers_started, 1, "{alloc:?}");
        // The worker taken said how long it took to start (this fake one says nothing: 0).
        assert_eq!(
            sup.startups(),
            &[WorkerStart {
                total_s: 0.0,
                parts: None
            }]
        );
        assert_eq!(sup.standing_by(), want, "{alloc:?}");
    }
}

/// A worker says where its start-up went (its libraries, its GPU, the impls it loaded ahead):
/// the summary's start-up gives the median of each part.
#[test]
fn a_worker_says_where_its_start_up_went() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::install_fake_worker(
        dir.path(),
        r#"#!/usr/bin/env bash
IFS= read -r spec
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"limits":%s,"startup_s":0.9,"startup_parts":{"libraries_s":0.5,"device_s":0.3,"warm_up_s":0.1}}}\n' "$$" "$(cat "$(dirname "$0")/limits.json")"
while IFS= read -r line; do
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
"#,
    );
    let mut sup = plain(dir.path(), exe);
    sup.run(&[case(1), case(2)], &mut |_| Ok(())).unwrap();
    let parts = StartupParts {
        libraries_s: 0.5,
        device_s: 0.3,
        warm_up_s: 0.1,
    };
    assert_eq!(
        sup.startups(),
        &[WorkerStart {
            total_s: 0.9,
            parts: Some(parts)
        }]
    );
    let s = StartUp::of(sup.startups()).expect("one worker");
    assert_eq!((s.median, s.parts), (0.9, Some(parts)));
}

#[test]
fn standbys_are_kept_under_a_sanitizer_and_once_a_worker_was_lost() {
    use kedge_runner::run::{standbys_wanted, StandbyNeed, MAX_STANDBYS};
    let need = |sanitized, guarded, lost| StandbyNeed {
        sanitized,
        guarded,
        lost,
    };
    // Under a sanitizer every batch ends its worker: one is always started ahead, and no
    // more, whatever the tier allows (a worker under the tool is heavy).
    assert_eq!(standbys_wanted(need(true, false, 0), 4), MAX_STANDBYS);
    assert_eq!(standbys_wanted(need(true, false, 9), 4), MAX_STANDBYS);
    // Natively none until a worker is lost, then what the tier allows.
    assert_eq!(standbys_wanted(need(false, false, 0), 4), 0);
    assert_eq!(standbys_wanted(need(false, false, 1), 1), MAX_STANDBYS);
    assert_eq!(standbys_wanted(need(false, false, 1), 3), 3);
    // Guard mode stands one by from the start, and more once its workers die.
    assert_eq!(standbys_wanted(need(false, true, 0), 4), MAX_STANDBYS);
    assert_eq!(standbys_wanted(need(false, true, 2), 4), 4);
}

#[test]
fn a_tier_of_fewer_slots_keeps_more_standbys_each() {
    use kedge_runner::run::{standbys_per_slot, MAX_STANDBYS, STANDBYS_AT_MOST};
    // Every slot in use: one each (run 14's three a slot slowed guard mode).
    assert_eq!(standbys_per_slot(8, 8), MAX_STANDBYS);
    // Fewer slots share the full tier's standbys: the GPU keeps as many processes.
    assert_eq!(standbys_per_slot(4, 8), 2);
    assert_eq!(standbys_per_slot(3, 8), 2);
    assert_eq!(standbys_per_slot(2, 8), STANDBYS_AT_MOST);
    assert_eq!(
        standbys_per_slot(2, 16),
        STANDBYS_AT_MOST,
        "a few, not eight"
    );
    // A slot alone on its GPU (its cases need the GPU's memory): one, as before.
    assert_eq!(standbys_per_slot(1, 8), MAX_STANDBYS);
    assert_eq!(standbys_per_slot(1, 1), MAX_STANDBYS);
    assert_eq!(standbys_per_slot(0, 0), MAX_STANDBYS);
}

#[test]
fn a_lost_worker_brings_as_many_standbys_as_the_tier_allows() {
    // A supervisor told it may keep three: no standby while its workers live; once one is lost
    // (the SIGSEGV case), three start behind the replacement. Told one again, it lets the others go.
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_worker(dir.path());
    let mut sup = plain(dir.path(), exe);
    sup.set_standbys(3);
    sup.run(&[case(1), case(2)], &mut |_| Ok(())).unwrap();
    assert_eq!(sup.standing_by(), 0);
    let mut verdicts = Vec::new();
    sup.run(&[case(666), case(3), case(4)], &mut |r| {
        verdicts.push(r.verdict);
        Ok(())
    })
    .unwrap();
    assert_eq!(
        verdicts,
        [Verdict::DeviceFault, Verdict::Pass, Verdict::Pass],
        "the case after the crash runs on a new worker"
    );
    assert_eq!(sup.standing_by(), 3);
    sup.set_standbys(1);
    assert_eq!(sup.standing_by(), 1);
}

#[test]
fn standbys_get_ready_for_distinct_cases() {
    use kedge_runner::run::warm_up_cases;
    let mut a = case(1);
    a.alloc = kedge_core::AllocMode::Guard;
    // Seed and allocation mode do not change what an impl loads: one warm-up for both.
    let cases = [case(1), a, case(2), {
        let mut c = case(1);
        c.imp = "ggml".into();
        c
    }];
    let got = warm_up_cases(cases.iter(), 4);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1].imp, "ggml");
    assert_eq!(warm_up_cases(cases.iter(), 1).len(), 1);
}

#[test]
fn a_worker_that_cannot_start_fails_at_once_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::install_fake_worker(
        dir.path(),
        "#!/usr/bin/env bash\necho 'error while loading shared libraries: libcuda.so.1' >&2\nexit 127\n",
    );
    let mut sup = native(
        dir.path(),
        exe,
        WorkerSpec::new(0, ExternalSpec::default()),
        Duration::from_secs(5),
        Duration::from_secs(60),
    );
    let t0 = std::time::Instant::now();
    let err = sup.probe().expect_err("the worker died").to_string();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a dead worker is not waited for"
    );
    assert!(err.contains("exited with status 127"), "{err}");
    assert!(
        err.contains("libcuda.so.1"),
        "its stderr is in the message: {err}"
    );
}

#[test]
fn a_worker_that_never_becomes_ready_is_named_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let exe = common::install_fake_worker(
        dir.path(),
        "#!/usr/bin/env bash\necho 'opening the device' >&2\nsleep 600\n",
    );
    let mut sup = native(
        dir.path(),
        exe,
        WorkerSpec::new(0, ExternalSpec::default()),
        Duration::from_secs(5),
        Duration::from_millis(700),
    );
    let err = sup.probe().expect_err("never ready").to_string();
    assert!(err.contains("did not become ready"), "{err}");
    assert!(err.contains("opening the device"), "{err}");
}
