//! The GPU executor: cases on the GPUs' worker pools, admitted by memory in tiers (bigger cases
//! with fewer beside them), in units that share inputs and a reference, or in the order of
//! expected yield when a time limit is set.

use super::*;
use kedge_core::FIXED_LIMIT;

/// Failed batches in a row (a worker that would not start or could not open its GPU) after
/// which a run gives a GPU up.
const GPU_MAX_FAILURES: usize = 3;

/// Cases that run with the same number of workers per GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tier {
    /// Workers per GPU for these cases.
    slots: usize,
    /// Indices into the cases.
    cases: Vec<usize>,
    /// The largest case's tensor bytes.
    largest: u64,
}

/// A case's tensor bytes on the device and what its host side holds of them: as much again
/// (inputs drawn, outputs downloaded, a reference) for a case judged whole, nothing for one
/// judged on sampled slices (`judge::sample`: drawn, run and scanned on the device), its
/// inputs for one whose inputs the op makes on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CaseBytes {
    /// Bytes of its tensors on the device.
    device: u64,
    /// Bytes of them the host holds.
    host: u64,
}

impl CaseBytes {
    /// A case judged whole: its tensors on both sides.
    fn whole(b: u64) -> CaseBytes {
        CaseBytes { device: b, host: b }
    }
    /// A case's bytes as `judging` runs it: judged on sampled slices (an op whose slices are
    /// independent, big enough, on kedge's kernels or a ggml build's CUDA device), nothing of
    /// it on the host but the inputs the op makes there. `kernels`: the case's impl is one of
    /// kedge's kernels (no library backend).
    fn of(op: &dyn kedge_core::Op, c: &Case, judging: Judging, kernels: bool) -> CaseBytes {
        let Ok(specs) = op.tensors(c) else {
            return CaseBytes::whole(u64::MAX);
        };
        let device = specs
            .iter()
            .map(|t| t.bytes)
            .fold(0u64, u64::saturating_add);
        // The impls that draw and scan on the device: kedge's kernels where every output is
        // read back as it is (no block format), and a ggml build's CUDA devices
        // (`ggml:CUDA0`). The worker decides for itself; this is what admission expects.
        // (Counted as judged whole, kedge's own 2^31-element cases ran one per GPU.)
        let on_device = if kernels {
            kedge_core::judge::sample::kernels_read_back_as_is(&specs)
        } else {
            c.imp.starts_with("ggml:CUDA")
        };
        let sampled = on_device && kedge_core::judge::sample::sampled(op, c, judging);
        let sampling = op.row_sampling(c);
        let made = sampling.as_ref().is_some_and(|s| s.inputs_made());
        if sampled && !made {
            return CaseBytes { device, host: 0 };
        }
        // On the host a block-format tensor is also its f32 values (drawn, then quantized by
        // the build; its output dequantized): four bytes an element beside its blocks. (A
        // 2^32-element q5_0 table held 16 GiB of f32 there; eight at once ran the H200's host
        // out of memory.) A sampled case whose inputs the op makes holds only those.
        let host = specs
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                !sampled
                    || (t.role == kedge_core::Role::Input
                        && sampling.as_ref().is_some_and(|s| s.makes(*i)))
            })
            .map(|(_, t)| {
                if t.dtype.is_block() {
                    t.bytes.saturating_add(t.nelements().saturating_mul(4))
                } else {
                    t.bytes
                }
            })
            .fold(0u64, u64::saturating_add);
        CaseBytes { device, host }
    }
}

/// Cases with this many bytes of tensors or more run one at a time: their CPU-side work
/// (drawing gigabytes of inputs, an f64 reference, the comparison) already uses every core,
/// so side by side they take as long in all as one after the other (on the H200 a 2^29-element
/// rms_norm took 2 s alone and 15 to 20 s eight at a time) and hold several times the host
/// memory.
pub(crate) const ALONE_FROM_BYTES: u64 = 4 << 30;

/// Group cases by how many may run at once on one GPU: `slots` cases of `bytes` each must fit
/// in half the device's memory (the rest is the driver's, cuBLASLt's workspaces and
/// fragmentation), and on the host in a third of its available memory each (inputs,
/// downloaded outputs and an f64 reference: about three times the tensors). Most slots
/// first; a tier's cases keep their order, so verdicts and their order within a tier do not
/// depend on `jobs`.
fn admission_tiers(
    bytes: &[CaseBytes],
    jobs: usize,
    device_bytes: u64,
    host_bytes: Option<u64>,
) -> Vec<Tier> {
    let jobs = jobs.max(1);
    let slots_for = |b: CaseBytes| -> usize {
        if b.host >= ALONE_FROM_BYTES {
            return 1;
        }
        let by_device = device_bytes / b.device.max(1).saturating_mul(2);
        let by_host = match (host_bytes, b.host) {
            (_, 0) | (None, _) => u64::MAX,
            (Some(h), x) => h / x.saturating_mul(3),
        };
        (by_device.min(by_host).min(jobs as u64) as usize).max(1)
    };
    let mut tiers: Vec<Tier> = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        let slots = if jobs == 1 { 1 } else { slots_for(b) };
        match tiers.iter_mut().find(|t| t.slots == slots) {
            Some(t) => {
                t.cases.push(i);
                t.largest = t.largest.max(b.device);
            }
            None => tiers.push(Tier {
                slots,
                cases: vec![i],
                largest: b.device,
            }),
        }
    }
    tiers.sort_by_key(|t| std::cmp::Reverse(t.slots));
    tiers
}

