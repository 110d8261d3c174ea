//! A user's ggml build as impls: every op kedge can express as a ggml graph runs on every
//! backend device the build has (`ggml:CUDA0`, `ggml:CPU`), from the same case lines, with
//! kedge's seeded inputs and poisoned outputs, each tensor in its own buffer of exactly its
//! alloc size. kedge's own ops are judged against their f64 references; ggml's other ops
//! (`ops::TABLE`) against ggml's CPU backend from the same build, as test-backend-ops does.
//!
//! kedge cannot see the grid of a ggml kernel, so these impls plan no launches: their cases
//! come from the boundaries kedge generates from the device's limits (`Op::probe_base`).

pub mod c_repro;
mod exec;
pub(crate) mod kedge_ops;
mod pool_cache;
pub mod table;

pub(crate) use exec::{GgmlImpl, GraphFn};

/// The ggml graph of an op kedge can express as one (kedge's own ops and the table's).
pub(crate) fn graph_of(op: &str) -> Option<GraphFn> {
    kedge_ops::graphs()
        .into_iter()
        .find(|(o, _)| *o == op)
        .map(|(_, g)| g)
        .or_else(|| table::TABLE.iter().find(|e| e.name == op).map(|e| e.graph))
}

use kedge_core::{ImplRole, Registry};
use kedge_ggml::{DeviceKind, Ggml, LoadError};
use std::path::Path;

/// What `register` added.
#[derive(Debug, Clone)]
pub struct Registered {
    /// The build's `ggml_version()` ("unknown" for a build older than the function).
    pub version: String,
    /// The build's `ggml_commit()`: the short commit it was made from, or "unknown".
    pub commit: String,
    /// Backend devices, as `ggml:NAME` impl names, with their descriptions.
    pub devices: Vec<(String, String)>,
    /// (op, impl) pairs added.
    pub impls: Vec<(String, String)>,
    /// Ops kedge declares that this build lacks, and why.
    pub missing: Vec<String>,
}

/// Load the ggml build in `dir` and add its backends as impls of every op kedge can express as
/// a ggml graph. `devices` limits the backends (ggml's device names, `CUDA0`, `CPU`); empty:
/// all of them. ggml's other ops (whose reference is ggml's CPU backend) get no impl on the
/// CPU backend itself: a backend compared with itself proves nothing.
pub fn register(
    reg: &mut Registry,
    dir: &Path,
    devices: &[String],
) -> Result<Registered, SetupError> {
    let ggml = Ggml::load(dir)?;
    let all = ggml.devices();
    for d in devices {
        if !all.iter().any(|x| x.name.eq_ignore_ascii_case(d)) {
            return Err(SetupError::UnknownDevice {
                device: d.clone(),
                available: all.iter().map(|x| x.name.clone()).collect(),
            });
        }
    }
    let chosen: Vec<_> = all
        .into_iter()
        .filter(|d| devices.is_empty() || devices.iter().any(|x| x.eq_ignore_ascii_case(&d.name)))
        .collect();
    let mut out = Registered {
        version: ggml.version(),
        commit: ggml.commit(),
        devices: chosen
            .iter()
            .map(|d| (format!("ggml:{}", d.name), d.description.clone()))
            .collect(),
        impls: Vec::new(),
        missing: Vec::new(),
    };
    let missing_syms = ggml.missing_ops();
    // kedge's own ops (f64 references, ggml's f32 only) and the table's (ggml's CPU backend
    // as reference, each entry's own dtypes).
    type Entry = (
        &'static str,
        GraphFn,
        bool,
        Option<&'static [kedge_core::DType]>,
    );
    let ops: Vec<Entry> = kedge_ops::graphs()
        .into_iter()
        .map(|(op, f)| (op, f, false, Some(kedge_ops::GGML_DTYPES)))
        .chain(table::TABLE.iter().map(|e| (e.name, e.graph, true, None)))
        .collect();
    for (op, graph, cpu_reference, dtypes) in ops {
        if reg.op(op).is_err() {
            continue;
        }
        for d in &chosen {
            if cpu_reference && d.kind == DeviceKind::Cpu {
                continue;
            }
            let host = d.kind == DeviceKind::Cpu;
            let imp =
                GgmlImpl::new(ggml, op, &d.name, &d.description, host, graph).with_dtypes(dtypes);
            let name = imp.impl_name();
            reg.add_impl(op, Box::new(imp))
                .map_err(|e| SetupError::Registry(e.to_string()))?;
            out.impls.push((op.to_string(), name));
        }
    }
    for m in missing_syms {
        out.missing.push(format!(
            "{m} is not in this build: ops that use it are unsupported"
        ));
    }
    let _ = ImplRole::External;
    Ok(out)
}

