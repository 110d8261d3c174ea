//! Judging a big case on sampled rows. A case of 2^31 elements is there for its index widths:
//! what breaks, breaks at the rows where an offset crosses 2^31 or 2^32, at the first and the
//! last row, at a grid limit, or everywhere. So its inputs are drawn on the device (the same
//! values as the host draw), the whole output is scanned there for elements never written and
//! for non-finite values, and the rows at and around every crossing, the first and last rows and
//! a seeded sample of the rest are read back and compared with a reference computed for those
//! rows alone: the op on a case of just those rows (`sliced`), whose inputs are the same rows
//! of the same streams (`gathered_inputs`). That needs an op whose rows are independent of each
//! other and of where they are (`Op::row_sampling`).

use crate::contract::op::{Role, TensorSpec, Tolerance};
use crate::cuda::big::Scan;
use crate::error::CaseError;
use crate::judge::compare::{compare, nothing_written, Comparison};
use crate::model::case::Case;
use crate::model::host::HostTensor;
use crate::model::rng::Rng;
use crate::model::shape::dense_strides;
use crate::model::words::Verdict;
use serde::{Deserialize, Serialize};

/// From this many elements in a case's largest tensor, `Judging::Auto` judges on sampled rows.
const SAMPLED_FROM: u64 = 1 << 26;

/// Rows drawn at random (seeded by the case) beside the crossings and the ends.
const RANDOM_ROWS: usize = 64;

/// How a worker judges big cases' outputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Judging {
    /// Sampled rows for cases of `SAMPLED_FROM` elements or more whose op allows it.
    #[default]
    Auto,
    /// Every case whole.
    Full,
    /// Sampled rows for every case whose op allows it, whatever its size (to compare the two).
    Sampled,
}

impl Judging {
    /// `auto`, `full`, `sampled`.
    pub fn name(self) -> &'static str {
        match self {
            Judging::Auto => "auto",
            Judging::Full => "full",
            Judging::Sampled => "sampled",
        }
    }
    /// Whether a case whose largest tensor has `elements` elements is judged on sampled rows
    /// (when its op and impl allow it).
    fn samples(self, elements: u64) -> bool {
        match self {
            Judging::Auto => elements >= SAMPLED_FROM,
            Judging::Full => false,
            Judging::Sampled => true,
        }
    }
}

impl std::str::FromStr for Judging {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Judging::Auto),
            "full" => Ok(Judging::Full),
            "sampled" => Ok(Judging::Sampled),
            _ => Err(format!(
                "unknown judging '{s}' (known: auto, full, sampled)"
            )),
        }
    }
}

/// The case's rows (the product of `ne[1..3]`) when every tensor is dense and has them, or is
/// an input of one row that every row reads (a broadcast weight: `broadcast_row`), which
/// sampling needs; `None` otherwise.
pub(crate) fn rows_of(case: &Case, specs: &[TensorSpec]) -> Option<u64> {
    let rows = case.ne[1..]
        .iter()
        .try_fold(1u64, |a, &x| a.checked_mul(u64::try_from(x).ok()?))?;
    let fits = specs.iter().all(|s| {
        (s.ne[1..] == case.ne[1..] || broadcast_row(case, s))
            && s.nb == dense_strides(&s.ne, s.dtype)
    });
    (fits && rows > 0).then_some(rows)
}

/// An input of a single row (`ne[1..3]` all 1) in a case of more: every row of the case reads
/// the whole of it, so the sampled rows' reference takes it whole, drawn as the case draws it.
fn broadcast_row(case: &Case, s: &TensorSpec) -> bool {
    s.role == Role::Input && s.ne[1..] == [1, 1, 1] && case.ne[1..] != [1, 1, 1]
}

/// Whether a case is judged on sampled rows by an impl that can run it so: `judging` samples
/// its size, its op allows it, every tensor is a dense stack of the case's rows and every
/// output is of a type the device scans.
pub fn sampled(op: &dyn crate::contract::op::Op, case: &Case, judging: Judging) -> bool {
    if judging == Judging::Full || op.row_sampling(case).is_none() {
        return false;
    }
    let Ok(specs) = op.tensors(case) else {
        return false;
    };
    judging.samples(largest(&specs))
        && rows_of(case, &specs).is_some()
        && broadcasts_kept(op, case, &specs)
        && specs
            .iter()
            .filter(|s| s.role == Role::Output)
            .all(|s| crate::cuda::big::can_draw(s.dtype))
}

