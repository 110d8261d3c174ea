//! Running one case, op-agnostic, in the order of kedge's data flow: plan and check it,
//! allocate in the case's mode, fill inputs and poison outputs, run the impl, synchronize, read
//! canaries, copy back, compare with the reference. The CPU side (`check_on_cpu`) is the same
//! plan check and reference without a device.

pub mod bench;
mod cpu;
pub mod phase;
mod reference;

pub use cpu::{check_on_cpu, plan_case};
pub use reference::{JudgedBefore, ReferenceCache, ReferenceKey};

use crate::contract::imp::{BackendImpl, BackendRun, Impl, SampledDraw, SampledRun};
use crate::contract::op::{Op, Role, TensorSpec};
use crate::contract::registry::Registry;
use crate::contract::run::RunCtx;
use crate::cuda::alloc::DeviceAlloc;
use crate::cuda::device::Device;
use crate::cuda::error::{DeviceError, RunError};
use crate::judge::compare::{all_poisoned, compare, digest, nothing_written, Comparison};
use crate::judge::result::{Allocation, CaseResult, Observed, Timings, FIXED_LIMIT};
use crate::judge::sample::{self, Judging};
use crate::model::case::{AllocMode, Case};
use crate::model::host::{poison_pattern, HostTensor};
use crate::model::words::{Detector, Verdict};
use phase::Phase;
use std::time::Instant;

/// The outcome of a case on a device, and whether the CUDA context is now dead (the worker
/// must then exit: every later call in the process would fail).
pub struct Executed {
    /// The verdict.
    pub result: CaseResult,
    /// The CUDA context is dead: every later call would fail.
    pub context_dead: bool,
}

impl Executed {
    fn alive(result: CaseResult) -> Executed {
        Executed {
            result,
            context_dead: false,
        }
    }
}

/// A GPU a worker opens on first use: cases whose impl owns its memory (a library backend,
/// which may be a CPU backend) run without kedge ever opening the device.
pub struct DeviceSlot {
    ordinal: usize,
    dev: Option<Device>,
    packed_exact: bool,
    judging: Judging,
}

impl DeviceSlot {
    /// A slot that opens device `ordinal` on first use.
    pub fn new(ordinal: usize) -> Self {
        DeviceSlot {
            ordinal,
            dev: None,
            packed_exact: true,
            judging: Judging::Auto,
        }
    }
    /// A slot with device `ordinal` open now.
    pub fn open(ordinal: usize) -> Result<Self, DeviceError> {
        Ok(DeviceSlot {
            ordinal,
            dev: Some(Device::open(ordinal)?),
            packed_exact: true,
            judging: Judging::Auto,
        })
    }
    /// Exact mode packed in the arena (the default) or one `cuMemAlloc` per buffer (under a
    /// sanitizer): see `Device::packed_exact`.
    pub fn packed_exact(mut self, on: bool) -> Self {
        self.packed_exact = on;
        if let Some(d) = self.dev.as_mut() {
            d.packed_exact = on;
        }
        self
    }
    /// How big cases are judged in this worker (`judge::sample`): on sampled rows from
    /// `SAMPLED_FROM` elements (the default), always whole, or sampled whatever the size.
    pub fn judging(mut self, j: Judging) -> Self {
        self.judging = j;
        self
    }
    /// The device, opened if it was not.
    fn get(&mut self) -> Result<&mut Device, DeviceError> {
        if self.dev.is_none() {
            let mut d = Device::open(self.ordinal)?;
            d.packed_exact = self.packed_exact;
            self.dev = Some(d);
        }
        match self.dev.as_mut() {
            Some(d) => Ok(d),
            None => Err(DeviceError::NoDevice(
                "the device could not be opened".into(),
            )),
        }
    }
    /// The device, if it is open.
    pub fn opened(&self) -> Option<&Device> {
        self.dev.as_ref()
    }
}

/// Run one case and judge it. Never panics on device errors; says whether the context died.
pub fn execute(
    reg: &Registry,
    slot: &mut DeviceSlot,
    case: &Case,
    refs: &mut ReferenceCache,
) -> Executed {
    let t0 = begin(Phase::Setup);
    let judging = slot.judging;
    let mut ex = match reg.resolve(case) {
        Err(e) => Executed::alive(CaseResult::new(
            case,
            Verdict::Unsupported,
            Detector::Impl,
            e.to_string(),
        )),
        Ok((op, imp)) => match imp.backend() {
            Some(_) => execute_backend(op, imp, case, refs, judging),
            None => match slot.get() {
                Ok(dev) => execute_kernels(op, imp, dev, case, refs, judging),
                Err(e) => Executed::alive(CaseResult::new(
                    case,
                    Verdict::Unsupported,
                    Detector::Impl,
                    format!("impl {} needs a CUDA device: {e}", imp.name()),
                )),
            },
        },
    };
    ex.result.ms = t0.elapsed().as_secs_f64() * 1e3;
    phase::clear();
    ex
}

