use super::*;
use crate::signature::check_launch;
use approx::assert_abs_diff_eq;
use kedge_core::model::rng::Rng;
use rstest::rstest;

fn case(imp: &str, ne: Ne) -> Case {
    Case::new("sdpa_prefill", imp, DType::F32, ne)
        .with_param("max_buffer_bytes", INCIDENT_MAX_BUFFER_BYTES)
        .with_param("q_chunk", INCIDENT_Q_CHUNK)
}

fn modelled(imp: &str, ne: Ne) -> Case {
    case(imp, ne).with_param("max_buffer_bytes", MODELLED_MAX_BUFFER_BYTES)
}

fn h200() -> LimitsProfile {
    LimitsProfile::builtin("h200").unwrap()
}

fn t(ne: Ne, vals: &[f32]) -> HostTensor {
    HostTensor::from_f32(DType::F32, ne, vals)
}

#[test]
fn reference_by_hand_l2_d1() {
    // D = 1, so scale = 1. Row 0 sees only key 0: out0 = v0. Row 1 sees keys 0 and 1 with
    // scores q1·k0 = 0.5·1 and q1·k1 = 0.5·(-2).
    let ne = [1, 2, 1, 1];
    let q = t(ne, &[3.0, 0.5]);
    let k = t(ne, &[1.0, -2.0]);
    let v = t(ne, &[0.25, 4.0]);
    let out = OP.reference(&case("fused", ne), &[q, k, v]).unwrap();
    let (e0, e1) = (0.5f64.exp(), (-1.0f64).exp());
    let want1 = (e0 * 0.25 + e1 * 4.0) / (e0 + e1);
    assert_eq!(out[0].len(), 2);
    assert_abs_diff_eq!(out[0][0], 0.25, epsilon = 1e-15);
    assert_abs_diff_eq!(out[0][1], want1, epsilon = 1e-14);
}

#[test]
fn reference_is_causal_and_a_convex_combination() {
    let (d, l, h) = (4usize, 6usize, 2usize);
    let n = d * l * h;
    let vals = |seed: u64| -> Vec<f64> {
        let mut r = Rng::stream(seed, 0);
        (0..n).map(|_| r.uniform(-1.0, 1.0) as f64).collect()
    };
    let (q, k, mut v) = (vals(1), vals(2), vals(3));
    let out = causal_attention(&q, &k, &v, d, l, h, 1);
    for head in 0..h {
        // Row 0 attends to key 0 alone.
        let b = head * l * d;
        assert_eq!(&out[b..b + d], &v[b..b + d]);
        // Every output lies within the range of the values it averages (weights >= 0, sum 1).
        for i in 0..l {
            for dd in 0..d {
                let seen = (0..=i).map(|j| v[b + j * d + dd]);
                let lo = seen.clone().fold(f64::INFINITY, f64::min);
                let hi = seen.fold(f64::NEG_INFINITY, f64::max);
                let o = out[b + i * d + dd];
                assert!(
                    o >= lo - 1e-12 && o <= hi + 1e-12,
                    "{o} not in [{lo}, {hi}]"
                );
            }
        }
    }
    // A constant v comes back unchanged: the weights sum to one on every row.
    let ones = vec![0.75; n];
    for o in causal_attention(&q, &k, &ones, d, l, h, 1) {
        assert_abs_diff_eq!(o, 0.75, epsilon = 1e-14);
    }
    // Changing the last key and value of head 0 changes only its last row.
    let mut k2 = k.clone();
    let last = (l - 1) * d;
    k2[last] += 3.0;
    v[last] -= 2.0;
    let out2 = causal_attention(&q, &k2, &v, d, l, h, 1);
    assert_eq!(&out2[..last], &out[..last]);
    assert_ne!(&out2[last..last + d], &out[last..last + d]);
    assert_eq!(&out2[l * d..], &out[l * d..]);
}

#[test]
fn unfused_scratch_is_16_l_squared_4_bytes_the_incident_table() {
    let s = |l: i64| unfused_scratch_bytes(&case("unfused-fallback", [256, l, 16, 1])).unwrap();
    // The incident's table: 17.18 GB, 36.86 GB, 41.74 GB, 41.94 GB, 68.72 GB.
    assert_eq!(s(16_384), 17_179_869_184);
    assert_eq!(s(24_000), 36_864_000_000);
    assert_eq!(s(25_540), 41_746_662_400);
    assert_eq!(s(25_600), 41_943_040_000);
    assert_eq!(s(32_768), 68_719_476_736);
    for l in [1, 7, 513, 25_541] {
        assert_eq!(s(l), 16 * (l as u64) * (l as u64) * 4);
    }
}

