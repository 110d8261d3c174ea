//! Boundaries: values of a dimension or parameter where behaviour may change, each with the
//! workload that reaches it. An op declares its own (implementation thresholds); kedge
//! generates the ones that come from the hardware and the data (`generated`). Both expand to
//! cases the same way (`Boundary::cases`).

use crate::model::case::Case;
use crate::model::dtype::DType;
use crate::model::limits::LimitsProfile;
use crate::model::params::Params;
use crate::model::shape::Ne;

/// Which real workload puts a boundary value there, or that none is known.
#[derive(Debug, Clone, PartialEq)]
pub struct Reach(pub &'static str);

impl Reach {
    /// A boundary no known workload reaches.
    pub const SYNTHETIC: Reach = Reach("synthetic: no known model reaches it");
    /// A boundary kedge derived from the device's limits, not from the op's code.
    pub const GENERATED: Reach = Reach(
        "generated from the device's limits: no known workload named (see the case's reach note)",
    );
}

/// The axis a boundary moves.
#[derive(Debug, Clone, PartialEq)]
pub enum Axis {
    /// Dimension `ne[i]`.
    Ne(usize),
    /// A numeric parameter of the op.
    Param(&'static str),
}

/// A value where behaviour may change. The generator probes `at - 1`, `at`, `at + 1`
/// (or the explicit `values`), on `base` for the other dimensions.
#[derive(Debug, Clone, PartialEq)]
pub struct Boundary {
    /// What the boundary is, as reports name it (`grid.y limit`).
    pub label: String,
    /// The dimension or parameter it moves.
    pub axis: Axis,
    /// The value where behaviour may change.
    pub at: i64,
    /// Explicit probe values instead of at-1, at, at+1 (still both sides of `at`).
    pub values: Vec<i64>,
    /// The shape of the other dimensions.
    pub base: Ne,
    /// The op's parameters in every probe.
    pub params: Params,
    /// Only this dtype (`None`: the op's default).
    pub dtype: Option<DType>,
    /// Only these impls (empty: all impls of the op).
    pub impls: Vec<&'static str>,
    /// The workload that reaches it.
    pub reach: Reach,
}

impl Boundary {
    /// A boundary of dimension `ne[dim]` at `at`, on `base`.
    pub fn ne(label: impl Into<String>, dim: usize, at: i64, base: Ne, reach: Reach) -> Self {
        Boundary {
            label: label.into(),
            axis: Axis::Ne(dim),
            at,
            values: Vec::new(),
            base,
            params: Params::new(),
            dtype: None,
            impls: Vec::new(),
            reach,
        }
    }
    /// A boundary of parameter `name` at `at`, on `base`.
    pub fn param(
        label: impl Into<String>,
        name: &'static str,
        at: i64,
        base: Ne,
        reach: Reach,
    ) -> Self {
        Boundary {
            axis: Axis::Param(name),
            ..Boundary::ne(label, 0, at, base, reach)
        }
    }
    /// The same boundary with parameter `name` set in every probe.
    pub fn with_param(mut self, name: &str, v: impl Into<serde_json::Value>) -> Self {
        self.params.insert(name.to_string(), v.into());
        self
    }
    /// Probe these values instead of `at - 1`, `at`, `at + 1`.
    pub fn with_values(mut self, values: Vec<i64>) -> Self {
        self.values = values;
        self
    }
    /// Probe only these impls.
    pub fn only(mut self, impls: &[&'static str]) -> Self {
        self.impls = impls.to_vec();
        self
    }
    /// Probe in this dtype.
    pub fn dtype(mut self, d: DType) -> Self {
        self.dtype = Some(d);
        self
    }
    /// The values probed: `values`, or `at - 1`, `at`, `at + 1`.
    pub fn probe_values(&self) -> Vec<i64> {
        if self.values.is_empty() {
            vec![self.at - 1, self.at, self.at + 1]
        } else {
            self.values.clone()
        }
    }
    /// The boundary's cases for one impl (none when the boundary names other impls): one per
    /// probe value of at least 1, on `base` for the other dimensions. Not yet validated.
    pub fn cases(&self, op: &str, imp: &str, default_dtype: DType) -> Vec<Case> {
        if !self.impls.is_empty() && !self.impls.contains(&imp) {
            return Vec::new();
        }
        self.probe_values()
            .into_iter()
            .filter(|&v| v >= 1)
            .map(|v| {
                let mut c = Case::new(op, imp, self.dtype.unwrap_or(default_dtype), self.base);
                c.params = self.params.clone();
                match self.axis {
                    Axis::Ne(d) => c.ne[d] = v,
                    Axis::Param(p) => {
                        c.params.insert(p.to_string(), v.into());
                    }
                }
                c
            })
            .collect()
    }
}

/// Where the generated boundaries of an op start (`Op::probe_base`): a small valid shape and
/// which of its dimensions may move.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeBase {
    /// The base shape.
    pub ne: Ne,
    /// The parameters of every generated probe.
    pub params: Params,
    /// Dimensions (1..=3) probed at the grid.y/z limits, both sides.
    pub grid_dims: &'static [usize],
    /// The dimension moved to take the element count across 2^31 and 2^32 (and the byte
    /// count across 2^31); `None` leaves those out.
    pub count_dim: Option<usize>,
    /// Probe `ne[0]` as a row across the shared-memory opt-in limit.
    pub row_dim: bool,
}

impl ProbeBase {
    /// A row op: every dimension above `ne[0]` free, `ne[1]` carries the element count, `ne[0]` is
    /// the row.
    pub fn rows(ne: Ne) -> ProbeBase {
        ProbeBase {
            ne,
            params: Params::new(),
            grid_dims: &[1, 2, 3],
            count_dim: Some(1),
            row_dim: true,
        }
    }
}

/// The boundaries kedge derives from the hardware and the data, for kernels whose grid it
/// cannot read: each free dimension at the grid.y and grid.z limits (the value that fits and
/// one past it), the element count across 2^31 and 2^32 and the byte count across 2^31
/// (32-bit indices and offsets), and a row on both sides of the shared-memory opt-in limit.
/// Each probe keeps the other dimensions at the small base.
pub fn generated(base: &ProbeBase, limits: &LimitsProfile, elem_bytes: u64) -> Vec<Boundary> {
    let mut out = Vec::new();
    let gy = limits.grid_limit(1) as i64;
    let gz = limits.grid_limit(2) as i64;
    let mk = |label: String, dim: usize, values: Vec<i64>| {
        let mut b = Boundary::ne(
            label,
            dim,
            values[values.len() - 1],
            base.ne,
            Reach::GENERATED,
        )
        .with_values(values);
        b.params = base.params.clone();
        b
    };
    for &d in base.grid_dims {
        if gy == gz {
            out.push(mk(
                format!("ne[{d}] at the grid.y/z limit {gy} (generated)"),
                d,
                vec![gy, gy + 1],
            ));
        } else {
            for (axis, lim) in [("y", gy), ("z", gz)] {
                out.push(mk(
                    format!("ne[{d}] at the grid.{axis} limit {lim} (generated)"),
                    d,
                    vec![lim, lim + 1],
                ));
            }
        }
    }
    if let Some(d) = base.count_dim {
        let others: i64 = (0..4)
            .filter(|&i| i != d)
            .map(|i| base.ne[i].max(1))
            .product();
        let mut thresholds = vec![
            ("elements across 2^31 (signed 32-bit index)", 1i64 << 31),
            ("elements across 2^32 (unsigned 32-bit count)", 1i64 << 32),
        ];
        if elem_bytes > 1 {
            thresholds.push((
                "bytes across 2^31 (signed 32-bit byte offset)",
                (1i64 << 31) / elem_bytes as i64,
            ));
        }
        for (what, t) in thresholds {
            // The largest value whose count stays below the threshold, and the next.
            let lo = (t - 1) / others;
            if lo >= 1 {
                out.push(mk(
                    format!("ne[{d}]: {what} (generated)"),
                    d,
                    vec![lo, lo + 1],
                ));
            }
        }
    }
    if base.row_dim && elem_bytes > 0 {
        let n = (limits.shared_per_block_optin.value / elem_bytes) as i64;
        out.push(mk(
            format!(
                "ne[0]: a row of {n} elements fills the {}-byte shared-memory opt-in limit (generated)",
                limits.shared_per_block_optin.value
            ),
            0,
            vec![n, n + 1],
        ));
    }
    out
}
