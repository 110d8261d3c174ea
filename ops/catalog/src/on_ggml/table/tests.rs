use super::*;
use crate::on_ggml::GgmlImpl;
use kedge_core::engine::{execute, DeviceSlot, ReferenceCache};
use kedge_ggml::Ggml;
use std::collections::{BTreeSet, HashSet};

/// A CPU-only build of the pinned ggml (`scripts/build-ggml.sh`), from `KEDGE_GGML_DIR`. The
/// tests that call this are ignored unless the build script saw the variable.
fn build_dir() -> std::path::PathBuf {
    match std::env::var_os("KEDGE_GGML_DIR") {
        Some(d) if !d.is_empty() => d.into(),
        _ => panic!("this test needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"),
    }
}

fn h200() -> LimitsProfile {
    LimitsProfile::builtin("h200").expect("a built-in profile")
}

/// The registry with every entry's impl on ggml's CPU backend of the build in
/// `KEDGE_GGML_DIR` (here the device under test is the reference's own backend).
fn on_ggml_cpu() -> Registry {
    let ggml = Ggml::load(&build_dir()).expect("the build loads");
    let cpu = ggml
        .devices()
        .into_iter()
        .find(|d| d.name == "CPU")
        .expect("a CPU device");
    let mut reg = crate::registry();
    for e in TABLE {
        let imp = GgmlImpl::new(ggml, e.name, &cpu.name, &cpu.description, true, e.graph);
        reg.add_impl(e.name, Box::new(imp)).expect("added");
    }
    reg
}

/// A q8_0 case of `op` on ggml's CPU backend of rows of 64 values, twice the pool and a few
/// rows more: its block-format inputs are made of pooled rows.
fn pooled_case(reg: &Registry, op: &str) -> Case {
    let rows = (kedge_core::contract::op::POOLED_FROM / 64 * 2 + 3) as i64;
    reg.validate(&Case::new(op, "ggml:CPU", DType::Q8_0, [64, rows, 1, 1]))
        .expect("valid")
}

/// The cases that compute here hold at most this many bytes (every case builds its graph).
const RUN_LIMIT: u64 = 8 << 20;

/// Elements a case in a block-quantized type may have to run here: drawing its inputs means
/// quantizing them, which costs far more per element than the bytes say (an i-quant about 1 µs
/// an element on two cores: get_rows of 256 x 65535 iq1_m values took 18 s, most of this test's
/// time). The GPU sweep runs those probes; here they add nothing a smaller case does not show.
const QUANT_ELEMENT_LIMIT: u64 = 1 << 20;

/// Bytes of every tensor of a case.
fn case_bytes(e: &GgmlOpEntry, c: &Case) -> u64 {
    (e.tensors)(c)
        .map(|v| v.iter().map(|s| s.bytes).sum())
        .unwrap_or(u64::MAX)
}

/// Whether a suite keeps a case (`select::suite::generate`): the op accepts it, or refusing it
/// is a declaration error (a case in the op's first dtype that no generator made), which the
/// caller's checks then report.
fn kept(e: &GgmlOpEntry, c: &Case, origin: &str) -> bool {
    let refusable = origin.contains("(generated)") || c.dtype != e.dtypes[0];
    !refusable || (e.tensors)(c).is_ok()
}

/// Every case of every entry that runs on the CPU here: the smoke cases in every dtype, and
/// each boundary's smallest case where it fits in `limit` bytes (and, in a block-quantized
/// type, `QUANT_ELEMENT_LIMIT` elements).
fn runnable(limit: u64) -> Vec<(&'static GgmlOpEntry, Case, String)> {
    let mut out = Vec::new();
    for e in TABLE {
        for (c, origin) in cases(e, &h200()) {
            let later_value = !origin.starts_with("smoke") && !origin.ends_with("#0");
            let elements = c.ne.iter().map(|&n| n.max(0) as u64).product::<u64>();
            let slow_to_draw = c.dtype.is_block() && elements > QUANT_ELEMENT_LIMIT;
            if later_value || !kept(e, &c, &origin) || case_bytes(e, &c) > limit || slow_to_draw {
                continue;
            }
            out.push((e, c, origin));
        }
    }
    out
}

#[test]
fn the_table_has_every_op_once_and_none_of_kedges_own() {
    let names: HashSet<&str> = TABLE.iter().map(|e| e.name).collect();
    assert_eq!(names.len(), TABLE.len(), "duplicate names");
    assert!(TABLE.len() >= 37, "{} entries", TABLE.len());
    for own in [
        "rms_norm",
        "norm",
        "l2_norm",
        "rms_norm_mul_add",
        "softmax",
        "soft_max",
        "cumsum",
        "tri",
        "add_id",
    ] {
        assert!(!names.contains(own), "{own} is kedge's own op");
    }
    for required in [
        "abs",
        "sgn",
        "neg",
        "step",
        "tanh",
        "elu",
        "relu",
        "sigmoid",
        "gelu",
        "gelu_quick",
        "gelu_erf",
        "silu",
        "hardswish",
        "hardsigmoid",
        "exp",
        "sqr",
        "sqrt",
        "log",
        "sin",
        "cos",
        "clamp",
        "leaky_relu",
        "swiglu",
        "geglu",
        "reglu",
        "scale",
        "sum",
        "sum_rows",
        "mean",
        "argmax",
        "count_equal",
        "pad",
        "concat",
        "repeat",
        "repeat_back",
        "get_rows",
        "set_rows",
        "cpy",
        "cont",
        "argsort",
        "top_k",
        "diag_mask_inf",
        "timestep_embedding",
        "rope",
        "mul_mat",
        "mul_mat_id",
        "group_norm",
        "upscale",
        "interpolate",
        "im2col",
        "pool_2d",
        "acc",
        "add",
        "sub",
        "mul",
        "div",
        "soft_max_back",
        "ssm_conv",
        "xielu",
        "silu_back",
        "rms_norm_back",
        "dup",
        "set",
        "fill",
        "diag",
        "pad_reflect_1d",
        "get_rows_back",
        "solve_tri",
        "rope_back",
        "cross_entropy_loss",
        "cross_entropy_loss_back",
        "opt_step_adamw",
        "opt_step_sgd",
        "arange",
        "mul_mat_hadamard",
        "lightning_indexer",
        "pool_1d",
        "ssm_scan",
        "rwkv_wkv6",
        "rwkv_wkv7",
        "gated_linear_attn",
        "gated_delta_net",
        "conv_2d_dw",
        "conv_2d",
        "conv_3d",
        "im2col_3d",
        "col2im_1d",
    ] {
        assert!(names.contains(required), "{required} missing");
    }
    // Every entry's own names resolve: kedge's and upstream's (`-o`).
    let reg = crate::registry();
    for e in TABLE {
        assert_eq!(reg.op(e.name).map(|o| o.name()), Ok(e.name));
        assert!(reg.ops_named(e.upstream).iter().any(|o| o.name() == e.name));
    }
}

#[test]
fn every_case_is_valid_and_prints_a_constructor_and_its_vars() {
    let mut n = 0;
    for e in TABLE {
        let all = cases(e, &h200());
        assert!(
            all.iter().any(|(_, o)| o.starts_with("smoke")),
            "{}: no smoke case",
            e.name
        );
        let mut generated_kept = 0;
        let mut generated_any = false;
        for (c, origin) in all {
            // The generator does not know the op's shape rules: a generated probe the op
            // refuses is left out (the suite counts them); every other case must be valid.
            let specs = match (e.tensors)(&c) {
                Ok(s) => s,
                Err(_) if origin.contains("(generated)") => {
                    generated_any = true;
                    continue;
                }
                // Declarations are checked in the op's first dtype.
                Err(_) if c.dtype != e.dtypes[0] => continue,
                Err(err) => panic!("{} {origin}: {err}", e.name),
            };
            if origin.contains("(generated)") {
                generated_any = true;
                generated_kept += 1;
            }
            assert!(specs.iter().any(|s| s.role == Role::Output));
            let u = (e.upstream_line)(&c);
            assert!(
                u.test_case_line
                    .starts_with("test_cases.emplace_back(new test_")
                    && u.test_case_line.ends_with("));"),
                "{}: {}",
                e.name,
                u.test_case_line
            );
            assert_eq!(u.op_name, e.upstream);
            assert!(
                !u.vars.is_empty() && !u.vars.contains(' '),
                "{}: {}",
                e.name,
                u.vars
            );
            n += 1;
        }
        assert!(
            !generated_any || generated_kept > 0,
            "{}: the op refuses every generated probe",
            e.name
        );
    }
    assert!(n > 500, "{n} cases");
}