/// A run error as a verdict: which layer saw it.
fn failed(case: &Case, e: RunError) -> Executed {
    let dead = e.is_sticky();
    let (verdict, detector) = match &e {
        RunError::LaunchRefused { .. } => (Verdict::LaunchError, Detector::Driver),
        RunError::Fault { name, .. } | RunError::Driver { name, .. } => {
            let guard = matches!(case.alloc, AllocMode::Guard | AllocMode::GuardFront);
            if guard && name == "CUDA_ERROR_ILLEGAL_ADDRESS" {
                (Verdict::DeviceFault, Detector::GuardPage)
            } else {
                (Verdict::DeviceFault, Detector::DeviceSync)
            }
        }
        RunError::Compile(_) => (Verdict::Unsupported, Detector::Impl),
        RunError::Resource(_) | RunError::OverLimit(_) => {
            (Verdict::ResourceLimit, Detector::Driver)
        }
        RunError::Unsupported(_) => (Verdict::Unsupported, Detector::Impl),
        // An impl's own error check (a plugin's cudaGetLastError after its launch, a
        // library's status) failed: a launch error seen by the impl rather than by kedge.
        RunError::Impl(_) => (Verdict::LaunchError, Detector::Impl),
    };
    let detail = if detector == Detector::GuardPage {
        format!("guard page hit: {e}")
    } else {
        e.to_string()
    };
    let mut result = CaseResult::new(case, verdict, detector, detail);
    if matches!(e, RunError::OverLimit(_)) {
        result.facts.insert(FIXED_LIMIT.into(), true.into());
    }
    Executed {
        result,
        context_dead: dead,
    }
}

fn bad_input(case: &Case, e: impl std::fmt::Display) -> Executed {
    Executed::alive(CaseResult::new(
        case,
        Verdict::Unsupported,
        Detector::Impl,
        format!("bad input: {e}"),
    ))
}

