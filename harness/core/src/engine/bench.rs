//! Kernel timing: an impl's work on one case, after a judged run and a warm-up, timed with CUDA
//! events around the impl's launches (no host wait inside the timed region: the launches are
//! checked when they are issued and the stream is checked after each repetition), and the
//! bytes the case's tensors move, against the device's copy bandwidth measured the same way.
//! Libraries that own their memory (a ggml build) are timed around their compute call, as
//! test-backend-ops' perf mode does.

use super::{execute, DeviceSlot, ReferenceCache};
use crate::contract::op::Role;
use crate::contract::registry::Registry;
use crate::contract::run::RunCtx;
use crate::cuda::alloc::DeviceAlloc;
use crate::cuda::error::{DeviceError, RunError};
use crate::model::case::{AllocMode, Case};
use crate::model::host::poison_pattern;
use crate::model::words::Verdict;
use cudarc::driver::sys;

/// How many runs.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Untimed runs first.
    pub warmup: u32,
    /// Timed runs.
    pub reps: u32,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warmup: 3,
            reps: 25,
        }
    }
}

use crate::judge::result::Bench as Timing;

impl Timing {
    fn of(mut times: Vec<f64>, bytes: u64, flops: Option<u64>, method: &str) -> Timing {
        let raw = times.clone();
        times.sort_by(f64::total_cmp);
        let median = if times.is_empty() {
            0.0
        } else if times.len() % 2 == 1 {
            times[times.len() / 2]
        } else {
            (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
        };
        let per_s = |x: f64| {
            if median > 0.0 {
                x / (median * 1e-3)
            } else {
                0.0
            }
        };
        Timing {
            times_ms: raw,
            median_ms: median,
            min_ms: times.first().copied().unwrap_or(0.0),
            max_ms: times.last().copied().unwrap_or(0.0),
            bytes,
            gb_per_s: per_s(bytes as f64) / 1e9,
            flops,
            tflop_per_s: flops.map(|f| per_s(f as f64) / 1e12),
            method: method.to_string(),
            copy_gb_per_s: None,
            not_timed: None,
        }
    }
}

/// CUDA events around the timed region.
struct Events {
    start: sys::CUevent,
    end: sys::CUevent,
}

impl Events {
    fn new() -> Result<Events, RunError> {
        let mut start: sys::CUevent = std::ptr::null_mut();
        let mut end: sys::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointers valid; the context is current (the device is open).
        unsafe {
            check("cuEventCreate", sys::cuEventCreate(&mut start, 0))?;
            if let Err(e) = check("cuEventCreate", sys::cuEventCreate(&mut end, 0)) {
                sys::cuEventDestroy_v2(start);
                return Err(e);
            }
        }
        Ok(Events { start, end })
    }
    fn record(&self, ev: sys::CUevent, stream: sys::CUstream) -> Result<(), RunError> {
        // SAFETY: both belong to the current context.
        check("cuEventRecord", unsafe { sys::cuEventRecord(ev, stream) })
    }
    fn elapsed_ms(&self) -> Result<f64, RunError> {
        let mut ms = 0f32;
        // SAFETY: both events were recorded and the stream synchronized.
        check("cuEventElapsedTime", unsafe {
            sys::cuEventElapsedTime_v2(&mut ms, self.start, self.end)
        })?;
        Ok(ms as f64)
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once.
        unsafe {
            sys::cuEventDestroy_v2(self.start);
            sys::cuEventDestroy_v2(self.end);
        }
    }
}

fn check(call: &'static str, r: sys::CUresult) -> Result<(), RunError> {
    crate::cuda::error::driver(call, r)
}

/// Time one case: judge it once (the same run a sweep makes), then, when it passed, time it.
/// The timing (or why there is none) is in the result's `observed.bench`.
pub fn bench(
    reg: &Registry,
    slot: &mut DeviceSlot,
    case: &Case,
    refs: &mut ReferenceCache,
    opts: BenchOptions,
) -> super::Executed {
    let mut ex = execute(reg, slot, case, refs);
    let not_timed = |why: String| Timing {
        not_timed: Some(why),
        ..Timing::of(Vec::new(), 0, None, "none")
    };
    let timing = if ex.context_dead {
        not_timed("the judged run left the context dead".into())
    } else if ex.result.verdict != Verdict::Pass {
        not_timed(format!(
            "the judged run gave {} ({})",
            ex.result.verdict, ex.result.detector
        ))
    } else {
        match time_case(reg, slot, case, refs, opts) {
            Ok(t) => t,
            Err(e) => {
                ex.context_dead = e.is_sticky();
                not_timed(e.to_string())
            }
        }
    };
    ex.result.observed.bench = Some(timing);
    ex
}

fn time_case(
    reg: &Registry,
    slot: &mut DeviceSlot,
    case: &Case,
    refs: &mut ReferenceCache,
    opts: BenchOptions,
) -> Result<Timing, RunError> {
    let (op, imp) = reg
        .resolve(case)
        .map_err(|e| RunError::Unsupported(e.to_string()))?;
    let (specs, inputs) = refs
        .inputs(op, case)
        .map_err(|e| RunError::Unsupported(e.to_string()))?;
    let bytes: u64 = specs.iter().map(|s| s.bytes).sum();
    let flops = op.flops(case);
    if let Some(b) = imp.backend() {
        let times = b.time(case, &specs, &inputs, opts.warmup, opts.reps)?;
        return Ok(Timing::of(times, bytes, flops, "host-wall"));
    }
    let dev = slot.get().map_err(device_err)?;
    let plan = imp
        .plan(case, &dev.limits)
        .map_err(|r| RunError::Unsupported(r.0))?;
    let mut allocs: Vec<DeviceAlloc> = Vec::new();
    let mut input_iter = inputs.iter();
    for s in &specs {
        let a = dev.alloc(&s.name, s.bytes, AllocMode::Exact, s.dtype.size())?;
        match s.role {
            Role::Input => {
                if let Some(h) = input_iter.next() {
                    dev.upload(&a, &h.bytes)?;
                }
            }
            Role::Output => dev.fill_pattern(&a, &poison_pattern(s.dtype))?,
        }
        allocs.push(a);
    }
    dev.synchronize("upload")?;
    let ev = Events::new()?;
    let stream = dev.cu_stream();
    let mut ctx = RunCtx::new(dev, &allocs, AllocMode::Exact);
    ctx.sync_each_launch = false;
    let mut times = Vec::with_capacity(opts.reps as usize);
    for i in 0..opts.warmup + opts.reps {
        ev.record(ev.start, stream)?;
        imp.run(&mut ctx, case, &plan)?;
        ev.record(ev.end, stream)?;
        ctx.dev.synchronize("a timed run")?;
        if i >= opts.warmup {
            times.push(ev.elapsed_ms()?);
        }
    }
    drop(ctx);
    Ok(Timing::of(times, bytes, flops, "cuda-events"))
}

fn device_err(e: DeviceError) -> RunError {
    RunError::Unsupported(format!("no CUDA device: {e}"))
}

/// The device's copy bandwidth: a device-to-device copy of `bytes` bytes, timed with events,
/// counting the bytes read and written (GB/s, the median of `reps`).
pub fn copy_bandwidth(slot: &mut DeviceSlot, bytes: u64, reps: u32) -> Result<f64, RunError> {
    let dev = slot.get().map_err(device_err)?;
    let src = dev.alloc("copy-src", bytes, AllocMode::Exact, 256)?;
    let dst = dev.alloc("copy-dst", bytes, AllocMode::Exact, 256)?;
    dev.fill_pattern(&src, &[0x3c, 0x00, 0x80, 0x3f])?;
    dev.synchronize("copy setup")?;
    let ev = Events::new()?;
    let stream = dev.cu_stream();
    let mut times = Vec::new();
    for i in 0..reps + 2 {
        ev.record(ev.start, stream)?;
        dev.copy_d2d(dst.ptr, src.ptr, bytes as usize)?;
        ev.record(ev.end, stream)?;
        dev.synchronize("a timed copy")?;
        if i >= 2 {
            times.push(ev.elapsed_ms()?);
        }
    }
    let t = Timing::of(times, 2 * bytes, None, "cuda-events");
    Ok(t.gb_per_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_spread_and_rates() {
        let t = Timing::of(
            vec![3.0, 1.0, 2.0, 10.0],
            2_000_000_000,
            Some(4_000_000_000_000),
            "x",
        );
        assert_eq!(t.median_ms, 2.5);
        assert_eq!((t.min_ms, t.max_ms), (1.0, 10.0));
        approx::assert_relative_eq!(t.gb_per_s, 800.0, max_relative = 1e-12);
        approx::assert_relative_eq!(t.tflop_per_s.unwrap_or(0.0), 1600.0, max_relative = 1e-12);
        assert_eq!(t.times_ms, vec![3.0, 1.0, 2.0, 10.0]);
        let odd = Timing::of(vec![5.0, 1.0, 3.0], 0, None, "x");
        assert_eq!(odd.median_ms, 3.0);
    }
}