/// Each predicted CUDA failure (by tag), with the case kedge derives that reproduces it:
/// (op, prediction tag, the constructor line test-backend-ops prints for that case).
const PREDICTIONS: &[(&str, &str, &str)] = &[
    ("mul_mat", "C1", "new test_mul_mat(GGML_TYPE_F16, GGML_TYPE_F32, 524544, 1, 4096, {1, 1}, {1, 1})"),
    ("rms_norm_mul_rope", "A4", "new test_rms_norm_mul_rope({128, 8, 65536, 1}, 1e-6f, false, false, false, GGML_ROPE_TYPE_NEOX)"),
    ("concat", "B7", "new test_concat(GGML_TYPE_F32, {16, 1, 65536, 1}, 16, 0, 1)"),
    ("mul_mat", "C2", "new test_mul_mat(GGML_TYPE_Q4_0, GGML_TYPE_F32, 65536, 33024, 256, {1, 1}, {1, 1})"),
    ("interpolate", "C11", "new test_interpolate(GGML_TYPE_F32, {512, 512, 2049, 1}, {512, 512, 2049, 1}, GGML_SCALE_MODE_NEAREST)"),
    ("flash_attn_ext", "C10", "new test_flash_attn_ext(128, 128, 33, {1, 1}, 131072, 1, true, false, 0.0f, 0.0f, GGML_PREC_F32, GGML_TYPE_F16, GGML_TYPE_F16, {0, 1, 2, 3}, true)"),
    ("pad", "B5", "new test_pad(GGML_TYPE_F32, {64, 65535, 1, 1}, 0, 1, false)"),
    ("mul_mat", "B12", "new test_mul_mat(GGML_TYPE_Q4_0, GGML_TYPE_F32, 16, 1, 256, {1, 1}, {65536, 1})"),
    ("mul_mat", "B13", "new test_mul_mat(GGML_TYPE_Q4_0, GGML_TYPE_F32, 16, 9, 256, {1, 1}, {65536, 1})"),
    ("mul_mat", "B14", "new test_mul_mat(GGML_TYPE_F32, GGML_TYPE_F32, 16, 1, 32, {65536, 1}, {1, 1})"),
    ("gelu", "C5", "new test_unary(GGML_UNARY_OP_GELU, GGML_TYPE_F16, {65536, 32768, 1, 1}, 0)"),
    ("silu", "C6", "new test_unary(GGML_UNARY_OP_SILU, GGML_TYPE_F16, {65536, 65537, 1, 1}, 0)"),
    ("sqr", "C7", "new test_sqr(GGML_TYPE_F16, {65536, 32768, 1, 1})"),
    ("clamp", "C8", "new test_clamp(GGML_TYPE_F16, {65536, 32768, 1, 1}, -0.5f, 0.5f)"),
    ("leaky_relu", "C8", "new test_leaky_relu(GGML_TYPE_F16, {65536, 32768, 1, 1}, 0.1f)"),
    ("group_norm", "C9", "new test_group_norm(GGML_TYPE_F32, {1024, 1024, 2048, 1}, 32, 1e-6f)"),
    ("upscale", "C12", "new test_upscale(GGML_TYPE_F32, {512, 512, 2048, 1}, 2, GGML_SCALE_MODE_BILINEAR, false)"),
    ("rope", "C14", "new test_rope(GGML_TYPE_F16, {128, 32, 524289, 1}, 128, GGML_ROPE_TYPE_NEOX, 512, 1.0f, 0.0f, 1.0f, false, 0, true)"),
    ("timestep_embedding", "B8", "new test_timestep_embedding(GGML_TYPE_F32, {65536, 1, 1, 1}, 320, 10000)"),
    ("timestep_embedding", "C13", "new test_timestep_embedding(GGML_TYPE_F32, {65535, 1, 1, 1}, 8200, 10000)"),
    ("repeat_back", "B9", "new test_repeat_back(GGML_TYPE_F32, {8, 65536, 1, 1}, {2, 1, 1, 1}, false)"),
    ("cont", "D1", "new test_cont(GGML_TYPE_F32, {1024, 524288, 2, 1}, true)"),
    ("cpy", "D1", "new test_cpy(GGML_TYPE_F32, GGML_TYPE_F32, {1, 2, 1, 1}, {1, 2, 1, 1}, {0, 0, 0, 0}, {0, 0, 0, 0}, false, {536870912, 2, 1, 1})"),
    ("diag_mask_inf", "B10", "new test_diag_mask_inf(GGML_TYPE_F32, {2097152, 1, 1, 1}, 5)"),
    ("rope", "B11", "new test_rope(GGML_TYPE_F32, {33554432, 1, 1, 1}, 128, GGML_ROPE_TYPE_NORMAL, 512, 1.0f, 0.0f, 1.0f, false, 0, true)"),
    ("pad", "B6", "new test_pad_ext(GGML_TYPE_F32, {8, 1, 65535, 1}, 0, 0, 0, 0, 0, 1, 0, 0, 0, false)"),
    ("sum_rows", "C16", "new test_sum_rows(GGML_TYPE_F32, {1024, 2097153, 1, 1}, false, false)"),
    ("mean", "C16", "new test_mean(GGML_TYPE_F32, {1024, 2097153, 1, 1})"),
    ("argsort", "C17", "new test_argsort(GGML_TYPE_F32, {1024, 2097153, 1, 1}, GGML_SORT_ORDER_ASC)"),
    ("pad", "C18", "new test_pad(GGML_TYPE_F32, {1023, 1023, 2049, 1}, 1, 1, false)"),
    ("pool_2d", "C19", "new test_pool2d(GGML_OP_POOL_AVG, GGML_TYPE_F32, {1024, 1024, 2049, 1}, 2, 2, 2, 2, 0, 0)"),
    ("mul_mat_id", "C3", "new test_mul_mat_id(GGML_TYPE_F16, GGML_TYPE_F32, 257, 257, false, 4096, 4, 4096)"),
    ("set_rows", "C22", "new test_set_rows(GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_I32, {4096, 1048577, 1, 1}, {1, 1}, 1048577, false)"),
    ("acc", "C23", "new test_acc(GGML_TYPE_F32, {65536, 65537, 1, 1}, {256, 16, 1, 1}, -1)"),
    ("argsort", "D3", "new test_argsort(GGML_TYPE_F32, {5000, 2, 1, 1}, GGML_SORT_ORDER_ASC)"),
    ("argmax", "D3", "new test_argmax(GGML_TYPE_F32, {5000, 2, 1, 1})"),
    ("add", "D4", "new test_bin_bcast(ggml_add, GGML_TYPE_F16, {65536, 65537, 1, 1}, {1, 1, 1, 1}, 1, false, false)"),
    ("count_equal", "D5", "new test_count_equal(GGML_TYPE_F32, {4, 1073741824, 1, 1})"),
    ("ssm_conv", "B15", "new test_ssm_conv(GGML_TYPE_F32, {2097155, 128, 1, 1}, {4, 128, 1, 1})"),
    ("ssm_conv", "C24", "new test_ssm_conv(GGML_TYPE_F32, {35, 8192, 2048, 1}, {4, 8192, 1, 1})"),
    ("ssm_conv", "D30", "new test_ssm_conv(GGML_TYPE_F32, {12288, 128, 1, 1}, {4, 128, 1, 1})"),
    ("diag_mask_inf", "C20", "new test_diag_mask_inf(GGML_TYPE_F32, {65536, 32769, 1, 1}, 5)"),
    ("xielu", "C25", "new test_xielu(GGML_TYPE_F32, {65536, 32768, 1, 1})"),
    ("silu_back", "C26", "new test_silu_back(GGML_TYPE_F32, {65536, 32768, 1, 1}, 1e-6f)"),
    ("diag", "C27", "new test_diag(GGML_TYPE_F32, {256, 1, 65537, 1})"),
    ("lightning_indexer", "B20", "new test_lightning_indexer(128, 64, 256, 65536, 1, 1, GGML_TYPE_F32)"),
    ("lightning_indexer", "B21", "new test_lightning_indexer(128, 32, 64, 1, 65536, 1, GGML_TYPE_F32)"),
    ("arange", "C30", "new test_arange(GGML_TYPE_F32, 0.0f, 2.147483648e9f, 1.0f)"),
    ("ssm_scan", "C43", "new test_ssm_scan(GGML_TYPE_F32, 128, 64, 16, 1, 1, 4097, false, 1)"),
    ("ssm_scan", "B31", "new test_ssm_scan(GGML_TYPE_F32, 128, 16, 1, 1, 1, 65536, false, 1)"),
    ("ssm_scan", "D20", "new test_ssm_scan(GGML_TYPE_F32, 128, 64, 16, 1, 524288, 1, false, 1)"),
    ("rwkv_wkv6", "D21", "new test_rwkv_wkv6(GGML_TYPE_F32, 4, 32, 2, 1)"),
    ("rwkv_wkv6", "C40", "new test_rwkv_wkv6(GGML_TYPE_F32, 32, 64, 2, 15888)"),
    ("rwkv_wkv7", "D22", "new test_rwkv_wkv7(GGML_TYPE_F32, 4, 32, 2, 1)"),
    ("rwkv_wkv7", "C41", "new test_rwkv_wkv7(GGML_TYPE_F32, 32, 64, 2, 15888)"),
    ("rwkv_wkv7", "C42", "new test_rwkv_wkv7(GGML_TYPE_F32, 32, 64, 1, 16385)"),
    ("gated_linear_attn", "D23", "new test_gla(GGML_TYPE_F32, 4, 32, 2, 1)"),
    ("gated_linear_attn", "C44", "new test_gla(GGML_TYPE_F32, 32, 64, 2, 15888)"),
    ("gated_delta_net", "D24", "new test_gated_delta_net(GGML_TYPE_F32, 2, 48, 2, 1, 1, false, false, 1)"),
    ("gated_delta_net", "B30", "new test_gated_delta_net(GGML_TYPE_F32, 1, 16, 1, 65536, 1, false, false, 1)"),
    ("conv_2d_dw", "C50", "new test_conv_2d_dw({1024, 1024, 2048, 1}, {3, 3, 1, 2048}, GGML_TYPE_F32, 1, 1, 1, false)"),
    ("conv_2d_dw", "C51", "new test_conv_2d_dw({1024, 1024, 2049, 1}, {3, 3, 1, 2049}, GGML_TYPE_F32, 2, 1, 1, false)"),
    ("conv_2d", "C52", "new test_conv_2d({1024, 1024, 1, 1}, {1, 1, 1, 2048}, GGML_TYPE_F32, 1, 1, 0, 0, 1, 1, false)"),
    ("col2im_1d", "C53", "new test_col2im_1d(GGML_TYPE_F32, 16, 512, 262145, 8, 0)"),
    ("col2im_1d", "C54", "new test_col2im_1d(GGML_TYPE_F32, 2, 16, 33554433, 4, 0)"),
];

