//! What a run of cases comes to, as `sweep-summary.json` holds it: a row per way the cases
//! ran (`RunSummary`), how long workers took to start, where the worker time went, and what
//! each GPU ran. Plain data, below everything that produces or reads it.

use kedge_core::Under;
use serde::{Deserialize, Serialize};

/// What one GPU ran, and why it was lost, if it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuRun {
    /// The GPU's ordinal.
    pub gpu: u32,
    /// Cases it ran.
    pub cases: usize,
    /// Why it was lost mid-run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost: Option<String>,
}

/// One row of `sweep-summary.json`: one way the cases ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// How the cases ran: `cpu`, `native` or the sanitizer tool's name.
    pub under: Under,
    /// The allocation modes asked for (`exact` when none was).
    pub allocs: String,
    /// The suite's name, or `given cases` for cases named on the command line or in a corpus.
    pub suite: String,
    /// Selected cases with a result in `results.jsonl` (with `--resume`, earlier ones too).
    pub cases: usize,
    /// Of those, the failing ones.
    pub failures: usize,
    /// Selected cases with no result.
    #[serde(default)]
    pub missing: usize,
    /// Of those, the cases this invocation did not start because its time limit ran out
    /// (`--max-time`; they are in `not-run.jsonl`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_run: usize,
    /// Cases run by this invocation.
    #[serde(default)]
    pub ran_now: usize,
    /// This invocation's wall time for them, in seconds.
    pub wall_s: f64,
    /// Worker processes this invocation started, replacements for ones that died included.
    #[serde(default)]
    pub workers: usize,
    /// Seconds the worker slots waited for a worker to become ready with cases waiting,
    /// summed over the slots.
    #[serde(default)]
    pub worker_wait_s: f64,
    /// What the slots spent, as the supervisor saw it, beside the workers' own case times.
    /// Absent where nothing was measured (the CPU plan, an older kedge's).
    #[serde(default, skip_serializing_if = "SlotSeconds::is_empty")]
    pub slot_s: SlotSeconds,
    /// Workers' start-up (their device opened, their libraries loaded), as each measured it:
    /// the median and the longest, in seconds. Absent when no worker started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_start_s: Option<StartUp>,
    /// The GPU (or the profile the CPU side checked against).
    pub device: String,
    /// `cuDriverGetVersion` (13000: CUDA 13.0); 0 without a GPU.
    #[serde(default)]
    pub driver_version: i32,
    /// The kernel-mode driver's version (`580.159.04`), where the worker could read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// The ordinals of the GPUs the run used; empty without a GPU.
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// What each of them ran.
    #[serde(default)]
    pub per_gpu: Vec<GpuRun>,
    /// Where the worker time of the cases run now went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TimeSpent>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Where the slots' time went, summed over the slots, in seconds: from sending each case to
/// its verdict coming back (`cases_s`; beside the workers' own `time.cases_s`, what a case
/// costs outside its timed phases), and waiting for sanitized workers to exit and reading
/// their reports (`read_out_s`). `pulls_s` is the slots' time from taking cases off the queue
/// to the last of them done: set against the wall times the slots, it is the time a slot had
/// nothing to take; set against the others, the time a slot spent in a pull on neither.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SlotSeconds {
    /// Each case sent until its verdict came back.
    pub cases_s: f64,
    /// Sanitized workers' exits waited for and their reports read.
    pub read_out_s: f64,
    /// Each pull of cases from the queue, from taking it to its last case done.
    #[serde(default)]
    pub pulls_s: f64,
}

impl SlotSeconds {
    /// Nothing measured.
    pub fn is_empty(&self) -> bool {
        self.cases_s == 0.0 && self.read_out_s == 0.0 && self.pulls_s == 0.0
    }

    /// Rounded to milliseconds, for the summary.
    pub fn rounded(self) -> SlotSeconds {
        let r = |x: f64| (x * 1e3).round() / 1e3;
        SlotSeconds {
            cases_s: r(self.cases_s),
            read_out_s: r(self.read_out_s),
            pulls_s: r(self.pulls_s),
        }
    }
}

