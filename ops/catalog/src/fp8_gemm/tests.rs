use super::*;
use crate::signature::check_launch;
use rstest::rstest;

fn case(imp: &str, ne: Ne) -> Case {
    let mut c = Case::new("fp8_gemm", imp, DType::Bf16, ne);
    for p in Fp8GemmParams::SPECS {
        c.params.insert(p.name.to_string(), p.default_value());
    }
    c
}

fn bf16_tensor(ne: Ne, vals: &[f32]) -> HostTensor {
    HostTensor::from_f32(DType::Bf16, ne, vals)
}

fn u8_tensor(ne: Ne, bytes: Vec<u8>) -> HostTensor {
    HostTensor::from_bytes(
        DType::U8,
        ne,
        kedge_core::model::shape::dense_strides(&ne, DType::U8),
        bytes,
    )
}

#[test]
fn reference_by_hand() {
    // K = 2, M = 1, N = 1. W row: k0 code 0x2 (+1.0), k1 code 0xB (-1.5) -> byte 0xB2;
    // block scale 2^(128-127) = 2 -> upcast weights [2, -3] (exact in e4m3).
    let c = case("bucketed", [2, 1, 1, 1]);
    let d = Dims::of(&c).unwrap();
    let w = u8_tensor([1, 1, 1, 1], vec![0xB2]);
    let s = u8_tensor([1, 1, 1, 1], vec![128]);
    // a = [1, -0.5]: amax 1, scale 1/448, quantized [448, -224] (exact): D = 1*2 + 0.5*3 = 3.5.
    let a = bf16_tensor([2, 1, 1, 1], &[1.0, -0.5]);
    assert_eq!(reference(&d, &a, &w, &s), vec![3.5]);
    // a = [0.3, 1]: bf16(0.3) = 0.30078125, / (1/448) = 134.75 -> e4m3 128 (step 16 in
    // [128, 256)); D = (128 * 2 + 448 * -3) / 448 = -2.4285714..., BF16 (ulp 2^-6 in [2, 4))
    // -> -2.421875. Unquantized it would be 0.30078125 * 2 - 3 = -2.398: the reference sees
    // the quantization.
    let a = bf16_tensor([2, 1, 1, 1], &[0.3, 1.0]);
    assert_eq!(reference(&d, &a, &w, &s), vec![-2.421875]);
}

#[test]
fn reference_scales_each_chunk_separately() {
    // chunk = 1: each row is its own chunk with its own amax. Row 1: a = [2, 0.25], scale
    // 2/448, quantized [448, 56] (exact), D = 2*2 + 0.25*(-3) = 3.25.
    let mut c = case("bucketed", [2, 2, 1, 1]);
    c.params.insert("chunk".into(), json!(1));
    let d = Dims::of(&c).unwrap();
    let w = u8_tensor([1, 1, 1, 1], vec![0xB2]);
    let s = u8_tensor([1, 1, 1, 1], vec![128]);
    let a = bf16_tensor([2, 2, 1, 1], &[1.0, -0.5, 2.0, 0.25]);
    assert_eq!(reference(&d, &a, &w, &s), vec![3.5, 3.25]);
}

#[test]
fn reference_layout_is_n_by_m_and_blocks_apply_per_row() {
    // K = 4, M = 2, N = 2, weight_block = 2: row n0 scales [1, 4], row n1 scales [0.5, 2].
    let mut c = case("bucketed", [4, 2, 2, 1]);
    c.params.insert("weight_block".into(), json!(2));
    let d = Dims::of(&c).unwrap();
    // All weights code 0x2 (+1.0): bytes 0x22.
    let w = u8_tensor([2, 2, 1, 1], vec![0x22; 4]);
    let s = u8_tensor([2, 2, 1, 1], vec![127, 129, 126, 128]);
    // Activations are powers of two: quantization is exact.
    let a = bf16_tensor([4, 2, 1, 1], &[1.0, 1.0, 0.5, 0.5, 0.25, 0.5, 1.0, 0.5]);
    let out = reference(&d, &a, &w, &s);
    // d[m][n]: m0n0 = 1+1+4*0.5*2 = 6; m0n1 = 0.5*2 + 2*0.5*2 = 3;
    //          m1n0 = 0.25+0.5+4*1.5 = 6.75; m1n1 = 0.5*0.75 + 2*1.5 = 3.375.
    assert_eq!(out, vec![6.0, 3.0, 6.75, 3.375]);
}