/// Each prediction is a case kedge derives (declared or generated), in the dtype the
/// prediction names or in another dtype the same kernel serves (the unary launches take
/// `int k` whatever the type): the line must match up to the type.
/// Inputs are drawn where test-backend-ops draws them: test_unary's [-150, 150) (f16 exp and
/// expm1 in [-10, 10)), test_glu's and test_swiglu_oai's [-150, 150), and
/// test_rms_norm_mul_rope's positions each token's own index, shuffled. A big case's device
/// draw takes the same range (`row_sampling`).
#[test]
fn inputs_are_drawn_in_upstreams_domains() {
    let entry = |name: &str| TABLE.iter().find(|e| e.name == name).expect("in the table");
    let range_of = |name: &str, dtype: DType| {
        let e = entry(name);
        let c = Case::new(name, "ggml:CUDA0", dtype, [64, 300, 1, 1]);
        let specs = (e.tensors)(&c).expect("tensors");
        let ins = Op::inputs(e, &c, &specs).expect("inputs");
        let v: Vec<f64> = ins.iter().flat_map(|h| h.to_f64()).collect();
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sampling = Op::row_sampling(e, &c).expect("sampled when big");
        assert!(
            // <=: a 16-bit value may round up to the range's end.
            sampling
                .ranges()
                .iter()
                .all(|&(a, b)| (a as f64) <= lo && hi <= b as f64),
            "{name} {dtype}: the device would draw in {:?}, the host drew in [{lo}, {hi}]",
            sampling.ranges()
        );
        (lo, hi)
    };
    for (name, dtype, want) in [
        ("gelu", DType::F32, 150.0),
        ("gelu", DType::F16, 150.0),
        ("exp", DType::F32, 150.0),
        ("exp", DType::F16, 10.0),
        ("expm1", DType::F16, 10.0),
        ("silu", DType::F16, 150.0),
        ("geglu", DType::F16, 150.0),
        ("swiglu", DType::F32, 150.0),
        ("swiglu_oai", DType::F32, 150.0),
    ] {
        let (lo, hi) = range_of(name, dtype);
        assert!(
            lo >= -want && hi <= want && lo < -0.9 * want && hi > 0.9 * want,
            "{name} {dtype}: drawn in [{lo}, {hi}], upstream's is [-{want}, {want})"
        );
    }
    let e = entry("rms_norm_mul_rope");
    let c = Case::new(
        "rms_norm_mul_rope",
        "ggml:CUDA0",
        DType::F32,
        [64, 4, 1000, 1],
    );
    let specs = (e.tensors)(&c).expect("tensors");
    let pos = Op::inputs(e, &c, &specs).expect("inputs")[2].to_f64();
    let mut sorted = pos.clone();
    sorted.sort_by(f64::total_cmp);
    let ids: Vec<f64> = (0..1000).map(f64::from).collect();
    assert_eq!(sorted, ids, "each token's index once");
    assert_ne!(pos, ids, "shuffled");
}