#[test]
fn the_default_limit_puts_the_boundary_at_25541() {
    let limit = INCIDENT_MAX_BUFFER_BYTES as u64;
    assert_eq!(last_fitting_len(limit, 16), 25_541);
    let fits = |l: i64| unfused_fits(&case("unfused-fallback", [256, l, 16, 1]));
    assert!(fits(25_540));
    assert!(fits(25_541));
    assert!(!fits(25_542));
    assert!(!fits(25_600));
    // And the modelled limit: 512 fits exactly (16 · 512² · 4 = 16 MiB), 513 does not.
    assert_eq!(last_fitting_len(MODELLED_MAX_BUFFER_BYTES as u64, 16), 512);
    assert_eq!(
        score_bytes(16, 512, 512),
        Some(MODELLED_MAX_BUFFER_BYTES as u64)
    );
    let m = |l: i64| unfused_fits(&modelled("unfused-fallback", [256, l, 16, 1]));
    assert!(m(511) && m(512) && !m(513));
}

#[test]
fn the_limit_boundary_probes_both_sides_of_512() {
    let b = OP.boundaries(&h200());
    let lim = b
        .iter()
        .find(|b| b.label.contains("score buffer"))
        .expect("the score-buffer boundary");
    assert_eq!(lim.axis, Axis::Ne(1));
    assert_eq!(lim.probe_values(), vec![511, 512, 513]);
    assert_eq!(lim.base, [256, 0, 16, 1]);
    assert_eq!(
        lim.params.get("max_buffer_bytes"),
        Some(&serde_json::Value::from(16i64 << 20))
    );
    assert!(lim.reach.0.contains("25,541") && lim.reach.0.contains("L* = 512"));
    let hd = b
        .iter()
        .find(|b| b.label.contains("head_dim"))
        .expect("the head_dim boundary");
    assert_eq!(hd.probe_values(), vec![64, 80, 96, 128, 256]);
}

#[test]
fn the_silent_fallback_plans_nothing_past_the_limit() {
    let p = h200();
    let at = UNFUSED_FALLBACK
        .plan(&modelled("unfused-fallback", [256, 512, 16, 1]), &p)
        .unwrap();
    let names: Vec<_> = at.launches.iter().map(|l| l.name()).collect();
    assert_eq!(names, ["sdpa_scores", "sdpa_softmax_pv"]);
    assert_eq!(at.launches[0].grid, [512, 16, 1]);
    assert!(at.violations(&p).is_empty());
    assert_eq!(at.standalone(), Ok(()));
    let past = UNFUSED_FALLBACK
        .plan(&modelled("unfused-fallback", [256, 513, 16, 1]), &p)
        .unwrap();
    assert!(past.launches.is_empty(), "{:?}", past.launches);
    // The checked variant states what it would launch and refuses at run time: no standalone
    // file does what it does.
    let checked = UNFUSED_CHECKED
        .plan(&modelled("unfused-checked", [256, 513, 16, 1]), &p)
        .unwrap();
    assert_eq!(checked.launches.len(), 2);
    assert!(checked.standalone().is_err());
    assert!(
        checked.unchecked[0].contains("resource-limit"),
        "{:?}",
        checked.unchecked
    );
    // The scores buffer passed to both launches is the one [16, 512, 512] buffer.
    let scratch: Vec<_> = at
        .launches
        .iter()
        .flat_map(|l| &l.args)
        .filter_map(|a| match a {
            KernelArg::Scratch { name, bytes } => Some((name.clone(), *bytes)),
            _ => None,
        })
        .collect();
    assert_eq!(
        scratch,
        vec![
            ("scores".to_string(), 16u64 << 20),
            ("scores".to_string(), 16u64 << 20)
        ]
    );
}

