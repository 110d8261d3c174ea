//! `kedge repro` output, golden-tested for every op in the registry.
//!
//! Each op has a case line in `golden/repro/cases.jsonl` and its expected repro text in
//! `golden/repro/<op>.txt` (kernel sources replaced by a placeholder line, so editing a kernel
//! does not change the golden); a further line of another dtype has `<op>.<dtype>.txt`. A new
//! op needs only those two things. To (re)write goldens:
//! `KEDGE_BLESS=1 cargo test -p kedge-runner --test runner repro_golden`, then read the diff.

use kedge_core::model::case::parse_corpus;
use kedge_core::LimitsProfile;
use kedge_runner::workflow::repro::{self, ReproInput, SourceMode};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/repro")
}

#[test]
fn repro_output_matches_the_golden_file_of_every_op() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let cases_path = dir().join("cases.jsonl");
    let text = std::fs::read_to_string(&cases_path).unwrap();
    let cases = parse_corpus(&text).unwrap();
    let bless = std::env::var_os("KEDGE_BLESS").is_some();
    let mut problems = Vec::new();
    // ggml's other ops have impls only once a ggml build is loaded; their upstream lines are
    // checked against upstream's own test-backend-ops (scripts/check-upstream-lines.sh).
    for op in reg.ops().iter().filter(|o| !o.impls().is_empty()) {
        if !cases.iter().any(|(_, c)| c.op == op.name()) {
            problems.push(format!(
                "op {} has no case line in {}: add one (a failing case of its upstream impl if it has one), then run with KEDGE_BLESS=1",
                op.name(),
                cases_path.display()
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (line, case) in &cases {
        let op = reg.op(&case.op).unwrap();
        if op.impls().is_empty() {
            continue;
        }
        // The op's first line is `<op>.txt`; a line of another dtype `<op>.<dtype>.txt`.
        let file = if seen.insert(op.name()) {
            format!("{}.txt", op.name())
        } else {
            format!("{}.{}.txt", op.name(), case.dtype)
        };
        let case = reg
            .validate(case)
            .unwrap_or_else(|e| panic!("{}:{line}: {e}", cases_path.display()));
        let r = repro::build(&ReproInput {
            reg: &reg,
            case: &case,
            profile: &h200,
            result: None,
            transition: None,
            sources: SourceMode::Placeholder,
        })
        .unwrap();
        let got = repro::render(&r);
        let golden = dir().join(&file);
        if bless {
            std::fs::write(&golden, &got).unwrap();
            eprintln!("wrote {}", golden.display());
            continue;
        }
        match std::fs::read_to_string(&golden) {
            Err(_) => problems.push(format!(
                "no golden file {} for op {}: run `KEDGE_BLESS=1 cargo test -p kedge-runner --test runner repro_golden`, read it, commit it",
                golden.display(),
                op.name()
            )),
            Ok(want) if want != got => {
                let first = want
                    .lines()
                    .zip(got.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(want.lines().count().min(got.lines().count()));
                problems.push(format!(
                    "{} differs from the repro of op {} at line {}:\n  golden: {:?}\n  now:    {:?}\n(if the change is intended: KEDGE_BLESS=1 cargo test -p kedge-runner --test runner repro_golden)",
                    golden.display(),
                    op.name(),
                    first + 1,
                    want.lines().nth(first).unwrap_or("<end>"),
                    got.lines().nth(first).unwrap_or("<end>")
                ))
            }
            Ok(_) => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The incident's repro: the exact two things a maintainer pastes, from the launch contract.
#[test]
fn rms_norm_incident_repro_has_the_upstream_line_the_limit_and_the_command() {
    let reg = kedge_ops::registry();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let case = reg
        .validate(&kedge_core::Case::new(
            "rms_norm",
            "ggml",
            kedge_core::DType::F32,
            [64, 1, 65536, 1],
        ))
        .unwrap();
    let r = repro::build(&ReproInput {
        reg: &reg,
        case: &case,
        profile: &h200,
        result: None,
        transition: None,
        sources: SourceMode::Embed,
    })
    .unwrap();
    let up = r.upstream.as_ref().unwrap();
    assert_eq!(
        up.lines,
        vec![
            "// ne[2] = 65536 > grid.y limit 65535 (h200)".to_string(),
            "test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-6f));".to_string(),
        ]
    );
    assert_eq!(
        up.command,
        r"test-backend-ops test -b CUDA0 -o RMS_NORM -p '^type=f32,ne=\[64,1,65536,1\],v=0,eps=0\.000001,inplace=0$'"
    );
    assert_eq!(
        up.vars_line,
        "RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0)"
    );
    let repro::CuRepro::Available { source, build, .. } = &r.cu else {
        panic!("{:?}", r.cu)
    };
    assert_eq!(build, "nvcc -arch=sm_90 -o repro repro.cu");
    // The kernel itself, the planned grid, the exact input size and the error checks.
    assert!(source.contains("extern \"C\" __global__ void rms_norm_ggml_256("));
    assert!(source.contains("const dim3 grid(1u, 65536u, 1u), block(256u, 1u, 1u);"));
    assert!(source.contains("const size_t bytes_0 = 16777216ull;"));
    assert!(source.contains("cudaLaunchKernel((const void *) rms_norm_ggml_256"));
    assert!(source.contains("e = cudaGetLastError();"));
    assert!(source.contains("e = cudaDeviceSynchronize();"));
    // eps passed bit-exactly.
    assert!(source.contains(&format!("0x{:08x}u", 1e-6f32.to_bits())));
    // The passing side: no limit comment.
    let ok = case.clone();
    let mut ok = ok;
    ok.ne[2] = 65535;
    assert!(repro::limit_comments(&reg, &ok, &h200).is_empty());
    // On grid.z.
    let mut z = case.clone();
    z.ne = [64, 1, 1, 65536];
    assert_eq!(
        repro::limit_comments(&reg, &z, &h200),
        vec!["// ne[3] = 65536 > grid.z limit 65535 (h200)".to_string()]
    );
}

const ROW_COPY: kedge_core::Kernel = kedge_core::Kernel {
    file: "row_copy.cu",
    source: "extern \"C\" __global__ void row_copy(const float *x, float *y, int n) {\n    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];\n}\n",
    entry: "row_copy",
};

/// One launch per row, repeated over rows, channels and samples.
fn per_row(
    c: &kedge_core::Case,
    _: &LimitsProfile,
) -> Result<kedge_core::Plan, kedge_core::Refusal> {
    use kedge_core::KernelArg;
    let [n0, n1, n2, n3] = c.ne;
    let row = n0 * 4;
    let step = [row, row * n1, row * n1 * n2];
    let at = |index| KernelArg::TensorAt {
        index,
        offset: 0,
        step,
    };
    let l = kedge_core::LaunchPlan::new(ROW_COPY, [1, 1, 1], [32, 1, 1], 0).args(vec![
        at(0),
        at(1),
        KernelArg::I32(n0 as i32),
    ]);
    Ok(kedge_core::Plan::single(l).repeated([n1 as u64, n2 as u64, n3 as u64]))
}

/// The standalone file is valid CUDA: nvcc (the front end and the device compiler) accepts it,
/// for every op's golden case (repeated plans become loop nests) and every impl of the
/// calibration zoo when it is built in (one of them takes a scratch buffer).
#[test]
#[cfg_attr(
    not(kedge_have_nvcc),
    ignore = "nvcc not found at build time: pip install nvidia-cuda-nvcc==13.0.88 and put its nvidia/cu13/bin on PATH (or set KEDGE_NVCC)"
)]
fn standalone_cu_compiles_with_nvcc() {
    let nvcc = option_env!("KEDGE_NVCC_PATH").unwrap_or("nvcc");
    let mut reg = kedge_ops::registry();
    reg.add_impl(
        "rms_norm",
        Box::new(kedge_core::KernelImpl {
            name: "per-row",
            role: kedge_core::ImplRole::Fixed,
            about: "one launch per row: a repeated plan",
            plan: per_row,
        }),
    )
    .unwrap();
    let h200 = LimitsProfile::builtin("h200").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(self::dir().join("cases.jsonl")).unwrap();
    let mut cases: Vec<kedge_core::Case> = parse_corpus(&text)
        .unwrap()
        .into_iter()
        .map(|(_, c)| c)
        .filter(|c| reg.op(&c.op).is_ok())
        .collect();
    if let Ok(zoo) = reg.op("zoo_rows") {
        for imp in reg.impls_of(zoo) {
            cases.push(kedge_core::Case::new(
                "zoo_rows",
                imp.name(),
                kedge_core::DType::F32,
                [64, 2, 1, 1],
            ));
        }
    }
    // A padded rms_norm case with the clamped fix, beside the golden one, and a repeated
    // plan (a C loop nest).
    cases.push(
        kedge_core::Case::new(
            "rms_norm",
            "clamped",
            kedge_core::DType::F32,
            [100, 4, 2, 2],
        )
        .with_param("row_pad", 3),
    );
    cases.push(kedge_core::Case::new(
        "rms_norm",
        "per-row",
        kedge_core::DType::F32,
        [8, 3, 2, 2],
    ));
    let mut compiled = 0;
    for (i, c) in cases.iter().enumerate() {
        let c = reg.validate(c).unwrap();
        let r = repro::build(&ReproInput {
            reg: &reg,
            case: &c,
            profile: &h200,
            result: None,
            transition: None,
            sources: SourceMode::Embed,
        })
        .unwrap();
        let repro::CuRepro::Available { source, .. } = r.cu else {
            continue;
        };
        let cu = dir.path().join(format!("repro{i}.cu"));
        let ptx = dir.path().join(format!("repro{i}.ptx"));
        std::fs::write(&cu, &source).unwrap();
        let out = std::process::Command::new(nvcc)
            .args(["-arch=compute_90", "-ptx", "-o"])
            .arg(&ptx)
            .arg(&cu)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // The PyPI wheels pair a newer cicc with ptxas 13.0, which then refuses to verify the
        // PTX ("Unsupported .version"); the PTX itself was written, which is what is checked.
        let only_ptxas_version = err
            .lines()
            .filter(|l| l.contains("fatal") || l.contains("error"))
            .all(|l| l.contains("Unsupported .version") || l.contains("Ptx assembly aborted"));
        assert!(
            out.status.success() || (only_ptxas_version && ptx.exists()),
            "nvcc rejected the repro of {}:\n{err}",
            c.label()
        );
        assert!(
            !err.contains("warning"),
            "nvcc warned on {}:\n{err}",
            c.label()
        );
        let ptx_text = std::fs::read_to_string(&ptx).unwrap();
        // Every planned entry is in the PTX.
        let plan = reg.resolve(&c).unwrap().1.plan(&c, &h200).unwrap();
        for l in &plan.launches {
            let entry = l.name();
            assert!(ptx_text.contains(&format!(".entry {entry}(")), "{entry}");
        }
        compiled += 1;
    }
    assert!(compiled > 0, "no repro had a standalone .cu");
}