#[test]
fn every_predicted_failure_is_a_case_of_its_op() {
    let mut missing = Vec::new();
    for &(op, tag, want) in PREDICTIONS {
        let e = TABLE
            .iter()
            .find(|e| e.name == op)
            .unwrap_or_else(|| panic!("{op}"));
        let lines: Vec<(String, String)> = cases(e, &h200())
            .into_iter()
            .map(|(c, o)| ((e.upstream_line)(&c).test_case_line, o))
            .collect();
        let any_type = |s: &str| {
            s.replace("GGML_TYPE_F32", "T")
                .replace("GGML_TYPE_F16", "T")
        };
        let hit = lines.iter().find(|(l, _)| l.contains(want)).or_else(|| {
            lines
                .iter()
                .find(|(l, _)| any_type(l).contains(&any_type(want)))
        });
        match hit {
            Some((_, origin)) => eprintln!("{tag:>4} {op}: {origin}"),
            None => missing.push(format!("{tag} {op}: {want}")),
        }
    }
    assert!(
        missing.is_empty(),
        "no case reproduces:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_declared_boundary_case_carries_its_workload() {
    let e = TABLE
        .iter()
        .find(|e| e.name == "rms_norm_mul_rope")
        .expect("an entry");
    let reg = crate::registry();
    let c =
        Case::new(e.name, "ggml:CPU", DType::F32, [128, 8, 65536, 1]).with_param("mode", "neox");
    let c = Case {
        params: kedge_core::model::params::check_params(e.name, e.params, &c.params)
            .expect("valid"),
        ..c
    };
    assert!(reg.op(e.name).is_ok());
    let r = Op::reach(e, &c).expect("a reach note");
    assert!(r.starts_with("A4:") && r.contains("Qwen3"), "{r}");
    // The pair partner below the limit is the same boundary's probe; a smoke case is none.
    assert!(Op::reach(
        e,
        &Case {
            ne: [128, 8, 65535, 1],
            ..c.clone()
        }
    )
    .is_some());
    assert!(Op::reach(
        e,
        &Case {
            ne: [128, 8, 3, 1],
            ..c
        }
    )
    .is_none());
}

/// The predictions on the element-wise ops come from the generated count boundary
/// too: 2^31 elements on ne[1] from [64, 1, 1, 1].
#[test]
fn generated_boundaries_move_one_dimension_of_a_small_base() {
    for e in TABLE {
        let Some(base) = (e.probe)() else { continue };
        let bytes = case_bytes(e, &Case::new(e.name, "ggml:CPU", e.dtypes[0], base.ne));
        assert!(bytes < 1 << 20, "{}: a {bytes}-byte probe base", e.name);
        for b in kedge_core::contract::boundary::generated(&base, &h200(), e.dtypes[0]) {
            let Axis::Ne(d) = b.axis else { continue };
            for c in b.cases(e.name, "ggml:CPU", e.dtypes[0]) {
                let moved: Vec<usize> = (0..4).filter(|&i| c.ne[i] != base.ne[i]).collect();
                assert!(moved.iter().all(|&i| i == d), "{}: {}", e.name, b.label);
            }
        }
    }
}

/// Every entry's cases run on ggml's CPU backend and pass against the entry's own reference,
/// in `PARTS` tests of every `PARTS`-th entry, so the test threads share the work (run whole,
/// it was the longest test of the workspace).
const PARTS: usize = 4;

fn entries_run_on_ggml_cpu(part: usize) {
    let reg = on_ggml_cpu();
    let mine: BTreeSet<&str> = TABLE
        .iter()
        .enumerate()
        .filter(|(i, _)| i % PARTS == part)
        .map(|(_, e)| e.name)
        .collect();
    let mut slot = DeviceSlot::new(0);
    let mut failures = Vec::new();
    let mut ran: BTreeSet<&str> = BTreeSet::new();
    let mut count = 0;
    for (e, c, origin) in runnable(RUN_LIMIT) {
        if !mine.contains(e.name) {
            continue;
        }
        let case = match reg.validate(&c) {
            Ok(c) => c,
            Err(err) => {
                failures.push(format!("{} {origin}: invalid: {err}", e.name));
                continue;
            }
        };
        // A fresh cache per case: references are kept per case key, and nothing repeats.
        let mut refs = ReferenceCache::default();
        let t = std::time::Instant::now();
        let ex = execute(&reg, &mut slot, &case, &mut refs);
        if t.elapsed().as_secs_f64() > 0.5 {
            eprintln!(
                "{:.1} s: {} {origin}",
                t.elapsed().as_secs_f64(),
                case.label()
            );
        }
        if ex.result.verdict != Verdict::Pass {
            failures.push(format!(
                "{} {origin} {}: {:?}: {}",
                e.name,
                case.label(),
                ex.result.verdict,
                ex.result.detail
            ));
        }
        ran.insert(e.name);
        count += 1;
    }
    eprintln!(
        "part {} of {PARTS}: {count} cases ran on ggml's CPU backend",
        part + 1
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(ran, mine, "entries with no case run");
}

/// An output judged under an allowance of a few values off over the whole of it (a block
/// format written by set_rows or cpy) is judged whole: a sample of its rows would hold those
/// values only by chance. Elsewhere the same ops are judged on sampled rows.
#[test]
fn an_allowance_over_the_whole_output_is_judged_whole() {
    let entry = |name: &str| TABLE.iter().find(|e| e.name == name).expect("in the table");
    let (set_rows, cpy) = (entry("set_rows"), entry("cpy"));
    let big = [64, 65536, 1, 1];
    for d in [DType::Q4_0, DType::Q5_1, DType::Q8_0, DType::Iq4Nl] {
        let c = Case::new("set_rows", "ggml:CUDA0", d, big);
        assert!(Op::row_sampling(set_rows, &c).is_none(), "{}", c.label());
        let c = Case::new("cpy", "ggml:CUDA0", DType::F32, big).with_param("dst", d.name());
        assert!(Op::row_sampling(cpy, &c).is_none(), "{}", c.label());
    }
    let c = Case::new("set_rows", "ggml:CUDA0", DType::F32, big);
    assert!(Op::row_sampling(set_rows, &c).is_some(), "{}", c.label());
    for d in ["f32", "f16", "bf16"] {
        let c = Case::new("cpy", "ggml:CUDA0", DType::F32, big).with_param("dst", d);
        assert!(Op::row_sampling(cpy, &c).is_some(), "{}", c.label());
    }
    // The bound itself is unchanged: one step over every value written, else upstream's own.
    let c = Case::new("cpy", "ggml:CUDA0", DType::F32, big);
    assert_eq!(Op::tolerance(cpy, &c).nmse, 0.0);
    let c = Case::new("cpy", "ggml:CUDA0", DType::F32, big).with_param("dst", "f16");
    assert_eq!(Op::tolerance(cpy, &c).nmse, 1e-6);
    let c = Case::new("cpy", "ggml:CUDA0", DType::F32, big).with_param("dst", "q8_0");
    let n = (64 * 65536) as f64;
    assert_eq!(
        Op::tolerance(cpy, &c).nmse,
        (1.0 / 64.0f64).powi(2) / (0.25 * n)
    );
}

/// `distinct_rows` draws what drawing a fresh permutation a row draws (one buffer reused for
/// all rows), the padding after each row from the same stream.
#[test]
fn distinct_rows_draw_what_a_permutation_a_row_draws() {
    let case = Case::new("argsort", "ggml:CPU", DType::F32, [7, 5, 3, 1]);
    let spec = TensorSpec {
        name: "a".into(),
        role: Role::Input,
        dtype: DType::F32,
        ne: [7, 5, 3, 1],
        nb: [4, 40, 200, 600],
        bytes: 600,
    };
    let got = distinct_rows(&case, &spec, 0);
    let mut rng = Rng::stream(case.seed, 0);
    let mut want = vec![0f32; 150];
    for start in (0..150).step_by(10) {
        for (k, p) in permutation(&mut rng, 7).into_iter().enumerate() {
            want[start + k] = distinct_value(p, 7);
        }
        for v in &mut want[start + 7..start + 10] {
            *v = rng.uniform(-1.0, 1.0);
        }
    }
    assert!(got == span_tensor(&spec, &want));
    // More rows than one task draws (rows are drawn in parallel, each task from where its
    // rows start in the stream): the values of one sequential pass, padding included.
    let (row, pitch, rows) = (5usize, 8usize, 2500usize);
    let spec = TensorSpec {
        name: "a".into(),
        role: Role::Input,
        dtype: DType::F32,
        ne: [row as i64, rows as i64, 1, 1],
        nb: [
            4,
            4 * pitch as u64,
            4 * (pitch * rows) as u64,
            4 * (pitch * rows) as u64,
        ],
        bytes: 4 * (pitch * (rows - 1) + row) as u64,
    };
    let got = distinct_rows(&case, &spec, 3);
    let mut rng = Rng::stream(case.seed, 3);
    let mut want = vec![0f32; pitch * (rows - 1) + row];
    for r in 0..rows {
        for (k, p) in permutation(&mut rng, row).into_iter().enumerate() {
            want[r * pitch + k] = distinct_value(p, row);
        }
        if r + 1 < rows {
            for v in &mut want[r * pitch + row..(r + 1) * pitch] {
                *v = rng.uniform(-1.0, 1.0);
            }
        }
    }
    assert!(got == span_tensor(&spec, &want));
}

/// An entry that makes some of its inputs lists them (what a sampled case's host holds, for
/// admission): every input its function makes is listed, and is an input.
#[test]
fn partly_made_inputs_are_the_ones_listed() {
    let mut seen = 0;
    for e in TABLE {
        let Inputs::Partly(listed, f) = e.inputs else {
            continue;
        };
        for (c, origin) in cases(e, &h200())
            .into_iter()
            .filter(|(_, o)| o.starts_with("smoke"))
        {
            let specs = (e.tensors)(&c).expect("tensors");
            let made = f(&c, &specs).expect("made");
            for (i, _) in &made {
                assert!(
                    listed.contains(i) && specs[*i].role == Role::Input,
                    "{} {origin}: makes input {i}, lists {listed:?}",
                    e.name
                );
            }
            seen += 1;
        }
    }
    assert!(seen > 10, "{seen} cases");
}

/// A big block-format table is made of a pool of quantized rows: every row one of the pool's
/// (no more distinct rows than the pool has, and most of them used), the same bytes each time,
/// and the case passes on ggml's CPU backend; a small table is quantized once when drawn, the
/// bytes the build makes of the f32 values (what the run and the reference would each make).
/// Drawn inputs (concat) and set_rows' destination are pooled the same way.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_big_block_format_table_is_made_of_a_pool_of_quantized_rows() {
    let reg = on_ggml_cpu();
    let e = TABLE
        .iter()
        .find(|e| e.name == "get_rows")
        .expect("get_rows");
    let case = pooled_case(&reg, "get_rows");
    let specs = (e.tensors)(&case).expect("tensors");
    let inputs = Op::inputs(e, &case, &specs).expect("inputs");
    let table = &inputs[0];
    assert_eq!(table.dtype, DType::Q8_0);
    assert_eq!(table.bytes.len() as u64, specs[0].bytes);
    let row = specs[0].nb[1] as usize;
    let distinct: HashSet<&[u8]> = table.bytes.chunks(row).collect();
    let pool = (kedge_core::contract::op::POOLED_FROM / 64) as usize;
    assert!(
        distinct.len() <= pool && distinct.len() > pool / 2,
        "{} distinct rows",
        distinct.len()
    );
    assert!(Op::inputs(e, &case, &specs).expect("inputs")[0] == *table);
    // The worker keeps quantized pools for its next cases: a pool of another range or seed is
    // made anew, never one kept for another key.
    let ggml = Ggml::load(&build_dir()).expect("the build loads");
    let pooled = |seed: u64, lo: f32, hi: f32| {
        crate::on_ggml::exec::pooled_bytes(ggml, seed, 0, &specs[0], lo, hi)
            .expect("pooled")
            .expect("a pooled input")
    };
    assert!(pooled(case.seed, 0.0, 1.0) != table.bytes);
    assert!(pooled(case.seed + 1, -1.0, 1.0) != table.bytes);
    assert!(pooled(case.seed, -1.0, 1.0) == table.bytes);
    let ex = execute(
        &reg,
        &mut DeviceSlot::new(0),
        &case,
        &mut ReferenceCache::default(),
    );
    assert_eq!(ex.result.verdict, Verdict::Pass, "{}", ex.result.detail);
    let small = reg
        .validate(&Case::new(
            "get_rows",
            "ggml:CPU",
            DType::Q8_0,
            [64, 8, 1, 1],
        ))
        .expect("valid");
    let specs = (e.tensors)(&small).expect("tensors");
    let drawn = Op::inputs(e, &small, &specs).expect("inputs");
    assert_eq!(drawn[0].dtype, DType::Q8_0);
    assert_eq!(drawn[0].bytes.len() as u64, specs[0].bytes);
    let ggml = Ggml::load(&build_dir()).expect("the build loads");
    let values = default_input(&small, &specs, 0);
    assert_eq!(values.dtype, DType::F32);
    let by_the_run =
        crate::on_ggml::exec::input_bytes(ggml, &specs[0], &values).expect("quantized");
    assert!(
        drawn[0].bytes == *by_the_run,
        "not the bytes the run would quantize"
    );
    // Already quantized, the run passes them through.
    assert!(matches!(
        crate::on_ggml::exec::input_bytes(ggml, &specs[0], &drawn[0]),
        Ok(std::borrow::Cow::Borrowed(_))
    ));
    let ex = execute(
        &reg,
        &mut DeviceSlot::new(0),
        &small,
        &mut ReferenceCache::default(),
    );
    assert_eq!(ex.result.verdict, Verdict::Pass, "{}", ex.result.detail);
    // The same for an entry drawing its inputs (concat) and for set_rows' destination.
    for name in ["concat", "set_rows"] {
        let e = TABLE.iter().find(|e| e.name == name).expect("entry");
        let case = pooled_case(&reg, name);
        let specs = (e.tensors)(&case).expect("tensors");
        let inputs = Op::inputs(e, &case, &specs).expect("inputs");
        let blocks: Vec<_> = specs
            .iter()
            .filter(|s| s.role == Role::Input)
            .zip(&inputs)
            .filter(|(s, _)| s.dtype.is_block())
            .collect();
        assert!(!blocks.is_empty(), "{name}: no block-format input");
        for (s, h) in blocks {
            assert!(
                h.dtype == s.dtype && h.bytes.len() as u64 == s.bytes,
                "{name}: input {} is not pooled blocks",
                s.name
            );
        }
        let ex = execute(
            &reg,
            &mut DeviceSlot::new(0),
            &case,
            &mut ReferenceCache::default(),
        );
        assert_eq!(
            ex.result.verdict,
            Verdict::Pass,
            "{name}: {}",
            ex.result.detail
        );
    }
}

/// Every entry with independent rows or slices judged on sampled slices (as a big case is):
/// its small cases on ggml's CPU backend, the inputs drawn in the entry's domain by the
/// sampled path (or made by the entry and cut) and sliced for the reference, pass, and every
/// entry drawn in a domain and every entry that makes its inputs has cases judged so. An
/// entry whose domain the sampled draw missed (sqrt or log of values below zero) fails here on
/// non-finite output.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn independent_slices_pass_judged_on_sampled_slices() {
    let reg = on_ggml_cpu();
    let mut slot = DeviceSlot::new(0).judging(kedge_core::judge::sample::Judging::Sampled);
    let mut failures = Vec::new();
    let mut sampled: BTreeSet<&str> = BTreeSet::new();
    let mut domains: BTreeSet<&str> = BTreeSet::new();
    for (e, c, origin) in runnable(1 << 20) {
        if matches!(e.rows, Rows::Whole) {
            continue;
        }
        if matches!(
            e.inputs,
            Inputs::Uniform(..)
                | Inputs::UniformBy(_)
                | Inputs::Made(_)
                | Inputs::Distinct
                | Inputs::Partly(..)
        ) {
            domains.insert(e.name);
        }
        let case = match reg.validate(&c) {
            Ok(c) => c,
            Err(err) => {
                failures.push(format!("{} {origin}: invalid: {err}", e.name));
                continue;
            }
        };
        let ex = execute(&reg, &mut slot, &case, &mut ReferenceCache::default());
        if ex.result.facts.contains_key("judged_on") {
            sampled.insert(e.name);
        }
        if ex.result.verdict != Verdict::Pass {
            failures.push(format!(
                "{} {origin} {}: {:?}: {}",
                e.name,
                case.label(),
                ex.result.verdict,
                ex.result.detail
            ));
        }
    }
    // A block-format output (set_rows into q4_K and q6_K, rows of it gathered): its sampled
    // blocks dequantized by the build, its never-written blocks counted by the scan. Into q4_0
    // (an allowance of one value off by a step over the whole output) it is judged whole.
    for d in [DType::Q4K, DType::Q6K, DType::Q4_0] {
        let case = reg
            .validate(&Case::new("set_rows", "ggml:CPU", d, [256, 4, 40, 1]))
            .expect("valid");
        let ex = execute(&reg, &mut slot, &case, &mut ReferenceCache::default());
        let judged = ex.result.facts.get("judged_on").and_then(|v| v.as_str());
        if ex.result.verdict != Verdict::Pass || judged.is_none() != (d == DType::Q4_0) {
            failures.push(format!(
                "set_rows into {d} on sampled rows: {:?} ({judged:?}): {}",
                ex.result.verdict, ex.result.detail
            ));
        }
    }
    // A big block-format input (cpy from q8_0, 2^25 values) judged on sampled rows: the run
    // takes its pool's rows, and so must the sampled rows' reference.
    let case = pooled_case(&reg, "cpy");
    let ex = execute(&reg, &mut slot, &case, &mut ReferenceCache::default());
    if ex.result.verdict != Verdict::Pass || !ex.result.facts.contains_key("judged_on") {
        failures.push(format!(
            "cpy from pooled q8_0 rows: {:?} ({}): {}",
            ex.result.verdict,
            ex.result.facts.contains_key("judged_on"),
            ex.result.detail
        ));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let missing: Vec<&str> = domains.difference(&sampled).copied().collect();
    assert!(
        missing.is_empty(),
        "never judged on sampled rows: {missing:?}"
    );
    assert!(domains.len() >= 6, "entries drawn in a domain: {domains:?}");
}

/// A destination whose rows lie 64 MiB apart (test_cpy's `dst_alloc`, as D1 makes at 2 GiB
/// a row) is poisoned and read back a row at a time, not as its whole span: every value of the
/// copy is still compared where the view puts it, and none is unwritten.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_destination_of_rows_far_apart_is_judged_row_by_row() {
    let reg = on_ggml_cpu();
    let mut slot = DeviceSlot::new(0);
    for pad in [1 << 24, 31] {
        let mut c = Case::new("cpy", "ggml:CPU", DType::F32, [33, 3, 1, 1]);
        c.params = crate::params_with(|p: &mut layout::CpyParams| {
            p.dst = "f32";
            p.dst_row_pad = pad;
        });
        let case = reg.validate(&c).expect("valid");
        let ex = execute(&reg, &mut slot, &case, &mut ReferenceCache::default());
        assert_eq!(
            ex.result.verdict,
            Verdict::Pass,
            "pad {pad}: {}",
            ex.result.detail
        );
        let n = ex.result.numbers.as_ref().expect("judged on values");
        assert_eq!((n.compared, n.unwritten), (99, 0), "pad {pad}");
    }
}