/// A time-limited run's tiers class by class (`YieldOrder`): every case of a lower class
/// starts before any case of a higher one, whatever its tier, so the cases the limit leaves
/// are those of least expected yield. (Tier by tier, a limit of 5 minutes left crossings of
/// big cases judged whole unrun behind the small tiers' other cases.) Within a class the
/// tiers keep their order, most slots first; a class's last tier and the next class's first,
/// where they have the same slots, are one (a barrier fewer).
fn tiers_by_class(tiers: Vec<Tier>, bytes: &[CaseBytes], class: impl Fn(usize) -> u8) -> Vec<Tier> {
    let mut classes: Vec<u8> = tiers
        .iter()
        .flat_map(|t| t.cases.iter().map(|&i| class(i)))
        .collect();
    classes.sort_unstable();
    classes.dedup();
    let mut out: Vec<Tier> = Vec::new();
    for c in classes {
        for t in &tiers {
            let cases: Vec<usize> = t.cases.iter().copied().filter(|&i| class(i) == c).collect();
            let Some(largest) = cases.iter().map(|&i| bytes[i].device).max() else {
                continue;
            };
            match out.last_mut() {
                Some(last) if last.slots == t.slots => {
                    last.cases.extend(cases);
                    last.largest = last.largest.max(largest);
                }
                _ => out.push(Tier {
                    slots: t.slots,
                    cases,
                    largest,
                }),
            }
        }
    }
    out
}

/// The host's available memory (`MemAvailable` in /proc/meminfo), where it can be read.
pub(super) fn host_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

/// Cases on GPUs: one supervisor (worker pool) per GPU pulling from one shared queue.
pub struct GpuExecutor {
    pub(super) under: Under,
    /// `jobs` supervisors (worker slots) per GPU, slot-major.
    pub(super) pools: Vec<(u32, Supervisor)>,
    pub(super) jobs: usize,
    /// The device's memory: a case's tensors may take half of it, shared among the cases
    /// running beside it.
    pub(super) device_bytes: u64,
    /// The host's available memory, where known: each running case holds its inputs, its
    /// downloaded outputs and its f64 reference there.
    pub(super) host_bytes: Option<u64>,
    /// The temporary work directory, kept when a case fails in it.
    pub(super) temp: Option<std::sync::Arc<lifecycle::TempWorkDir>>,
    pub(super) events: Events,
    /// The run's time limit: once it is up, no new case starts.
    pub(super) budget: Option<Arc<TimeBudget>>,
    /// How workers judge big cases (what admission expects them to hold on the host).
    pub(super) judging: Judging,
    /// The order of expected yield, when the run has one (`Executor::set_order`).
    pub(super) order: Option<Arc<YieldOrder>>,
    pub(super) device: String,
}

impl GpuExecutor {
    /// Run one case and return its result (a predicate for `minimize`).
    pub(crate) fn run_one(&mut self, case: &Case) -> Result<CaseResult, EngineError> {
        let mut got = None;
        self.run(std::slice::from_ref(case), &mut |r| {
            got = Some(r);
            Ok(())
        })?;
        got.ok_or_else(|| EngineError::NoVerdict { case: case.label() })
    }

    /// Tell this executor's events to `events` instead (a caller that reports on its own
    /// gives a console without progress).
    pub(crate) fn set_events(&mut self, events: Events) {
        self.events = events;
    }
}

impl Executor for GpuExecutor {
    fn under(&self) -> Under {
        self.under
    }
    fn device(&self) -> String {
        self.device.clone()
    }
    fn set_order(&mut self, order: Arc<YieldOrder>) {
        self.order = Some(order);
    }
    fn run(&mut self, cases: &[Case], sink: &mut Sink<'_>) -> Result<RunStats, EngineError> {
        // Admission: a case's tensors must leave room for the cases beside it; bigger cases
        // run after the rest, with fewer of them at once (down to one per GPU). In a
        // time-limited run, class by class of expected yield first (`tiers_by_class`).
        let reg = kedge_ops::registry();
        let bytes: Vec<CaseBytes> = cases
            .iter()
            .map(|c| match reg.op(&c.op) {
                Ok(op) => {
                    let kernels = reg.imp(op, &c.imp).is_ok_and(|imp| imp.backend().is_none());
                    CaseBytes::of(op, c, self.judging, kernels)
                }
                Err(_) => CaseBytes::whole(u64::MAX),
            })
            .collect();
        let gpus = self.gpus();
        let mut stats = RunStats::default();
        let mut tiers = admission_tiers(&bytes, self.jobs, self.device_bytes, self.host_bytes);
        if let Some(o) = &self.order {
            tiers = tiers_by_class(tiers, &bytes, |i| o.rank(&cases[i]).class);
        }
        // Cases that ran out of device memory beside others: their verdicts wait for a run
        // alone (`OutOfRoom`).
        let mut again: Vec<Case> = Vec::new();
        // Each tier's wall is told where there are several, or the one runs fewer at a time.
        let tiered = tiers.len() > 1 || tiers.first().is_some_and(|t| t.slots < self.jobs);
        for (k, tier) in tiers.into_iter().enumerate() {
            // Out of time: the tiers left (bigger cases) start nothing.
            if self.budget.as_ref().is_some_and(|b| b.exhausted()) {
                break;
            }
            let tier_cases: Vec<Case> = tier.cases.iter().map(|&i| cases[i].clone()).collect();
            if k > 0 || tier.slots < self.jobs {
                self.events.emit(Event::Tier {
                    under: self.under,
                    cases: tier_cases.len(),
                    largest_bytes: tier.largest,
                    per_gpu: tier.slots,
                });
            }
            // Alone on its GPU already: one at a time, or the tier's one case.
            let mut room = OutOfRoom::new(tier.slots > 1 && tier_cases.len() > 1);
            let more = self.run_on(&tier_cases, tier.slots * gpus, &mut |r| room.pass(r, sink))?;
            if tiered {
                self.events.emit(Event::TierEnded {
                    under: self.under,
                    ran: more.ran,
                    per_gpu: tier.slots,
                    wall_s: more.wall_s,
                    replaced: more.replaced,
                    waited_s: more.worker_wait_s,
                });
            }
            stats.add(more);
            stats.ran = stats.ran.saturating_sub(room.held.len());
            again.extend(room.held);
        }
        // Run alone, one per GPU, unless the time is up: then they are not run (`--resume`
        // runs them), rather than reported with a verdict the other cases caused.
        if !again.is_empty() && !self.budget.as_ref().is_some_and(|b| b.exhausted()) {
            self.events.emit(Event::AloneAgain {
                under: self.under,
                cases: again.len(),
            });
            let more = self.run_on(&again, gpus, &mut |mut r| {
                r.detail.push_str(if r.verdict == Verdict::ResourceLimit {
                    ALONE_SAME_NOTE
                } else {
                    ALONE_NOTE
                });
                sink(r)
            })?;
            stats.add(more);
        }
        Ok(stats)
    }
}