/// Whether each single-row input of the case is the same tensor in the case of its sampled rows
/// (`sliced`), as a broadcast weight is: then the sampled reference reads what every row read.
/// An input whose shape follows the rows (one row because the case has one) is not one.
fn broadcasts_kept(op: &dyn crate::contract::op::Op, case: &Case, specs: &[TensorSpec]) -> bool {
    if !specs.iter().any(|s| broadcast_row(case, s)) {
        return true;
    }
    let Ok(sliced_specs) = op.tensors(&sliced(case, 2)) else {
        return false;
    };
    sliced_specs.len() == specs.len()
        && specs
            .iter()
            .zip(&sliced_specs)
            .all(|(s, ss)| !broadcast_row(case, s) || (ss.ne == s.ne && ss.dtype == s.dtype))
}

/// Elements of the case's largest tensor.
fn largest(specs: &[TensorSpec]) -> u64 {
    specs.iter().map(TensorSpec::nelements).max().unwrap_or(0)
}

/// The rows a sampled judge compares, ascending: the first two and the last two; for every
/// tensor, the rows holding elements 2^31 - 1, 2^31, 2^32 - 1 and 2^32 and the byte offsets
/// 2^31 and 2^32, each with its neighbours; the rows at 65535 and 65536 of each of `ne[1..3]`
/// (a grid limit) with theirs; and `RANDOM_ROWS` rows drawn from the case's seed.
pub(crate) fn sample_rows(case: &Case, specs: &[TensorSpec], rows: u64) -> Vec<u64> {
    let mut v: Vec<u64> = vec![0, 1, rows.saturating_sub(2), rows.saturating_sub(1)];
    let mut around = |r: u64| v.extend([r.saturating_sub(1), r, r + 1]);
    for s in specs {
        let n0 = s.ne[0].max(1) as u64;
        let row_bytes = s.nb[1].max(1);
        for t in [1u64 << 31, 1u64 << 32] {
            around((t - 1) / n0);
            around(t / n0);
            around(t / row_bytes);
        }
    }
    let (n1, n2) = (case.ne[1].max(1) as u64, case.ne[2].max(1) as u64);
    for at in [65_535u64, 65_536] {
        around(at);
        around(at * n1);
        around(at * n1 * n2);
    }
    let mut rng = Rng::stream(case.seed, 0x5A3B_1E50);
    for _ in 0..RANDOM_ROWS {
        v.push(rng.below(rows.max(1)));
    }
    v.retain(|&r| r < rows);
    v.sort_unstable();
    v.dedup();
    v
}

/// The case of the sampled rows alone: the same op, dtype, parameters and seed on
/// `[ne0, n, 1, 1]`.
pub(crate) fn sliced(case: &Case, n: u64) -> Case {
    let mut c = case.clone();
    c.ne = [case.ne[0], n as i64, 1, 1];
    c
}