impl std::ops::AddAssign for SlotSeconds {
    fn add_assign(&mut self, o: SlotSeconds) {
        self.cases_s += o.cases_s;
        self.read_out_s += o.read_out_s;
        self.pulls_s += o.pulls_s;
    }
}

/// How long workers took to start.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StartUp {
    /// Seconds, the median worker.
    pub median: f64,
    /// Seconds, the slowest.
    pub max: f64,
    /// Where the start-ups went: the median of each part, in seconds. Absent where no worker
    /// said (an older kedge's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<StartupParts>,
}

/// Where one worker's start-up went, in seconds, as it measured it. A sweep that replaces
/// many workers (a library that ends the process on every CUDA error) spends much of its
/// time here, and each part has its own remedy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StartupParts {
    /// The libraries under test loaded and the registry of ops and impls built.
    pub libraries_s: f64,
    /// Its GPU opened: the driver, the context, the device's limits.
    pub device_s: f64,
    /// The impls of the cases it will probably run loaded (kernels, a library's backend).
    pub warm_up_s: f64,
}

/// One worker's start-up: the whole, as it measured it, and its parts where it said them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorkerStart {
    /// Seconds from the worker's start to its `ready` line.
    pub total_s: f64,
    /// Its parts; `None` from a worker that did not say them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<StartupParts>,
}

impl StartUp {
    /// The median and the longest of `starts` (seconds), to the millisecond, and the median
    /// of each part over the workers that gave them; `None` for none.
    pub fn of(starts: &[WorkerStart]) -> Option<StartUp> {
        let median = |mut t: Vec<f64>| {
            t.retain(|x| x.is_finite());
            t.sort_by(f64::total_cmp);
            (!t.is_empty()).then(|| (t[t.len() / 2], t[t.len() - 1]))
        };
        let ms = |x: f64| (x * 1e3).round() / 1e3;
        let (med, max) = median(starts.iter().map(|s| s.total_s).collect())?;
        let parts: Vec<StartupParts> = starts.iter().filter_map(|s| s.parts).collect();
        let part = |f: fn(&StartupParts) -> f64| {
            median(parts.iter().map(f).collect()).map_or(0.0, |(m, _)| ms(m))
        };
        Some(StartUp {
            median: ms(med),
            max: ms(max),
            parts: (!parts.is_empty()).then(|| StartupParts {
                libraries_s: part(|p| p.libraries_s),
                device_s: part(|p| p.device_s),
                warm_up_s: part(|p| p.warm_up_s),
            }),
        })
    }
}

/// Where the time of a run went: each phase summed over the cases run now (worker time, so
/// with several workers it adds up to more than the wall time), and the slowest cases.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeSpent {
    /// Cases the sums are over.
    cases: usize,
    /// Their verdict times, summed (every phase below, and the rest: messages, freeing).
    cases_s: f64,
    /// Cases with no phase timed (their worker ended with them, a library's abort or a fault,
    /// or they were refused before anything ran): all of their time is in the rest. On the
    /// H200's whole ggml sweep these were 241.7 s of the rest's 242.7 s.
    #[serde(default)]
    unphased: usize,
    #[serde(default)]
    unphased_s: f64,
    setup_s: f64,
    upload_s: f64,
    run_s: f64,
    download_s: f64,
    reference_s: f64,
    compare_s: f64,
    /// Cases whose outputs were the same, byte for byte, as the last case's of their key, and
    /// were judged by that case's comparison (no comparison time of their own).
    #[serde(default)]
    compared_before: usize,
    /// The five slowest cases: label and seconds.
    pub slowest: Vec<(String, f64)>,
}