/// What each entry promises for sampled judging (`Rows`), checked on ggml's CPU backend: for
/// every small case that cuts into three slices or more, the reference of a case of some of
/// its slices alone (every other one and the last, never all) is those slices of the whole
/// case's reference, their inputs cut from the inputs the whole case draws or makes. An entry
/// that declared rows or planes independent where they are not (a gather across them, a mask
/// that depends on the row) fails here, and so would a tensor the check took for a stack of
/// slices whose slices are not where the stack says.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_sampled_slice_reference_is_the_slice_of_the_whole_reference() {
    use kedge_core::judge::sample::sampled_matches_whole;
    let _ = on_ggml_cpu();
    let mut failures = Vec::new();
    let mut checked: BTreeSet<String> = BTreeSet::new();
    // The entries sliced by batch have no small case of three batches or more: give them some.
    let mut all = runnable(1 << 20);
    for (name, ne) in [
        ("conv_2d", [12, 10, 3, 4]),
        ("group_norm", [9, 7, 32, 3]),
        ("im2col", [10, 10, 3, 3]),
        ("conv_2d_dw", [11, 9, 3, 5]),
    ] {
        let e = TABLE.iter().find(|e| e.name == name).expect("in the table");
        all.push((
            e,
            Case::new(name, "ggml:CPU", e.dtypes[0], ne),
            "batches".into(),
        ));
    }
    // conv_2d_dw's windows with every geometry parameter away from 1 and 0, and an f16 kernel.
    let dw = TABLE
        .iter()
        .find(|e| e.name == "conv_2d_dw")
        .expect("in the table");
    for dtype in [DType::F32, DType::F16] {
        all.push((
            dw,
            Case::new("conv_2d_dw", "ggml:CPU", dtype, [13, 23, 5, 2]).with_params(
                |p: &mut super::conv::Conv2dDwParams| {
                    (p.kw, p.kh, p.stride, p.padding, p.dilation) = (5, 3, 2, 2, 2);
                },
            ),
            "windows".into(),
        ));
    }
    for (e, c, origin) in all {
        match sampled_matches_whole(e, &c) {
            Ok(Some(from)) => {
                checked.insert(format!("{}/{from}", e.name));
            }
            Ok(None) => {}
            Err(err) => failures.push(format!("{} {origin}: {err}", e.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every kind of slice is checked, each from several entries.
    for from in 1..=3 {
        let n = checked
            .iter()
            .filter(|x| x.ends_with(&format!("/{from}")))
            .count();
        assert!(
            n >= 3,
            "slices from ne[{from}] checked for {n} entries: {checked:?}"
        );
    }
    for name in [
        "get_rows",
        "set_rows",
        "argsort",
        "conv_2d",
        "group_norm",
        "rope",
        "concat",
        "pad",
        "lightning_indexer",
        "cont",
        "im2col_3d",
        "acc",
        "rope_back",
        "rms_norm_mul_rope",
        "timestep_embedding",
        "conv_2d_dw",
        "col2im_1d",
    ] {
        assert!(
            checked.iter().any(|x| x.starts_with(&format!("{name}/"))),
            "{name} never checked: {checked:?}"
        );
    }
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_entry_runs_on_ggml_cpu_and_agrees_with_itself_1() {
    entries_run_on_ggml_cpu(0);
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_entry_runs_on_ggml_cpu_and_agrees_with_itself_2() {
    entries_run_on_ggml_cpu(1);
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_entry_runs_on_ggml_cpu_and_agrees_with_itself_3() {
    entries_run_on_ggml_cpu(2);
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_entry_runs_on_ggml_cpu_and_agrees_with_itself_4() {
    entries_run_on_ggml_cpu(3);
}

/// Shapes the pinned ggml itself gets wrong, found by the shape check of the test below (kedge
/// declares the exact size; the sweep reports such a case as an error of the impl).
const SHAPE_FINDINGS: &[(&str, &str)] = &[(
    "pool_2d",
    "ggml_calc_pool_output_size takes the padding as a float, so it computes the output size \
     in float: past 2^24 rows the height is rounded to a float's step",
)];

/// Every case, huge ones included, builds its graph (no memory is allocated) with outputs of
/// the shapes the entry declares (`build` checks them), and ggml's CPU backend supports it.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_case_builds_a_graph_of_the_declared_shapes_that_the_cpu_supports() {
    let dir = build_dir();
    let ggml = Ggml::load(&dir).expect("the build loads");
    let cpu = ggml.backend("CPU").expect("a CPU backend");
    let mut failures = Vec::new();
    let mut found: BTreeSet<&str> = BTreeSet::new();
    let mut n = 0;
    for e in TABLE {
        for (c, origin) in cases(e, &h200()) {
            if !kept(e, &c, &origin) {
                continue;
            }
            let specs = match (e.tensors)(&c) {
                Ok(s) => s,
                Err(err) => {
                    failures.push(format!("{} {origin}: {err}", e.name));
                    continue;
                }
            };
            match crate::on_ggml::exec::build(ggml, &c, &specs, e.graph) {
                Ok(b) => {
                    let u = b.graph.unsupported(&cpu);
                    if !u.is_empty() {
                        failures.push(format!("{} {origin}: CPU does not support {u:?}", e.name));
                    }
                }
                Err(err)
                    if SHAPE_FINDINGS.iter().any(|(op, _)| *op == e.name)
                        && err.to_string().contains("gives dst a shape") =>
                {
                    eprintln!("{} {origin}: {err}", e.name);
                    found.insert(e.name);
                }
                Err(err) => failures.push(format!("{} {origin} {}: {err}", e.name, c.label())),
            }
            n += 1;
        }
    }
    eprintln!("{n} graphs built");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for (op, why) in SHAPE_FINDINGS {
        assert!(
            found.contains(op),
            "{op}: ggml's graph now has the declared shape ({why}): the finding is gone"
        );
    }
}

/// Every dtype an entry declares runs (the first smoke case in it the op accepts).
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_dtype_of_every_entry_builds_a_graph_of_the_declared_shape() {
    let dir = build_dir();
    let ggml = Ggml::load(&dir).expect("the build loads");
    for e in TABLE {
        for &d in e.dtypes {
            let first = e
                .smoke
                .iter()
                .filter(|sm| sm.dtype.is_none_or(|x| x == d))
                .find_map(|sm| {
                    let ne = kedge_core::contract::boundary::whole_blocks(sm.ne, d);
                    let mut c = Case::new(e.name, "ggml:CPU", d, ne);
                    c.params = (sm.params)();
                    (e.tensors)(&c).ok().map(|specs| (c, specs))
                });
            let (c, specs) =
                first.unwrap_or_else(|| panic!("{} {d}: no smoke case the op accepts", e.name));
            let inputs = Op::inputs(e, &c, &specs).expect("inputs");
            for h in &inputs {
                assert!(h.any_nonzero(), "{} {d}: an all-zero input", e.name);
            }
            let ran = crate::on_ggml::exec::run_on(ggml, "CPU", &c, &specs, &inputs, e.graph)
                .unwrap_or_else(|err| panic!("{} {d}: {err}", e.name));
            for (o, s) in ran
                .outputs
                .iter()
                .zip(specs.iter().filter(|s| s.role == Role::Output))
            {
                let (hit, _) = kedge_core::judge::compare::poisoned_elements(o);
                assert_eq!(
                    hit, 0,
                    "{} {d}: {} elements of {} unwritten",
                    e.name, hit, s.name
                );
            }
        }
    }
}

/// A copy keeps its rows where they were, so a big one is judged on sampled rows; a permuted
/// copy moves them, so it is judged whole.
#[test]
fn a_plain_copy_is_sampled_and_a_permuted_one_is_judged_whole() {
    let e = TABLE.iter().find(|e| e.name == "dup").expect("dup");
    let plain = Case::new("dup", "ggml:CPU", DType::F32, [64, 8, 2, 1]);
    assert!(Op::row_sampling(e, &plain).is_some());
    let permuted = plain.clone().with_param("permute", "0213");
    assert!(Op::row_sampling(e, &permuted).is_none());
}

/// solve_tri's lower-triangular input, made by rows in parallel, holds the values one
/// sequential pass over the stream gives (test_solve_tri's init_tensor_tril): matrices of
/// several sizes, several of them, n = 1 included.
#[test]
fn lower_triangular_rows_in_parallel_are_the_sequential_draw() {
    for (seed, n, matrices) in [(1u64, 1usize, 3usize), (7, 5, 4), (3, 64, 6), (9, 129, 2)] {
        let total = n * n * matrices;
        let mut rng = Rng::stream(seed, 0);
        let want: Vec<f32> = (0..total)
            .map(|i| {
                if i % n <= (i / n) % n {
                    rng.uniform(0.1, 1.0)
                } else {
                    0.0
                }
            })
            .collect();
        let got = super::nn::lower_triangular(seed, n, total);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "n {n}, element {i}");
        }
    }
}

/// lightning_indexer f32 `[128,32,64,14528]`, judged on sampled token slices on an H100, was
/// `nonfinite`: 18,812 non-finite elements over the whole output where its 68 sampled slices'
/// reference is finite. Judged whole the same case passes. Its mask, made on the host, holds
/// exactly 18,812 -inf (the output is -inf where the mask is), none of them in a sampled slice:
/// so the judge must know the made inputs hold non-finite values, and not judge the count.
#[test]
fn a_masked_case_whose_sampled_slices_miss_every_masked_block_is_known_to_have_nonfinite_inputs() {
    use kedge_core::contract::op::Op;
    use kedge_core::judge::sample::{sample_slices, sampled, slicing_of, Judging};
    let e = TABLE
        .iter()
        .find(|e| e.name == "lightning_indexer")
        .expect("in the table");
    let c = Case::new(
        "lightning_indexer",
        "ggml:CUDA0",
        DType::F32,
        [128, 32, 64, 14528],
    );
    assert!(sampled(e, &c, Judging::Auto));
    let specs = e.tensors(&c).expect("tensors");
    let made = e.made_inputs(&c, &specs).expect("made");
    let (_, mask) = made
        .iter()
        .find(|(i, _)| *i == 3)
        .expect("the mask is made");
    assert_eq!((mask.dtype, mask.ne), (DType::F16, [64, 14528, 1, 1]));
    let ninf: Vec<bool> = mask
        .bytes
        .chunks_exact(2)
        .map(|b| half::f16::from_le_bytes([b[0], b[1]]) == half::f16::NEG_INFINITY)
        .collect();
    assert_eq!(ninf.iter().filter(|&&x| x).count(), 18_812);
    let sl = slicing_of(e, &c).expect("sliced by token");
    let slices = sample_slices(&c, &specs, &sl);
    assert_eq!(slices.len(), 68);
    for t in &slices {
        let row = &ninf[*t as usize * 64..(*t as usize + 1) * 64];
        assert!(!row.iter().any(|&x| x), "token {t} is masked");
    }
    assert!(kedge_core::judge::sample::holds_nonfinite(&made));
}

/// The same lightning_indexer case run on ggml's CPU backend and judged on sampled token
/// slices: its scan counts the 18,812 -inf the mask puts in the output, none in a sampled slice,
/// and the case passes with the count told, not judged (before, it was `nonfinite`).
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_masked_output_judged_on_sampled_slices_passes_with_the_masks_nonfinite_told() {
    let reg = on_ggml_cpu();
    let mut slot = DeviceSlot::new(0);
    let case = reg
        .validate(&Case::new(
            "lightning_indexer",
            "ggml:CPU",
            DType::F32,
            [128, 32, 64, 14528],
        ))
        .expect("valid");
    let ex = execute(&reg, &mut slot, &case, &mut ReferenceCache::default());
    let r = &ex.result;
    assert!(r.facts.contains_key("judged_on"), "{}", r.detail);
    assert_eq!(r.verdict, Verdict::Pass, "{}", r.detail);
    assert!(
        r.detail
            .contains("18812 non-finite elements over the whole output")
            && r.detail.contains("not judged"),
        "{}",
        r.detail
    );
}

/// A transpose of one big plane is sampled in runs of its flat result (its rows, x's columns,
/// are too long to sample whole); one of many small planes by planes; test_cont's slice by its
/// rows. The widths divide the result and leave 16 runs or more.
#[test]
fn a_one_plane_transpose_is_sampled_in_runs_of_its_result() {
    use kedge_core::judge::sample::{sampled, slicing_of, Judging};
    let cont = TABLE
        .iter()
        .find(|e| e.name == "cont")
        .expect("in the table");
    let case = |ne: [i64; 4], slice: bool| {
        Case::new("cont", "ggml:CUDA0", DType::F32, ne)
            .with_params(|p: &mut layout::ContParams| p.slice = slice)
    };
    let big = case([64, 33_554_431, 1, 1], false);
    let sl = slicing_of(cont, &big).expect("sampled");
    let w = 64 * 33_554_431 / sl.count;
    assert_eq!(sl.run, Some(w));
    assert!(w <= 4096 && w > 1 && (64 * 33_554_431) % w == 0, "{w}");
    assert!(sampled(cont, &big, Judging::Auto));
    // 2^25 - 1 = 31 * 601 * 1801: the largest divisor of 64 * (2^25 - 1) up to 4096.
    assert_eq!(w, 2 * 1801);
    let planes = slicing_of(cont, &case([10, 10, 10, 1], false)).expect("sampled");
    assert_eq!((planes.from, planes.run), (2, None));
    let slice = slicing_of(cont, &case([1024, 524_288, 2, 1], true)).expect("sampled");
    assert_eq!(slice.run, None);
    assert_eq!(super::run_width(17), 1);
    assert_eq!(super::run_width(600), 30);
    assert_eq!(super::run_width(1 << 40), 4096);
}

/// The NMSE of `got` against `want` over the pairs where both are finite (the squared error
/// itself where `want` is all zero).
fn nmse(want: &[f64], got: &[f64]) -> f64 {
    let (num, den) = want
        .iter()
        .zip(got)
        .filter(|(a, b)| a.is_finite() && b.is_finite())
        .fold((0.0, 0.0), |(n, d), (a, b)| {
            (n + (a - b) * (a - b), d + a * a)
        });
    if den > 0.0 {
        num / den
    } else {
        num
    }
}

/// The entry `name`, and what decides and computes its host reference (`Reference::F64`).
fn host_reference(name: &str) -> (&'static GgmlOpEntry, fn(&Case) -> bool, F64Reference) {
    let e = TABLE.iter().find(|e| e.name == name).expect("in the table");
    match e.reference {
        Reference::F64 {
            applies, compute, ..
        } => (e, applies, compute),
        Reference::CpuBackend => panic!("{name} has a host reference"),
    }
}

/// The cases of `name` that run here (`runnable`), each with where it comes from.
fn runnable_of(name: &str) -> Vec<(Case, String)> {
    runnable(RUN_LIMIT)
        .into_iter()
        .filter(|(e, ..)| e.name == name)
        .map(|(_, c, origin)| (c, origin))
        .collect()
}

/// flash_attn_ext's f64 reference computes what ggml's CPU backend computes: on every case of
/// the op small enough to run here, in each type it reads itself (grouped query heads, a V head
/// size of its own, the mask's -inf blocks, K and V as views of their caches), the two agree
/// far inside test-backend-ops' 5e-4, and block formats keep the CPU backend.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn flash_attn_f64_reference_agrees_with_ggml_cpu() {
    let reg = on_ggml_cpu();
    let (e, applies, compute) = host_reference("flash_attn_ext");
    let mut seen = BTreeSet::new();
    let mut shapes = HashSet::new();
    for (c, origin) in runnable_of("flash_attn_ext") {
        let c = reg.validate(&c).expect("valid");
        if !applies(&c) {
            assert!(c.dtype.is_block(), "{origin}: {} falls back", c.dtype);
            continue;
        }
        let specs = (e.tensors)(&c).expect("tensors");
        let inputs = e.inputs(&c, &specs).expect("inputs");
        let mine = compute(&c, &specs, &inputs).expect("f64 reference");
        let cpu = cpu_reference(&c, &specs, &inputs, e.graph).expect("CPU reference");
        assert!(
            mine[0].iter().any(|v| *v != 0.0),
            "{origin}: an all-zero result"
        );
        let e = nmse(&mine[0], &cpu[0]);
        assert!(
            e < 5e-5,
            "{origin} {}: NMSE {e:.3e} between the f64 reference and ggml's CPU backend",
            c.label()
        );
        seen.insert(c.dtype);
        let p = nn::FlashAttnParams::of(&c);
        shapes.insert((p.gqa > 1, p.mask, p.kv_view, p.hsv != 0));
    }
    assert_eq!(
        seen,
        BTreeSet::from([DType::F32, DType::F16, DType::Bf16]),
        "every type read as is"
    );
    assert!(
        shapes.len() >= 4,
        "grouped heads, masks, views and V head sizes: {shapes:?}"
    );
}

/// SUM's f64 reference (every core) computes what ggml's CPU backend (one thread) computes: on
/// every case of the op small enough to run here and one of 2^22 values in rows of 4,096, the
/// two agree far inside test-backend-ops' 1e-7, and the sum is no zero.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn sum_f64_reference_agrees_with_ggml_cpu() {
    let reg = on_ggml_cpu();
    let (e, applies, compute) = host_reference("sum");
    let mut cases = runnable_of("sum");
    cases.push((
        Case::new("sum", "ggml:CPU", DType::F32, [4096, 512, 2, 1]),
        "2^22 values".into(),
    ));
    let mut ran = 0;
    for (c, origin) in cases {
        let c = reg.validate(&c).expect("valid");
        assert!(applies(&c), "{origin}");
        let specs = (e.tensors)(&c).expect("tensors");
        let inputs = e.inputs(&c, &specs).expect("inputs");
        let mine = compute(&c, &specs, &inputs).expect("f64 reference");
        let cpu = cpu_reference(&c, &specs, &inputs, e.graph).expect("CPU reference");
        assert!(mine[0][0] != 0.0, "{origin}: a zero sum");
        let e = nmse(&cpu[0], &mine[0]);
        assert!(
            e < 1e-12,
            "{origin} {}: NMSE {e:.3e} between the f64 sum {} and ggml's CPU backend's {}",
            c.label(),
            mine[0][0],
            cpu[0][0]
        );
        ran += 1;
    }
    assert!(ran >= 4, "{ran} cases");
}

/// set_rows into a block format has the CPU backend's own row writer, on every core, for its
/// reference: on every set_rows case small enough to run here (some rows set of many, batches
/// broadcast over the indices, i32 and i64 indices) and one of 2^20 source values in each of
/// the types upstream's whole-output allowance covers, its destination is the CPU backend's,
/// bit for bit; f32, f16 and bf16 keep the CPU backend.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn set_rows_cpu_row_writer_reference_is_the_cpu_backends_bit_for_bit() {
    let reg = on_ggml_cpu();
    let (e, applies, compute) = host_reference("set_rows");
    let allowance = [
        DType::Q4_0,
        DType::Q4_1,
        DType::Q5_0,
        DType::Q5_1,
        DType::Q2_0,
        DType::Q8_0,
        DType::Iq4Nl,
    ];
    let mut cases = runnable_of("set_rows");
    for d in allowance {
        let c = Case::new("set_rows", "ggml:CPU", d, [256, 4096, 1, 1]);
        cases.push((c, "2^20 source values".into()));
    }
    let (mut seen, mut shapes) = (BTreeSet::new(), HashSet::new());
    for (c, origin) in cases {
        let c = reg.validate(&c).expect("valid");
        if !applies(&c) {
            assert!(!c.dtype.is_block(), "{origin}: {} falls back", c.dtype);
            continue;
        }
        let specs = (e.tensors)(&c).expect("tensors");
        let inputs = e.inputs(&c, &specs).expect("inputs");
        let mine = compute(&c, &specs, &inputs).expect("the row writer's reference");
        let cpu = cpu_reference(&c, &specs, &inputs, e.graph).expect("CPU reference");
        assert_eq!(mine.len(), 1, "{origin}: one output");
        assert!(
            mine[0].iter().any(|v| *v != 0.0),
            "{origin}: an all-zero result"
        );
        let same = mine[0].len() == cpu[0].len()
            && mine[0]
                .iter()
                .zip(&cpu[0])
                .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "{origin} {}: the row writer's destination is not the CPU backend's",
            c.label()
        );
        seen.insert(c.dtype);
        let p = layout::SetRowsParams::of(&c);
        shapes.insert((p.r != 0 && p.r < c.ne[1], p.nr2 * p.nr3 > 1, p.type_idx));
    }
    for d in allowance {
        assert!(seen.contains(&d), "{d} was judged on the row writer");
    }
    assert!(seen.len() > allowance.len(), "more block formats: {seen:?}");
    assert!(
        shapes.len() >= 3,
        "some rows set, broadcast batches, both index types: {shapes:?}"
    );
}

