//! The boundary matrix: for each line of probes (cases that differ in one dimension or
//! parameter only, as a boundary's probes do), the values across and every impl × allocation
//! mode × run kind down, each cell the verdict there.

use super::{axes_of, num, order};
use kedge_core::{AllocMode, CaseResult, Verdict};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One cell: the verdict of one case in one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cell {
    /// The result's verdict.
    pub verdict: Verdict,
    /// The case id, which marks the cell known when a baseline lists it.
    pub id: String,
    /// The result carries leak records.
    pub leaks: bool,
}

/// One row: an impl in one allocation mode and run kind.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MatrixRow {
    /// The impl (`impl` in JSON).
    #[serde(rename = "impl")]
    pub imp: String,
    /// The allocation mode.
    pub alloc: AllocMode,
    /// The run kind: `native`, `memcheck`, `cpu` ...
    pub under: String,
    /// One per value of the line; `None` where this row has no result there.
    pub cells: Vec<Option<Cell>>,
}

/// A line of probes: one axis moved, everything else fixed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeLine {
    /// The op.
    pub op: String,
    /// The dtype, by name.
    pub dtype: String,
    /// `ne[2]` or a parameter name.
    pub axis: String,
    /// The other coordinates: `ne=[64,1,*,1] eps=1e-6 seed=1`.
    pub fixed: String,
    /// The values probed, in increasing order.
    pub values: Vec<Value>,
    /// One per impl × allocation mode × run kind that has a result on the line.
    pub rows: Vec<MatrixRow>,
}

impl ProbeLine {
    /// Does any cell fail?
    pub(crate) fn has_failure(&self) -> bool {
        self.rows
            .iter()
            .flat_map(|r| r.cells.iter().flatten())
            .any(|c| c.verdict.is_failure())
    }
}

/// Every line of probes in the results with at least two values, op by op.
pub fn probe_lines(results: &[CaseResult]) -> Vec<ProbeLine> {
    type LineKey = (String, String, String, String);
    type RowKey = (String, AllocMode, String);
    type Rows<'r> = BTreeMap<RowKey, Vec<(Value, &'r CaseResult)>>;
    let mut lines: BTreeMap<LineKey, Rows<'_>> = BTreeMap::new();
    for r in order(results) {
        for (axis, value, fixed) in axes_of(r) {
            lines
                .entry((
                    r.case.op.clone(),
                    axis,
                    fixed,
                    r.case.dtype.name().to_string(),
                ))
                .or_default()
                .entry((r.case.imp.clone(), r.case.alloc, r.under.to_string()))
                .or_default()
                .push((value, r));
        }
    }
    let mut out = Vec::new();
    for ((op, axis, fixed, dtype), rows) in lines {
        let mut values: Vec<Value> = Vec::new();
        for (v, _) in rows.values().flatten() {
            if !values.contains(v) {
                values.push(v.clone());
            }
        }
        if values.len() < 2 {
            continue;
        }
        values.sort_by(|a, b| num(a).total_cmp(&num(b)));
        let rows = rows
            .into_iter()
            .map(|((imp, alloc, under), members)| MatrixRow {
                imp,
                alloc,
                under,
                cells: values
                    .iter()
                    .map(|v| {
                        members.iter().find(|(x, _)| x == v).map(|(_, r)| Cell {
                            verdict: r.verdict,
                            id: r.id.clone(),
                            leaks: super::has_leaks(r),
                        })
                    })
                    .collect(),
            })
            .collect();
        out.push(ProbeLine {
            op,
            dtype,
            axis,
            fixed,
            values,
            rows,
        });
    }
    out
}
