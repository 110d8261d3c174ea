//! A library impl that does not compute a case says so before kedge draws a single input: the
//! verdict is `unsupported`, and neither the op's inputs nor the library's run happen. A
//! library that says when it copies (`phase::enter`) has those copies timed as kedge's, not as
//! its run.

use kedge_core::contract::imp::{BackendImpl, BackendRun};
use kedge_core::cuda::error::RunError;
use kedge_core::engine::phase::{self, Phase};
use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
use kedge_core::judge::result::LibraryInfo;
use kedge_core::*;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How often the op made inputs, and how often the library ran (the timing test's cases, of
/// 3 rows, not counted: the two tests run side by side).
static INPUTS_MADE: AtomicUsize = AtomicUsize::new(0);
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// A library that computes rows up to 64 long and refuses the rest, as ggml's
/// `supports_op` refuses a type.
struct Lib;

impl BackendImpl for Lib {
    fn library(&self) -> LibraryInfo {
        LibraryInfo {
            name: "fake".into(),
            version: "0".into(),
            commit: "0".into(),
            device: "host".into(),
        }
    }
    fn supports(&self, case: &Case, _specs: &[TensorSpec]) -> Result<(), RunError> {
        if case.ne[0] > 64 {
            return Err(RunError::Unsupported(
                "rows past 64 (fake supports_op)".into(),
            ));
        }
        Ok(())
    }
    fn execute(
        &self,
        case: &Case,
        _specs: &[TensorSpec],
        inputs: &[HostTensor],
    ) -> Result<BackendRun, RunError> {
        if case.ne[1] != 3 {
            RUNS.fetch_add(1, Ordering::SeqCst);
        } else {
            // A library that uploads for 200 ms, computes for a moment, reads back for 100 ms.
            let nap = |ms| std::thread::sleep(std::time::Duration::from_millis(ms));
            phase::enter(Phase::Upload);
            nap(200);
            phase::enter(Phase::Run);
            nap(1);
            phase::enter(Phase::Download);
            nap(100);
        }
        Ok(BackendRun {
            outputs: vec![inputs[0].clone()],
            allocations: Vec::new(),
            library: self.library(),
            not_applied: None,
            facts: Default::default(),
        })
    }
}

struct LibImpl;
static LIB: Lib = Lib;
static LIB_IMPL: LibImpl = LibImpl;

impl Impl for LibImpl {
    fn name(&self) -> &str {
        "lib"
    }
    fn role(&self) -> ImplRole {
        ImplRole::External
    }
    fn about(&self) -> &str {
        "a library that owns its memory"
    }
    fn plan(&self, _case: &Case, _limits: &LimitsProfile) -> Result<Plan, Refusal> {
        Ok(Plan::default())
    }
    fn backend(&self) -> Option<&dyn BackendImpl> {
        Some(&LIB)
    }
    fn needs_gpu(&self) -> bool {
        false
    }
}

struct Copy;
static COPY: Copy = Copy;

impl Op for Copy {
    fn name(&self) -> &'static str {
        "copy"
    }
    fn about(&self) -> &'static str {
        "dst = x"
    }
    fn dtypes(&self) -> &'static [DType] {
        &[DType::F32]
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[]
    }
    fn impls(&self) -> Vec<&'static dyn Impl> {
        vec![&LIB_IMPL]
    }
    fn tensors(&self, case: &Case) -> Result<Vec<TensorSpec>, CaseError> {
        Ok(vec![
            TensorSpec::dense("x", Role::Input, case.dtype, case.ne)?,
            TensorSpec::dense("dst", Role::Output, case.dtype, case.ne)?,
        ])
    }
    fn inputs(&self, case: &Case, specs: &[TensorSpec]) -> Result<Vec<HostTensor>, CaseError> {
        if case.ne[1] != 3 {
            INPUTS_MADE.fetch_add(1, Ordering::SeqCst);
        }
        Ok(vec![kedge_core::contract::op::random_tensor(
            case.seed, 0, &specs[0], -1.0, 1.0,
        )])
    }
    fn reference(&self, _case: &Case, inputs: &[HostTensor]) -> Result<Vec<Vec<f64>>, CaseError> {
        Ok(vec![inputs[0].to_f64()])
    }
    fn boundaries(&self, _limits: &LimitsProfile) -> Vec<Boundary> {
        Vec::new()
    }
    fn smoke(&self) -> Vec<(Ne, Params)> {
        vec![([8, 2, 1, 1], Params::new())]
    }
    fn upstream(&self, _case: &Case) -> Option<UpstreamRepro> {
        None
    }
}

#[test]
fn an_unsupported_case_is_the_verdict_before_any_input_is_made() {
    let reg = Registry::new(vec![&COPY]);
    let mut slot = DeviceSlot::new(0);
    let mut refs = ReferenceCache::default();
    let run = |ne: Ne, slot: &mut DeviceSlot, refs: &mut ReferenceCache| {
        let case = reg
            .validate(&Case::new("copy", "lib", DType::F32, ne))
            .expect("a valid case");
        execute(&reg, slot, &case, refs).result
    };

    let r = run([128, 4, 1, 1], &mut slot, &mut refs);
    assert_eq!(r.verdict, Verdict::Unsupported, "{r:?}");
    assert!(r.detail.contains("fake supports_op"), "{}", r.detail);
    assert_eq!(INPUTS_MADE.load(Ordering::SeqCst), 0, "inputs were made");
    assert_eq!(RUNS.load(Ordering::SeqCst), 0, "the library ran");

    // A case it computes: inputs made, the library run, the copy judged a pass.
    let r = run([64, 4, 1, 1], &mut slot, &mut refs);
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    assert_eq!(INPUTS_MADE.load(Ordering::SeqCst), 1);
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
}

#[test]
fn a_librarys_copies_are_timed_as_kedges_and_its_run_is_its_compute() {
    let reg = Registry::new(vec![&COPY]);
    let mut slot = DeviceSlot::new(0);
    let mut refs = ReferenceCache::default();
    let case = reg
        .validate(&Case::new("copy", "lib", DType::F32, [8, 3, 1, 1]))
        .expect("a valid case");
    let r = execute(&reg, &mut slot, &case, &mut refs).result;
    assert_eq!(r.verdict, Verdict::Pass, "{r:?}");
    let t = r.observed.timings;
    assert!(t.upload >= 200.0, "{t:?}");
    assert!(t.download >= 100.0, "{t:?}");
    // The run is the library's compute alone: not its 300 ms of copies.
    assert!(t.run < t.upload, "{t:?}");
}