/// ggml's CPU backend judges every other entry, with one thread per 8 MiB of a case's tensors
/// up to the worker's cores: a verdict must not depend on how many cores judged it. Every
/// entry's cases of 24 to 96 MiB (two each, not block formats), computed with one thread and
/// with the threads kedge gives them (3 to 12): the references agree far inside any tolerance
/// test-backend-ops sets (1e-7 at the tightest). On the pinned snapshot 160 of 162 cases over 81
/// ops were bit-identical; cross_entropy_loss's one value differed at NMSE 5.7e-11 (per-thread
/// partial sums). flash_attn_ext, which did depend on it, has its own f64 reference (its CPU
/// reference of one f16 query over 16,384 keys and 4 heads, 56 MiB: NMSE 3.6e-4 between one
/// thread and twelve, against a tolerance of 5e-4).
#[test]
#[ignore = "an audit of 162 CPU references of 24 to 96 MiB, each twice: minutes in a release build (KEDGE_GGML_DIR=... cargo test --release -p kedge-ops -- --ignored --exact on_ggml::table::tests::cpu_references_do_not_depend_on_the_thread_count); it sets RAYON_NUM_THREADS, so run it alone"]
fn cpu_references_do_not_depend_on_the_thread_count() {
    let reg = on_ggml_cpu();
    let mut per_entry: std::collections::HashMap<&str, usize> = Default::default();
    let (mut checked, mut identical) = (0, 0);
    let mut far = Vec::new();
    for e in TABLE {
        for (c, origin) in cases(e, &h200()) {
            let bytes = case_bytes(e, &c);
            if c.dtype.is_block()
                || !kept(e, &c, &origin)
                || !(24 << 20..=96 << 20).contains(&bytes)
                || per_entry.get(e.name).is_some_and(|&n| n >= 2)
            {
                continue;
            }
            let c = reg.validate(&c).expect("valid");
            let specs = (e.tensors)(&c).expect("tensors");
            let inputs = e.inputs(&c, &specs).expect("inputs");
            *per_entry.entry(e.name).or_default() += 1;
            let with = |threads: &str| {
                // SAFETY: run alone (see the ignore reason): no other thread reads the
                // environment meanwhile.
                unsafe { std::env::set_var("RAYON_NUM_THREADS", threads) };
                cpu_reference(&c, &specs, &inputs, e.graph).expect("the CPU reference")
            };
            let (one, many) = (with("1").concat(), with("12").concat());
            let same = one
                .iter()
                .zip(&many)
                .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
            checked += 1;
            identical += usize::from(same);
            let e = nmse(&one, &many);
            if e > 1e-9 {
                far.push(format!("{} {origin}: NMSE {e:.3e}", c.label()));
            }
        }
    }
    eprintln!(
        "{identical} of {checked} references bit-identical over {} ops",
        per_entry.len()
    );
    assert!(checked >= 100, "only {checked} cases of 24 to 96 MiB");
    assert!(far.is_empty(), "{}", far.join("\n"));
}

