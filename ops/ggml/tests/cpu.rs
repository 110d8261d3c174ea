//! One-op graphs on the CPU backend of a real ggml build (linked layout), checked against naive
//! computations here. The build comes from KEDGE_GGML_DIR (scripts/build-ggml.sh OUTDIR).

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use common::{assert_close, build_dir, values, POISON};
use kedge_ggml::{
    AllocationInfo, Backend, BackendError, ComputeError, DeviceKind, Ggml, Graph, GraphError,
    GraphOptions, HostMemory, Located, Placement, PlacementKind, Tensor, TriType, Type, UnaryOp,
};

fn ggml(test: &str) -> Ggml {
    let dir = build_dir("KEDGE_GGML_DIR", test);
    Ggml::load(&dir).unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
}

fn cpu(g: &Ggml) -> Backend {
    let b = g.backend("CPU").expect("a CPU backend");
    assert!(b.set_n_threads(2));
    b
}

/// Builds, checks support, allocates (one buffer per tensor), writes inputs, poisons the
/// outputs, computes, and returns the outputs' values.
fn run(
    g: &mut Graph,
    be: &Backend,
    inputs: &[(Tensor, Vec<u8>)],
    outputs: &[Tensor],
) -> Vec<Vec<f32>> {
    g.build(outputs).unwrap();
    assert_eq!(
        g.unsupported(be),
        vec![],
        "the CPU backend supports every node"
    );
    g.alloc(be).unwrap();
    for (t, data) in inputs {
        g.set_data(*t, data).unwrap();
    }
    for &o in outputs {
        g.fill(o, &POISON.to_le_bytes()).unwrap();
        assert!(g
            .get_data(o)
            .unwrap()
            .chunks(4)
            .all(|c| c == POISON.to_le_bytes()));
    }
    g.compute(be).unwrap();
    outputs.iter().map(|&o| g.get_f32(o).unwrap()).collect()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The CPU backend's own row writers are reachable in the linked layout: a type whose CPU
/// writer is its reference quantizer writes what `ggml_quantize_chunk` writes, every type with
/// a writer writes its row size, and the i-quants that need an importance matrix have none.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn cpu_row_writers_write_whole_rows() {
    let ggml = ggml("cpu_row_writers_write_whole_rows");
    let xs = values(256 * 37, 5);
    for ty in [Type::Q4_0, Type::Q5_1, Type::Q8_0, Type::Q4K, Type::Iq4Nl] {
        assert!(ggml.has_cpu_row_writer(ty), "{ty:?}");
        let rows = ggml
            .cpu_write_rows(ty, &xs, 256)
            .unwrap()
            .expect("a writer");
        assert_eq!(rows.len(), 37 * ggml.row_size(ty, 256).unwrap(), "{ty:?}");
        assert!(rows.iter().any(|b| *b != 0), "{ty:?}");
    }
    let by_chunk = ggml.quantize(Type::Q4_0, &xs, 256, None).unwrap();
    assert_eq!(
        ggml.cpu_write_rows(Type::Q4_0, &xs, 256).unwrap(),
        Some(by_chunk)
    );
    assert!(!ggml.has_cpu_row_writer(Type::Iq2Xxs));
    assert_eq!(ggml.cpu_write_rows(Type::Iq2Xxs, &xs, 256).unwrap(), None);
    assert!(
        ggml.cpu_write_rows(Type::Q4_0, &xs[..100], 100).is_err(),
        "not whole blocks"
    );
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn version_commit_devices_and_types() {
    let ggml = ggml("version_commit_devices_and_types");
    let version = ggml.version();
    let commit = ggml.commit();
    eprintln!(
        "ggml {version} ({commit}) from {}, {:?}, devices {:?}",
        ggml.dir().display(),
        ggml.layout(),
        ggml.devices()
    );
    assert!(version.split('.').count() == 3, "version {version:?}");
    assert!(!commit.is_empty());
    let devices = ggml.devices();
    assert!(
        devices
            .iter()
            .any(|d| d.name == "CPU" && d.kind == DeviceKind::Cpu && !d.description.is_empty()),
        "{devices:?}"
    );
    if commit.starts_with("d99724f") {
        assert_eq!(
            ggml.missing_ops(),
            Vec::<&str>::new(),
            "the pinned snapshot has every op this crate wraps"
        );
    }
    // The enum values this crate passes are the build's, for every type the build has (the
    // pinned snapshot has all of them, the newest included).
    for &ty in Type::ALL.iter().filter(|&&t| ggml.has_type(t)) {
        assert_eq!(ggml.type_name(ty), ty.name(), "{ty:?}");
        assert_eq!(ggml.block_size(ty), ty.block_size(), "{ty:?}");
        assert_eq!(ggml.type_size(ty), ty.type_size(), "{ty:?}");
    }
    if commit.starts_with("d99724f") {
        assert!(Type::ALL.iter().all(|&t| ggml.has_type(t)));
    }
    assert_eq!(ggml.type_size(Type::Q8_0), 34);
    assert_eq!(ggml.row_size(Type::Q4_0, 64), Some(36));
    assert_eq!(ggml.row_size(Type::Q4_0, 33), None);
    // Loading the same directory again is the same build.
    assert_eq!(Ggml::load(ggml.dir()).unwrap().dir(), ggml.dir());
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn unknown_backend_names_the_ones_there_are() {
    let ggml = ggml("unknown_backend_names_the_ones_there_are");
    let e = ggml.backend("CUDA7").unwrap_err();
    assert!(
        matches!(&e, BackendError::Unknown { available, .. } if available.iter().any(|n| n == "CPU"))
    );
    let msg = e.to_string();
    assert!(msg.contains("\"CUDA7\"") && msg.contains("CPU"), "{msg}");
    assert!(
        ggml.backend("cpu").is_ok(),
        "ggml matches device names without regard to case"
    );
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn rms_norm_matches_naive() {
    let ggml = ggml("rms_norm_matches_naive");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let ne = [64i64, 3, 2, 1];
    let x = g.new_tensor(Type::F32, &ne).unwrap();
    g.set_name(x, "x").unwrap();
    let eps = 1e-6f32;
    let y = g.rms_norm(x, eps).unwrap();
    assert_eq!(g.shape(y).unwrap(), ne);
    assert_eq!(g.op(y).unwrap(), "RMS_NORM");
    let xs = values(64 * 6, 1);
    let out = run(&mut g, &be, &[(x, f32_bytes(&xs))], &[y]);
    let want: Vec<f32> = xs
        .chunks(64)
        .flat_map(|row| {
            let ms = row.iter().map(|v| (v * v) as f64).sum::<f64>() / 64.0;
            let s = 1.0 / (ms + eps as f64).sqrt();
            row.iter().map(move |v| (*v as f64 * s) as f32)
        })
        .collect();
    assert_close(&out[0], &want, 1e-5, "rms_norm");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn soft_max_ext_with_mask_matches_naive() {
    let ggml = ggml("soft_max_ext_with_mask_matches_naive");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    // a [ncols, rows, heads, 1]; the mask has more rows than a (ne11 >= ne01) and one head,
    // broadcast over the heads, as attention uses it.
    let (nc, nr, nh, mr) = (32usize, 4usize, 2usize, 6usize);
    let a = g
        .new_tensor(Type::F32, &[nc as i64, nr as i64, nh as i64])
        .unwrap();
    let m = g.new_tensor(Type::F32, &[nc as i64, mr as i64]).unwrap();
    let scale = 0.5f32;
    let y = g.soft_max_ext(a, Some(m), scale, 0.0).unwrap();
    let av = values(nc * nr * nh, 2);
    // A causal-style mask: -inf past column 20 + row.
    let mv: Vec<f32> = (0..nc * mr)
        .map(|i| {
            if i % nc > 20 + i / nc {
                f32::NEG_INFINITY
            } else {
                0.25 * (i % 3) as f32
            }
        })
        .collect();
    let out = run(
        &mut g,
        &be,
        &[(a, f32_bytes(&av)), (m, f32_bytes(&mv))],
        &[y],
    );
    let mut want = Vec::new();
    for h in 0..nh {
        for r in 0..nr {
            let row: Vec<f64> = (0..nc)
                .map(|c| av[(h * nr + r) * nc + c] as f64 * scale as f64 + mv[r * nc + c] as f64)
                .collect();
            let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
            want.extend(row.iter().map(|v| ((v - mx).exp() / sum) as f32));
        }
    }
    assert_close(&out[0], &want, 1e-5, "soft_max_ext");
    assert!(out[0].contains(&0.0), "the masked columns are 0");
}

/// A fill of a range longer than one of `fill_range`'s chunks, starting off a pattern's
/// width, with a pattern whose width divides no chunk: the pattern runs on unbroken from the
/// range's start, and the bytes around the range are untouched.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_long_fill_repeats_its_pattern_unbroken_across_chunks() {
    let ggml = ggml("a_long_fill_repeats_its_pattern_unbroken_across_chunks");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let n = (17 << 20) + 12;
    let x = g.new_tensor(Type::F32, &[n as i64 / 4]).unwrap();
    let y = g.cumsum(x).unwrap();
    g.build(&[y]).unwrap();
    g.alloc(&be).unwrap();
    g.set_data(x, &vec![0xAA; n]).unwrap();
    let (offset, len) = (7, n - 9);
    g.fill_range(x, offset, len, &[1, 2, 3, 4, 5]).unwrap();
    let got = g.get_data(x).unwrap();
    assert!(got[..offset].iter().all(|&b| b == 0xAA));
    assert!(got[offset + len..].iter().all(|&b| b == 0xAA));
    assert!(got[offset..offset + len]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == [1, 2, 3, 4, 5][i % 5]));
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn cumsum_matches_naive() {
    let ggml = ggml("cumsum_matches_naive");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[17, 3, 2]).unwrap();
    let y = g.cumsum(x).unwrap();
    let xs = values(17 * 6, 3);
    let out = run(&mut g, &be, &[(x, f32_bytes(&xs))], &[y]);
    let want: Vec<f32> = xs
        .chunks(17)
        .flat_map(|row| {
            let mut acc = 0.0f64;
            row.iter().map(move |v| {
                acc += *v as f64;
                acc as f32
            })
        })
        .collect();
    assert_close(&out[0], &want, 1e-5, "cumsum");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn add_id_with_a_view_of_the_ids() {
    let ggml = ggml("add_id_with_a_view_of_the_ids");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    // As test-backend-ops builds it: ids [n_experts, n_tokens], viewed as [n_used, n_tokens]
    // with the full row stride.
    let (n_embd, n_experts, n_used, n_tokens) = (16usize, 8usize, 3usize, 5usize);
    let a = g
        .new_tensor(Type::F32, &[n_embd as i64, n_used as i64, n_tokens as i64])
        .unwrap();
    let b = g
        .new_tensor(Type::F32, &[n_embd as i64, n_experts as i64])
        .unwrap();
    let ids_full = g
        .new_tensor(Type::I32, &[n_experts as i64, n_tokens as i64])
        .unwrap();
    g.set_name(ids_full, "ids").unwrap();
    let row = ggml.row_size(Type::I32, n_experts as i64).unwrap();
    let ids = g
        .view_2d(ids_full, n_used as i64, n_tokens as i64, row, 0)
        .unwrap();
    g.set_name(ids, "view_of_ids").unwrap();
    assert_eq!(
        g.shape(ids).unwrap(),
        [n_used as i64, n_tokens as i64, 1, 1]
    );
    assert!(!g.is_contiguous(ids).unwrap());
    let y = g.add_id(a, b, ids).unwrap();
    let av = values(n_embd * n_used * n_tokens, 4);
    let bv = values(n_embd * n_experts, 5);
    // Each token's row: a permutation of the experts; the unused tail holds ids out of range,
    // which a kernel reading past the view would trip over.
    let idv: Vec<i32> = (0..n_tokens)
        .flat_map(|t| {
            (0..n_experts).map(move |e| {
                if e < n_used {
                    ((t * 3 + e * 5) % n_experts) as i32
                } else {
                    1_000_000
                }
            })
        })
        .collect();
    let out = run(
        &mut g,
        &be,
        &[
            (a, f32_bytes(&av)),
            (b, f32_bytes(&bv)),
            (ids_full, i32_bytes(&idv)),
        ],
        &[y],
    );
    let mut want = Vec::new();
    for t in 0..n_tokens {
        for u in 0..n_used {
            let e = idv[t * n_experts + u] as usize;
            for i in 0..n_embd {
                want.push(av[(t * n_used + u) * n_embd + i] + bv[e * n_embd + i]);
            }
        }
    }
    assert_close(&out[0], &want, 1e-6, "add_id");
    // The view has no buffer of its own.
    let names: Vec<String> = g.allocations().into_iter().map(|a| a.name).collect();
    assert!(
        names.contains(&"ids".to_string()) && !names.contains(&"view_of_ids".to_string()),
        "{names:?}"
    );
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn mul_mat_with_broadcast_batches_matches_naive() {
    let ggml = ggml("mul_mat_with_broadcast_batches_matches_naive");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let (k, n, m, ba, bb) = (32usize, 5usize, 7usize, 2usize, 4usize);
    let a = g
        .new_tensor(Type::F32, &[k as i64, n as i64, ba as i64])
        .unwrap();
    let b = g
        .new_tensor(Type::F32, &[k as i64, m as i64, bb as i64])
        .unwrap();
    let y = g.mul_mat(a, b).unwrap();
    assert_eq!(g.shape(y).unwrap(), [n as i64, m as i64, bb as i64, 1]);
    assert_eq!(g.tensor_type(y).unwrap(), Some(Type::F32));
    let av = values(k * n * ba, 6);
    let bv = values(k * m * bb, 7);
    let out = run(
        &mut g,
        &be,
        &[(a, f32_bytes(&av)), (b, f32_bytes(&bv))],
        &[y],
    );
    let mut want = Vec::new();
    for z in 0..bb {
        let za = z / (bb / ba);
        for j in 0..m {
            for i in 0..n {
                let s: f64 = (0..k)
                    .map(|kk| av[(za * n + i) * k + kk] as f64 * bv[(z * m + j) * k + kk] as f64)
                    .sum();
                want.push(s as f32);
            }
        }
    }
    assert_close(&out[0], &want, 1e-4, "mul_mat");
    let e = g.mul_mat(a, a).unwrap_err();
    assert!(matches!(e, GraphError::AlreadyBuilt), "{e}");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn get_rows_matches_naive() {
    let ggml = ggml("get_rows_matches_naive");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let a = g.new_tensor(Type::F32, &[8, 10]).unwrap();
    let idx = g.new_tensor(Type::I32, &[4]).unwrap();
    let y = g.get_rows(a, idx).unwrap();
    let av = values(80, 8);
    let iv = [9, 0, 3, 3];
    let out = run(
        &mut g,
        &be,
        &[(a, f32_bytes(&av)), (idx, i32_bytes(&iv))],
        &[y],
    );
    let want: Vec<f32> = iv
        .iter()
        .flat_map(|&r| av[r as usize * 8..r as usize * 8 + 8].to_vec())
        .collect();
    assert_close(&out[0], &want, 0.0, "get_rows");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn more_ops_run_and_agree() {
    let ggml = ggml("more_ops_run_and_agree");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[4, 4]).unwrap();
    let silu = g.unary(x, UnaryOp::Silu).unwrap();
    let neg = g.unary(x, UnaryOp::Neg).unwrap();
    let tri = g.tri(x, TriType::Lower).unwrap();
    let sw = g.swiglu(x).unwrap();
    let t = g.transpose(x).unwrap();
    let tc = g.cont(t).unwrap();
    let xs = values(16, 9);
    let out = run(
        &mut g,
        &be,
        &[(x, f32_bytes(&xs))],
        &[silu, neg, tri, sw, tc],
    );
    let s = |v: f32| v / (1.0 + (-v).exp());
    assert_close(
        &out[0],
        &xs.iter().map(|&v| s(v)).collect::<Vec<_>>(),
        1e-5,
        "silu",
    );
    assert_close(
        &out[1],
        &xs.iter().map(|&v| -v).collect::<Vec<_>>(),
        0.0,
        "neg",
    );
    let tri_want: Vec<f32> = (0..16)
        .map(|i| if i % 4 < i / 4 { xs[i] } else { 0.0 })
        .collect();
    assert_close(&out[2], &tri_want, 0.0, "tri lower");
    let sw_want: Vec<f32> = (0..4)
        .flat_map(|r| (0..2).map(move |c| (r, c)))
        .map(|(r, c)| s(xs[r * 4 + c]) * xs[r * 4 + c + 2])
        .collect();
    assert_close(&out[3], &sw_want, 1e-5, "swiglu");
    let t_want: Vec<f32> = (0..16).map(|i| xs[(i % 4) * 4 + i / 4]).collect();
    assert_close(&out[4], &t_want, 0.0, "cont(transpose)");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn every_tensor_has_its_own_exact_buffer() {
    let ggml = ggml("every_tensor_has_its_own_exact_buffer");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[10, 3]).unwrap();
    g.set_name(x, "x").unwrap();
    let w = g.new_tensor(Type::F32, &[10]).unwrap();
    g.set_name(w, "w").unwrap();
    let n = g.rms_norm(x, 1e-6).unwrap();
    let y = g.mul(n, w).unwrap();
    g.set_name(y, "y").unwrap();
    let v = g.view_1d(y, 5, 8).unwrap();
    g.build(&[y, v]).unwrap();
    assert_eq!(g.nodes().unwrap().len(), 3, "{:?}", g.nodes());
    g.alloc(&be).unwrap();
    let allocs = g.allocations();
    // x, w, the rms_norm result, y: four buffers; the view has none.
    assert_eq!(allocs.len(), 4, "{allocs:?}");
    for a in &allocs {
        assert_eq!(a.placement, PlacementKind::Device);
        assert_eq!(
            a.bytes, a.nbytes,
            "{}: the CPU buffer type pads nothing",
            a.name
        );
        assert_eq!(
            a.buffer_bytes, a.bytes,
            "{}: exactly the alloc size",
            a.name
        );
    }
    let by_name = |n: &str| allocs.iter().find(|a| a.name == n).cloned().unwrap();
    assert_eq!(by_name("x").bytes, 120);
    assert_eq!(by_name("w").bytes, 40);
    assert!(
        allocs.iter().any(|a| a.name == "RMS_NORM#2"),
        "unnamed results are named after their op: {allocs:?}"
    );
    let mut spans: Vec<&AllocationInfo> = allocs.iter().collect();
    spans.sort_by_key(|a| a.base);
    for p in spans.windows(2) {
        assert!(
            p[0].base + p[0].bytes <= p[1].base,
            "{} and {} overlap",
            p[0].name,
            p[1].name
        );
    }
    let x0 = by_name("x");
    assert_eq!(
        g.locate(x0.base + 7),
        Some(Located::Inside {
            name: "x".into(),
            offset: 7
        })
    );
    // An address past x's end is reported relative to the nearest allocation below it.
    match g.locate(x0.base + x0.bytes + 3) {
        Some(Located::After { past_end, .. }) => assert!(past_end <= 3),
        Some(Located::Inside { name, .. }) => assert_ne!(name, "x"),
        None => panic!("an address above x is located"),
    }
    // Data moves are checked against the tensor's size.
    let e = g.set_data(x, &[0u8; 12]).unwrap_err();
    assert!(
        matches!(
            e,
            GraphError::SizeMismatch {
                expected: 120,
                got: 12,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(g.alloc(&be), Err(GraphError::AlreadyAllocated)));
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn supports_answers_per_node() {
    let ggml = ggml("supports_answers_per_node");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let a = g.new_tensor(Type::F32, &[16, 4]).unwrap();
    let b = g.new_tensor(Type::F32, &[16, 4]).unwrap();
    let ok = g.soft_max_ext(a, None, 1.0, 0.0).unwrap();
    // The CPU backend runs soft_max_back only without ALiBi (ggml-cpu.cpp supports_op).
    let back = g.soft_max_ext_back(a, b, 1.0, 0.5).unwrap();
    g.set_name(back, "back").unwrap();
    assert!(g.supports(&be, ok).unwrap());
    assert!(!g.supports(&be, back).unwrap());
    let u = g.unsupported(&be);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!(
        (u[0].name.as_str(), u[0].op.as_str()),
        ("back", "SOFT_MAX_BACK")
    );
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn misuse_is_an_error_not_an_abort() {
    let ggml = ggml("misuse_is_an_error_not_an_abort");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions { max_tensors: 4 }).unwrap();
    let x = g.new_tensor(Type::F32, &[8, 2]).unwrap();
    let shape = |r: Result<Tensor, GraphError>| matches!(r, Err(GraphError::Shape { .. }));
    assert!(shape(g.view_1d(x, 17, 0)), "a view past the end");
    assert!(
        shape(g.view_2d(x, 8, 2, 64, 0)),
        "a strided view past the end"
    );
    assert!(shape(g.view_1d(x, 8, 40)), "an offset view past the end");
    assert!(
        shape(g.reshape(x, &[5, 3])),
        "a reshape that changes the element count"
    );
    assert!(shape(g.permute(x, [0, 0, 1, 2])), "not a permutation");
    assert!(
        shape(g.new_tensor(Type::Q8_0, &[33])),
        "a partial quantized block"
    );
    assert!(
        shape(g.new_tensor(Type::F32, &[i64::MAX, 4])),
        "a size past the address range"
    );
    let i = g.new_tensor(Type::I32, &[8]).unwrap();
    assert!(shape(g.cumsum(i)), "cumsum of i32");
    let z = g.new_tensor(Type::F32, &[5]).unwrap();
    assert!(shape(g.mul_mat(x, z)), "mul_mat of mismatched rows");
    // Room for at least max_tensors, then a clear error (ggml itself would abort).
    let made = (0..10).take_while(|_| g.scale(x, 2.0).is_ok()).count() + 3;
    assert!((4..10).contains(&made), "{made} tensors fit");
    let e = g.scale(x, 2.0).unwrap_err();
    assert!(
        matches!(e, GraphError::CapacityExceeded { capacity: 4 }),
        "{e}"
    );
    let mut other = ggml.graph(GraphOptions::default()).unwrap();
    assert!(matches!(
        other.rms_norm(x, 1e-6),
        Err(GraphError::ForeignTensor)
    ));
    assert!(matches!(
        g.set_data(x, &[0; 64]),
        Err(GraphError::NotAllocated)
    ));
    assert!(matches!(
        g.compute(&be),
        Err(ComputeError::Graph(GraphError::NotBuilt))
    ));
}

/// Runs the named test of this binary in a child process and returns its status and stderr.
fn child(test: &str, env: (&str, &str)) -> (std::process::ExitStatus, String) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            test,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(env.0, env.1)
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn guarded_tensors_compute_and_fault_one_byte_out() {
    let ggml = ggml("guarded_tensors_compute_and_fault_one_byte_out");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[64, 2]).unwrap();
    g.set_name(x, "x").unwrap();
    let y = g.rms_norm(x, 1e-6).unwrap();
    g.set_name(y, "y").unwrap();
    g.build(&[y]).unwrap();
    g.alloc_with(&be, |t| {
        if t.op == "NONE" {
            Placement::GuardAfter
        } else {
            Placement::GuardBefore
        }
    })
    .unwrap();
    let allocs = g.allocations();
    let x0 = allocs.iter().find(|a| a.name == "x").unwrap();
    assert_eq!(
        (x0.placement, x0.slack, x0.bytes),
        (PlacementKind::GuardAfter, 0, 512)
    );
    assert_eq!(
        allocs.iter().find(|a| a.name == "y").unwrap().placement,
        PlacementKind::GuardBefore
    );
    // A correct op never touches the guard pages.
    let xs = values(128, 10);
    g.set_data(x, &f32_bytes(&xs)).unwrap();
    g.compute(&be).unwrap();
    let out = g.get_f32(y).unwrap();
    assert!(out.iter().all(|v| v.is_finite()));
    // One byte out, on either side, faults (in a child, so this process lives on).
    for side in ["after", "before"] {
        let (status, stderr) = child("guard_fault_child", ("KEDGE_GGML_GUARD_CHILD", side));
        assert_eq!(
            status.signal(),
            Some(libc::SIGSEGV),
            "reading one byte {side} the tensor: {status:?}\n{stderr}"
        );
        assert!(stderr.contains("about to read"), "{stderr}");
    }
}

/// Not a test on its own: the child of `guarded_tensors_compute_and_fault_one_byte_out`.
#[test]
#[ignore = "the child process of `guarded_tensors_compute_and_fault_one_byte_out`, which runs it"]
fn guard_fault_child() {
    let side = std::env::var("KEDGE_GGML_GUARD_CHILD").expect(
        "run by guarded_tensors_compute_and_fault_one_byte_out, which sets KEDGE_GGML_GUARD_CHILD",
    );
    let ggml = ggml("guard_fault_child");
    let be = cpu(&ggml);
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[40]).unwrap();
    g.set_name(x, "x").unwrap();
    let y = g.scale(x, 2.0).unwrap();
    g.build(&[y]).unwrap();
    let place = if side == "after" {
        Placement::GuardAfter
    } else {
        Placement::GuardBefore
    };
    let mut place = Some(place);
    g.alloc_with(&be, |t| {
        if t.name == "x" {
            place.take().unwrap_or(Placement::Device)
        } else {
            Placement::Device
        }
    })
    .unwrap();
    let a = g.allocations().into_iter().find(|a| a.name == "x").unwrap();
    assert_eq!(
        a.slack, 0,
        "160 bytes is a multiple of the 32-byte alignment"
    );
    let addr = if side == "after" {
        a.base + a.bytes
    } else {
        a.base - 1
    };
    eprintln!("about to read {addr:#x}, one byte {side} x");
    // SAFETY: deliberately reads the guard page: the fault is the test's expected outcome.
    let v = unsafe { std::ptr::read_volatile(addr as *const u8) };
    eprintln!("read {v} without a fault");
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn abort_hook_reports_ggml_words() {
    let _ = ggml("abort_hook_reports_ggml_words");
    let (status, stderr) = child("abort_child", ("KEDGE_GGML_ABORT_CHILD", "1"));
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "ggml aborts after the hook: {status:?}\n{stderr}"
    );
    assert!(stderr.contains("REPORT ggml abort: "), "{stderr}");
    assert!(
        stderr.contains("GGML_ASSERT(a->type == GGML_TYPE_F32) failed"),
        "ggml's own words: {stderr}"
    );
    assert!(
        stderr.contains("Error: CUDA error: invalid argument (logged before the abort)"),
        "the ring: {stderr}"
    );
    assert!(
        stderr.contains("LOG Error: CUDA error"),
        "the log hook: {stderr}"
    );
}

fn on_log(level: kedge_ggml::LogLevel, text: &str) {
    eprint!("LOG {level:?}: {text}");
}

fn on_abort(r: &kedge_ggml::AbortReport<'_>) {
    eprintln!("REPORT {r}");
}

/// Not a test on its own: the child of `abort_hook_reports_ggml_words`.
#[test]
#[ignore = "the child process of `abort_hook_reports_ggml_words`, which runs it"]
fn abort_child() {
    assert!(
        std::env::var_os("KEDGE_GGML_ABORT_CHILD").is_some(),
        "run by abort_hook_reports_ggml_words, which sets KEDGE_GGML_ABORT_CHILD"
    );
    let ggml = ggml("abort_child");
    ggml.install_hooks(Some(on_log), Some(on_abort));
    type LogInternal = unsafe extern "C" fn(i32, *const std::ffi::c_char, ...);
    // SAFETY: ggml_log_internal(enum ggml_log_level, const char * fmt, ...), exported by
    // libggml-base.so; called with a format and a matching string argument.
    unsafe {
        let log: LogInternal = ggml.raw_symbol("ggml_log_internal").unwrap();
        log(
            4,
            c"%s\n".as_ptr(),
            c"CUDA error: invalid argument (logged before the abort)".as_ptr(),
        );
    }
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let i = g.new_tensor(Type::I32, &[8]).unwrap();
    let p = g.raw_tensor(i).unwrap();
    type Op1 =
        unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void) -> *mut std::ffi::c_void;
    // SAFETY: ggml_cumsum(ctx, a) with a tensor of this graph; ggml asserts a is f32 and
    // aborts, which is what this child is for.
    let _ = unsafe {
        let cumsum: Op1 = ggml.raw_symbol("ggml_cumsum").unwrap();
        g.raw_op("ggml_cumsum", None, |ctx| cumsum(ctx, p))
    };
    eprintln!("ggml did not abort");
}

#[test]
#[cfg_attr(
    not(all(kedge_have_ggml, kedge_have_ggml_dl)),
    ignore = "needs both ggml builds: set KEDGE_GGML_DIR and KEDGE_GGML_DL_DIR (scripts/build-ggml.sh)"
)]
fn another_build_is_refused_in_the_same_process() {
    let ggml = ggml("another_build_is_refused_in_the_same_process");
    let dl = build_dir(
        "KEDGE_GGML_DL_DIR",
        "another_build_is_refused_in_the_same_process",
    );
    let e = Ggml::load(std::path::Path::new(&dl)).unwrap_err();
    assert!(
        matches!(e, kedge_ggml::LoadError::AnotherBuildLoaded { ref loaded, .. } if loaded == ggml.dir()),
        "{e}"
    );
}

/// Caller memory for a tensor: a boxed slice the test can look into.
struct CallerMemory(Box<[u8]>);

// SAFETY: the boxed slice does not move and lives as long as the value.
unsafe impl HostMemory for CallerMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_tensor_can_live_in_caller_memory() {
    let ggml = ggml("a_tensor_can_live_in_caller_memory");
    let be = cpu(&ggml);
    let align = be.alignment();
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[16]).unwrap();
    g.set_name(x, "x").unwrap();
    let y = g.scale(x, 3.0).unwrap();
    g.build(&[y]).unwrap();
    let mem = CallerMemory(vec![0u8; 256].into_boxed_slice());
    let base = mem.as_ptr() as usize;
    let offset = (align - base % align) % align + align;
    let mut given = Some(mem);
    g.alloc_with(&be, |t| match (t.name.as_str(), given.take()) {
        ("x", Some(memory)) => Placement::Host {
            memory: Box::new(memory),
            offset,
        },
        (_, m) => {
            given = m;
            Placement::Device
        }
    })
    .unwrap();
    let a = g.allocations().into_iter().find(|a| a.name == "x").unwrap();
    assert_eq!((a.placement, a.base), (PlacementKind::Host, base + offset));
    let xs = values(16, 12);
    g.set_f32(x, &xs).unwrap();
    // The bytes are where the caller put them.
    // SAFETY: the graph keeps the caller's memory alive; 64 bytes at the tensor's address.
    let seen = unsafe { std::slice::from_raw_parts(a.base as *const u8, 64) };
    assert_eq!(seen, f32_bytes(&xs).as_slice());
    g.compute(&be).unwrap();
    assert_close(
        &g.get_f32(y).unwrap(),
        &xs.iter().map(|v| v * 3.0).collect::<Vec<_>>(),
        0.0,
        "scale",
    );

    // A misaligned place is refused before ggml (which would abort) sees it.
    let mut g = ggml.graph(GraphOptions::default()).unwrap();
    let x = g.new_tensor(Type::F32, &[16]).unwrap();
    g.build(&[x]).unwrap();
    let mem = CallerMemory(vec![0u8; 256].into_boxed_slice());
    let off = (align - mem.as_ptr() as usize % align) % align + 1;
    let mut mem = Some(mem);
    let e = g
        .alloc_with(&be, |_| match mem.take() {
            Some(m) => Placement::Host {
                memory: Box::new(m),
                offset: off,
            },
            None => Placement::Device,
        })
        .unwrap_err();
    assert!(matches!(e, GraphError::Placement { .. }), "{e}");
    // Refused before any tensor got memory: the graph can still be allocated.
    g.alloc(&be).unwrap();
    g.set_f32(x, &[1.0; 16]).unwrap();
}

/// A recorded graph is every call as C, tensor `i` as `t[i]`, floats by their bits, names as
/// C strings; a call this crate cannot write down (`raw_op`) makes the recording say so.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn a_recorded_graph_is_its_calls_as_c() {
    let gg = ggml("a_recorded_graph_is_its_calls_as_c");
    let mut g = gg.graph(GraphOptions::default()).unwrap();
    g.record();
    let base = g.new_tensor_1d(Type::F32, 24).unwrap();
    g.set_name(base, "x \"base\"").unwrap();
    let v = g.view_2d(base, 5, 4, 24, 0).unwrap();
    let y = g.scale(v, 0.5).unwrap();
    let z = g.rms_norm(y, 1e-6).unwrap();
    g.build(&[z]).unwrap();
    let r = g.recording().expect("recording").clone();
    assert_eq!(r.broken, None);
    assert_eq!(r.tensors, 4);
    assert_eq!(r.outputs, vec![z.index()]);
    let text = r.lines.join("\n");
    for want in [
        "t[0] = ggml_new_tensor_1d(ctx, (enum ggml_type) 0 /* f32 */, 24LL);",
        "ggml_set_name(t[0], \"x \\\"base\\\"\");",
        "t[1] = ggml_view_2d(ctx, t[0], 5LL, 4LL, (size_t) 24ull, (size_t) 0ull);",
        "t[2] = ggml_scale(ctx, t[1], kedge_f32(0x3f000000u) /* 5e-1 */);",
        "t[3] = ggml_rms_norm(ctx, t[2], kedge_f32(0x358637bdu) /* 1e-6 */);",
    ] {
        assert!(text.contains(want), "missing {want} in\n{text}");
    }

    let mut g = gg.graph(GraphOptions::default()).unwrap();
    g.record();
    let a = g.new_tensor_1d(Type::F32, 8).unwrap();
    let pa = g.raw_tensor(a).unwrap();
    // SAFETY: ggml_dup_tensor(ctx, a) through the raw entry point is a valid constructor call.
    let f = unsafe { gg_dup(&gg) };
    // SAFETY: as above: the context and a tensor of this graph.
    unsafe { g.raw_op("ggml_dup_tensor", Some(Type::F32), |ctx| f(ctx, pa)) }.unwrap();
    let why = g.recording().unwrap().broken.clone().expect("broken");
    assert!(
        why.contains("ggml_dup_tensor") && why.contains("not written down"),
        "{why}"
    );
}

/// `ggml_dup_tensor` from the loaded build.
///
/// # Safety
/// The symbol has ggml.h's signature.
unsafe fn gg_dup(
    gg: &Ggml,
) -> unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void) -> *mut std::ffi::c_void {
    let lib = gg
        .libraries()
        .iter()
        .find(|p| p.display().to_string().contains("ggml-base"))
        .expect("libggml-base")
        .clone();
    let l = libloading::Library::new(&lib).expect("opens");
    let s: libloading::Symbol<
        unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void) -> *mut std::ffi::c_void,
    > = l.get(b"ggml_dup_tensor\0").expect("symbol");
    let f = *s;
    std::mem::forget(l);
    f
}