/// What a verdict run alone after running out of device memory beside other cases says.
const ALONE_NOTE: &str =
    " (run alone on its GPU: it had run out of device memory beside other cases)";
/// What a `resource-limit` says when the run alone gave it too: the cases beside it were not
/// the cause.
const ALONE_SAME_NOTE: &str =
    " (run again alone on its GPU, with the same verdict: the cases beside it were not the cause)";

/// The results of a tier whose cases share each GPU (`shared`), passed on except a
/// `resource-limit`: a case that ran out of device memory beside others may fit alone
/// (under memcheck the tool's own device memory came on top of the tensors admission counts:
/// 16 of 337 cases past 2^28 elements, each of 4 to 8 GiB, on an H100), so it is held to run
/// again alone and only that run's verdict is reported. A case that cannot fit alone gets
/// its `resource-limit` then. One past a limit of the device's whatever runs beside it (the
/// fact `FIXED_LIMIT`: a modelled maximum buffer length, or more than exact mode's address
/// range, which holds one case's buffers) keeps its verdict: run 34's H200 ran sdpa_prefill's
/// six such cases again alone after the other 5,334, for nothing.
struct OutOfRoom {
    shared: bool,
    held: Vec<Case>,
}

impl OutOfRoom {
    fn new(shared: bool) -> Self {
        OutOfRoom {
            shared,
            held: Vec::new(),
        }
    }

    fn pass(&mut self, r: CaseResult, sink: &mut Sink<'_>) -> Result<(), OutputError> {
        let fixed = r.facts.get(FIXED_LIMIT) == Some(&serde_json::Value::Bool(true));
        if self.shared && r.verdict == Verdict::ResourceLimit && !fixed {
            self.held.push(r.case);
            return Ok(());
        }
        sink(r)
    }
}

impl GpuExecutor {
    /// Run `cases` on the first `slots` pools.
    fn run_on(
        &mut self,
        cases: &[Case],
        slots: usize,
        sink: &mut Sink<'_>,
    ) -> Result<RunStats, EngineError> {
        if cases.is_empty() {
            return Ok(RunStats::default());
        }
        let n = slots.min(self.pools.len());
        let under = self.under;
        let overlap = self.fit_pools(n);
        let pools = &mut self.pools[..n];
        let t0 = Instant::now();
        let before = PoolMarks::of(pools);
        let per_worker = pools.first().and_then(|(_, s)| s.cases_per_worker());
        let opts = schedule::Options {
            batch: pull_size(per_worker, overlap, cases.len(), n),
            least: per_worker.unwrap_or(1),
            max_failures: GPU_MAX_FAILURES,
        };
        // Cases that share inputs and a reference (every impl of one shape) go to one worker
        // in a row, which draws the inputs and computes the reference once for all of them.
        // In a time-limited sweep, in the order of expected yield.
        let (cases, units) = match &self.order {
            Some(o) => units_by_position(cases, |c| o.position(c)),
            None => units_by_reference(cases),
        };
        let cases = &cases[..];
        let progress = Ticker::start(&self.events, under, cases.len());
        let mut written = 0usize;
        let temp = self.temp.clone();
        let budget = self.budget.clone();
        let res = schedule::run_units(cases, &units, pools, opts, budget.as_deref(), |f| {
            let mut r = f.output;
            r.gpu = Some(f.device);
            if r.verdict.is_failure() {
                if let Some(t) = &temp {
                    t.keep();
                }
            }
            written += 1;
            progress.case(&r);
            sink(r)
        });
        progress.end();
        let res = match res {
            Err(schedule::ScheduleError::Sink(e)) => return Err(EngineError::Sink(e)),
            res => res,
        };
        let sched = res.map_err(|source| stopped(source, under, pools, cases, written))?;
        for d in sched.lost() {
            self.events.emit(Event::GpuLost {
                under,
                gpu: d.device,
                after: d.ran,
                why: d.lost.clone().unwrap_or_default(),
            });
        }
        Ok(before.stats(pools, &sched, t0))
    }

    /// Whether a sanitized worker's exit may overlap the next batch on a tier of `n` pools:
    /// only where every slot is in use and there are several (the cases small). An exiting
    /// worker holds its device memory, which a tier of bigger cases, or a lone slot, leaves no
    /// room for.
    fn overlaps(&self, n: usize) -> bool {
        n == self.pools.len() && self.jobs > 1
    }

