//! The host executor: a library's host backend (ggml's CPU backend) run for real, in workers
//! that open no GPU.

use super::*;

/// Cases whose impl runs on a library's host backend (ggml's CPU backend), run natively in
/// worker processes that open no GPU, on a machine that may have none: the library is under
/// test, so it runs crash-isolated like any impl.
pub(crate) struct HostExecutor<'a> {
    reg: &'a Registry,
    sup: Supervisor,
    events: Events,
}

impl<'a> HostExecutor<'a> {
    pub(crate) fn new(
        reg: &'a Registry,
        exe: Option<PathBuf>,
        external: ExternalSpec,
        opts: &EngineOptions,
        work_dir: &Path,
    ) -> Result<Self, EngineError> {
        let exe = match exe {
            Some(e) => e,
            None => std::env::current_exe().map_err(EngineError::Exe)?,
        };
        let mut spec = WorkerSpec::new(0, external);
        spec.open_gpu = false;
        spec.judging = opts.judging;
        let mut sup = Supervisor::new(SupervisorConfig {
            exe,
            spec,
            timeout: opts.timeout,
            ready_timeout: opts.ready_timeout,
            sanitize: None,
            work_dir: work_dir.to_path_buf(),
            keep_worker: true,
        });
        sup.set_budget(opts.budget.clone());
        sup.set_events(opts.events.clone());
        Ok(HostExecutor {
            reg,
            sup,
            events: opts.events.clone(),
        })
    }
}

impl Executor for HostExecutor<'_> {
    fn under(&self) -> Under {
        Under::Native
    }
    fn device(&self) -> String {
        "the host (a library's CPU backend; no GPU used)".into()
    }
    fn accepts(&self, c: &Case) -> bool {
        !needs_gpu(self.reg, c)
    }
    fn run(&mut self, cases: &[Case], sink: &mut Sink<'_>) -> Result<RunStats, EngineError> {
        let t0 = Instant::now();
        let waited_before = self.sup.waited();
        let slot_before = self.sup.slot_time();
        let started_before = self.sup.startups().len();
        let progress = Ticker::start(&self.events, Under::Native, cases.len());
        let summary = self
            .sup
            .run(cases, &mut |r| {
                progress.case(&r);
                sink(r)
            })
            .map_err(|e| match e {
                SupervisorError::Sink(f) => EngineError::Sink(f),
                e => EngineError::Host(e),
            });
        progress.end();
        let summary = summary?;
        Ok(RunStats {
            ran: summary.ran,
            wall_s: t0.elapsed().as_secs_f64(),
            workers: summary.workers_started,
            replaced: summary.workers_replaced,
            worker_wait_s: self
                .sup
                .waited()
                .saturating_sub(waited_before)
                .as_secs_f64(),
            slot_time: self.sup.slot_time().since(slot_before).into(),
            worker_start_s: self.sup.startups()[started_before..].to_vec(),
            per_gpu: Vec::new(),
        })
    }
}