/// Starts a phase of the case in flight: says so (`phase::current`) and starts its clock.
fn begin(p: Phase) -> Instant {
    phase::enter(p);
    Instant::now()
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// A library backend's call timed by the phases it went through: the run is only its compute
/// where it says when it uploads and reads back (`phase::enter`), and the rest is counted as
/// kedge's copies, not as the library's run.
fn add_spent(timings: &mut Timings, spent: phase::Spent) {
    timings.setup += spent.ms(Phase::Setup) + spent.ms(Phase::Inputs);
    timings.upload += spent.ms(Phase::Upload);
    timings.run += spent.ms(Phase::Run);
    timings.download += spent.ms(Phase::Download);
    timings.reference += spent.ms(Phase::Reference);
    timings.compare += spent.ms(Phase::Compare);
}

fn execute_kernels(
    op: &dyn Op,
    imp: &dyn Impl,
    dev: &mut Device,
    case: &Case,
    refs: &mut ReferenceCache,
    judging: Judging,
) -> Executed {
    let t = Instant::now();
    let limits = dev.limits.clone();
    let plan = match plan_case(imp, case, &limits) {
        Ok(p) => p,
        Err(r) => return Executed::alive(*r),
    };
    if let Some(sp) =
        sampled_plan(op, case, judging).filter(|sp| sample::kernels_read_back_as_is(&sp.specs))
    {
        return execute_kernels_sampled(op, imp, dev, case, &plan, sp, t);
    }
    // The last big download's buffer is kept only for an output of its size, and let go
    // before this case's inputs are drawn.
    let out_sizes: Vec<u64> = op
        .tensors(case)
        .map(|ts| {
            ts.iter()
                .filter(|s| s.role == Role::Output)
                .map(|s| s.bytes)
                .collect()
        })
        .unwrap_or_default();
    dev.keep_spare_for(&out_sizes);
    phase::enter(Phase::Inputs);
    let (specs, inputs) = match refs.inputs(op, case) {
        Ok(x) => x,
        Err(e) => return bad_input(case, e),
    };
    // A big case's reference, when it is linear in the case's size, is computed on its own
    // threads while the device has the case (upload, run, download): on the H200 a
    // 2^31-element case's reference took 0.6 to 1.9 s and the device's part 0.6 s. Any
    // impl of the same key then finds it in the cache; a case the device fails keeps it for
    // the next impl (the upstream launch that is refused, then the fix).
    let ahead = computes_ahead(op, case) && !refs.has_reference(case, &inputs);
    std::thread::scope(|scope| {
        // Started with the upload: started after it instead, its threads took the cores
        // from the run (the kernel's first load) and the download, and the case took as long
        // (the 2^31-element cases on the H200, run 17: the host's memory bandwidth is what
        // both share).
        let pending = ahead.then(reference::ahead_pool).flatten().map(|pool| {
            let inputs = &inputs;
            scope.spawn(move || pool.install(|| op.reference(case, inputs)))
        });
        let prepared = Prepared {
            plan: &plan,
            specs: &specs,
            inputs: &inputs,
        };
        let on_dev = on_device(op, imp, dev, case, prepared, t);
        let waited = begin(Phase::Reference);
        if let Some(h) = pending {
            match h.join() {
                Ok(Ok(r)) => refs.put_reference(case, &inputs, r),
                // The judge computes it again and says what is wrong.
                Ok(Err(_)) => {}
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        let waited = ms(waited);
        match on_dev {
            Err(mut ex) => {
                ex.result.observed.timings.reference += waited;
                *ex
            }
            Ok(d) => {
                let OnDevice {
                    outs,
                    same_as,
                    digests,
                    canary_hits,
                    mut observed,
                    facts,
                } = d;
                observed.timings.reference = waited;
                let mut timings = observed.timings;
                let tol = op.tolerance(case);
                let known = outs
                    .iter()
                    .zip(&same_as)
                    .map(|((s, _), tag)| refs.judged_before(case, &s.name, tol, *tag))
                    .collect();
                let seen = Seen {
                    outs: &outs,
                    canary_hits,
                    known,
                    digests,
                };
                let (mut r, judged) = judge(op, case, seen, &inputs, refs, &mut timings);
                observed.timings = timings;
                r.observed = Observed {
                    output_digests: std::mem::take(&mut r.observed.output_digests),
                    same_output_as: std::mem::take(&mut r.observed.same_output_as),
                    ..observed
                };
                r.facts = facts;
                finish_notes(op, case, &mut r);
                for ((s, o), j) in outs.into_iter().zip(judged) {
                    let tag = j.map(|(digest, c)| {
                        refs.remember_comparison(case, &s.name, tol, &digest, &c)
                    });
                    dev.hand_back(o.bytes, tag);
                }
                Executed::alive(r)
            }
        }
    })
}

/// Compute the reference while the device has the case: a big case (2^24 elements or more)
/// whose reference is linear in its size. A quadratic one (attention, a GEMM) is left to the
/// judge, which skips it when the impl wrote nothing.
fn computes_ahead(op: &dyn Op, case: &Case) -> bool {
    let elements = case
        .ne
        .iter()
        .fold(1u64, |a, &x| a.saturating_mul(x.max(0) as u64));
    elements >= 1 << 24 && op.reference_work(case) <= elements.saturating_mul(4)
}

/// What the device gave back for a case that ran.
struct OnDevice {
    outs: Vec<(TensorSpec, HostTensor)>,
    /// Per output, the tag of the buffer handed back last when the download found every
    /// byte the same as it was.
    same_as: Vec<Option<u64>>,
    /// Per output, its digest when the download made it.
    digests: Vec<Option<String>>,
    canary_hits: Vec<String>,
    observed: Observed,
    facts: serde_json::Map<String, serde_json::Value>,
}

/// The device's part of a case: allocate, upload and poison, run, read canaries, download.
/// `Err` is the case's verdict when the device failed it. `t` is when the case's setup began.
/// A case's plan, tensors and inputs, ready for the device.
struct Prepared<'a> {
    plan: &'a crate::contract::plan::Plan,
    specs: &'a [TensorSpec],
    inputs: &'a [HostTensor],
}

fn on_device(
    op: &dyn Op,
    imp: &dyn Impl,
    dev: &mut Device,
    case: &Case,
    prepared: Prepared<'_>,
    t: Instant,
) -> Result<OnDevice, Box<Executed>> {
    let Prepared {
        plan,
        specs,
        inputs,
    } = prepared;
    let failed = |case: &Case, e: RunError| Box::new(failed(case, e));
    let mut timings = Timings::default();
    // Allocate every tensor in the case's mode.
    phase::enter(Phase::Setup);
    let mut allocs: Vec<DeviceAlloc> = Vec::with_capacity(specs.len());
    let mut observed = Observed::default();
    for s in specs.iter() {
        match dev.alloc(&s.name, s.bytes, case.alloc, s.dtype.size()) {
            Ok(a) => {
                if let Some(g) = a.guard_slack().filter(|&g| g > 0) {
                    observed.guard_slack.push(format!(
                        "{}: {g} bytes between its end and the guard page (alignment)",
                        s.name
                    ));
                }
                allocs.push(a)
            }
            Err(e) => return Err(failed(case, e)),
        }
    }
    timings.setup = ms(t);
    // Upload inputs, poison outputs.
    let t = begin(Phase::Upload);
    let mut input_iter = inputs.iter();
    for (s, a) in specs.iter().zip(&allocs) {
        let r = match s.role {
            Role::Input => match input_iter.next() {
                Some(h) => dev.upload(a, &h.bytes),
                None => Err(RunError::Unsupported(format!(
                    "op gave no data for input {}",
                    s.name
                ))),
            },
            Role::Output => dev.fill_pattern(a, &poison_pattern(s.dtype)),
        };
        if let Err(e) = r {
            return Err(failed(case, e));
        }
    }
    if let Err(e) = dev.synchronize("upload") {
        return Err(failed(case, e));
    }
    timings.upload = ms(t);
    // Run.
    let t = begin(Phase::Run);
    let mut ctx = RunCtx::new(dev, &allocs, case.alloc);
    let run = imp.run(&mut ctx, case, plan);
    let record = ctx.finish();
    let run = run.and_then(|_| dev.synchronize("run"));
    timings.run = ms(t);
    observed.launches = record.launched;
    observed.allocations = allocs
        .iter()
        .chain(&record.scratch)
        .map(|a| Allocation {
            name: a.name.clone(),
            base: a.ptr,
            bytes: a.bytes,
        })
        .collect();
    if let Err(e) = run {
        let mut ex = failed(case, e);
        ex.result.observed = observed;
        ex.result.observed.timings = timings;
        ex.result.facts.extend(record.facts);
        finish_notes(op, case, &mut ex.result);
        return Err(ex);
    }
    // Canaries (inputs, outputs and scratch), then the outputs.
    let t = begin(Phase::Download);
    let mut canary_hits = Vec::new();
    for a in allocs.iter().chain(record.scratch.iter()) {
        match dev.check_canary(a) {
            Ok(Some(msg)) => canary_hits.push(msg),
            Ok(None) => {}
            Err(e) => return Err(failed(case, e)),
        }
    }
    let mut outs = Vec::new();
    let mut same_as = Vec::new();
    let mut digests = Vec::new();
    for (s, a) in specs.iter().zip(&allocs) {
        if s.role == Role::Output {
            match dev.download_compared(a) {
                Ok(d) => {
                    outs.push((
                        s.clone(),
                        HostTensor::from_bytes(s.dtype, s.ne, s.nb, d.bytes),
                    ));
                    same_as.push(d.same_as);
                    digests.push(d.digest);
                }
                Err(e) => return Err(failed(case, e)),
            }
        }
    }
    timings.download = ms(t);
    drop(record.scratch);
    drop(allocs);
    observed.timings = timings;
    Ok(OnDevice {
        outs,
        same_as,
        digests,
        canary_hits,
        observed,
        facts: record.facts,
    })
}

/// A library that owns its memory (a ggml build): kedge hands it the inputs and judges what it
/// gives back, the same way.
fn execute_backend(
    op: &dyn Op,
    imp: &dyn Impl,
    case: &Case,
    refs: &mut ReferenceCache,
    judging: Judging,
) -> Executed {
    let Some(backend) = imp.backend() else {
        return bad_input(case, "not a backend impl");
    };
    // A dtype the library does not compute is the verdict, before anything runs.
    if let Some(ds) = imp.dtypes().filter(|ds| !ds.contains(&case.dtype)) {
        let only: Vec<String> = ds.iter().map(|d| d.to_string()).collect();
        return Executed::alive(CaseResult::new(
            case,
            Verdict::Unsupported,
            Detector::Impl,
            format!(
                "{} computes {} in {} only, not {}",
                imp.name(),
                case.op,
                only.join(", "),
                case.dtype
            ),
        ));
    }
    // What the library does not compute is the verdict before any input is drawn.
    if let Ok(specs) = op.tensors(case) {
        if let Err(e) = backend.supports(case, &specs) {
            let mut ex = failed(case, e);
            ex.result.observed.library = Some(backend.library());
            return ex;
        }
    }
    // The sampled plan's host work (the inputs the op makes, the sampled rows' case) is the
    // case's setup.
    let t = begin(Phase::Inputs);
    if let Some(plan) = backend
        .samples()
        .then(|| sampled_plan(op, case, judging))
        .flatten()
    {
        return execute_sampled(op, backend, case, plan, ms(t));
    }
    let mut timings = Timings::default();
    let t = begin(Phase::Inputs);
    let (specs, inputs) = match refs.inputs(op, case) {
        Ok(x) => x,
        Err(e) => {
            let mut ex = bad_input(case, e);
            ex.result.observed.library = Some(backend.library());
            return ex;
        }
    };
    timings.setup = ms(t);
    phase::enter(Phase::Run);
    phase::take_spent();
    let run: BackendRun = match backend.execute(case, &specs, &inputs) {
        Ok(r) => r,
        Err(e) => {
            let mut ex = failed(case, e);
            ex.result.observed.library = Some(backend.library());
            return ex;
        }
    };
    add_spent(&mut timings, phase::take_spent());
    let outs: Vec<(TensorSpec, HostTensor)> = specs
        .iter()
        .filter(|s| s.role == Role::Output)
        .cloned()
        .zip(run.outputs)
        .collect();
    let seen = Seen {
        outs: &outs,
        canary_hits: Vec::new(),
        known: Vec::new(),
        digests: Vec::new(),
    };
    let (mut r, _) = judge(op, case, seen, &inputs, refs, &mut timings);
    r.observed.timings = timings;
    r.observed.allocations = run.allocations;
    r.observed.library = Some(run.library);
    r.observed.not_applied = run.not_applied;
    r.facts = run.facts;
    finish_notes(op, case, &mut r);
    Executed::alive(r)
}

/// A big case judged on sampled slices: what it needs, computed before anything runs.
struct SampledPlan {
    specs: Vec<TensorSpec>,
    slicing: sample::Slicing,
    slices: Vec<u64>,
    ranges: Vec<(f32, f32)>,
    /// The drawn inputs are distinct rows (`contract::op::distinct_rows`).
    distinct: bool,
    sliced: Case,
    inputs: Vec<HostTensor>,
    /// The inputs the op makes, made whole on the host, by spec index (`Op::made_inputs`).
    made: Vec<(usize, HostTensor)>,
}

/// Whether the case is judged on sampled slices (`judge::sample`): a library that can run it
/// so, an op whose slices are independent, tensors that are all dense stacks of the case's
/// slices or inputs read whole, outputs the device can scan, and a size the worker's `Judging`
/// samples. `None`: judged whole.
fn sampled_plan(op: &dyn Op, case: &Case, judging: Judging) -> Option<SampledPlan> {
    if !sample::sampled(op, case, judging) {
        return None;
    }
    let sampling = op.row_sampling(case)?;
    let specs = op.tensors(case).ok()?;
    let slicing = sample::slicing_of(op, case)?;
    let made = if sampling.made {
        op.made_inputs(case, &specs).ok()?
    } else {
        Vec::new()
    };
    let mut slices = sample::sample_slices(case, &specs, &slicing);
    // A scatter's input rows at their crossings land on output rows anywhere: those too.
    slices.extend(op.scattered_rows(case, &specs, &made));
    slices.retain(|&r| r < slicing.count);
    slices.sort_unstable();
    slices.dedup();
    let (sliced, inputs) =
        sample::sampled_case(op, case, &specs, &sampling, &slicing, &slices, &made).ok()?;
    Some(SampledPlan {
        specs,
        slicing,
        slices,
        distinct: sampling.is_distinct(),
        ranges: sampling.ranges,
        sliced,
        inputs,
        made,
    })
}

/// Run a big case on sampled rows and judge it: each output's scan and its sampled rows
/// against the reference of those rows alone.
fn execute_sampled(
    op: &dyn Op,
    backend: &dyn BackendImpl,
    case: &Case,
    plan: SampledPlan,
    setup_ms: f64,
) -> Executed {
    let mut timings = Timings {
        setup: setup_ms,
        ..Timings::default()
    };
    phase::enter(Phase::Run);
    phase::take_spent();
    let draw = SampledDraw {
        slices: &plan.slices,
        chunk: &plan.slicing.chunk,
        ranges: &plan.ranges,
        distinct: plan.distinct,
        made: &plan.made,
    };
    let run: SampledRun = match backend.execute_sampled(case, &plan.specs, &draw) {
        Ok(r) => r,
        Err(e) => {
            let mut ex = failed(case, e);
            ex.result.observed.library = Some(backend.library());
            return ex;
        }
    };
    add_spent(&mut timings, phase::take_spent());
    let seen = SampledSeen {
        rows: &run.rows,
        scans: &run.scans,
        canary_hits: Vec::new(),
    };
    let mut r = match judge_sampled(op, case, &plan, seen, &mut timings) {
        Ok(r) => r,
        Err(mut ex) => {
            ex.result.observed.library = Some(run.library);
            return *ex;
        }
    };
    r.observed.timings = timings;
    r.observed.allocations = run.allocations;
    r.observed.library = Some(run.library);
    r.observed.not_applied = run.not_applied;
    r.facts.extend(run.facts);
    finish_notes(op, case, &mut r);
    Executed::alive(r)
}

/// A big case of kedge's own kernels judged on sampled rows: each tensor allocated in the
/// case's mode, inputs drawn and outputs poisoned where they lie, the plan run, canaries read,
/// each output scanned on the device and only the sampled rows read back.
fn execute_kernels_sampled(
    op: &dyn Op,
    imp: &dyn Impl,
    dev: &mut Device,
    case: &Case,
    plan: &crate::contract::plan::Plan,
    sp: SampledPlan,
    t: Instant,
) -> Executed {
    use crate::cuda::big;
    let mut timings = Timings::default();
    let mut observed = Observed::default();
    let mut allocs: Vec<DeviceAlloc> = Vec::with_capacity(sp.specs.len());
    for s in &sp.specs {
        match dev.alloc(&s.name, s.bytes, case.alloc, s.dtype.size()) {
            Ok(a) => allocs.push(a),
            Err(e) => return failed(case, e),
        }
    }
    timings.setup = ms(t);
    let t = begin(Phase::Upload);
    for (i, (s, a)) in sp.specs.iter().zip(&allocs).enumerate() {
        let r = match s.role {
            Role::Input if sp.distinct => {
                big::distinct_rows(dev, a.ptr, s.dtype, s.ne, s.nb, case.seed, i as u64)
            }
            Role::Input => {
                let (lo, hi) = sp.ranges.get(i).copied().unwrap_or((-1.0, 1.0));
                big::draw_uniform(
                    dev,
                    a.ptr,
                    s.dtype,
                    s.nelements(),
                    case.seed,
                    i as u64,
                    lo,
                    hi,
                )
            }
            Role::Output => dev.fill_pattern(a, &poison_pattern(s.dtype)),
        };
        if let Err(e) = r {
            return failed(case, e);
        }
    }
    if let Err(e) = dev.synchronize("drawing the inputs") {
        return failed(case, e);
    }
    timings.upload = ms(t);
    let t = begin(Phase::Run);
    let mut ctx = RunCtx::new(dev, &allocs, case.alloc);
    let run = imp.run(&mut ctx, case, plan);
    let record = ctx.finish();
    let run = run.and_then(|_| dev.synchronize("run"));
    timings.run = ms(t);
    observed.launches = record.launched;
    observed.allocations = allocs
        .iter()
        .chain(&record.scratch)
        .map(|a| Allocation {
            name: a.name.clone(),
            base: a.ptr,
            bytes: a.bytes,
        })
        .collect();
    if let Err(e) = run {
        let mut ex = failed(case, e);
        ex.result.observed = observed;
        ex.result.observed.timings = timings;
        ex.result.facts.extend(record.facts);
        finish_notes(op, case, &mut ex.result);
        return ex;
    }
    let t = begin(Phase::Download);
    let mut canary_hits = Vec::new();
    for a in allocs.iter().chain(record.scratch.iter()) {
        match dev.check_canary(a) {
            Ok(Some(msg)) => canary_hits.push(msg),
            Ok(None) => {}
            Err(e) => return failed(case, e),
        }
    }
    let mut rows = Vec::new();
    let mut scans = Vec::new();
    for (i, (s, a)) in sp.specs.iter().zip(&allocs).enumerate() {
        if s.role != Role::Output {
            continue;
        }
        let chunk = sp.slicing.chunk.get(i).copied().unwrap_or(0);
        let scanned = big::scan(dev, a.ptr, s.dtype, s.nelements()).and_then(|scan| {
            let mut bytes = Vec::with_capacity(chunk as usize * sp.slices.len());
            for &p in &sp.slices {
                bytes.extend(big::read(dev, a.ptr + p * chunk, chunk as usize)?);
            }
            Ok((scan, bytes))
        });
        match scanned {
            Ok((scan, bytes)) => {
                let ne = [
                    sp.slicing.chunk_elements(s, i) as i64,
                    sp.slices.len() as i64,
                    1,
                    1,
                ];
                rows.push(HostTensor::from_bytes(
                    s.dtype,
                    ne,
                    crate::model::shape::dense_strides(&ne, s.dtype),
                    bytes,
                ));
                scans.push(scan);
            }
            Err(e) => return failed(case, e),
        }
    }
    timings.download = ms(t);
    drop(record.scratch);
    drop(allocs);
    let seen = SampledSeen {
        rows: &rows,
        scans: &scans,
        canary_hits,
    };
    let mut r = match judge_sampled(op, case, &sp, seen, &mut timings) {
        Ok(r) => r,
        Err(ex) => return *ex,
    };
    observed.output_digests = std::mem::take(&mut r.observed.output_digests);
    observed.timings = timings;
    r.observed = observed;
    r.facts.extend(record.facts);
    finish_notes(op, case, &mut r);
    Executed::alive(r)
}

/// What a sampled run left to be judged: each output's sampled rows and scan, and the
/// canaries it broke.
struct SampledSeen<'a> {
    rows: &'a [HostTensor],
    scans: &'a [crate::cuda::big::Scan],
    canary_hits: Vec<String>,
}

/// The verdict of a sampled run: each output's scan and sampled rows against the reference of
/// those rows alone (`judge::sample::judge_output`), the worst of them; broken canaries first.
fn judge_sampled(
    op: &dyn Op,
    case: &Case,
    plan: &SampledPlan,
    seen: SampledSeen<'_>,
    timings: &mut Timings,
) -> Result<CaseResult, Box<Executed>> {
    let t = begin(Phase::Reference);
    let reference = op
        .reference(&plan.sliced, &plan.inputs)
        .map_err(|e| Box::new(bad_input(case, e)))?;
    timings.reference = ms(t);
    let t = begin(Phase::Compare);
    let tol = op.tolerance(&plan.sliced);
    let outs: Vec<(usize, &TensorSpec)> = plan
        .specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Output)
        .collect();
    let made_nonfinite = sample::holds_nonfinite(&plan.made);
    let mut worst: Option<Comparison> = None;
    let mut digests = Vec::new();
    for (k, &(i, s)) in outs.iter().enumerate() {
        let (Some(got), Some(r), Some(scan)) =
            (seen.rows.get(k), reference.get(k), seen.scans.get(k))
        else {
            return Err(Box::new(bad_input(
                case,
                format!(
                    "the sampled run gave no slices or scan of output {}",
                    s.name
                ),
            )));
        };
        digests.push(format!("{}:rows:{}", s.name, digest(got)));
        let at = sample::SampledAt {
            slicing: &plan.slicing,
            slices: &plan.slices,
            index: i,
        };
        let c = sample::judge_output(s, got, r, *scan, at, tol, made_nonfinite);
        if worst
            .as_ref()
            .is_none_or(|w| c.verdict.severity() > w.verdict.severity())
        {
            worst = Some(c);
        }
    }
    timings.compare = ms(t);
    let Some(c) = worst else {
        return Ok(CaseResult::new(
            case,
            Verdict::SilentFailure,
            Detector::Reference,
            "the op produced no output tensors",
        ));
    };
    let detector = match c.verdict {
        Verdict::Pass => Detector::None,
        Verdict::UnwrittenOutput | Verdict::SilentFailure => Detector::Poison,
        _ => Detector::Reference,
    };
    let mut r = if seen.canary_hits.is_empty() {
        CaseResult::new(case, c.verdict, detector, c.detail)
    } else {
        let mut r = CaseResult::new(
            case,
            Verdict::OobWrite,
            Detector::Canary,
            seen.canary_hits.join("; "),
        );
        if c.verdict != Verdict::Pass {
            r.also.push(detector);
        }
        r
    };
    r.numbers = Some(c.numbers);
    r.observed.output_digests = digests;
    r.facts.insert(
        "judged_on".into(),
        format!(
            "{} of {} {} (sampled: crossings, the ends, a seeded sample); every output scanned whole",
            plan.slices.len(),
            plan.slicing.count,
            plan.slicing.unit()
        )
        .into(),
    );
    Ok(r)
}