#[test]
fn chunked_buffer_is_linear_in_l() {
    let b = |l: i64| chunked_scratch_bytes(&case("chunked", [256, l, 16, 1])).unwrap();
    // [16, 2048, L] f32 once L passes one block.
    assert_eq!(b(4096), 16 * 2048 * 4096 * 4);
    assert_eq!(b(8192), 2 * b(4096));
    assert_eq!(b(262_144), 2 * b(131_072));
    // The model's full context fits: 34.36 GB < 41.75 GB.
    assert_eq!(b(262_144), 34_359_738_368);
    // Below one block it is the unfused buffer.
    assert_eq!(b(1000), 16 * 1000 * 1000 * 4);
    // The fix's own ceiling: the 2048-row block fits up to L = 318,527, then shrinks.
    let rows = |l: i64| chunk_rows(&case("chunked", [256, l, 16, 1])).unwrap();
    assert_eq!(rows(318_527), 2048);
    assert_eq!(rows(318_528), 2047);
    assert!(b(318_528) <= INCIDENT_MAX_BUFFER_BYTES as u64);
}

/// The block pointer of a launch argument: (tensor, bytes per block).
fn block_pointer(a: &KernelArg) -> Option<(usize, i64)> {
    match a {
        KernelArg::TensorAt {
            index,
            offset: 0,
            step: [s, 0, 0],
        } => Some((*index, *s)),
        _ => None,
    }
}

#[test]
fn chunked_offsets_the_mask_per_block_and_covers_every_row() {
    let p = h200();
    // The modelled limit at L = 513: the 2048-row block does not fit, 511 rows do.
    let c = modelled("chunked", [256, 513, 16, 1]);
    let blocks = chunks(&c).unwrap();
    assert_eq!(
        (blocks.block(0), blocks.block(1)),
        (Some((0, 511)), Some((511, 2)))
    );
    assert_eq!(blocks.block(2), None);
    assert!(chunked_scratch_bytes(&c).unwrap() <= MODELLED_MAX_BUFFER_BYTES as u64);
    let plan = CHUNKED.plan(&c, &p).unwrap();
    // Two launches, repeated per block; every block has the 511-row grid (the last block's
    // rows past L return at once).
    assert_eq!(plan.launches.len(), 2);
    assert_eq!(plan.repeat, [2, 1, 1]);
    assert_eq!(plan.launch_count(), 4);
    assert_eq!(plan.launches[1].grid, [511, 16, 1]);
    assert_eq!(plan.standalone(), Ok(()));
    // row0 reaches the kernels as q's and out's row pointer (argument 1 of the scores kernel,
    // 3 of softmax-PV), one block of 511 rows x 256 f32 further per repetition.
    let step = 511 * 256 * 4;
    assert_eq!(block_pointer(&plan.launches[0].args[1]), Some((Q, step)));
    assert_eq!(block_pointer(&plan.launches[1].args[3]), Some((OUT, step)));
    assert_eq!(plan.launches[0].args[6], KernelArg::I64(511));
    // q_chunk 16 over 100 rows: six full blocks and one of 4.
    let c = case("chunked", [128, 100, 2, 1]).with_param("q_chunk", 16);
    let blocks = chunks(&c).unwrap();
    assert_eq!(blocks.count, 7);
    assert_eq!(blocks.block(6), Some((96, 4)));
    assert_eq!(blocks.last_rows(), 4);
    assert_eq!(
        (0..blocks.count)
            .filter_map(|i| blocks.block(i))
            .map(|b| b.1)
            .sum::<i64>(),
        100
    );
    // Unfused is chunked with one block of L rows: the same kernels, the same launches.
    let one = case("chunked", [128, 100, 2, 1]);
    let un = case("unfused-fallback", [128, 100, 2, 1]);
    let (a, b) = (
        CHUNKED.plan(&one, &p).unwrap(),
        UNFUSED_FALLBACK.plan(&un, &p).unwrap(),
    );
    assert_eq!((a.launches, a.repeat), (b.launches, b.repeat));
}