/// Why a ggml build could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The directory holds no ggml build that loads, or another build is already loaded in
    /// this process (ggml's state is process-global).
    #[error("--ggml: {0}")]
    Load(#[from] LoadError),
    /// A device asked for (`--ggml-device`) is not one the build has.
    #[error("--ggml-device {device}: this ggml build has no such device (it has: {})", available.join(", "))]
    UnknownDevice {
        /// The name asked for.
        device: String,
        /// The names of the devices the build has (`CUDA0`, `CPU`).
        available: Vec<String>,
    },
    /// The registry refused one of the build's impls (its message).
    #[error("registering ggml impls: {0}")]
    Registry(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
    use kedge_core::{Case, DType, Verdict};

    /// A CPU-only build of the pinned ggml (`scripts/build-ggml.sh`), from `KEDGE_GGML_DIR`.
    /// The tests that call this are ignored unless the build script saw the variable.
    fn build_dir() -> std::path::PathBuf {
        match std::env::var_os("KEDGE_GGML_DIR") {
            Some(d) if !d.is_empty() => d.into(),
            _ => panic!("this test needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"),
        }
    }

    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn kedge_ops_on_ggml_cpu_pass_against_f64_references() {
        let dir = build_dir();
        let mut reg = crate::registry();
        let r = register(&mut reg, &dir, &["CPU".to_string()]).expect("the build loads");
        assert!(
            r.impls
                .iter()
                .any(|(o, i)| o == "rms_norm" && i == "ggml:CPU"),
            "{r:?}"
        );
        // ggml's other ops are never registered on the CPU backend: it is their reference.
        assert!(!r.impls.iter().any(|(o, _)| o == "gelu"));
        let mut slot = DeviceSlot::new(0);
        let mut refs = ReferenceCache::default();
        let mut checked = 0;
        for op in reg.ops() {
            if !r.impls.iter().any(|(o, _)| o == op.name()) {
                continue;
            }
            let (ne, params) = op.smoke().into_iter().next().expect("a smoke case");
            let mut case = Case::new(op.name(), "ggml:CPU", DType::F32, ne);
            case.params = params;
            let case = reg.validate(&case).expect("valid");
            let ex = execute(&reg, &mut slot, &case, &mut refs);
            assert_eq!(ex.result.verdict, Verdict::Pass, "{}", ex.result.detail);
            let lib = ex.result.observed.library.expect("library recorded");
            assert_eq!(lib.name, "ggml");
            assert!(lib.device.starts_with("CPU"), "{}", lib.device);
            assert!(ex.result.observed.allocations.len() >= 2);
            checked += 1;
        }
        // rms_norm, rms_norm_mul_add, norm, l2_norm, softmax, cumsum, tri, add_id.
        assert_eq!(checked, 8);
        // A padded row (a strided view of its own base tensor) too.
        let case = reg
            .validate(
                &Case::new("rms_norm", "ggml:CPU", DType::F32, [100, 4, 2, 2])
                    .with_param("row_pad", 3),
            )
            .expect("valid");
        let ex = execute(&reg, &mut slot, &case, &mut refs);
        assert_eq!(ex.result.verdict, Verdict::Pass, "{}", ex.result.detail);
    }

    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn unknown_device_names_the_ones_the_build_has() {
        let dir = build_dir();
        let mut reg = crate::registry();
        let e = register(&mut reg, &dir, &["CUDA7".to_string()]).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("CUDA7") && msg.contains("CPU"), "{msg}");
    }
}