/// Quantizing and dequantizing run in chunks of rows on every core; the bytes must be those of
/// the rows done one call at a time, in every block format the build has (a format whose rows
/// depended on each other would differ here).
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn chunked_quantizing_gives_the_bytes_of_one_row_at_a_time() {
    let ggml = ggml("chunked_quantizing_gives_the_bytes_of_one_row_at_a_time");
    const ROW: usize = 256;
    const ROWS: usize = 512;
    // Two chunks at least on any thread count (a chunk is 64Ki values or more), values of
    // every sign and size.
    let vals: Vec<f32> = (0..ROW * ROWS)
        .map(|i| (((i as u64).wrapping_mul(2654435761) % 20011) as f32 / 10005.0 - 1.0) * 3.0)
        .collect();
    let ones = vec![1.0f32; ROW];
    let mut checked = 0;
    for &ty in Type::ALL {
        let block = ggml.block_size(ty);
        if !ggml.has_type(ty) || block <= 1 || ROW as i64 % block != 0 {
            continue;
        }
        let im = ggml
            .requires_imatrix(ty)
            .unwrap()
            .then_some(ones.as_slice());
        let Ok(whole) = ggml.quantize(ty, &vals, ROW as i64, im) else {
            continue; // a type the build cannot quantize (none in the pinned snapshot)
        };
        let mut by_row = Vec::with_capacity(whole.len());
        for r in vals.chunks(ROW) {
            by_row.extend(ggml.quantize(ty, r, ROW as i64, im).unwrap());
        }
        assert!(
            whole == by_row,
            "{ty:?}: chunked quantizing differs from row by row"
        );
        let back = ggml.dequantize(ty, &whole).unwrap();
        let row_bytes = whole.len() / ROWS;
        let mut back_by_row = Vec::with_capacity(back.len());
        for r in whole.chunks(row_bytes) {
            back_by_row.extend(ggml.dequantize(ty, r).unwrap());
        }
        assert!(
            back.iter()
                .map(|v| v.to_bits())
                .eq(back_by_row.iter().map(|v| v.to_bits())),
            "{ty:?}: chunked dequantizing differs from row by row"
        );
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} block formats checked");
}