#[test]
fn tensors_follow_the_documented_mapping() {
    let c = case("bucketed", [3072, 300, 256, 1]);
    let t = OP.tensors(&c).unwrap();
    let names: Vec<_> = t.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "w", "w_scale", "d"]);
    assert_eq!(t[0].ne, [3072, 300, 1, 1]);
    assert_eq!(t[0].bytes, 3072 * 300 * 2);
    assert_eq!(t[1].ne, [1536, 256, 1, 1]);
    assert_eq!(t[2].ne, [96, 256, 1, 1]);
    assert_eq!(t[3].ne, [256, 300, 1, 1]);
    assert_eq!(t[3].role, Role::Output);
    // Odd K: packed rows round up; a partial last scale block.
    let t = OP.tensors(&case("bucketed", [3073, 1, 16, 1])).unwrap();
    assert_eq!(t[1].ne[0], 1537);
    assert_eq!(t[2].ne[0], 97);
    assert!(OP.tensors(&case("bucketed", [16, 1, 16, 2])).is_err());
}

#[test]
fn inputs_are_nonzero_and_scales_in_the_exact_range() {
    let c = case("bucketed", [64, 5, 32, 1]);
    let specs = OP.tensors(&c).unwrap();
    let ins = OP.inputs(&c, &specs).unwrap();
    assert_eq!(ins.len(), 3);
    assert!(ins.iter().all(|t| t.any_nonzero()));
    assert!(ins[2].bytes.iter().all(|&e| (124..=129).contains(&e)));
    // Both nibbles vary.
    assert!(ins[1].bytes.iter().any(|&b| b >> 4 != 0));
}

#[test]
fn incident_plan_and_record_numbers() {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let c = case("bucketed-short", [3072, 300, 3072, 1]);
    let p = BUCKETED_SHORT.plan(&c, &h200).unwrap();
    let names: Vec<_> = p.launches.iter().map(|l| l.name()).collect();
    assert_eq!(
        names,
        [
            "fp8_gemm_upcast_w",
            "fp8_gemm_act_scale",
            "fp8_gemm_quantize_a"
        ]
    );
    // bucketed-short quantizes 300 rows; bucketed stages (and zeroes to) 512.
    assert_eq!(p.launches[2].grid[0], (300 * 3072u64).div_ceil(256));
    let pf = BUCKETED
        .plan(&case("bucketed", [3072, 300, 3072, 1]), &h200)
        .unwrap();
    assert_eq!(pf.launches[2].grid[0], (512 * 3072u64).div_ceil(256));
    assert!(p.violations(&h200).is_empty());
    assert!(p.unchecked[0].contains("n=512"));
    assert!(p.unchecked[0].contains("staged rows 300"));
    assert_eq!(OP.reach(&c).as_deref(), Some(REACH_INCIDENT));
}

#[test]
fn chunked_plans_upcast_once_into_the_pool_and_per_staging_in_strict() {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let strict = case("bucketed", [64, 1000, 32, 1]);
    let n_up = |p: &Plan| {
        p.launches
            .iter()
            .filter(|l| l.name() == "fp8_gemm_upcast_w")
            .count()
    };
    assert_eq!(n_up(&BUCKETED.plan(&strict, &h200).unwrap()), 2);
    let mut pool = strict.clone();
    pool.params.insert("scratch".into(), json!("pool"));
    assert_eq!(n_up(&BUCKETED.plan(&pool, &h200).unwrap()), 1);
}

#[test]
fn pool_mode_says_it_can_hide_overruns() {
    let mut c = case("bucketed-short", [3072, 300, 256, 1]);
    assert_eq!(OP.alloc_note(&c), None);
    c.params.insert("scratch".into(), json!("pool"));
    let note = OP.alloc_note(&c).unwrap();
    assert!(note.contains("CAN HIDE OVERRUNS"), "{note}");
    assert!(note.contains("nvtx=false"));
    c.params.insert("nvtx".into(), json!(true));
    assert!(OP.alloc_note(&c).unwrap().contains("NVTX sub-allocator"));
    let canary = case("bucketed-short", [3072, 300, 256, 1]).with_alloc(AllocMode::Canary);
    assert!(OP.alloc_note(&canary).unwrap().contains("read"));
}

#[test]
fn boundaries_cover_every_bucket_edge_the_incident_and_the_chunk() {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let b = OP.boundaries(&h200);
    let m_values: Vec<i64> = b
        .iter()
        .filter(|x| x.axis == Axis::Ne(1))
        .flat_map(|x| x.probe_values())
        .collect();
    for edge in plan_cache::buckets(512) {
        let e = edge as i64;
        assert!(m_values.contains(&e), "bucket {e}");
        assert!(m_values.contains(&(e + 1)), "bucket {e} + 1");
        if e > 1 {
            assert!(m_values.contains(&(e - 1)), "bucket {e} - 1");
        }
    }
    for m in [300, 511, 512, 513, 1000] {
        assert!(m_values.contains(&m), "M = {m}");
    }
    let k_values: Vec<i64> = b
        .iter()
        .filter(|x| x.axis == Axis::Ne(0))
        .flat_map(|x| x.probe_values())
        .collect();
    assert!(k_values.contains(&3071) && k_values.contains(&3072) && k_values.contains(&3073));
    assert!(b.iter().all(|x| !x.reach.0.is_empty()));
}