    /// GPUs the pools are on (`jobs` pools each).
    fn gpus(&self) -> usize {
        (self.pools.len() / self.jobs.max(1)).max(1)
    }

    /// Give the first `n` pools (a tier's) their threads, standbys and whether a sanitized
    /// worker's exit overlaps the next batch (returned), and let the others' workers go.
    fn fit_pools(&mut self, n: usize) -> bool {
        // The workers of a tier of big cases share the host's cores, each with its part for
        // its CPU-side work (inputs, reference, comparison). With every slot in use the cases
        // are small and each worker may use every core for its bursts: on the H200 (16 cores,
        // 8 workers) the default suite took 7.2 s so and 11.2 s with two threads a worker.
        // Pools this tier leaves idle let their workers go: an idle worker keeps its last
        // inputs and reference, which a bigger case needs the room of.
        let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
        let threads = tier_threads(n, self.pools.len(), cores);
        // A tier of fewer slots keeps more standbys each, the GPU's processes as many as with
        // every slot in use: its cases are the big ones, where ggml's aborts come in runs.
        let standbys = standbys_per_slot(n / self.gpus(), self.jobs);
        let overlap = self.overlaps(n);
        for (k, (_, s)) in self.pools.iter_mut().enumerate() {
            if k < n {
                s.set_threads(threads);
                s.set_standbys(standbys);
                s.set_overlap_read_out(overlap);
            } else {
                s.release();
            }
        }
        overlap
    }
}

/// Where a tier's pools stood before it ran (workers started, time waited for workers,
/// start-ups recorded): the tier's stats count what they did since.
struct PoolMarks {
    started: Vec<usize>,
    waited: Duration,
    slot_time: SlotTime,
    startups: Vec<usize>,
}

/// The pools' slot time, summed.
fn slot_time(pools: &[(u32, Supervisor)]) -> SlotTime {
    pools
        .iter()
        .map(|(_, s)| s.slot_time())
        .fold(SlotTime::default(), |a, b| a + b)
}

impl PoolMarks {
    fn of(pools: &[(u32, Supervisor)]) -> PoolMarks {
        PoolMarks {
            started: pools.iter().map(|(_, s)| s.workers_started()).collect(),
            waited: pools.iter().map(|(_, s)| s.waited()).sum(),
            slot_time: slot_time(pools),
            startups: pools.iter().map(|(_, s)| s.startups().len()).collect(),
        }
    }

    /// The tier's stats: what `pools` did since these marks, the scheduler's `sched`, and
    /// the wall time since `t0`.
    fn stats(
        &self,
        pools: &[(u32, Supervisor)],
        sched: &schedule::Summary,
        t0: Instant,
    ) -> RunStats {
        let started: Vec<usize> = pools
            .iter()
            .zip(&self.started)
            .map(|((_, s), before)| s.workers_started() - before)
            .collect();
        RunStats {
            ran: sched.ran(),
            wall_s: t0.elapsed().as_secs_f64(),
            workers: started.iter().sum(),
            replaced: started.iter().map(|n| n.saturating_sub(1)).sum(),
            worker_wait_s: pools
                .iter()
                .map(|(_, s)| s.waited())
                .sum::<Duration>()
                .saturating_sub(self.waited)
                .as_secs_f64(),
            slot_time: crate::summary::SlotSeconds {
                pulls_s: sched.devices.iter().map(|d| d.busy.as_secs_f64()).sum(),
                ..slot_time(pools).since(self.slot_time).into()
            },
            worker_start_s: pools
                .iter()
                .zip(&self.startups)
                .flat_map(|((_, s), &before)| s.startups()[before..].iter().copied())
                .collect(),
            per_gpu: sched
                .devices
                .iter()
                .map(|d| GpuRun {
                    gpu: d.device,
                    cases: d.ran,
                    lost: d.lost.clone(),
                })
                .collect(),
        }
    }
}

/// The error of a tier the scheduler stopped: the GPUs of its `pools`, the results
/// `written`, and (every GPU lost) the first of its `cases` not run.
fn stopped(
    source: schedule::ScheduleError<SupervisorError>,
    under: Under,
    pools: &[(u32, Supervisor)],
    cases: &[Case],
    written: usize,
) -> EngineError {
    let gpus = pools
        .iter()
        .map(|(g, _)| g.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let left = match &source {
        schedule::ScheduleError::AllLost { not_run, .. } => {
            format!("; not run: {}", name_cases(cases, not_run))
        }
        _ => String::new(),
    };
    EngineError::Stopped {
        under,
        gpus,
        written,
        left,
        source: Box::new(source),
    }
}

/// Threads each worker of a tier of `n` workers may use, out of `pools` slots and `cores`:
/// every core (`None`) when every slot is in use (small cases) or one worker runs alone, else
/// an equal part (see `GpuExecutor::fit_pools`).
fn tier_threads(n: usize, pools: usize, cores: usize) -> Option<usize> {
    (n > 1 && n < pools).then(|| (cores / n).max(1))
}

/// Where a case stands in a time-limited sweep's order of expected yield
/// (`select::order::ranks` computes it). Classes run in order, lowest first; within a class the
/// units of one group (the probes of one boundary, both sides of its crossing) are next to
/// each other, and each op's groups are spread over the class as `units_by_reference` spreads
/// units.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank {
    /// Every unit of a lower class runs before any unit of a higher one.
    pub class: u8,
    /// Units with the same class and group run next to each other; `None`: a group of its own.
    pub(crate) group: Option<u32>,
}