#[rstest]
#[case::default_q_chunk(1 << 40, INCIDENT_Q_CHUNK, None)]
#[case::largest_q_chunk(1 << 40, i32::MAX as i64, Some(513))]
#[case::most_blocks(1 << 26, 1024, Some(MAX_CHUNKS))]
#[case::one_past(1 << 26, 1023, None)]
fn chunked_plans_any_length_in_two_launches(
    #[case] l: i64,
    #[case] q_chunk: i64,
    #[case] blocks: Option<u64>,
) {
    // No modelled limit: the device decides, as on a GPU.
    let c = Case::new("sdpa_prefill", "chunked", DType::F32, [256, l, 16, 1])
        .with_param("q_chunk", q_chunk);
    // The formula answers at once, whatever L is.
    let qb = chunks(&c).unwrap();
    assert_eq!(qb.count, (l as u64).div_ceil(qb.rows as u64));
    match (CHUNKED.plan(&c, &h200()), blocks) {
        (Ok(plan), Some(n)) => {
            assert_eq!(plan.launches.len(), 2);
            assert_eq!(plan.buffers.len(), 1);
            assert_eq!(plan.repeat, [n, 1, 1]);
            assert!(plan.unchecked.is_empty());
        }
        (Err(why), None) => assert!(why.0.contains("raise q_chunk"), "{why}"),
        (got, want) => panic!("{got:?}, expected {want:?} blocks"),
    }
}

#[test]
fn every_plan_fills_its_kernels_parameters() {
    let p = h200();
    let mut checked = 0;
    for imp in OP.impls() {
        for dtype in [DType::F32, DType::Bf16] {
            for (ne, params) in OP.smoke() {
                let mut c = Case::new("sdpa_prefill", imp.name(), dtype, ne);
                c.params = params;
                let Ok(plan) = imp.plan(&c, &p) else {
                    continue;
                };
                for l in &plan.launches {
                    assert_eq!(check_launch(l), Ok(()), "{} {dtype}", imp.name());
                    checked += 1;
                }
            }
        }
    }
    // fused, unfused (twice), chunked and mlx-dispatch all planned kernels.
    assert!(checked > 40, "{checked}");
}

#[test]
fn fused_supports_64_80_128_only() {
    let p = h200();
    for d in FUSED_HEAD_DIMS {
        let plan = FUSED.plan(&case("fused", [d, 33, 4, 1]), &p).unwrap();
        assert_eq!(plan.launches[0].grid, [33, 4, 1]);
        assert!(plan.violations(&p).is_empty());
        assert_eq!(plan.standalone(), Ok(()));
    }
    assert_eq!(
        FUSED.plan(&case("fused", [256, 513, 16, 1]), &p),
        Err(Refusal(
            "fused causal SDPA supports head_dim 64, 80, 128; got 256".to_string()
        ))
    );
    assert!(FUSED.plan(&case("fused", [96, 5, 2, 1]), &p).is_err());
    assert!(FUSED.plan(&case("fused", [32, 5, 2, 1]), &p).is_err());
}

#[test]
fn tensors_are_q_k_v_out_of_one_shape() {
    let c = case("fused", [64, 7, 2, 1]);
    let specs = OP.tensors(&c).unwrap();
    let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["q", "k", "v", "out"]);
    assert!(specs.iter().all(|s| s.ne == [64, 7, 2, 1]));
    assert_eq!(specs[3].role, Role::Output);
    assert!(OP.tensors(&case("fused", [64, 7, 2, 2])).is_err());
}

