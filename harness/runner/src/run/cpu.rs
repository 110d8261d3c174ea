//! The CPU executor: the CPU side of cases (launch and allocation contracts against a profile,
//! and the references), on any machine.

use super::*;

/// The CPU side of cases: the launch and allocation contracts against a profile and, for
/// references up to `reference_limit` multiply-adds, the reference. Results are `skipped`
/// when the plan fits (the device part did not run).
pub struct CpuExecutor<'a> {
    reg: &'a Registry,
    limits: LimitsProfile,
    /// Leave the cases a host executor runs (a library's host backend) to it.
    pub(crate) skip_host: bool,
    /// Compute references of at most this much work (`Op::reference_work`); `None`: none.
    reference_limit: Option<u64>,
    /// Where its verdicts are told as they come.
    pub(crate) events: Events,
    /// The run's time limit: once it is up, no new case is checked.
    pub(crate) budget: Option<Arc<TimeBudget>>,
}

/// References above this many multiply-adds are not computed by a CPU-side sweep (it would
/// need tens of GiB); the GPU sweep computes them.
pub(crate) const CPU_REFERENCE_LIMIT: u64 = 1 << 26;

impl<'a> CpuExecutor<'a> {
    /// Contracts only: no references, every case taken, no time limit, and its verdicts told
    /// to the console without progress.
    pub fn new(reg: &'a Registry, limits: LimitsProfile) -> Self {
        CpuExecutor {
            reg,
            limits,
            skip_host: false,
            reference_limit: None,
            events: Events::console(Progress::Off),
            budget: None,
        }
    }
    pub(crate) fn with_references(mut self, limit: u64) -> Self {
        self.reference_limit = Some(limit);
        self
    }

    /// One case's CPU-side result.
    pub(crate) fn check(&self, c: &Case) -> CaseResult {
        let with_ref = self.reference_limit.is_some_and(|lim| {
            self.reg
                .op(&c.op)
                .map(|op| op.reference_work(c))
                .unwrap_or(u64::MAX)
                <= lim
        });
        let mut r = check_on_cpu(self.reg, c, &self.limits, with_ref);
        if let (Some(lim), false) = (self.reference_limit, with_ref) {
            if r.verdict == Verdict::Skipped {
                r.detail.push_str(&format!(
                    "; reference not computed on the CPU (over {lim} multiply-adds); device run skipped"
                ));
            }
        }
        r
    }
}

impl Executor for CpuExecutor<'_> {
    fn under(&self) -> Under {
        Under::Cpu
    }
    fn accepts(&self, c: &Case) -> bool {
        !self.skip_host || needs_gpu(self.reg, c)
    }
    fn device(&self) -> String {
        format!("profile {} (no GPU used)", self.limits.name)
    }
    fn run(&mut self, cases: &[Case], sink: &mut Sink<'_>) -> Result<RunStats, EngineError> {
        let t0 = Instant::now();
        let progress = Ticker::start(&self.events, Under::Cpu, cases.len());
        let mut ran = 0;
        for c in cases {
            if !budget::may_start(self.budget.as_deref()) {
                break;
            }
            let r = self.check(c);
            progress.case(&r);
            if let Err(e) = sink(r) {
                progress.end();
                return Err(e.into());
            }
            ran += 1;
        }
        progress.end();
        Ok(RunStats {
            ran,
            wall_s: t0.elapsed().as_secs_f64(),
            ..RunStats::default()
        })
    }
}