/// A run's order of expected yield (`select::order::by_yield`): each key's rank, and where
/// its cases stand in the order of the whole selection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct YieldOrder {
    pub(crate) ranks: std::collections::HashMap<ReferenceKey, Rank>,
    pub(crate) positions: std::collections::HashMap<ReferenceKey, usize>,
}

impl YieldOrder {
    /// A case's rank (the default, class 0 alone, for a key not ranked).
    pub fn rank(&self, c: &Case) -> Rank {
        self.ranks
            .get(&ReferenceKey::of(c))
            .copied()
            .unwrap_or_default()
    }
    /// Where a case's key stands in the order (after every ranked key when it is not).
    fn position(&self, c: &Case) -> usize {
        self.positions
            .get(&ReferenceKey::of(c))
            .copied()
            .unwrap_or(usize::MAX)
    }
}

/// `cases` as units of one `ReferenceKey` each (numbered as `units_by_reference` numbers
/// them), the units in the order of `position` (ties: first seen first): a subset of a run
/// (a tier, what is left to resume) keeps the order of the whole.
fn units_by_position(cases: &[Case], position: impl Fn(&Case) -> usize) -> (Vec<Case>, Vec<usize>) {
    let mut first: std::collections::HashMap<ReferenceKey, usize> = Default::default();
    let mut unit_pos: Vec<usize> = Vec::new();
    let keys: Vec<usize> = cases
        .iter()
        .map(|c| {
            let n = first.len();
            let k = *first.entry(ReferenceKey::of(c)).or_insert(n);
            if k == unit_pos.len() {
                unit_pos.push(position(c));
            }
            k
        })
        .collect();
    let mut order: Vec<usize> = (0..cases.len()).collect();
    order.sort_by_key(|&i| (unit_pos[keys[i]], keys[i], i));
    (
        order.iter().map(|&i| cases[i].clone()).collect(),
        order.iter().map(|&i| keys[i]).collect(),
    )
}

/// `cases` with the cases of one `ReferenceKey` next to each other (cases in their order
/// within a key), and the unit of each: its key's number, in the order keys first appear.
///
/// Each op's units are spread evenly over the whole order (the units of an op with k of them
/// sit at 1/2k, 3/2k, ... of the way), rather than one op after another: a run of one op's
/// slow or faulting cases (guard mode's FP8 over-reads each end a worker) then reaches the
/// slots a few at a time over the sweep, where a standby worker keeps up, instead of every
/// slot at once.
fn units_by_reference(cases: &[Case]) -> (Vec<Case>, Vec<usize>) {
    units_ranked(cases, |_| Rank::default())
}