impl TimeSpent {
    /// Sum the phases of `results`; `None` when there are none.
    pub fn of(results: &[&kedge_core::CaseResult]) -> Option<TimeSpent> {
        if results.is_empty() {
            return None;
        }
        let mut t = TimeSpent {
            cases: results.len(),
            ..TimeSpent::default()
        };
        for r in results {
            let p = &r.observed.timings;
            t.cases_s += r.ms / 1e3;
            t.setup_s += p.setup / 1e3;
            t.upload_s += p.upload / 1e3;
            t.run_s += p.run / 1e3;
            t.download_s += p.download / 1e3;
            t.reference_s += p.reference / 1e3;
            t.compare_s += p.compare / 1e3;
            t.compared_before += usize::from(!r.observed.same_output_as.is_empty());
            if *p == kedge_core::judge::result::Timings::default() {
                t.unphased += 1;
                t.unphased_s += r.ms / 1e3;
            }
        }
        let mut by_time: Vec<&&kedge_core::CaseResult> = results.iter().collect();
        by_time.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        // Microseconds are plenty, and a value with few digits reads back from
        // sweep-summary.json as exactly the same f64.
        let us = |x: f64| (x * 1e6).round() / 1e6;
        t.slowest = by_time
            .iter()
            .take(5)
            .map(|r| (r.case.label(), us(r.ms / 1e3)))
            .collect();
        for x in [
            &mut t.cases_s,
            &mut t.setup_s,
            &mut t.upload_s,
            &mut t.run_s,
            &mut t.download_s,
            &mut t.reference_s,
            &mut t.compare_s,
            &mut t.unphased_s,
        ] {
            *x = us(*x);
        }
        Some(t)
    }

    /// One line a person reads.
    pub fn line(&self) -> String {
        let phases = self.setup_s
            + self.upload_s
            + self.run_s
            + self.download_s
            + self.reference_s
            + self.compare_s;
        let slowest: Vec<String> = self
            .slowest
            .iter()
            .take(3)
            .map(|(l, s)| format!("{l} {s:.1} s"))
            .collect();
        let before = match self.compared_before {
            0 => String::new(),
            n => format!(
                " ({n} {} the same bytes as the key's case before, not compared again)",
                if n == 1 {
                    "case's output was"
                } else {
                    "cases' outputs were"
                }
            ),
        };
        let unphased = match self.unphased {
            0 => String::new(),
            n => format!(
                " ({:.1} s of it {n} {} no phase timed: {} worker ended with {}, or {} refused before running)",
                self.unphased_s,
                if n == 1 { "case with" } else { "cases with" },
                if n == 1 { "its" } else { "their" },
                if n == 1 { "it" } else { "them" },
                if n == 1 { "it was" } else { "they were" },
            ),
        };
        format!(
            "where the time went ({} cases, {:.1} s of worker time): setup and inputs {:.1} s, upload {:.1} s, run {:.1} s, download {:.1} s, reference {:.1} s, compare {:.1} s{before}, the rest {:.1} s{unphased}; slowest: {}",
            self.cases,
            self.cases_s,
            self.setup_s,
            self.upload_s,
            self.run_s,
            self.download_s,
            self.reference_s,
            self.compare_s,
            (self.cases_s - phases).max(0.0),
            slowest.join(", ")
        )
    }
}

/// `sweep-summary.json`: one row per way the cases ran.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SweepSummary {
    /// One row per way the cases ran, in the order they ran.
    pub runs: Vec<RunSummary>,
}

impl SweepSummary {
    /// Failing results over every row.
    pub fn failures(&self) -> usize {
        self.runs.iter().map(|r| r.failures).sum()
    }
}

#[cfg(test)]
mod time_tests {
    use super::TimeSpent;
    use kedge_core::{Case, CaseResult, DType, Detector, Verdict};

    fn result(n0: i64, ms: f64, reference: f64, compare: f64) -> CaseResult {
        let c = Case::new("rms_norm", "clamped", DType::F32, [n0, 1, 1, 1]);
        let mut r = CaseResult::new(&c, Verdict::Pass, Detector::None, "");
        r.ms = ms;
        r.observed.timings.reference = reference;
        r.observed.timings.compare = compare;
        r
    }

