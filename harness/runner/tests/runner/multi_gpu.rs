//! A multi-GPU sweep's scheduling with real worker processes and no GPU: one supervisor per
//! "GPU", each starting a fake worker (a shell script speaking the worker protocol) whose
//! spec names device N. GPU 1 falls off the bus during its 4th case: that case gets `device-fault`
//! (as on real hardware, the case in flight is charged), every later worker on GPU 1 cannot
//! open it, GPU 1 is given up, and GPU 0 runs the rest. Every case gets exactly one verdict,
//! tagged with the GPU it ran on.

use crate::common;
use kedge_core::{Case, DType, Verdict};
use kedge_runner::events::Events;
use kedge_runner::external::ExternalSpec;
use kedge_runner::run::schedule::{self, Options};
use kedge_runner::run::{Supervisor, SupervisorConfig, WorkerSpec};
use std::collections::BTreeMap;
use std::time::Duration;

const FAKE_WORKER: &str = r#"#!/usr/bin/env bash
# Called as: fake-worker.sh worker, its spec ({"protocol":1,"device":N,...}) the first line.
IFS= read -r spec
dev=$(printf '%s' "$spec" | sed 's/.*"device":\([0-9]*\).*/\1/'); dir="$(dirname "$0")"
echo "$$ threads=${RAYON_NUM_THREADS:-all}" >> "$dir/started-$dev"
if [ -e "$dir/gone-$dev" ]; then
  echo '{"fatal":{"message":"no CUDA device: gpu '"$dev"' fell off the bus","kind":"no-device"}}'
  exit 3
fi
printf '{"ready":{"device":"fake","driver_version":0,"pid":%s,"device_count":2,"limits":%s}}\n' "$$" "$(cat "$dir/limits.json")"
n=0
while IFS= read -r line; do
  case "$line" in *'"warm_up"'*) continue ;; esac   # get ready: nothing to answer
  n=$((n+1))
  if [ "$dev" = 1 ] && [ "$n" -ge 4 ]; then touch "$dir/gone-$dev"; exit 0; fi
  [ "$dev" = 0 ] && sleep 0.05
  echo '{"result":{"id":"x","case":'"$line"',"verdict":"pass","detector":"none","detail":"fake worker","under":"native","ms":0.0}}'
done
"#;

fn fake_worker(dir: &std::path::Path) -> std::path::PathBuf {
    common::install_fake_worker(dir, FAKE_WORKER)
}

fn pool(dir: &std::path::Path, exe: &std::path::Path, gpu: u32) -> Supervisor {
    Supervisor::new(SupervisorConfig {
        exe: exe.to_path_buf(),
        spec: WorkerSpec::new(gpu, ExternalSpec::default()),
        timeout: Duration::from_secs(10),
        ready_timeout: Duration::from_secs(10),
        sanitize: None,
        work_dir: dir.join(format!("gpu{gpu}")),
        keep_worker: true,
    })
}

#[test]
fn a_gpu_lost_mid_sweep_hands_its_cases_to_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_worker(dir.path());
    let cases: Vec<Case> = (1..=20)
        .map(|i| Case::new("rms_norm", "clamped", DType::F32, [64, i, 1, 1]))
        .collect();
    let mut pools = vec![
        (0, pool(dir.path(), &exe, 0)),
        (1, pool(dir.path(), &exe, 1)),
    ];
    let mut got = BTreeMap::new();
    let summary = schedule::run(&cases, &mut pools, Options::default(), |f| {
        let mut r = f.output;
        r.gpu = Some(f.device);
        // Keyed by the case itself: the fake worker does not compute ids.
        assert!(got.insert(r.case.id(), r).is_none(), "a case ran twice");
        Ok(())
    })
    .unwrap();

    assert_eq!(got.len(), cases.len(), "every case has a verdict");
    let on = |g| got.values().filter(|r| r.gpu == Some(g)).count();
    assert_eq!(on(1), 4, "{summary:?}");
    assert_eq!(on(0), 16, "{summary:?}");
    let charged: Vec<_> = got
        .values()
        .filter(|r| r.verdict != Verdict::Pass)
        .collect();
    assert_eq!(charged.len(), 1, "only the case in flight when GPU 1 went");
    assert_eq!(charged[0].verdict, Verdict::DeviceFault);
    assert_eq!(charged[0].gpu, Some(1));

    let gpu1 = &summary.devices[1];
    let why = gpu1.lost.as_deref().unwrap_or_default();
    assert!(why.contains("fell off the bus"), "{gpu1:?}");
    assert!(summary.devices[0].lost.is_none());
    // GPU 0 kept one worker for all its cases; GPU 1 had its first one and then three tries
    // that could not open the device.
    assert_eq!(pools[0].1.workers_started(), 1);
    assert_eq!(pools[1].1.workers_started(), 4);
    drop(pools);
    let started = |g| {
        std::fs::read_to_string(dir.path().join(format!("started-{g}")))
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert_eq!((started(0), started(1)), (1, 4));
}