/// The sliced case's inputs: row `j` of input `i` is row `rows[j]` of the case's input `i`,
/// drawn from the same stream at that row's offset (`random_tensor(seed, i, .., lo, hi)` with
/// `ranges[i]`; for a big block-format input, its pool row: `BlockPool`), so the reference of
/// the sliced case is the reference of those rows.
pub(crate) fn gathered_inputs(
    case: &Case,
    specs: &[TensorSpec],
    sliced_specs: &[TensorSpec],
    rows: &[u64],
    ranges: &[(f32, f32)],
) -> Result<Vec<HostTensor>, CaseError> {
    let bad = |msg: String| CaseError::BadInput {
        op: case.op.clone(),
        msg,
    };
    if sliced_specs.len() != specs.len() {
        return Err(bad(format!(
            "{} tensors for sampled rows, {} for the case",
            sliced_specs.len(),
            specs.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (s, ss)) in specs.iter().zip(sliced_specs).enumerate() {
        if s.role != Role::Input {
            continue;
        }
        let n0 = s.ne[0];
        // A broadcast row is taken whole (its row 0), the others row by row.
        let (want, rows): ([i64; 4], &[u64]) = if broadcast_row(case, s) {
            (s.ne, &[0])
        } else {
            ([n0, rows.len() as i64, 1, 1], rows)
        };
        if ss.ne != want || ss.dtype != s.dtype {
            return Err(bad(format!(
                "input {}: the sampled rows' tensor is {:?} of {}, {want:?} expected",
                s.name, ss.ne, ss.dtype
            )));
        }
        let (lo, hi) = ranges.get(i).copied().unwrap_or((-1.0, 1.0));
        let integer = s.dtype.is_integer();
        let stream = Rng::stream(case.seed, i as u64);
        // A big block-format input holds rows of its pool, drawn as the pool's rows.
        let pool = crate::contract::op::BlockPool::of(case.seed, i as u64, s);
        let mut vals = Vec::with_capacity(rows.len() * n0 as usize);
        for &r in rows {
            let r = pool.as_ref().map_or(r, |p| p.pick(r));
            let mut rng = stream.skipped(r * n0 as u64);
            for _ in 0..n0 {
                vals.push(if integer {
                    rng.below(16) as f32
                } else {
                    rng.uniform(lo, hi)
                });
            }
        }
        out.push(HostTensor::from_f32(s.dtype, ss.ne, &vals));
    }
    Ok(out)
}

/// An output judged on its sampled rows and its scan: elements never written anywhere in it
/// (the scan), then wrong values in the sampled rows, then non-finite values anywhere where
/// the sampled reference is finite. `first_bad` and the output's shape name the element in
/// the whole output.
pub(crate) fn judge_output(
    spec: &TensorSpec,
    got_rows: &HostTensor,
    reference: &[f64],
    scan: Scan,
    rows: &[u64],
    tol: Tolerance,
) -> Comparison {
    let name = &spec.name;
    let mut c = compare(name, got_rows, reference, tol);
    let n0 = spec.ne[0].max(1) as u64;
    if let Some(f) = c.numbers.first_bad {
        let (j, k) = ((f / n0) as usize, f % n0);
        c.numbers.first_bad = rows.get(j).map(|r| r * n0 + k);
    }
    c.numbers.output_ne = Some(spec.ne);
    let sampled = format!(
        "judged on {} of its {} rows (crossings, the ends, a seeded sample), the whole of it scanned for poison and non-finite values",
        rows.len(),
        spec.nelements() / n0
    );
    if scan.elements > 0 && scan.unwritten == scan.elements {
        let mut w = nothing_written(name, scan.elements);
        w.numbers.output = Some(name.clone());
        w.numbers.output_ne = Some(spec.ne);
        return w;
    }
    if scan.unwritten > 0 {
        c.verdict = Verdict::UnwrittenOutput;
        c.numbers.unwritten = scan.unwritten;
        c.detail = format!(
            "{name}: {} of {} elements never written (poison counted on the device over the whole output); {sampled}",
            scan.unwritten, scan.elements
        );
        return c;
    }
    if c.verdict != Verdict::Pass {
        c.detail = format!("{} ({sampled})", c.detail);
        return c;
    }
    let reference_finite = reference.iter().all(|x| x.is_finite());
    if scan.nonfinite > 0 && reference_finite && spec.dtype.is_float() {
        c.verdict = Verdict::Nonfinite;
        c.numbers.nonfinite = scan.nonfinite;
        c.detail = format!(
            "{name}: {} non-finite elements (counted on the device over the whole output) where the sampled rows' reference is finite; {sampled}",
            scan.nonfinite
        );
        return c;
    }
    c.detail = format!("{name}: {sampled}");
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::op::random_tensor;
    use crate::model::dtype::DType;
    use crate::model::host::POISON_F32;

    /// Whether `gathered_inputs` draws what `random_tensor` draws for the whole case.
    fn draws_agree(case: &Case, spec: &TensorSpec, index: usize, rows: &[u64]) -> bool {
        let whole = random_tensor(case.seed, index as u64, spec, -1.0, 1.0);
        let n0 = spec.ne[0] as usize;
        let e = spec.dtype.size() as usize;
        let sl = sliced(case, rows.len() as u64);
        let ss = TensorSpec::dense(&spec.name, Role::Input, spec.dtype, sl.ne);
        let Ok(ss) = ss else { return false };
        let specs = vec![spec.clone(); index + 1];
        let sspecs = vec![ss; index + 1];
        let Ok(g) = gathered_inputs(case, &specs, &sspecs, rows, &vec![(-1.0, 1.0); index + 1])
        else {
            return false;
        };
        let Some(got) = g.get(index) else {
            return false;
        };
        rows.iter().enumerate().all(|(j, &r)| {
            let a = &whole.bytes[r as usize * n0 * e..(r as usize + 1) * n0 * e];
            let b = &got.bytes[j * n0 * e..(j + 1) * n0 * e];
            a == b
        })
    }

    fn spec(name: &str, role: Role, ne: [i64; 4]) -> TensorSpec {
        TensorSpec::dense(name, role, DType::F32, ne).expect("spec")
    }

    #[test]
    fn rows_at_every_crossing_both_ends_and_a_seeded_sample() {
        // [64, 2^25 + 1]: element 2^31 starts row 2^25.
        let c = Case::new("x", "y", DType::F32, [64, (1 << 25) + 1, 1, 1]);
        let specs = [spec("a", Role::Input, c.ne), spec("d", Role::Output, c.ne)];
        let rows = rows_of(&c, &specs).expect("row-local");
        let r = sample_rows(&c, &specs, rows);
        for want in [0, 1, (1 << 25) - 1, 1 << 25, (1 << 25) - 2, 65_535, 65_536] {
            assert!(r.contains(&want), "row {want} missing");
        }
        assert!(r.windows(2).all(|w| w[0] < w[1]));
        assert!(r.iter().all(|&x| x < rows));
        // A few hundred rows at most; the seeded sample is the same for the same case.
        assert!(r.len() < RANDOM_ROWS + 60, "{}", r.len());
        assert_eq!(sample_rows(&c, &specs, rows), r);
        let mut other = c.clone();
        other.seed = 2;
        assert_ne!(sample_rows(&other, &specs, rows), r);
    }

    #[test]
    fn only_dense_tensors_with_the_cases_rows_are_sampled() {
        let c = Case::new("x", "y", DType::F32, [64, 8, 2, 1]);
        assert_eq!(
            rows_of(
                &c,
                &[
                    spec("a", Role::Input, c.ne),
                    spec("d", Role::Output, [1, 8, 2, 1])
                ]
            ),
            Some(16)
        );
        assert_eq!(
            rows_of(&c, &[spec("b", Role::Input, [64, 1, 2, 1])]),
            None,
            "a broadcast input's rows are not the case's"
        );
        let strided = TensorSpec::strided("v", Role::Input, DType::F32, c.ne, [4, 512, 4096, 8192])
            .expect("view");
        assert_eq!(rows_of(&c, &[strided]), None);
    }

    #[test]
    fn a_broadcast_row_input_is_sampled_and_taken_whole() {
        let c = Case::new("x", "y", DType::F32, [64, 8, 2, 1]);
        let x = spec("x", Role::Input, c.ne);
        let w = spec("w", Role::Input, [64, 1, 1, 1]);
        let d = spec("d", Role::Output, c.ne);
        assert_eq!(rows_of(&c, &[x.clone(), w.clone(), d.clone()]), Some(16));
        assert_eq!(
            rows_of(&c, &[x.clone(), spec("d", Role::Output, [64, 1, 1, 1])]),
            None,
            "an output of one row is not the case's rows"
        );
        // The sampled rows' reference reads the weight as the case drew it (stream 1, from its
        // start) and x's rows 3, 9 and 15 from stream 0.
        let rows = [3u64, 9, 15];
        let sl = sliced(&c, rows.len() as u64);
        let sx = spec("x", Role::Input, sl.ne);
        let g = gathered_inputs(
            &c,
            &[x.clone(), w.clone(), d.clone()],
            &[sx.clone(), w.clone(), spec("d", Role::Output, sl.ne)],
            &rows,
            &[(-1.0, 1.0); 3],
        )
        .expect("gathered");
        assert_eq!(g.len(), 2);
        assert_eq!(g[1].ne, [64, 1, 1, 1]);
        assert_eq!(
            g[1].bytes,
            random_tensor(c.seed, 1, &w, -1.0, 1.0).bytes,
            "the weight is the case's whole draw"
        );
        let whole_x = random_tensor(c.seed, 0, &x, -1.0, 1.0);
        let row = 64 * 4;
        for (j, &r) in rows.iter().enumerate() {
            assert_eq!(
                g[0].bytes[j * row..(j + 1) * row],
                whole_x.bytes[r as usize * row..(r as usize + 1) * row]
            );
        }
        // A sliced case whose single-row input follows the rows is refused, not guessed.
        assert!(gathered_inputs(
            &c,
            &[x, w],
            &[sx, spec("w", Role::Input, [64, 3, 1, 1])],
            &rows,
            &[(-1.0, 1.0); 2],
        )
        .is_err());
    }

    #[test]
    fn gathered_rows_are_the_rows_of_the_whole_draw() {
        let c = Case::new("x", "y", DType::F32, [33, 300, 2, 1]);
        for d in [DType::F32, DType::F16, DType::Bf16, DType::I32] {
            let s = TensorSpec::dense("a", Role::Input, d, c.ne).expect("spec");
            assert!(draws_agree(&c, &s, 0, &[0, 1, 7, 299, 300, 599]), "{d}");
            assert!(draws_agree(&c, &s, 2, &[5, 598]), "{d} index 2");
        }
    }

    fn out_rows(vals: &[f32], n0: i64) -> HostTensor {
        HostTensor::from_f32(DType::F32, [n0, vals.len() as i64 / n0, 1, 1], vals)
    }

    #[test]
    fn a_sampled_judge_sees_unwritten_elements_anywhere_and_wrong_values_in_its_rows() {
        let d = spec("dst", Role::Output, [4, 1000, 1, 1]);
        let rows = [0u64, 500, 999];
        let reference: Vec<f64> = (0..12).map(|i| i as f64 * 0.25).collect();
        let good: Vec<f32> = reference.iter().map(|&x| x as f32).collect();
        let all = Scan {
            unwritten: 0,
            nonfinite: 0,
            elements: 4000,
        };
        let tol = Tolerance::F32;
        let c = judge_output(&d, &out_rows(&good, 4), &reference, all, &rows, tol);
        assert_eq!(c.verdict, Verdict::Pass, "{}", c.detail);
        assert!(
            c.detail.contains("judged on 3 of its 1000 rows"),
            "{}",
            c.detail
        );
        // Elements never written outside the sampled rows: the scan sees them.
        let hole = Scan {
            unwritten: 7,
            ..all
        };
        let c = judge_output(&d, &out_rows(&good, 4), &reference, hole, &rows, tol);
        assert_eq!(c.verdict, Verdict::UnwrittenOutput);
        assert_eq!(c.numbers.unwritten, 7);
        let none = Scan {
            unwritten: 4000,
            ..all
        };
        let poison = vec![f32::from_bits(POISON_F32); 12];
        let c = judge_output(&d, &out_rows(&poison, 4), &reference, none, &rows, tol);
        assert_eq!(c.verdict, Verdict::SilentFailure);
        // A wrong value in row 500: named in the whole output's coordinates.
        let mut bad = good.clone();
        bad[4 + 2] = 9.0;
        let c = judge_output(&d, &out_rows(&bad, 4), &reference, all, &rows, tol);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(500 * 4 + 2));
        assert_eq!(c.numbers.first_bad_coords(), Some([2, 500, 0, 0]));
        // Non-finite values elsewhere, where the sampled reference is finite.
        let inf = Scan {
            nonfinite: 3,
            ..all
        };
        let c = judge_output(&d, &out_rows(&good, 4), &reference, inf, &rows, tol);
        assert_eq!(c.verdict, Verdict::Nonfinite);
        assert_eq!(c.numbers.nonfinite, 3);
    }
}