    /// A case whose worker ended with it has no phase timed: the summary says how much of the
    /// rest such cases are, so the rest is not read as overhead of the cases that ran.
    #[test]
    fn cases_with_no_phase_timed_are_counted_apart_in_the_rest() {
        let ran = result(1, 100.0, 40.0, 10.0);
        let c = Case::new("rms_norm", "clamped", DType::F32, [4, 1, 1, 1]);
        let mut died = CaseResult::new(&c, Verdict::LaunchError, Detector::Driver, "abort");
        died.ms = 2000.0;
        let t = TimeSpent::of(&[&ran, &died]).expect("some");
        assert_eq!((t.unphased, t.unphased_s), (1, 2.0));
        let line = t.line();
        assert!(
            line.contains(
                "the rest 2.1 s (2.0 s of it 1 case with no phase timed: its worker ended with it"
            ),
            "{line}"
        );
        // Without such a case the line says nothing of them.
        let t = TimeSpent::of(&[&ran]).expect("some");
        assert_eq!(t.unphased, 0);
        assert!(!t.line().contains("no phase timed"), "{}", t.line());
    }

    #[test]
    fn the_summary_says_where_the_time_went_and_names_the_slowest() {
        let mut rs = [
            result(1, 100.0, 40.0, 10.0),
            result(2, 3000.0, 2000.0, 500.0),
            result(3, 50.0, 0.0, 0.0),
        ];
        rs[2]
            .observed
            .same_output_as
            .push("dst: the same bytes as ggml (exact)'s, whose comparison holds".into());
        let refs: Vec<&CaseResult> = rs.iter().collect();
        let t = TimeSpent::of(&refs).expect("some");
        assert_eq!(t.cases, 3);
        assert!((t.cases_s - 3.15).abs() < 1e-9);
        assert!((t.reference_s - 2.04).abs() < 1e-9);
        assert!((t.compare_s - 0.51).abs() < 1e-9);
        assert!(t.slowest[0].0.contains("ne=[2,1,1,1]"), "{:?}", t.slowest);
        assert!((t.slowest[0].1 - 3.0).abs() < 1e-9);
        let line = t.line();
        assert!(
            line.contains("reference 2.0 s") && line.contains("the rest 0.6 s"),
            "{line}"
        );
        assert_eq!(t.compared_before, 1);
        assert!(
            line.contains("compare 0.5 s (1 case's output was the same bytes"),
            "{line}"
        );
        assert!(TimeSpent::of(&[]).is_none());
    }
}

#[cfg(test)]
mod start_up_tests {
    use super::{StartUp, StartupParts, WorkerStart};

    fn whole(t: &[f64]) -> Vec<WorkerStart> {
        t.iter()
            .map(|&total_s| WorkerStart {
                total_s,
                parts: None,
            })
            .collect()
    }

    #[test]
    fn the_median_and_the_slowest_start() {
        assert_eq!(StartUp::of(&[]), None);
        let s = StartUp::of(&whole(&[2.2, 0.41, 0.5, f64::NAN, 0.45])).expect("some");
        assert_eq!((s.median, s.max, s.parts), (0.5, 2.2, None));
        let s = StartUp::of(&whole(&[0.3333333])).expect("one");
        assert_eq!((s.median, s.max), (0.333, 0.333));
    }

    #[test]
    fn each_part_is_the_median_over_the_workers_that_said_it() {
        let part = |l, d, w| {
            Some(StartupParts {
                libraries_s: l,
                device_s: d,
                warm_up_s: w,
            })
        };
        let mut starts = whole(&[9.0]);
        for (t, p) in [
            (0.9, part(0.5, 0.3, 0.1)),
            (0.7, part(0.2, 0.4, 0.1)),
            (1.4, part(0.3, 0.9, 0.2)),
        ] {
            starts.push(WorkerStart {
                total_s: t,
                parts: p,
            });
        }
        let s = StartUp::of(&starts).expect("some");
        assert_eq!((s.median, s.max), (1.4, 9.0));
        assert_eq!(s.parts, part(0.3, 0.4, 0.1));
    }
}