#[test]
fn every_case_validates_against_the_registry() {
    let reg = crate::registry();
    for imp in ["bucketed-short", "bucketed", "exact-plan"] {
        let c = Case::new("fp8_gemm", imp, DType::Bf16, [3072, 300, 256, 1])
            .with_param("scratch", "pool")
            .with_param("nvtx", true);
        let v = reg.validate(&c).unwrap();
        assert_eq!(v.params["pool_prior_rows"], json!(512));
        assert_eq!(v.params["chunk"], json!(512));
    }
}

#[test]
fn the_act_scale_kernel_writes_the_weight_scale_where_cublaslt_reads_it() {
    // lt.rs hands cuBLASLt `scales + W_SCALE_OFFSET` as the A (weight) scale pointer; the
    // kernel must write exactly that float, inside the scratch kedge allocates.
    let idx = lt::W_SCALE_OFFSET / 4;
    assert!(
        SRC.source.contains(&format!("scales[{idx}] = 1.0f;")),
        "kernel does not write scales[{idx}]"
    );
    // Each scale on its own 256-byte boundary, inside the scratch.
    const { assert!(lt::W_SCALE_OFFSET.is_multiple_of(256)) };
    const { assert!(lt::W_SCALE_OFFSET + 4 <= lt::SCALES_BYTES) };
}

#[test]
fn simt_gemm_reads_the_plans_rows_through_a_kernel_kedge_launches() {
    let mut c = case("bucketed-short", [3072, 300, 3072, 1]);
    c.params.insert("gemm".into(), json!("simt"));
    let p = BUCKETED_SHORT
        .plan(&c, &LimitsProfile::builtin("h200").unwrap())
        .unwrap();
    let simt = p.launches.last().unwrap();
    assert_eq!(simt.name(), "fp8_gemm_simt");
    // One row of threads per plan row: the bucket (512), not the caller's 300.
    assert_eq!(simt.grid, [3072u64.div_ceil(256), 512, 1]);
    assert!(p.unchecked.iter().all(|u| !u.contains("cublasLt")));
    // The default stays the real cuBLASLt matmul.
    let c = case("bucketed-short", [3072, 300, 3072, 1]);
    let p = BUCKETED_SHORT
        .plan(&c, &LimitsProfile::builtin("h200").unwrap())
        .unwrap();
    assert!(p.launches.iter().all(|l| l.name() != "fp8_gemm_simt"));
    assert!(p.unchecked.iter().any(|u| u.contains("cublasLtMatmul")));
}

#[test]
fn the_strict_full_chunks_share_one_staging_and_the_remainder_has_its_own() {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    // M = 3 x 512 + 300: chunks 0..=2 full, chunk 3 the incident's remainder.
    let c = case("bucketed-short", [3072, 3 * 512 + 300, 256, 1]);
    let p = BUCKETED_SHORT.plan(&c, &h200).unwrap();
    let names: Vec<_> = p.launches.iter().map(|l| l.name()).collect();
    assert_eq!(
        names,
        [
            "fp8_gemm_upcast_w",
            "fp8_gemm_act_scale",
            "fp8_gemm_quantize_a",
            "fp8_gemm_upcast_w",
            "fp8_gemm_act_scale",
            "fp8_gemm_quantize_a",
        ]
    );
    let staging = |l: &LaunchPlan, i: usize| match &l.args[i] {
        KernelArg::Scratch { name, bytes } => (name.clone(), *bytes),
        a => panic!("{a:?}"),
    };
    let w = 3072 * 256;
    assert_eq!(
        staging(&p.launches[0], 2),
        ("fp8_gemm.staging[0]".into(), w + 512 * 3072)
    );
    assert_eq!(
        staging(&p.launches[2], 2),
        ("fp8_gemm.staging[0]".into(), w + 512 * 3072)
    );
    assert_eq!(
        staging(&p.launches[5], 2),
        ("fp8_gemm.staging[3]".into(), w + 300 * 3072)
    );
    // The full chunks' activation pointer steps one chunk; the remainder's starts at row 1536.
    assert_eq!(
        p.launches[1].args[0],
        KernelArg::TensorAt {
            index: 0,
            offset: 0,
            step: [512 * 3072 * 2, 0, 0]
        }
    );
    assert_eq!(
        p.launches[4].args[0],
        KernelArg::TensorAt {
            index: 0,
            offset: 1536 * 3072 * 2,
            step: [0, 0, 0]
        }
    );
    assert_eq!(p.buffers.len(), 3);
    assert!(p.buffers[0].name.contains("reused by the 3 full chunks"));
    assert_eq!(p.unchecked.len(), 2);
    assert!(
        p.unchecked[0].starts_with("chunks 0..=2 (each)"),
        "{}",
        p.unchecked[0]
    );
    assert!(p.unchecked[0].contains("run once per chunk, 3 times"));
    assert!(p.unchecked[1].starts_with("chunk 3: "));
    assert!(p.unchecked[1].contains("staged rows 300"));
}

