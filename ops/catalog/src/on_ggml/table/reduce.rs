//! Reductions, sorting and the normalizations kedge does not have itself: SUM, SUM_ROWS,
//! MEAN, ARGMAX, COUNT_EQUAL, ARGSORT, TOP_K, GROUP_NORM, SOFT_MAX_BACK.

use super::*;
use kedge_core::OpParams;
use kedge_ggml::{SortOrder, Type};

/// The first row starting at element 2^31 (`[ne0, ne1]` with ne1 = 2^31/ne0 + 1): kernels that
/// index `row * ncols` in int read or write out of bounds there, while the pair partner (the
/// last row ends at 2^31 - 1) passes. The generated count boundary stops at exactly 2^31
/// elements, whose last index still fits, so these are declared.
pub(crate) fn row_start_2p31(label: &str, ne0: i64, reach: Reach) -> Boundary {
    let rows = (1i64 << 31) / ne0;
    Boundary::ne(
        format!("{label}: the row past {rows} starts at element 2^31 (int row offset)"),
        1,
        rows + 1,
        [ne0, 0, 1, 1],
        reach,
    )
    .with_values(vec![rows, rows + 1])
}

/// A row-wise op's probe: rows of 64.
fn rows_probe() -> Option<ProbeBase> {
    Some(ProbeBase::rows([64, 1, 1, 1]))
}

/// A matrix op (ne[2] = ne[3] = 1, as ggml_argmax asserts): only ne[1] moves.
fn matrix_probe() -> Option<ProbeBase> {
    Some(ProbeBase {
        grid_dims: &[1],
        ..ProbeBase::rows([64, 1, 1, 1])
    })
}

pub(crate) const REACH_LOGITS: Reach = Reach(
    "rows of all-logits output (perplexity, imatrix): vocab 152k x 14k tokens is 2^31 elements",
);

// ---- SUM, SUM_ROWS, MEAN ---------------------------------------------------------------------

/// SUM in f64 on every core: each row's sum, in row order, over the input as it lies. ggml's
/// CPU backend sums on one thread (`n_tasks = 1`): 2.5 s for 2^29 values on the GPU machine.
/// It also rounds each row's sum to f32 before adding it; this one keeps f64 throughout, which
/// differs from it far inside test-backend-ops' 1e-7.
fn sum_f64(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let Some(x) = inputs.first() else {
        return Err(bad(c, "sum has an input"));
    };
    let [n0, n1, n2, n3] = x.ne.map(|n| n.max(0) as usize);
    let rows = n1 * n2 * n3;
    let sum = (0..rows)
        .into_par_iter()
        .with_min_len(4096)
        .map_init(
            || vec![0f64; n0],
            |row, r| {
                x.flat_row_f64(r, row);
                row.iter().sum::<f64>()
            },
        )
        .sum::<f64>();
    Ok(vec![vec![sum]])
}