/// How a host reference must agree with ggml's CPU backend.
#[derive(Clone, Copy)]
enum Agree {
    /// Bit for bit, -inf included (a copy, a mask, a count).
    Exactly,
    /// Within this NMSE (sums in another order or precision).
    Within(f64),
}

/// Every case of `name` small enough to run here, and `more`, judged by the entry's host
/// reference and by ggml's CPU backend: they agree as `agree` says, and the host's result for
/// each of `more` is no all-zero one (a small case may rightly give zero: one row's loss
/// against itself, no argmax in common). Returns how many cases were compared and how many
/// gave a result other than all zeros.
fn host_reference_agrees(name: &str, more: Vec<(Case, String)>, agree: Agree) -> (usize, usize) {
    let reg = on_ggml_cpu();
    let (e, applies, compute) = host_reference(name);
    let mut cases: Vec<_> = runnable_of(name).into_iter().map(|c| (c, false)).collect();
    cases.extend(more.into_iter().map(|c| (c, true)));
    let (mut ran, mut nonzero) = (0, 0);
    for ((c, origin), chosen) in cases {
        let c = reg.validate(&c).expect("valid");
        assert!(applies(&c), "{origin}: {} keeps the CPU backend", c.label());
        let specs = (e.tensors)(&c).expect("tensors");
        let inputs = e.inputs(&c, &specs).expect("inputs");
        let mine = compute(&c, &specs, &inputs).expect("the host reference");
        let cpu = cpu_reference(&c, &specs, &inputs, e.graph).expect("CPU reference");
        assert_eq!(mine.len(), cpu.len(), "{origin}: outputs");
        for (m, g) in mine.iter().zip(&cpu) {
            assert_eq!(m.len(), g.len(), "{origin} {}: output length", c.label());
            let any = m.iter().any(|v| *v != 0.0);
            assert!(any || !chosen, "{origin} {}: an all-zero result", c.label());
            nonzero += usize::from(any);
            match agree {
                Agree::Exactly => {
                    let first = m
                        .iter()
                        .zip(g)
                        .position(|(a, b)| a.to_bits() != b.to_bits());
                    assert!(
                        first.is_none(),
                        "{origin} {}: element {first:?} differs from the CPU backend's",
                        c.label()
                    );
                }
                Agree::Within(bound) => {
                    let e = nmse(g, m);
                    assert!(
                        e < bound,
                        "{origin} {}: NMSE {e:.3e} against the CPU backend (bound {bound:e})",
                        c.label()
                    );
                }
            }
        }
        ran += 1;
    }
    (ran, nonzero)
}