/// M at and past 2^32 rows: the plan is a handful of launches and buffers, whatever M is.
#[rstest]
#[case::m_2_32_plus_1((1 << 32) + 1)]
#[case::m_2_40(1 << 40)]
#[case::m_2_40_plus_300((1 << 40) + 300)]
fn a_plan_does_not_grow_with_m(#[case] m: i64) {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    for imp in OP.impls() {
        for (scratch, gemm) in [("strict", "cublaslt"), ("pool", "simt"), ("strict", "simt")] {
            let c = case(imp.name(), [3072, m, 3072, 1])
                .with_param("scratch", scratch)
                .with_param("gemm", gemm);
            let p = imp.plan(&c, &h200).unwrap();
            assert!(
                p.launches.len() <= 8,
                "{}: {}",
                imp.name(),
                p.launches.len()
            );
            assert!(p.buffers.len() <= 3, "{}", imp.name());
            assert!(p.unchecked.len() <= 2, "{}", imp.name());
            assert!(p.violations(&h200).is_empty(), "{:?}", p.violations(&h200));
            // The facts' numbers are a formula too.
            let ls = layouts(Sizing::BucketedShort, m as u64, 3072, 3072, 512).unwrap();
            assert_eq!(ls.count(), (m as u64).div_ceil(512));
        }
    }
    // The reach note reads the last chunk from the formula too: a remainder of 1 row or a
    // full chunk is its own bucket; 300 rows are not.
    let reach = OP.reach(&case("bucketed", [3072, m, 3072, 1]));
    assert_eq!(reach.is_some(), m % 512 == 300, "{reach:?}");
}

#[test]
fn every_plan_fills_its_kernels_parameters() {
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let mut checked = 0;
    for imp in OP.impls() {
        for gemm in ["cublaslt", "simt"] {
            for scratch in ["strict", "pool"] {
                for (ne, params) in OP.smoke() {
                    let mut c = case(imp.name(), ne);
                    c.params.extend(params);
                    c.params.insert("gemm".into(), json!(gemm));
                    c.params.insert("scratch".into(), json!(scratch));
                    let p = imp.plan(&c, &h200).unwrap();
                    for l in &p.launches {
                        assert_eq!(check_launch(l), Ok(()), "{}", imp.name());
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 100, "{checked}");
}

#[test]
fn the_run_names_the_staging_gap_the_engine_leaves_in_guard_mode() {
    let g = 2 << 20;
    // The incident's strict staging: 9,437,184 + 921,600 bytes, a multiple of 256: the end is
    // flush with the guard page.
    let staging = 3072 * 3072 + 300 * 3072;
    assert_eq!(guard_gap(AllocMode::Guard, staging, g), Some(0));
    assert_eq!(guard_gap(AllocMode::Guard, 1000, g), Some(24));
    // A granule exactly: the allocation starts at the mapping, no gap.
    assert_eq!(guard_gap(AllocMode::Guard, g, g), None);
    assert_eq!(guard_gap(AllocMode::Guard, g - 100, g), None);
    for mode in [AllocMode::Exact, AllocMode::GuardFront, AllocMode::Canary] {
        assert_eq!(guard_gap(mode, 1000, g), None);
    }
}

#[test]
fn typed_params_default_once() {
    let p = Fp8GemmParams::default();
    assert_eq!(
        (
            p.scratch,
            p.pool_prior_rows,
            p.chunk,
            p.nvtx,
            p.gemm,
            p.algo,
            p.weight_block
        ),
        ("strict", 512, 512, false, "cublaslt", 0, 32)
    );
    let names: Vec<_> = Fp8GemmParams::SPECS.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "scratch",
            "pool_prior_rows",
            "chunk",
            "nvtx",
            "gemm",
            "algo",
            "weight_block"
        ]
    );
    assert_eq!(OP.upstream_name(), None);
    assert_eq!(OP.probe_base(), None);
}