/// [`units_by_reference`] in classes: every unit of a lower class first; within a class, the
/// units of one group together (in the order they first appear) and each op's groups spread
/// over the class as `units_by_reference` spreads each op's units over the whole order. With
/// one rank for every case it is `units_by_reference`. A unit's rank is its first case's.
pub(crate) fn units_ranked(
    cases: &[Case],
    rank: impl Fn(&Case) -> Rank,
) -> (Vec<Case>, Vec<usize>) {
    let mut first: std::collections::HashMap<ReferenceKey, usize> = Default::default();
    // Per unit: its op's number and its rank.
    let mut unit_op: Vec<usize> = Vec::new();
    let mut unit_rank: Vec<Rank> = Vec::new();
    let mut ops: Vec<&str> = Vec::new();
    let keys: Vec<usize> = cases
        .iter()
        .map(|c| {
            let n = first.len();
            let k = *first.entry(ReferenceKey::of(c)).or_insert(n);
            if k == unit_op.len() {
                let op = match ops.iter().position(|o| *o == c.op) {
                    Some(o) => o,
                    None => {
                        ops.push(&c.op);
                        ops.len() - 1
                    }
                };
                unit_op.push(op);
                unit_rank.push(rank(c));
            }
            k
        })
        .collect();
    // Items: a group's units, or a unit alone; in the order they first appear.
    let mut items: Vec<(u8, usize, Vec<usize>)> = Vec::new();
    let mut item_of_group: std::collections::HashMap<(u8, u32), usize> = Default::default();
    for (u, r) in unit_rank.iter().enumerate() {
        match r.group {
            Some(g) => match item_of_group.get(&(r.class, g)) {
                Some(&i) => items[i].2.push(u),
                None => {
                    item_of_group.insert((r.class, g), items.len());
                    items.push((r.class, unit_op[u], vec![u]));
                }
            },
            None => items.push((r.class, unit_op[u], vec![u])),
        }
    }
    // Each item's rank among its class's items of its op, and how many those are.
    let mut per: std::collections::HashMap<(u8, usize), u128> = Default::default();
    let ranks: Vec<u128> = items
        .iter()
        .map(|(class, op, _)| {
            let n = per.entry((*class, *op)).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect();
    // Where item i sits in its class: (2 rank + 1) / (2 count), compared without division.
    let place = |i: usize| {
        let (class, op, _) = &items[i];
        (2 * ranks[i] + 1, 2 * per[&(*class, *op)])
    };
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by(|&a, &b| {
        let ((na, da), (nb, db)) = (place(a), place(b));
        items[a]
            .0
            .cmp(&items[b].0)
            .then((na * db).cmp(&(nb * da)))
            .then(items[a].1.cmp(&items[b].1))
            .then(a.cmp(&b))
    });
    let mut slot = vec![0usize; unit_op.len()];
    for (pos, u) in order.iter().flat_map(|&i| items[i].2.iter()).enumerate() {
        slot[*u] = pos;
    }
    let mut order: Vec<usize> = (0..cases.len()).collect();
    order.sort_by_key(|&i| (slot[keys[i]], i));
    (
        order.iter().map(|&i| cases[i].clone()).collect(),
        order.iter().map(|&i| keys[i]).collect(),
    )
}

/// The first few cases of `which` by label, and how many more.
fn name_cases(cases: &[Case], which: &[usize]) -> String {
    const SHOWN: usize = 5;
    let mut names: Vec<String> = which
        .iter()
        .take(SHOWN)
        .filter_map(|&i| cases.get(i).map(Case::label))
        .collect();
    if which.len() > SHOWN {
        names.push(format!("and {} more", which.len() - SHOWN));
    }
    names.join(", ")
}

/// Cases a slot pulls at a time. Natively one: that keeps the GPUs level, and a worker stays
/// alive between pulls. A sanitized worker's report is read when it ends, so there a pull is
/// whole batches (`per_worker`): `PULL_BATCHES` of them where one worker's exit overlaps the
/// next one's batch (`overlap`; the last worker of a pull is waited for, its results due when
/// the pull ends), else one. No more than an even share of the cases over the slots: a run of
/// few cases starts a worker on each slot instead of handing every case to the first (run 33:
/// four cases admitted two per GPU ran one after another in one sanitized worker); the queue
/// also cuts each pull to an even share of what is left, never below one worker's batch
/// (`schedule::Options::least`).
fn pull_size(per_worker: Option<usize>, overlap: bool, cases: usize, slots: usize) -> usize {
    match per_worker {
        None => 1,
        Some(b) => {
            let batches = if overlap { PULL_BATCHES } else { 1 };
            b.saturating_mul(batches)
                .min(cases.div_ceil(slots.max(1)))
                .max(1)
        }
    }
}

/// Sanitized batches a slot pulls at once where their workers' exits overlap (`pull_size`):
/// the exits of all but the last are hidden behind the next batch.
const PULL_BATCHES: usize = 4;

#[cfg(test)]
mod admission_tests {
    use super::{admission_tiers, pull_size, units_by_reference, CaseBytes};
    use kedge_core::{AllocMode, Case};
    const GB: u64 = 1 << 30;

    /// Natively a slot pulls one case at a time; under a sanitizer a worker's batch, cut to an
    /// even share so that few cases still start a worker on every slot.
    #[test]
    fn a_sanitized_pull_is_a_batch_cut_to_a_share_of_the_slots() {
        assert_eq!(pull_size(None, false, 1000, 8), 1);
        assert_eq!(pull_size(None, true, 1000, 8), 1);
        assert_eq!(
            pull_size(Some(16), false, 10_000, 8),
            16,
            "many cases: whole batches"
        );
        assert_eq!(
            pull_size(Some(16), true, 10_000, 8),
            16 * super::PULL_BATCHES,
            "exits overlapping: several batches a pull"
        );
        assert_eq!(pull_size(Some(16), true, 100, 8), 13, "an even share");
        assert_eq!(
            pull_size(Some(16), false, 4, 2),
            2,
            "four cases, two slots: two workers"
        );
        assert_eq!(pull_size(Some(16), false, 8, 8), 1, "a case per slot");
        assert_eq!(pull_size(Some(16), false, 9, 8), 2);
        assert_eq!(pull_size(Some(1), false, 100, 2), 1, "--batch 1 stays one");
        assert_eq!(pull_size(Some(16), false, 0, 8), 1);
        assert_eq!(
            pull_size(Some(16), false, 5, 0),
            5,
            "no slot counted: one share"
        );
    }

    #[test]
    fn the_impls_of_one_shape_are_one_unit_in_first_seen_order() {
        let c = |imp: &str, n: i64, alloc: AllocMode| {
            let mut c = Case::new("rms_norm", imp, kedge_core::DType::F32, [64, n, 1, 1]);
            c.alloc = alloc;
            c
        };
        let cases = vec![
            c("ggml", 2, AllocMode::Exact),
            c("ggml", 3, AllocMode::Exact),
            c("clamped", 2, AllocMode::Exact),
            c("clamped", 3, AllocMode::Guard),
            c("ggml", 4, AllocMode::Exact),
        ];
        let (ordered, units) = units_by_reference(&cases);
        let got: Vec<(String, i64, usize)> = ordered
            .iter()
            .zip(&units)
            .map(|(c, &u)| (c.imp.clone(), c.ne[1], u))
            .collect();
        let want = [
            ("ggml", 2, 0),
            ("clamped", 2, 0),
            ("ggml", 3, 1),
            ("clamped", 3, 1),
            ("ggml", 4, 2),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|&(i, n, u)| (i.to_string(), n, u))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn each_ops_units_are_spread_over_the_order() {
        let c = |op: &str, n: i64| Case::new(op, "x", kedge_core::DType::F32, [64, n, 1, 1]);
        // Four units of "a", then two of "b", then one of "c".
        let cases: Vec<Case> = [
            ("a", 1),
            ("a", 2),
            ("a", 3),
            ("a", 4),
            ("b", 1),
            ("b", 2),
            ("c", 1),
        ]
        .iter()
        .map(|&(op, n)| c(op, n))
        .collect();
        let (ordered, units) = units_by_reference(&cases);
        let got: Vec<(String, i64)> = ordered.iter().map(|c| (c.op.clone(), c.ne[1])).collect();
        // "a" at 1/8, 3/8, 5/8, 7/8; "b" at 1/4, 3/4; "c" at 1/2 (ties: first-seen op first).
        let want = [
            ("a", 1),
            ("b", 1),
            ("a", 2),
            ("c", 1),
            ("a", 3),
            ("b", 2),
            ("a", 4),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|&(o, n)| (o.to_string(), n))
                .collect::<Vec<_>>()
        );
        // Units keep their first-seen numbers.
        assert_eq!(units, vec![0, 4, 1, 6, 2, 5, 3]);
    }

    #[test]
    fn ranked_units_run_class_by_class_with_a_groups_units_together() {
        use super::{units_ranked, Rank};
        let c =
            |op: &str, n: i64, imp: &str| Case::new(op, imp, kedge_core::DType::F32, [64, n, 1, 1]);
        // Op a: a boundary (group 7: n = 10, 11) and two other shapes; op b: a boundary
        // (group 8: n = 20, 21) and one other shape in another dtype (class 1). Every shape
        // has two impls, given apart.
        let mut cases = Vec::new();
        for imp in ["x", "y"] {
            for (op, n) in [
                ("a", 1),
                ("a", 10),
                ("b", 5),
                ("a", 11),
                ("a", 2),
                ("b", 20),
                ("b", 21),
            ] {
                cases.push(c(op, n, imp));
            }
        }
        let rank = |c: &Case| match (c.op.as_str(), c.ne[1]) {
            ("a", 10 | 11) => Rank {
                class: 0,
                group: Some(7),
            },
            ("b", 20 | 21) => Rank {
                class: 0,
                group: Some(8),
            },
            ("b", 5) => Rank {
                class: 1,
                group: None,
            },
            _ => Rank {
                class: 2,
                group: None,
            },
        };
        let (ordered, units) = units_ranked(&cases, rank);
        let got: Vec<(String, i64, String)> = ordered
            .iter()
            .map(|c| (c.op.clone(), c.ne[1], c.imp.clone()))
            .collect();
        let want = [
            // Class 0: a's boundary, both sides, then b's (one group each: ops at 1/2, the
            // first-seen op first).
            ("a", 10, "x"),
            ("a", 10, "y"),
            ("a", 11, "x"),
            ("a", 11, "y"),
            ("b", 20, "x"),
            ("b", 20, "y"),
            ("b", 21, "x"),
            ("b", 21, "y"),
            // Class 1: the other dtype.
            ("b", 5, "x"),
            ("b", 5, "y"),
            // Class 2: the rest.
            ("a", 1, "x"),
            ("a", 1, "y"),
            ("a", 2, "x"),
            ("a", 2, "y"),
        ];
        assert_eq!(
            got,
            want.iter()
                .map(|&(o, n, i)| (o.to_string(), n, i.to_string()))
                .collect::<Vec<_>>()
        );
        // A key's impls stay one unit, numbered as units_by_reference numbers them.
        assert_eq!(units, vec![1, 1, 3, 3, 5, 5, 6, 6, 2, 2, 0, 0, 4, 4]);
        // The same input gives the same order.
        assert_eq!(units_ranked(&cases, rank).0, ordered);
    }

    #[test]
    fn small_cases_share_the_gpu_and_big_ones_run_fewer_at_once() {
        // A 14 GB device, 9 GB of host memory, 8 jobs.
        let bytes = [GB / 1024, 2 * GB, GB / 2, GB, 5 * GB].map(CaseBytes::whole);
        let t = admission_tiers(&bytes, 8, 14 * GB, Some(9 * GB));
        let slots: Vec<(usize, Vec<usize>)> =
            t.iter().map(|t| (t.slots, t.cases.clone())).collect();
        // 0.5 GB: device allows 14, host 9/1.5 = 6; 1 GB: device 7, host 3; 2 GB: device 3,
        // host 1; 5 GB: past ALONE_FROM_BYTES, alone whatever the memory.
        assert_eq!(
            slots,
            vec![(8, vec![0]), (6, vec![2]), (3, vec![3]), (1, vec![1, 4])]
        );
        assert_eq!(t[3].largest, 5 * GB);
        // Past ALONE_FROM_BYTES a case runs alone even where memory would let it share.
        let t = admission_tiers(
            &[CaseBytes::whole(super::ALONE_FROM_BYTES)],
            8,
            1 << 50,
            None,
        );
        assert_eq!(t[0].slots, 1);
        // A case judged on sampled rows holds nothing on the host: only the device limits it.
        let sampled = CaseBytes {
            device: 16 * GB,
            host: 0,
        };
        let t = admission_tiers(&[sampled; 3], 8, 140 * GB, Some(GB));
        assert_eq!(t[0].slots, 4);
    }

    #[test]
    fn big_tiers_share_the_cores_and_the_first_and_a_lone_case_do_not() {
        use super::tier_threads;
        assert_eq!(tier_threads(8, 8, 16), None);
        assert_eq!(tier_threads(2, 8, 16), Some(8));
        assert_eq!(tier_threads(5, 8, 16), Some(3));
        assert_eq!(tier_threads(1, 8, 16), None);
        assert_eq!(tier_threads(4, 8, 2), Some(1));
    }

    #[test]
    fn a_block_format_case_holds_its_f32_values_on_the_host_and_a_sampled_one_its_made_inputs() {
        use kedge_core::judge::sample::Judging;
        use kedge_core::{Case, DType};
        let reg = kedge_ops::registry();
        let op = reg.op("get_rows").unwrap();
        let c = Case::new("get_rows", "ggml:CUDA0", DType::Q5_0, [64, 1 << 20, 1, 1]);
        let c = reg.validate(&c).unwrap_or(c);
        // Judged whole: its table's blocks and their f32 values on the host.
        let b = CaseBytes::of(op, &c, Judging::Full, false);
        let table = DType::Q5_0.bytes_of(64 << 20);
        assert!(b.device >= table);
        assert!(b.host >= table + (64 << 20) * 4, "{b:?}");
        // Judged on its sampled output rows: only the three indices it makes.
        let b = CaseBytes::of(op, &c, Judging::Auto, false);
        assert_eq!(b.host, 3 * 4, "{b:?}");
        // A big gelu on a CUDA build is judged on sampled rows: nothing of it on the host.
        let op = reg.op("gelu").unwrap();
        let c = Case::new("gelu", "ggml:CUDA0", DType::F32, [64, 1 << 25, 1, 1]);
        let b = CaseBytes::of(op, &c, Judging::Auto, false);
        assert_eq!((b.device, b.host), (2 * 4 * (64 << 25), 0));
        assert_eq!(CaseBytes::of(op, &c, Judging::Full, false).host, b.device);
        // A big gather is judged on sampled output rows: its indices are made on the host and
        // held there, its table drawn on the device.
        let op = reg.op("get_rows").unwrap();
        let c = Case::new("get_rows", "ggml:CUDA0", DType::F32, [64, 8, 1 << 17, 1]);
        let c = reg.validate(&c).unwrap_or(c);
        let b = CaseBytes::of(op, &c, Judging::Auto, false);
        let table = 4 * ((64 * 8) << 17);
        let rows = 4 * 3 * (1 << 17);
        assert_eq!(b.host, rows, "{b:?}");
        assert_eq!(b.device, table + rows + 4 * 64 * 3 * (1 << 17));
    }

    #[test]
    fn kedges_own_big_cases_judged_on_sampled_rows_hold_nothing_on_the_host() {
        use kedge_core::judge::sample::Judging;
        use kedge_core::{Case, DType};
        let reg = kedge_ops::registry();
        // A 2^31-element rms_norm on kedge's kernel: drawn, run and scanned on the device.
        let c = Case::new("rms_norm", "clamped", DType::F32, [64, 1 << 25, 1, 1]);
        let c = reg.validate(&c).unwrap_or(c);
        let (op, imp) = reg.resolve(&c).unwrap();
        assert!(imp.backend().is_none());
        let b = CaseBytes::of(op, &c, Judging::Auto, true);
        assert_eq!((b.device, b.host), (2 * 4 * (64 << 25), 0), "{b:?}");
        // Judged whole, it holds its tensors on the host, and from 4 GiB runs alone.
        let whole = CaseBytes::of(op, &c, Judging::Full, true);
        assert_eq!(whole.host, whole.device);
        // Sampled, two fit side by side in half an 85 GB card's memory, with 4 workers.
        let t = admission_tiers(&[b, b], 4, 85 * GB, Some(125 * GB));
        assert_eq!(t[0].slots, 2, "{t:?}");
        let t = admission_tiers(&[whole, whole], 4, 85 * GB, Some(125 * GB));
        assert_eq!(t[0].slots, 1, "{t:?}");
    }

    #[test]
    fn a_time_limited_runs_tiers_go_class_by_class() {
        use super::tiers_by_class;
        // A 140 GB device, 8 jobs: cases 0 to 2 small (8 slots), 3 and 4 alone.
        let bytes = [GB, GB, GB, 90 * GB, 90 * GB].map(CaseBytes::whole);
        let t = admission_tiers(&bytes, 8, 140 * GB, None);
        let shape = |t: &[super::Tier]| -> Vec<(usize, Vec<usize>)> {
            t.iter().map(|t| (t.slots, t.cases.clone())).collect()
        };
        assert_eq!(shape(&t), vec![(8, vec![0, 1, 2]), (1, vec![3, 4])]);
        // A crossing (class 0) in each tier: both before the rest (class 3) of either.
        let class = [3u8, 0, 3, 0, 3];
        let by = tiers_by_class(t.clone(), &bytes, |i| class[i]);
        assert_eq!(
            shape(&by),
            vec![(8, vec![1]), (1, vec![3]), (8, vec![0, 2]), (1, vec![4])]
        );
        assert_eq!(by[1].largest, 90 * GB);
        assert_eq!(by[2].largest, GB);
        // A class's last tier and the next class's first with the same slots are one.
        let class = [0u8, 0, 0, 0, 1];
        let by = tiers_by_class(t.clone(), &bytes, |i| class[i]);
        assert_eq!(shape(&by), vec![(8, vec![0, 1, 2]), (1, vec![3, 4])]);
        // One class: the tiers as they were.
        assert_eq!(shape(&tiers_by_class(t.clone(), &bytes, |_| 2)), shape(&t));
    }

    #[test]
    fn one_job_is_one_tier_in_the_given_order() {
        let bytes = [90 * GB, 1, 2].map(CaseBytes::whole);
        let t = admission_tiers(&bytes, 1, 140 * GB, Some(GB));
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].slots, 1);
        assert_eq!(t[0].cases, vec![0, 1, 2]);
    }

    #[test]
    fn an_unknown_size_runs_alone_and_an_unknown_host_does_not_limit() {
        let t = admission_tiers(&[u64::MAX, 1].map(CaseBytes::whole), 4, 140 * GB, None);
        assert_eq!(t[0].slots, 4);
        assert_eq!(t[0].cases, vec![1]);
        assert_eq!(t[1].slots, 1);
        assert_eq!(t[1].cases, vec![0]);
    }
}