/// count_equal's host count (argmaxes on every core) is the CPU backend's (argmaxes on one
/// thread), exactly, on every case small enough to run here and one of 2^22 rows.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn count_equal_host_count_is_the_cpu_backends() {
    let big = Case::new("count_equal", "ggml:CPU", DType::F32, [4, 1 << 22, 1, 1]);
    let (ran, nonzero) = host_reference_agrees(
        "count_equal",
        vec![(big, "2^22 rows".into())],
        Agree::Exactly,
    );
    assert!(
        ran >= 3 && nonzero >= 2,
        "{ran} cases, {nonzero} counts above zero"
    );
}

/// cross_entropy_loss and its gradient in f64 agree with the CPU backend far inside
/// test-backend-ops' 1e-7, on every case small enough to run here and one of 2^22 values.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn cross_entropy_f64_references_agree_with_ggml_cpu() {
    for name in ["cross_entropy_loss", "cross_entropy_loss_back"] {
        let big = Case::new(name, "ggml:CPU", DType::F32, [1024, 4096, 1, 1]);
        let (ran, nonzero) = host_reference_agrees(
            name,
            vec![(big, "2^22 values".into())],
            Agree::Within(1e-10),
        );
        assert!(
            ran >= 4 && nonzero >= 3,
            "{name}: {ran} cases, {nonzero} not zero"
        );
    }
}

/// diag_mask_inf's, set's and diag's host copies are the CPU backend's bit for bit (the -inf
/// of the mask, i32 values and both set layouts included), and get_rows_back's f64 sums agree with
/// its f32 ones far inside 1e-7, on every case small enough to run here and a bigger one each.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn copy_and_mask_host_references_are_the_cpu_backends() {
    let mask = Case::new("diag_mask_inf", "ggml:CPU", DType::F32, [2048, 2048, 1, 1]);
    let (ran, _) = host_reference_agrees(
        "diag_mask_inf",
        vec![(mask, "2^22 values".into())],
        Agree::Exactly,
    );
    assert!(ran >= 3, "diag_mask_inf: {ran} cases");
    let set = Case::new("set", "ggml:CPU", DType::I32, [64, 4096, 4, 1]).with_param("dim", 2);
    let (ran, _) =
        host_reference_agrees("set", vec![(set, "2^20 i32 values".into())], Agree::Exactly);
    assert!(ran >= 4, "set: {ran} cases");
    let mut more = Vec::new();
    for d in [DType::F32, DType::F16] {
        let c = Case::new("get_rows_back", "ggml:CPU", d, [64, 65536, 4096, 1]);
        more.push((c, "4,096 rows into 65,536".to_string()));
    }
    let diag = Case::new("diag", "ggml:CPU", DType::F32, [2048, 1, 2, 1]);
    let (ran, _) =
        host_reference_agrees("diag", vec![(diag, "2^23 values".into())], Agree::Exactly);
    assert!(ran >= 3, "diag: {ran} cases");
    let (ran, _) = host_reference_agrees("get_rows_back", more, Agree::Within(1e-12));
    assert!(ran >= 4, "get_rows_back: {ran} cases");
}

/// A sampled judge of set_rows reads the destination rows its source rows at their crossings
/// land on: in a case of 2^32 + 64 source values, the source row holding element 2^32 (the
/// last) is written to destination row `rows[last]`, which the destination's own crossings do
/// not hold. ggml's CUDA set_rows casts the source's flat index to 32 bits, so that row is the
/// one it never writes; a sampled judge without it passed the case.
#[test]
fn set_rows_sampling_reads_where_the_source_rows_at_their_crossings_land() {
    use kedge_core::judge::sample::{sample_slices, sampled, slicing_of, Judging};
    let e = TABLE
        .iter()
        .find(|e| e.name == "set_rows")
        .expect("set_rows");
    let c = Case::new("set_rows", "ggml:CUDA0", DType::F32, [64, 67_108_865, 1, 1]);
    assert!(sampled(e, &c, Judging::Auto));
    let specs = e.tensors(&c).expect("tensors");
    let made = e.made_inputs(&c, &specs).expect("made");
    let (_, idx) = made
        .iter()
        .find(|(i, _)| *i == 2)
        .expect("the indices are made");
    let lands = |k: usize| layout::index_at(idx, k).expect("an index") as u64;
    let scattered = e.scattered_rows(&c, &specs, &made);
    let last = lands(67_108_864);
    assert!(
        scattered.contains(&last),
        "the last source row's destination"
    );
    for k in [0, 33_554_431, 33_554_432, 16_777_216] {
        assert!(
            scattered.contains(&lands(k)),
            "source row {k}'s destination"
        );
    }
    let sl = slicing_of(e, &c).expect("sliced by row");
    let own = sample_slices(&c, &specs, &sl);
    assert!(
        !own.contains(&last),
        "the destination's own crossings hold row {last} already: pick another seed"
    );
    // The sampled case of both sets builds, with every one of those rows set.
    let mut rows = own;
    rows.extend(&scattered);
    rows.sort_unstable();
    rows.dedup();
    let (sc, inputs) = e
        .gathered_case(&c, &specs, &rows, &made, &[(-1.0, 1.0); 3])
        .expect("the sampled case");
    assert_eq!(sc.ne[1] as usize, rows.len());
    assert_eq!(
        inputs[2].ne[0] as usize,
        rows.len(),
        "every sampled row is set"
    );
}