/// The default f32 tolerance tells a right answer from a mask off by one key either way.
#[test]
fn the_tolerance_catches_a_mask_off_by_one() {
    use kedge_core::judge::compare::compare;
    use kedge_core::{Tolerance, Verdict};
    let c = case("chunked", [64, 128, 4, 1]);
    let specs = OP.tensors(&c).unwrap();
    let inputs = OP.inputs(&c, &specs).unwrap();
    let want = OP.reference(&c, &inputs).unwrap().remove(0);
    let (d, l, h) = (64usize, 128usize, 4usize);
    let [q, k, v] = [0, 1, 2].map(|i| inputs[i].to_f64());
    // Keys [lo(i), hi(i)] instead of [0, i].
    let attend = |lo: &dyn Fn(usize) -> usize, hi: &dyn Fn(usize) -> usize| -> Vec<f64> {
        let mut out = vec![0.0; d * l * h];
        for head in 0..h {
            let b = head * l * d;
            for i in 0..l {
                let s: Vec<f64> = (lo(i)..=hi(i))
                    .map(|j| {
                        (0..d)
                            .map(|x| q[b + i * d + x] * k[b + j * d + x])
                            .sum::<f64>()
                            / (d as f64).sqrt()
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let sum: f64 = p.iter().sum();
                for x in 0..d {
                    out[b + i * d + x] = (lo(i)..=hi(i))
                        .zip(&p)
                        .map(|(j, w)| w * v[b + j * d + x])
                        .sum::<f64>()
                        / sum;
                }
            }
        }
        out
    };
    let as_f32 = |x: &[f64]| {
        HostTensor::from_f32(
            DType::F32,
            c.ne,
            &x.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        )
    };
    let tol = OP.tolerance(&c);
    assert_eq!(tol, Tolerance::F32);
    let same = attend(&|_| 0, &|i| i);
    assert_eq!(
        compare("out", &as_f32(&same), &want, tol).verdict,
        Verdict::Pass
    );
    // Row i misses key 0 (rows past 0), or also sees key i + 1 (rows before the last).
    let skips_first = attend(&|i| usize::from(i > 0), &|i| i);
    let peeks = attend(&|_| 0, &|i| (i + 1).min(l - 1));
    for wrong in [skips_first, peeks] {
        let r = compare("out", &as_f32(&wrong), &want, tol);
        assert_eq!(r.verdict, Verdict::WrongValues, "{}", r.detail);
    }
}

#[test]
fn the_m4_max_profile_puts_the_plan_transition_at_25541() {
    use kedge_core::engine::check_on_cpu;
    use kedge_core::Verdict;
    let reg = crate::registry();
    let m4 = LimitsProfile::builtin("m4-max").unwrap();
    // The boundary the suite generates for this profile probes both sides of L*.
    let b = OP.boundaries(&m4);
    let lim = b
        .iter()
        .find(|b| b.label.contains("profile's largest buffer"))
        .expect("the profile-limit boundary");
    assert_eq!(lim.probe_values(), vec![25_541, 25_542]);
    let plan = |l: i64| {
        // No modelled limit: the profile's largest buffer decides.
        let c = Case::new(
            "sdpa_prefill",
            "unfused-fallback",
            DType::F32,
            [256, l, 16, 1],
        );
        check_on_cpu(&reg, &c, &m4, false)
    };
    let fits = plan(25_541);
    assert_eq!(fits.verdict, Verdict::Skipped, "{}", fits.detail);
    assert!(fits.detail.contains("41.75 GB"), "{}", fits.detail);
    for l in [25_542, 25_600] {
        let r = plan(l);
        assert_eq!(
            (r.verdict, r.detector),
            (Verdict::ResourceLimit, Detector::AllocContract),
            "{}",
            r.detail
        );
        assert_eq!(r.buffer_violations.len(), 1);
    }
    let r = plan(25_600);
    assert!(
        r.detail.contains("unfused-fallback needs a 41.94 GB buffer (41,943,040,000 bytes: scores [16 heads, L = 25600, L = 25600] f32); profile m4-max allows 41.75 GB (41,750,000,000 bytes"),
        "{}",
        r.detail
    );
    // The fix plans a [16, 2048, L] block: it fits at the model's whole context.
    let c = Case::new("sdpa_prefill", "chunked", DType::F32, [256, 262_144, 16, 1]);
    assert_eq!(check_on_cpu(&reg, &c, &m4, false).verdict, Verdict::Skipped);
    // And the H200 (150 GB, the device's memory) holds the incident's buffer.
    let h = LimitsProfile::builtin("h200").unwrap();
    let c = Case::new(
        "sdpa_prefill",
        "unfused-fallback",
        DType::F32,
        [256, 25_600, 16, 1],
    );
    assert_eq!(check_on_cpu(&reg, &c, &h, false).verdict, Verdict::Skipped);
}

#[test]
fn mlx_dispatch_takes_the_fallback_for_head_dim_256_and_says_so() {
    let p = h200();
    for d in FUSED_HEAD_DIMS {
        let c = case("mlx-dispatch", [d, 33, 4, 1]);
        let plan = MLX_DISPATCH.plan(&c, &p).unwrap();
        assert_eq!(plan.launches[0].name(), "sdpa_fused_causal");
        assert!(plan.buffers.is_empty());
        assert_eq!(OP.alloc_note(&c), None);
    }
    let c = case("mlx-dispatch", [256, 33, 4, 1]);
    let plan = MLX_DISPATCH.plan(&c, &p).unwrap();
    let names: Vec<_> = plan.launches.iter().map(|l| l.name()).collect();
    assert_eq!(names, ["sdpa_scores", "sdpa_softmax_pv"]);
    assert_eq!(plan.buffers.len(), 1);
    assert_eq!(plan.buffers[0].bytes, 4 * 33 * 33 * 4);
    let note = OP.alloc_note(&c).unwrap();
    assert!(
        note.contains("head_dim 256") && note.contains("unfused fallback"),
        "{note}"
    );
}

#[test]
fn gqa_reads_each_query_heads_own_kv_group() {
    // Reference: group g over n_kv heads equals plain attention over K/V repeated per head.
    let (d, l, h, kv) = (8usize, 9usize, 8usize, 2usize);
    let g = h / kv;
    let vals = |seed: u64, n: usize| -> Vec<f64> {
        let mut r = Rng::stream(seed, 0);
        (0..n).map(|_| r.uniform(-1.0, 1.0) as f64).collect()
    };
    let q = vals(1, d * l * h);
    let (k, v) = (vals(2, d * l * kv), vals(3, d * l * kv));
    let expand = |t: &[f64]| -> Vec<f64> {
        (0..h)
            .flat_map(|head| t[(head / g) * l * d..][..l * d].to_vec())
            .collect()
    };
    assert_eq!(
        causal_attention(&q, &k, &v, d, l, h, g),
        causal_attention(&q, &expand(&k), &expand(&v), d, l, h, 1)
    );
    // The case: k and v are [D, L, n_kv_head]; every kernel gets the group.
    let c = case("chunked", [64, 33, 8, 1]).with_param("n_kv_head", 2);
    let specs = OP.tensors(&c).unwrap();
    assert_eq!(specs[1].ne, [64, 33, 2, 1]);
    assert_eq!(specs[2].ne, [64, 33, 2, 1]);
    assert_eq!(specs[3].ne, [64, 33, 8, 1]);
    let plan = CHUNKED.plan(&c, &h200()).unwrap();
    for l in &plan.launches {
        assert_eq!(l.args.last(), Some(&KernelArg::I32(4)));
    }
    // n_kv_head must divide n_head.
    assert!(OP
        .tensors(&case("chunked", [64, 33, 8, 1]).with_param("n_kv_head", 3))
        .is_err());
}

#[test]
fn bf16_cases_launch_the_bf16_kernels() {
    let p = h200();
    let mut c = case("chunked", [128, 40, 2, 1]);
    c.dtype = DType::Bf16;
    let names: Vec<_> = CHUNKED
        .plan(&c, &p)
        .unwrap()
        .launches
        .iter()
        .map(|l| l.name())
        .collect();
    assert_eq!(names, ["sdpa_scores_bf16", "sdpa_softmax_pv_bf16"]);
    let mut f = case("fused", [128, 40, 2, 1]);
    f.dtype = DType::Bf16;
    assert_eq!(
        FUSED.plan(&f, &p).unwrap().launches[0].name(),
        "sdpa_fused_causal_bf16"
    );
    assert!(SRC
        .source
        .contains("extern \"C\" __global__ void sdpa_scores_bf16("));
}

/// The fix's claim on the CPU path of the reference: computing the query axis in blocks with
/// the mask offset per block gives the same f64 bits as computing it whole.
#[test]
fn the_reference_in_query_blocks_is_bit_identical_to_the_whole() {
    let (d, l, h) = (16usize, 37usize, 3usize);
    let vals = |seed: u64| -> Vec<f64> {
        let mut r = Rng::stream(seed, 0);
        (0..d * l * h)
            .map(|_| r.uniform(-1.0, 1.0) as f64)
            .collect()
    };
    let (q, k, v) = (vals(4), vals(5), vals(6));
    let whole = causal_attention(&q, &k, &v, d, l, h, 1);
    for block in [1usize, 5, 16, 36, 37] {
        let mut got = vec![f64::NAN; d * l * h];
        for row0 in (0..l).step_by(block) {
            let rows = block.min(l - row0);
            let part = causal_attention_rows(&q, &k, &v, d, l, h, 1, row0, rows);
            for head in 0..h {
                for r in 0..rows {
                    let dst = (head * l + row0 + r) * d;
                    let src = (head * rows + r) * d;
                    got[dst..dst + d].copy_from_slice(&part[src..src + d]);
                }
            }
        }
        let same = whole
            .iter()
            .zip(&got)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "block {block}");
    }
}