pub(crate) const SUM: GgmlOpEntry = GgmlOpEntry {
    name: "sum",
    upstream: "SUM",
    about: "the sum of all elements (one element); CUB DeviceReduce with an int64 count on CUDA: a control. Inputs in [-0.9, 1.1) as test-backend-ops draws them (no cancellation to zero)",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| Ok(vec![input("x", c.dtype, c.ne)?, output("dst", c.dtype, [1, 1, 1, 1])?]),
    inputs: Inputs::Uniform(-0.9, 1.1),
    graph: |g, _c, x| Ok(vec![g.sum(x[0])?]),
    probe: elementwise_probe,
    smoke: &[s([10, 5, 4, 3]), s([1000, 3, 1, 1]), s([1, 1, 1, 1])],
    boundaries: none,
    upstream_line: |c| elementwise::type_ne_line("test_sum", "SUM", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::F64 {
        applies: |c| c.dtype == DType::F32,
        compute: sum_f64,
        source: "kedge's f64 sum of the input on every core (ggml's CPU backend, test-backend-ops' reference, sums on one thread)",
    },
    rows: Rows::Whole,
    reach: no_reach,
};

pub(crate) const SUM_ROWS: GgmlOpEntry = GgmlOpEntry {
    name: "sum_rows",
    upstream: "SUM_ROWS",
    about: "each row's sum: [1, ne1, ne2, ne3]",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", c.dtype, with_dim(c.ne, 0, 1))?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, _c, x| Ok(vec![g.sum_rows(x[0])?]),
    probe: rows_probe,
    smoke: &[s([10, 5, 4, 3]), s([4096, 3, 1, 1]), s([1, 7, 1, 1])],
    boundaries: |_| vec![row_start_2p31("C16", 1024, REACH_LOGITS)],
    upstream_line: |c| {
        repro(
            "SUM_ROWS",
            format!(
                "test_sum_rows({}, {}, false, false)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!("type={},ne={},permute=0,slice=0", c.dtype, vars_arr(&c.ne)),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

pub(crate) const MEAN: GgmlOpEntry = GgmlOpEntry {
    name: "mean",
    upstream: "MEAN",
    about: "each row's mean: f32 [1, ne1, ne2, ne3]. Inputs in [-0.9, 1.1) as test-backend-ops draws them",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", DType::F32, with_dim(c.ne, 0, 1))?,
        ])
    },
    inputs: Inputs::Uniform(-0.9, 1.1),
    graph: |g, _c, x| Ok(vec![g.mean(x[0])?]),
    probe: rows_probe,
    smoke: &[s([10, 5, 4, 3]), s([70000, 1, 1, 1]), s([33, 9, 2, 1])],
    boundaries: |_| {
        vec![
            row_start_2p31("C16", 1024, REACH_LOGITS),
            // mean.cu:79-104: one row longer than 65536 goes to CUB's DeviceReduce.
            Boundary::ne(
                "one row: ne[0] across 65536 (block reduction -> CUB DeviceReduce)",
                0,
                65537,
                [0, 1, 1, 1],
                Reach::SYNTHETIC,
            )
            .with_values(vec![65536, 65537]),
        ]
    },
    upstream_line: |c| elementwise::type_ne_line("test_mean", "MEAN", c),
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- ARGMAX, COUNT_EQUAL ---------------------------------------------------------------------

kedge_core::params! {
    /// A row op's input layout.
    pub(crate) struct RowPadParams {
        row_pad: int(0..=1 << 20) = 0, "extra elements after each input row (a view: non-contiguous rows)";
    }
}

/// The input `x` of a row op, padded rows as a view of `[ne0 + row_pad, ...]`.
fn padded_x(c: &Case) -> Result<TensorSpec, CaseError> {
    let pad = RowPadParams::of(c).row_pad;
    if pad == 0 {
        input("x", c.dtype, c.ne)
    } else {
        view_input("x", c.dtype, c.ne, with_dim(c.ne, 0, c.ne[0] + pad))
    }
}

fn matrix(c: &Case) -> Result<(), CaseError> {
    if c.ne[2] != 1 || c.ne[3] != 1 {
        return Err(bad(
            c,
            format!(
                "ne = {:?}: ggml's argmax takes a matrix (ne[2] = ne[3] = 1)",
                c.ne
            ),
        ));
    }
    Ok(())
}

/// D3: a non-contiguous input (rows of a larger buffer) passes supports_op and then aborts in
/// the CUDA op's `GGML_ASSERT(ggml_is_contiguous(src0))`. `[5000, 2]` with rows 6000 apart is
/// upstream's `--test-file` form of the case.
fn noncontig_bound(tag: &str) -> Boundary {
    Boundary::param(
        format!("{tag}: rows padded (a view): supports_op says yes, the op asserts contiguity"),
        kedge_core::param_name!(RowPadParams, row_pad),
        1,
        [5000, 2, 1, 1],
        Reach("a row view of a larger buffer, such as one sequence's logits"),
    )
    .with_values(vec![1, 1000])
}

pub(crate) const ARGMAX: GgmlOpEntry = GgmlOpEntry {
    name: "argmax",
    upstream: "ARGMAX",
    about: "each row's index of its maximum, i32 [ne1]; exact comparison (rows are shuffled distinct values, as test-backend-ops draws them, so there are no ties). row_pad > 0 makes x a view with padded rows, which test_argmax cannot build: the line printed is the contiguous case (upstream reaches the padded one with --test-file: `18 26 2 1 1 1 0 1 0 5000 2 1 1 4 24000 48000 48000 -`)",
    dtypes: &[DType::F32],
    params: RowPadParams::SPECS,
    tensors: |c| {
        matrix(c)?;
        Ok(vec![padded_x(c)?, output("dst", DType::I32, [c.ne[1], 1, 1, 1])?])
    },
    inputs: Inputs::Distinct,
    graph: |g, _c, x| Ok(vec![g.argmax(x[0])?]),
    probe: matrix_probe,
    smoke: &[
        s([10, 100, 1, 1]),
        s([32, 1, 1, 1]),
        s([1, 64, 1, 1]),
        sp!([300, 3, 1, 1], |p: &mut RowPadParams| p.row_pad = 7),
    ],
    boundaries: |_| vec![noncontig_bound("D3")],
    upstream_line: |c| elementwise::type_ne_line("test_argmax", "ARGMAX", c),
    nmse: Nmse::Fixed(0.0),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

/// COUNT_EQUAL of the two argmaxes, on every core: each row's argmax as ggml's CPU backend
/// takes it (the last index holding the maximum), counted exactly. That backend takes each
/// ARGMAX of the graph on one thread (`n_tasks = 1`): 6.8 s of a 9.8 s case of 2^29 values on
/// the GPU machine.
fn count_equal_host(
    c: &Case,
    _specs: &[TensorSpec],
    inputs: &[HostTensor],
) -> Result<Vec<Vec<f64>>, CaseError> {
    use rayon::prelude::*;
    let [a, b] = inputs else {
        return Err(bad(c, "count_equal has two inputs"));
    };
    let n0 = a.ne[0].max(0) as usize;
    let rows = a.ne[1].max(0) as usize;
    let argmax = |row: &[f64]| {
        let (mut max, mut at) = (f64::NEG_INFINITY, 0);
        for (i, &v) in row.iter().enumerate() {
            max = max.max(v);
            if v == max {
                at = i;
            }
        }
        at
    };
    let equal = (0..rows)
        .into_par_iter()
        .with_min_len(4096)
        .map_init(
            || (vec![0f64; n0], vec![0f64; n0]),
            |(ra, rb), r| {
                a.row_f64(r, 0, 0, ra);
                b.row_f64(r, 0, 0, rb);
                u64::from(argmax(ra) == argmax(rb))
            },
        )
        .sum::<u64>();
    Ok(vec![vec![equal as f64]])
}

pub(crate) const COUNT_EQUAL: GgmlOpEntry = GgmlOpEntry {
    name: "count_equal",
    upstream: "COUNT_EQUAL",
    about: "how many rows of a and b have their maximum at the same index: argmax of each, then count_equal (test-backend-ops' graph). ggml's result is one i64; kedge reads its low 32 bits as an i32 (a count below 2^30: CUDA's kernel asserts that bound); exact comparison",
    dtypes: &[DType::F32],
    params: &[],
    tensors: |c| {
        matrix(c)?;
        Ok(vec![
            input("a", c.dtype, c.ne)?,
            input("b", c.dtype, c.ne)?,
            output("dst", DType::I32, [1, 1, 1, 1])?,
        ])
    },
    inputs: Inputs::Distinct,
    graph: |g, _c, x| {
        let a = g.argmax(x[0])?;
        let b = g.argmax(x[1])?;
        Ok(vec![g.count_equal(a, b)?])
    },
    // argmax takes matrices (ne[2] = ne[3] = 1): only ne[1], the rows compared, moves.
    probe: || {
        Some(ProbeBase {
            grid_dims: &[],
            row_dim: false,
            ..ProbeBase::rows([4, 1, 1, 1])
        })
    },
    smoke: &[s([4, 500, 1, 1]), s([2, 33, 1, 1])],
    boundaries: |_| {
        // D5: count-equal.cu:46 asserts ne < 2^30 (atomicAdd on int) while supports_op says yes.
        vec![Boundary::ne(
            "D5: argmax rows across 2^30 (GGML_ASSERT(ne < (1 << 30)))",
            1,
            1 << 30,
            [4, 0, 1, 1],
            Reach::SYNTHETIC,
        )
        .with_values(vec![(1 << 30) - 1, 1 << 30])]
    },
    upstream_line: |c| elementwise::type_ne_line("test_count_equal", "COUNT_EQUAL", c),
    nmse: Nmse::Fixed(0.0),
    reference: Reference::F64 {
        applies: |_| true,
        compute: count_equal_host,
        source: "kedge's count of equal argmaxes on every core (ggml's CPU backend, test-backend-ops' reference, takes each argmax on one thread)",
    },
    rows: Rows::Whole,
    reach: no_reach,
};

// ---- ARGSORT, TOP_K --------------------------------------------------------------------------

kedge_core::params! {
    /// ARGSORT's order and input layout.
    pub(crate) struct ArgsortParams {
        order: choice(["asc", "desc"]) = "asc", "sort order";
        row_pad: int(0..=1 << 20) = 0, "extra elements after each input row (a view: non-contiguous rows)";
    }
}

fn sort_order(c: &Case) -> SortOrder {
    if ArgsortParams::of(c).order == "desc" {
        SortOrder::Desc
    } else {
        SortOrder::Asc
    }
}

pub(crate) const ARGSORT: GgmlOpEntry = GgmlOpEntry {
    name: "argsort",
    upstream: "ARGSORT",
    about: "the indices that sort each row, i32; exact comparison (rows are shuffled distinct values, as test-backend-ops draws them). row_pad > 0 makes x a view with padded rows, which test_argsort cannot build: the line printed is the contiguous case (upstream reaches the padded one with --test-file: `69 26 5000 2 1 1 1 1 1 0 5000 2 1 1 4 24000 48000 48000 -`)",
    dtypes: &[DType::F32],
    params: ArgsortParams::SPECS,
    tensors: |c| {
        let x = {
            let pad = ArgsortParams::of(c).row_pad;
            if pad == 0 {
                input("x", c.dtype, c.ne)?
            } else {
                view_input("x", c.dtype, c.ne, with_dim(c.ne, 0, c.ne[0] + pad))?
            }
        };
        Ok(vec![x, output("dst", DType::I32, c.ne)?])
    },
    inputs: Inputs::Distinct,
    graph: |g, c, x| Ok(vec![g.argsort(x[0], sort_order(c))?]),
    probe: rows_probe,
    smoke: &[
        s([16, 10, 10, 10]),
        sp!([60, 10, 10, 10], |p: &mut ArgsortParams| p.order = "desc"),
        s([1023, 2, 1, 1]),
        s([1025, 2, 1, 1]),
        sp!([300, 3, 1, 1], |p: &mut ArgsortParams| p.row_pad = 5),
    ],
    boundaries: |_| {
        vec![
            noncontig_bound("D3"),
            row_start_2p31("C17", 1024, REACH_LOGITS),
            // argsort.cu: up to 1024 columns the bitonic kernel (one block per row, the padded
            // row in shared memory); past it CUB's segmented sort, chunked.
            Boundary::ne(
                "ne[0] across 1024 (bitonic in shared memory -> CUB segmented sort)",
                0,
                1025,
                [0, 4, 1, 1],
                Reach("MoE routing sorts n_expert (8 to 512) scores per token on the bitonic path; sampling sorts vocabulary rows on the CUB path"),
            )
            .with_values(vec![1024, 1025]),
        ]
    },
    upstream_line: |c| {
        let order = if sort_order(c) == SortOrder::Desc {
            ("GGML_SORT_ORDER_DESC", 1)
        } else {
            ("GGML_SORT_ORDER_ASC", 0)
        };
        repro(
            "ARGSORT",
            format!(
                "test_argsort({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                order.0
            ),
            format!("type={},ne={},order={}", c.dtype, vars_arr(&c.ne), order.1),
        )
    },
    nmse: Nmse::Fixed(0.0),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

kedge_core::params! {
    /// TOP_K's k.
    pub(crate) struct TopKParams {
        k: int(1..=1 << 20) = 4, "indices kept per row";
    }
}

pub(crate) const TOP_K: GgmlOpEntry = GgmlOpEntry {
    name: "top_k",
    upstream: "TOP_K",
    about: "the indices of each row's k largest values. Their order is unspecified (ggml's CPU backend swaps the first two on purpose; test-backend-ops compares the sets), so the graph sorts each row's k indices ascending after the op (cast to f32, argsort, get_rows, on the same backend) and the output is f32 [k, ne1, ne2, ne3], compared exactly. Rows are shuffled distinct values",
    dtypes: &[DType::F32],
    params: TopKParams::SPECS,
    tensors: |c| {
        let k = TopKParams::of(c).k;
        if k > c.ne[0] {
            return Err(bad(c, format!("k = {k} is more than a row's {}", c.ne[0])));
        }
        Ok(vec![
            input("x", c.dtype, c.ne)?,
            output("dst", DType::F32, with_dim(c.ne, 0, k))?,
        ])
    },
    inputs: Inputs::Distinct,
    graph: |g, c, x| {
        let k = TopKParams::of(c).k;
        let ne = c.ne;
        let rows = ne[1] * ne[2] * ne[3];
        let idx = g.top_k(x[0], k as i32)?;
        let f = g.cast(idx, Type::F32)?;
        let order = g.argsort(f, SortOrder::Asc)?;
        let col = g.reshape(f, &[1, k, rows])?;
        let order = g.reshape(order, &[k, rows])?;
        let sorted = g.get_rows(col, order)?;
        Ok(vec![g.reshape(sorted, &[k, ne[1], ne[2], ne[3]])?])
    },
    probe: rows_probe,
    smoke: &[
        s([16, 10, 10, 10]),
        sp!([60, 4, 1, 1], |p: &mut TopKParams| p.k = 1),
        sp!([1000, 3, 1, 1], |p: &mut TopKParams| p.k = 40),
        sp!([5, 2, 1, 1], |p: &mut TopKParams| p.k = 5),
    ],
    boundaries: |_| {
        // top-k.cu:79-97 chunks the sort (without CUB's top-k), so the bitonic 2^31 overflow
        // of ARGSORT (C17) does not apply: a control.
        vec![row_start_2p31("control for C17 (chunked)", 1024, REACH_LOGITS).with_params(|p: &mut TopKParams| p.k = 8)]
    },
    upstream_line: |c| {
        let k = TopKParams::of(c).k;
        repro(
            "TOP_K",
            format!(
                "test_top_k({}, {}, {k}, false)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne)
            ),
            format!("type={},ne={},k={k},ties=0", c.dtype, vars_arr(&c.ne)),
        )
    },
    nmse: Nmse::Fixed(0.0),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- GROUP_NORM, SOFT_MAX_BACK ---------------------------------------------------------------

kedge_core::params! {
    /// GROUP_NORM's groups and epsilon.
    pub(crate) struct GroupNormParams {
        num_groups: int(1..=1 << 20) = 32, "groups over ne[2]";
        eps: float(0.0..=f64::MAX) = 1e-6, "added to the variance";
    }
}

pub(crate) const GROUP_NORM: GgmlOpEntry = GgmlOpEntry {
    name: "group_norm",
    upstream: "GROUP_NORM",
    about:
        "normalizes each group of ne[2]/num_groups channels (ne0*ne1 each) to mean 0, variance 1",
    dtypes: &[DType::F32],
    params: GroupNormParams::SPECS,
    tensors: same_shape,
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = GroupNormParams::of(c);
        Ok(vec![g.group_norm(
            x[0],
            p.num_groups as i32,
            p.eps as f32,
        )?])
    },
    probe: || {
        Some(ProbeBase {
            ne: [8, 8, 32, 1],
            params: Params::new(),
            // Groups and ne[3] share grid.x; ne[2] carries the groups themselves.
            grid_dims: &[3],
            count_dim: Some(1),
            row_dim: false,
            vec_dim: true,
            launch_loop_dims: &[],
        })
    },
    smoke: &[
        s([64, 64, 320, 1]),
        s([9, 7, 32, 2]),
        sp!([16, 16, 30, 1], |p: &mut GroupNormParams| p.num_groups = 6),
    ],
    boundaries: |_| {
        // C9: norm.cu:475 passes ggml_nelements as `const int ne_elements`; at exactly 2^31 the
        // last group's end is INT_MIN and it is never written. 2^31 - 2^26 passes.
        vec![Boundary::ne(
            "C9: elements across 2^31 (int ne_elements: the last group unwritten)",
            2,
            2048,
            [1024, 1024, 0, 1],
            Reach("the SD VAE decoder's group norm at 4K ([1024, 1024, 2048])"),
        )
        .with_values(vec![1984, 2048])]
    },
    upstream_line: |c| {
        let p = GroupNormParams::of(c);
        repro(
            "GROUP_NORM",
            format!(
                "test_group_norm({}, {}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                p.num_groups,
                cf(p.eps)
            ),
            format!(
                "type={},ne={},num_groups={},eps={}",
                c.dtype,
                vars_arr(&c.ne),
                p.num_groups,
                fl(p.eps)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Slices(3),
    reach: no_reach,
};

kedge_core::params! {
    /// SOFT_MAX_BACK's scale (max_bias is 0: the CPU backend asserts it).
    pub(crate) struct SoftMaxBackParams {
        scale: float = 1.0, "the forward pass' scale";
    }
}

pub(crate) const SOFT_MAX_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "soft_max_back",
    upstream: "SOFT_MAX_BACK",
    about: "the gradient of soft_max_ext: dy in a, the softmax output in b; max_bias 0 (ggml's CPU backend asserts it, CUDA supports nothing else)",
    dtypes: &[DType::F32],
    params: SoftMaxBackParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("dy", c.dtype, c.ne)?,
            input("y", c.dtype, c.ne)?,
            output("dx", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Default,
    graph: |g, c, x| {
        let p = SoftMaxBackParams::of(c);
        Ok(vec![g.soft_max_ext_back(x[0], x[1], p.scale as f32, 0.0)?])
    },
    probe: rows_probe,
    smoke: &[
        s([10, 5, 4, 3]),
        sp!([16, 16, 1, 1], |p: &mut SoftMaxBackParams| p.scale = 0.125),
        s([1500, 2, 1, 1]),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = SoftMaxBackParams::of(c);
        repro(
            "SOFT_MAX_BACK",
            format!(
                "test_soft_max_back({}, {}, {}, 0.0f)",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.scale)
            ),
            format!(
                "type={},ne={},scale={},max_bias=0.000000",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.scale)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};

// ---- RMS_NORM_BACK ---------------------------------------------------------------------------

kedge_core::params! {
    /// RMS_NORM_BACK's epsilon.
    pub(crate) struct RmsNormBackParams {
        eps: float(0.0..=f64::MAX) = 1e-6, "added to the mean square";
    }
}

pub(crate) const RMS_NORM_BACK: GgmlOpEntry = GgmlOpEntry {
    name: "rms_norm_back",
    upstream: "RMS_NORM_BACK",
    about: "the gradient of rms_norm: dy in a, the forward input x in b, per row (training); inputs in [-10, 10) as test-backend-ops draws them",
    dtypes: &[DType::F32],
    params: RmsNormBackParams::SPECS,
    tensors: |c| {
        Ok(vec![
            input("dy", c.dtype, c.ne)?,
            input("x", c.dtype, c.ne)?,
            output("dx", c.dtype, c.ne)?,
        ])
    },
    inputs: Inputs::Uniform(-10.0, 10.0),
    graph: |g, c, x| {
        let p = RmsNormBackParams::of(c);
        Ok(vec![g.rms_norm_back(x[0], x[1], p.eps as f32)?])
    },
    probe: rows_probe,
    smoke: &[
        s([64, 5, 4, 3]),
        s([1025, 5, 4, 3]),
        sp!([64, 5, 4, 3], |p: &mut RmsNormBackParams| p.eps = 0.1),
    ],
    boundaries: none,
    upstream_line: |c| {
        let p = RmsNormBackParams::of(c);
        repro(
            "RMS_NORM_BACK",
            format!(
                "test_rms_norm_back({}, {}, {})",
                c.dtype.ggml_type(),
                cpp_arr(&c.ne),
                cf(p.eps)
            ),
            format!(
                "type={},ne={},eps={}",
                c.dtype,
                vars_arr(&c.ne),
                fl(p.eps)
            ),
        )
    },
    nmse: Nmse::Fixed(1e-7),
    reference: Reference::CpuBackend,
    rows: Rows::Independent,
    reach: no_reach,
};