fn finish_notes(op: &dyn Op, case: &Case, r: &mut CaseResult) {
    r.reach = op.reach(case);
    r.alloc_note = op.alloc_note(case);
    if op.reference_source() != "f64 CPU reference" {
        r.observed.reference = Some(op.reference_source().to_string());
    }
}

/// What a case left to be judged: its outputs, the canaries it broke, and per output an
/// earlier comparison of the same bytes when there is one.
struct Seen<'a> {
    outs: &'a [(TensorSpec, HostTensor)],
    canary_hits: Vec<String>,
    known: Vec<Option<JudgedBefore>>,
    /// Per output, its digest when the download made it on the way.
    digests: Vec<Option<String>>,
}

/// Outputs against poison, canaries and the reference: the verdict and the detector that saw it.
/// `known` holds, per output, an earlier comparison of the same bytes for the same key (see
/// [`ReferenceCache::judged_before`]): that output is neither digested nor compared again.
/// Beside the result, each output's digest and comparison, for the next case of the key.
fn judge(
    op: &dyn Op,
    case: &Case,
    seen: Seen<'_>,
    inputs: &[HostTensor],
    refs: &mut ReferenceCache,
    timings: &mut Timings,
) -> (CaseResult, Vec<Option<(String, Comparison)>>) {
    let Seen {
        outs,
        canary_hits,
        mut known,
        digests: mut made,
    } = seen;
    known.resize_with(outs.len(), || None);
    made.resize_with(outs.len(), || None);
    // The digests are a pass over every output byte (the comparison's time) unless the
    // download made them.
    let t = begin(Phase::Compare);
    let digests: Vec<String> = outs
        .iter()
        .zip(&known)
        .zip(made)
        .map(|(((_, o), k), m)| match (k, m) {
            (Some(k), _) => k.digest.clone(),
            (None, Some(m)) => m,
            (None, None) => digest(o),
        })
        .collect();
    let named_digests = outs
        .iter()
        .zip(&digests)
        .map(|((s, _), d)| format!("{}:{d}", s.name))
        .collect();
    // Every output still entirely poison: the op did no work at all. That verdict needs no
    // reference, and skipping it matters: the shape an impl silently refused can be the one
    // whose reference is the most expensive (sdpa_prefill's fallback past its buffer limit).
    let untouched = (canary_hits.is_empty() && !outs.is_empty())
        .then(|| {
            outs.iter().all(|(_, o)| all_poisoned(o)).then(|| {
                let n = outs[0]
                    .1
                    .ne
                    .iter()
                    .fold(1u64, |a, &x| a.saturating_mul(x.max(0) as u64));
                nothing_written(&outs[0].0.name, n)
            })
        })
        .flatten();
    timings.compare += ms(t);
    let mut judged: Vec<Option<(String, Comparison)>> = vec![None; outs.len()];
    let mut same_as: Vec<String> = Vec::new();
    let cmp: Comparison = match untouched {
        Some(c) => c,
        None => {
            let tol = op.tolerance(case);
            let mut worst: Option<Comparison> = None;
            let mut reference = None;
            for (k, (s, out)) in outs.iter().enumerate() {
                let c = match known[k].take() {
                    Some(kb) => {
                        same_as.push(format!(
                            "{}: the same bytes as {}'s, whose comparison holds",
                            s.name, kb.by
                        ));
                        kb.comparison
                    }
                    None => {
                        if reference.is_none() {
                            let t = begin(Phase::Reference);
                            match refs.reference(op, case, inputs) {
                                Ok(r) => reference = Some(r),
                                Err(e) => return (bad_input(case, e).result, judged),
                            }
                            timings.reference += ms(t);
                        }
                        let Some(r) = reference.as_ref().and_then(|r| r.get(k)) else {
                            continue;
                        };
                        let t = begin(Phase::Compare);
                        let c = compare(&s.name, out, r, tol);
                        timings.compare += ms(t);
                        c
                    }
                };
                judged[k] = Some((digests[k].clone(), c.clone()));
                if worst
                    .as_ref()
                    .is_none_or(|w| c.verdict.severity() > w.verdict.severity())
                {
                    worst = Some(c);
                }
            }
            match worst {
                Some(c) => c,
                None => {
                    let r = CaseResult::new(
                        case,
                        Verdict::SilentFailure,
                        Detector::Reference,
                        "the op produced no output tensors",
                    );
                    return (r, judged);
                }
            }
        }
    };
    let detector = match cmp.verdict {
        Verdict::Pass => Detector::None,
        // Both are seen by the poison: elements no thread wrote.
        Verdict::UnwrittenOutput | Verdict::SilentFailure => Detector::Poison,
        _ => Detector::Reference,
    };
    let mut r = if !canary_hits.is_empty() {
        let mut r = CaseResult::new(
            case,
            Verdict::OobWrite,
            Detector::Canary,
            canary_hits.join("; "),
        );
        if cmp.verdict != Verdict::Pass {
            r.also.push(detector);
        }
        r
    } else {
        CaseResult::new(case, cmp.verdict, detector, cmp.detail)
    };
    r.numbers = Some(cmp.numbers);
    r.observed.output_digests = named_digests;
    r.observed.same_output_as = same_as;
    (r, judged)
}
