//! The plugin loader against real shared libraries built here from C
//! (tests/plugins/testplug.c, no CUDA): good plugin, every refusal the loader promises, and
//! the entry's answers (ok, unsupported, error, odd status, unterminated message) passed
//! through the same FFI call `PluginImpl::run` makes, with fake descriptors the C plugin only
//! inspects.
//!
//! Needs a C compiler (`CC`, else `cc`): kedge-ops' build compiles C too, so wherever these
//! tests build there is one; without it they fail.

use kedge_core::cuda::RunError;
use kedge_core::{Case, DType, ImplRole, LimitsProfile, Registry};
use kedge_runner::external::plugin::{
    register, EntryError, EntryParams, Plugin, PluginError, PluginImpl, TensorDescs, ABI_VERSION,
    MSG_LEN,
};
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/plugins/testplug.c");
const INCLUDE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../include");

/// A built test plugin; the directory is removed when it drops.
struct Built {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

/// The C compiler the plugins are built with: `CC`, else `cc` (kedge-ops' build compiles C
/// with it, so it is there wherever these tests build).
fn c_compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// Build testplug.c with `define` set (None: the good plugin).
fn build(define: Option<&str>) -> Built {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir
        .path()
        .join(format!("libtestplug_{}.so", define.unwrap_or("good")));
    let cc = c_compiler();
    let mut cmd = Command::new(&cc);
    cmd.args([
        "-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", "-I", INCLUDE,
    ]);
    if let Some(d) = define {
        cmd.arg(format!("-D{d}"));
    }
    cmd.arg(SOURCE).arg("-o").arg(&path);
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("the plugin tests build their plugins with {cc}: {e}"));
    assert!(
        out.status.success(),
        "{cc} failed for {define:?}:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Built { _dir: dir, path }
}

fn reg() -> Registry {
    kedge_ops::registry()
}

fn load_err(define: &str) -> PluginError {
    let b = build(Some(define));
    match Plugin::load(&b.path, &reg()) {
        Ok(p) => panic!("{define}: loaded although it must be refused: {p:?}"),
        Err(e) => {
            // Every refusal names the file.
            assert!(e.to_string().contains(&b.path.display().to_string()), "{e}");
            e
        }
    }
}

#[test]
fn good_plugin_loads_and_lists_its_ops() {
    let b = build(None);
    let r = reg();
    let p = Plugin::load(&b.path, &r).expect("good plugin loads");
    assert_eq!(p.name, "testplug");
    assert_eq!(p.abi_version, ABI_VERSION);
    assert_eq!(p.about.as_deref(), Some("loader test plugin (no CUDA)"));
    let listed: Vec<_> = p
        .entries
        .iter()
        .map(|e| (e.op.name(), e.variant.clone(), e.dtypes.clone()))
        .collect();
    // The second entry's mask has f16, which rms_norm takes (that entry gets f16 cases), and
    // i32, which it does not: dropped.
    assert_eq!(
        listed,
        vec![
            ("rms_norm", None, vec![DType::F32]),
            (
                "rms_norm",
                Some("alt".to_string()),
                vec![DType::F32, DType::F16]
            ),
        ]
    );
}

#[test]
fn registered_impls_are_external_and_say_the_plan_is_unchecked() {
    let b = build(None);
    let mut r = reg();
    let added = register(&mut r, &b.path, None).expect("register");
    assert_eq!(
        added,
        vec![
            ("rms_norm".to_string(), "plugin:testplug".to_string()),
            ("rms_norm".to_string(), "plugin:testplug:alt".to_string()),
        ]
    );
    let op = r.op("rms_norm").unwrap();
    let imp = r
        .imp(op, "plugin:testplug")
        .expect("impl is in the registry");
    assert_eq!(imp.role(), ImplRole::External);
    assert_eq!(imp.role().name(), "external");
    let h200 = LimitsProfile::builtin("h200").unwrap();
    // A validated case through the registry, as the CLI will build it.
    let case = r
        .validate(&Case::new(
            "rms_norm",
            "plugin:testplug",
            DType::F32,
            [64, 1, 65536, 1],
        ))
        .expect("case with the plugin impl validates");
    let plan = imp.plan(&case, &h200).expect("plan");
    assert!(plan.launches.is_empty());
    assert_eq!(
        plan.unchecked,
        vec!["plugin testplug launches its own kernels: launch contract not checked".to_string()]
    );
    // The CPU check reports it as skipped, and says what it could not check.
    let res = kedge_core::engine::check_on_cpu(&r, &case, &h200, false);
    assert!(
        res.detail.contains("not checked: plugin testplug"),
        "{}",
        res.detail
    );
    // A dtype outside the entry's mask is refused by plan, with the dtypes it has.
    let f16 = Case::new("rms_norm", "plugin:testplug", DType::F16, [64, 1, 1, 1]);
    let why = imp.plan(&f16, &h200).unwrap_err().0;
    assert!(why.contains("f16") && why.contains("f32"), "{why}");
    // The entry whose mask has f16 plans it.
    let alt = r.imp(op, "plugin:testplug:alt").unwrap();
    let mut f16_alt = f16.clone();
    f16_alt.imp = "plugin:testplug:alt".into();
    assert!(alt.plan(&f16_alt, &h200).is_ok());
    // The same plugin again: its names are taken, and nothing more is added.
    let before = r.impls_of(op).len();
    match register(&mut r, &b.path, None) {
        Err(PluginError::NameTaken { name, .. }) => assert_eq!(name, "plugin:testplug"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert_eq!(r.impls_of(op).len(), before);
    // Under a name of the user's choosing it can be added again.
    let added = register(&mut r, &b.path, Some("mine")).expect("register as mine");
    assert_eq!(added[0].1, "mine");
    assert_eq!(added[1].1, "mine:alt");
}

#[test]
fn version_mismatch_names_both_versions() {
    let e = load_err("BAD_VERSION");
    match &e {
        PluginError::AbiMismatch {
            found, expected, ..
        } => {
            assert_eq!((*found, *expected), (99, ABI_VERSION));
        }
        other => panic!("expected AbiMismatch, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(
        msg.contains("ABI version 99") && msg.contains(&format!("ABI version {ABI_VERSION}")),
        "{msg}"
    );
}

#[test]
fn missing_info_symbol_is_named() {
    let e = load_err("NO_INFO");
    assert!(matches!(e, PluginError::MissingInfo { .. }), "{e:?}");
    assert!(e.to_string().contains("kedge_plugin_info"), "{e}");
}

#[test]
fn null_info_is_refused() {
    let e = load_err("NULL_INFO");
    assert!(matches!(e, PluginError::NullInfo { .. }), "{e:?}");
}

#[test]
fn null_entry_pointer_is_named() {
    let e = load_err("NULL_ENTRY");
    match &e {
        PluginError::NullPointer { what, .. } => {
            assert_eq!(what, "op entry 1 (rms_norm): the entry function pointer")
        }
        other => panic!("expected NullPointer, got {other:?}"),
    }
}

#[test]
fn unknown_op_is_named_with_the_known_ones() {
    let e = load_err("UNKNOWN_OP");
    match &e {
        PluginError::UnknownOp {
            index, op, known, ..
        } => {
            assert_eq!((*index, op.as_str()), (1, "no_such_op"));
            assert!(known.contains("rms_norm"), "{known}");
        }
        other => panic!("expected UnknownOp, got {other:?}"),
    }
}

#[test]
fn null_and_garbage_names_are_refused() {
    {
        let e = load_err("NULL_NAME");
        match &e {
            PluginError::NullPointer { what, .. } => assert_eq!(what, "the plugin's name"),
            other => panic!("expected NullPointer, got {other:?}"),
        }
    }
    {
        let e = load_err("BAD_UTF8_NAME");
        match &e {
            PluginError::BadString { what, why, .. } => {
                assert_eq!(what, "the plugin's name");
                assert!(why.contains("not UTF-8"), "{why}");
            }
            other => panic!("expected BadString, got {other:?}"),
        }
    }
}

#[test]
fn dtype_mask_without_the_ops_dtypes_is_refused() {
    let e = load_err("NO_DTYPES");
    match &e {
        PluginError::BadDtypes { mask, why, .. } => {
            assert_eq!(*mask, 1 << 3);
            assert!(why.contains("f32"), "{why}");
        }
        other => panic!("expected BadDtypes, got {other:?}"),
    }
}

#[test]
fn duplicate_impl_names_add_nothing() {
    let b = build(Some("DUPLICATE"));
    let mut r = reg();
    let op = r.op("rms_norm").unwrap();
    let before = r.impls_of(op).len();
    match register(&mut r, &b.path, None) {
        Err(PluginError::NameTaken { name, .. }) => assert_eq!(name, "plugin:testplug"),
        other => panic!("expected NameTaken, got {other:?}"),
    }
    assert_eq!(
        r.impls_of(op).len(),
        before,
        "a failed registration added impls"
    );
}

#[test]
fn missing_file_and_non_library_are_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libnothere.so");
    match Plugin::load(&missing, &reg()) {
        Err(PluginError::NotFound { path }) => assert_eq!(path, missing),
        other => panic!("expected NotFound, got {other:?}"),
    }
    let text = dir.path().join("libnotelf.so");
    std::fs::write(&text, "this is not an ELF file\n").unwrap();
    match Plugin::load(&text, &reg()) {
        Err(PluginError::NotALibrary { msg, .. }) => assert!(!msg.is_empty()),
        other => panic!("expected NotALibrary, got {other:?}"),
    }
}

/// The good plugin's first impl, a padded rms_norm case and its descriptors at fake
/// addresses 0x1000 (x) and 0x2000 (dst), which the C plugin checks but never dereferences.
fn entry_setup(b: &Path) -> (PluginImpl, Case, TensorDescs) {
    let r = reg();
    let p = Plugin::load(b, &r).expect("load");
    let imp = p.impls(None).into_iter().next().expect("an impl");
    let case = Case::new("rms_norm", "plugin:testplug", DType::F32, [64, 5, 4, 3])
        .with_param("eps", 1e-6)
        .with_param("row_pad", 3);
    let specs = imp.op().tensors(&case).expect("specs");
    let descs = TensorDescs::new(&specs, &[0x1000, 0x2000]).expect("descriptors");
    (imp, case, descs)
}

fn call(imp: &PluginImpl, case: &Case, descs: &mut TensorDescs) -> Result<(), EntryError> {
    let specs = imp.op().tensors(case).unwrap();
    let params = EntryParams::for_case(imp.op(), case, &specs);
    // SAFETY: the test plugin only reads the descriptors, never the memory they name.
    unsafe { imp.call_entry(descs, &params, std::ptr::null_mut()) }
}

#[test]
fn entry_gets_the_descriptors_and_params_kedge_h_promises() {
    let b = build(None);
    let (imp, case, mut descs) = entry_setup(&b.path);
    // The plugin returns KEDGE_OK only if names, dtypes, ne0, strides (padded input rows),
    // pointers and eps are all as kedge.h says; otherwise its message names what differs.
    assert_eq!(call(&imp, &case, &mut descs), Ok(()));
    // The same call with a dense input is answered with the plugin's complaint.
    let dense = case.clone().with_param("row_pad", 0);
    let specs = imp.op().tensors(&dense).unwrap();
    let mut d = TensorDescs::new(&specs, &[0x1000, 0x2000]).unwrap();
    assert_eq!(
        call(&imp, &dense, &mut d),
        Err(EntryError::Failed(
            "testplug: nb1 256/256, expected 268/256".into()
        ))
    );
}

#[test]
fn unsupported_reason_is_passed_through() {
    let b = build(None);
    let (imp, case, mut descs) = entry_setup(&b.path);
    let r = call(&imp, &case.with_param("eps", 1.0), &mut descs);
    let reason = "testplug: eps 1 is not supported by this plugin".to_string();
    assert_eq!(r, Err(EntryError::Unsupported(reason.clone())));
    assert_eq!(imp.run_error(r.unwrap_err()), RunError::Unsupported(reason));
}

#[test]
fn error_message_is_passed_through() {
    let b = build(None);
    let (imp, case, mut descs) = entry_setup(&b.path);
    let r = call(&imp, &case.clone().with_param("eps", 2.0), &mut descs);
    let text = "testplug: launch failed: invalid configuration argument".to_string();
    assert_eq!(r, Err(EntryError::Failed(text.clone())));
    let run = imp.run_error(r.unwrap_err());
    assert_eq!(run, RunError::Impl(format!("plugin testplug: {text}")));
    assert!(run.to_string().contains(&text));
    // A status kedge does not know is an error that names it and keeps the message.
    match call(&imp, &case.clone().with_param("eps", 3.0), &mut descs) {
        Err(EntryError::Failed(m)) => {
            assert!(
                m.contains("status 7") && m.contains("testplug: odd status"),
                "{m}"
            )
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // A message that fills the buffer with no NUL is cut at the buffer's end.
    match call(&imp, &case.clone().with_param("eps", 4.0), &mut descs) {
        Err(EntryError::Failed(m)) => {
            assert_eq!(m.len(), MSG_LEN);
            assert!(m.bytes().all(|c| c == b'A'));
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    // An error with no message still says who failed.
    match call(&imp, &case.with_param("eps", 5.0), &mut descs) {
        Err(EntryError::Failed(m)) => {
            assert_eq!(m, "plugin testplug returned KEDGE_ERROR with no message")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}