#[test]
fn every_gpu_lost_stops_with_the_cases_left() {
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_worker(dir.path());
    // Both "GPUs" are gone before the sweep starts.
    for g in [0, 1] {
        std::fs::write(dir.path().join(format!("gone-{g}")), "").unwrap();
    }
    let cases: Vec<Case> = (1..=3)
        .map(|i| Case::new("rms_norm", "clamped", DType::F32, [64, i, 1, 1]))
        .collect();
    let mut pools = vec![
        (0, pool(dir.path(), &exe, 0)),
        (1, pool(dir.path(), &exe, 1)),
    ];
    let err = schedule::run(&cases, &mut pools, Options::default(), |_| Ok(())).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("every device was lost"), "{msg}");
    assert!(msg.contains("gpu 0 fell off the bus"), "{msg}");
    assert!(msg.ends_with("3 of 3 cases were not run"), "{msg}");
}

/// `--jobs 3`: three workers on one GPU pull from the one queue; every case gets one verdict,
/// and a case too big to share the device's memory with two others runs after the rest.
#[test]
fn several_workers_per_gpu_share_the_queue_and_big_cases_run_alone() {
    use kedge_runner::events::Progress;
    use kedge_runner::run::{EngineOptions, Executor, Gpus, RunEngine};
    let dir = tempfile::tempdir().unwrap();
    let exe = fake_worker(dir.path());
    let engine = RunEngine::builder("sweep")
        .exe(&exe)
        .without_driver_check()
        .work_dir(dir.path().join("w"))
        .gpus(Gpus::One(0))
        .options(EngineOptions {
            jobs: 3,
            events: Events::console(Progress::Off),
            ..EngineOptions::default()
        })
        .build()
        .unwrap();
    let mut ex = engine.executor(None).unwrap();
    let mut cases: Vec<Case> = (1..=12)
        .map(|i| Case::new("rms_norm", "clamped", DType::F32, [64, i, 1, 1]))
        .collect();
    // 2 * 64 * 2^28 f32: 137 GB of tensors, more than a third of the H200's memory.
    let big = Case::new("rms_norm", "clamped", DType::F32, [64, 1 << 28, 1, 1]);
    cases.insert(0, big.clone());
    let mut order = Vec::new();
    let stats = ex
        .run(&cases, &mut |r| {
            order.push(r.case.clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(stats.ran, cases.len());
    assert_eq!(order.len(), cases.len());
    let mut ids: Vec<String> = order.iter().map(Case::id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), cases.len(), "every case once");
    assert_eq!(
        order.last(),
        Some(&big),
        "the big case runs after the others"
    );
    // Three slots started a worker each for the shared cases (the probe's worker is apart);
    // the big case, alone, ran in the first slot's.
    assert_eq!(stats.workers, 3, "{stats:?}");
    let started = std::fs::read_to_string(dir.path().join("started-0")).unwrap();
    let threads: Vec<&str> = started
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, t)| t))
        .collect();
    // The probe and the three slots: every worker may use every core (the first tier is
    // the one with every slot in use; a big case alone has the host to itself anyway).
    assert_eq!(threads, vec!["threads=all"; 4]);
}

/// A driver older than the build needs: the worker says so before it opens a context, and the
/// run stops with exit status 3 and the worker's own words, not a panic or an obscure error.
/// The fake worker also checks that a ready worker's driver version reaches the fleet.
#[test]
fn an_old_driver_stops_the_run_with_exit_status_3_in_plain_words() {
    use kedge_runner::run::{Gpus, RunEngine};
    let old = r#"#!/usr/bin/env bash
IFS= read -r spec
msg=$(cat "$(dirname "$0")/msg.txt")
echo '{"fatal":{"message":"'"$msg"'","kind":"old-driver"}}'
exit 3
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = common::install_fake_worker(dir.path(), old);
    let msg = kedge_core::cuda::DeviceError::OldDriver { found: 12040 }.to_string();
    std::fs::write(dir.path().join("msg.txt"), &msg).unwrap();
    let err = match RunEngine::builder("run")
        .exe(&exe)
        .without_driver_check()
        .work_dir(dir.path().join("w"))
        .gpus(Gpus::One(0))
        .build()
    {
        Ok(_) => panic!("an old driver must stop the run"),
        Err(e) => e,
    };
    assert_eq!(err.exit_code(), 3, "{err}");
    let text = err.to_string();
    assert!(text.contains("supports CUDA 12.4"), "{text}");
    assert!(
        text.contains("needs a driver that supports CUDA 13.0 or newer"),
        "{text}"
    );

    let ready = r#"#!/usr/bin/env bash
IFS= read -r spec
printf '{"ready":{"device":"fake","driver_version":13000,"driver":"580.159.04","pid":%s,"device_count":1,"limits":%s}}\n' "$$" "$(cat "$(dirname "$0")/limits.json")"
while IFS= read -r line; do :; done
"#;
    let dir = tempfile::tempdir().unwrap();
    let exe = common::install_fake_worker(dir.path(), ready);
    let engine = RunEngine::builder("sweep")
        .exe(&exe)
        .without_driver_check()
        .work_dir(dir.path().join("w"))
        .gpus(Gpus::One(0))
        .build()
        .unwrap();
    assert_eq!(
        engine.fleet().driver_text(),
        "driver 580.159.04 (CUDA 13.0)"
    );
    let ex = engine.executor(None).unwrap();
    use kedge_runner::run::Executor;
    assert_eq!(ex.device(), "fake, driver 580.159.04 (CUDA 13.0), gpus 0");
}