/// Rows of f32 values quantized by the build and dequantized by its own `to_float` come back
/// close to what went in, for a 32-element, a 256-element and an importance-matrix type; a
/// row that is not whole blocks, or a type that needs an importance matrix without one, is
/// refused in words.
#[test]
#[cfg_attr(
    not(kedge_have_ggml),
    ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
)]
fn blocks_quantize_and_dequantize_through_the_build() {
    let ggml = ggml("blocks_quantize_and_dequantize_through_the_build");
    let vals: Vec<f32> = (0..512)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    // A 4-bit value is within one step (an eighth of the largest) of what went in.
    for (ty, max_err) in [(Type::Q8_0, 0.01), (Type::Q4_0, 0.13), (Type::Q4K, 0.13)] {
        let q = ggml.quantize(ty, &vals, 256, None).unwrap();
        assert_eq!(q.len(), 2 * ggml.row_size(ty, 256).unwrap(), "{ty:?}");
        let back = ggml.dequantize(ty, &q).unwrap();
        assert_eq!(back.len(), vals.len());
        let worst = vals
            .iter()
            .zip(&back)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < max_err, "{ty:?}: {worst}");
    }
    assert!(ggml.requires_imatrix(Type::Iq2Xxs).unwrap());
    let e = ggml.quantize(Type::Iq2Xxs, &vals, 256, None).unwrap_err();
    assert!(e.to_string().contains("importance matrix"), "{e}");
    let ones = vec![1.0f32; 256];
    let q = ggml
        .quantize(Type::Iq2Xxs, &vals, 256, Some(&ones))
        .unwrap();
    assert_eq!(ggml.dequantize(Type::Iq2Xxs, &q).unwrap().len(), 512);
    let e = ggml
        .quantize(Type::Q4K, &vals[..100], 100, None)
        .unwrap_err();
    assert!(e.to_string().contains("whole blocks"), "{e}");
}
