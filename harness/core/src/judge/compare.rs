//! Layers 1 and 2: compare a device output with the f64 reference (NMSE as test-backend-ops
//! computes it, plus max-abs / max-rel and the first bad index), and find poisoned elements
//! that no thread wrote.

use crate::contract::op::Tolerance;
use crate::judge::result::Numbers;
use crate::model::dtype::DType;
use crate::model::host::{poison_pattern, HostTensor};
use crate::model::words::Verdict;
use rayon::prelude::*;

/// One output judged.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// Pass, or what is wrong.
    pub verdict: Verdict,
    /// The numbers behind it.
    pub numbers: Numbers,
    /// One sentence a person reads.
    pub detail: String,
}

/// Elements of `out` (in logical order) that still hold the poison pattern, and how many
/// elements it has. When they are equal no thread wrote anything, which needs no reference to
/// judge.
pub fn poisoned_elements(out: &HostTensor) -> (u64, u64) {
    let n = out
        .ne
        .iter()
        .fold(1u64, |a, &x| a.saturating_mul(x.max(0) as u64));
    let poison = poison_pattern(out.dtype);
    let rows = out_rows(out);
    let hit = (0..rows.count as usize)
        .into_par_iter()
        .with_min_len(rows.min_len)
        .map(|row| {
            let (base, _) = rows.at(row as u64);
            (0..rows.n0)
                .filter(|i0| {
                    let off = (base + i0 * rows.nb0) as usize;
                    out.bytes[off..off + rows.elem] == *poison.as_slice()
                })
                .count() as u64
        })
        .sum::<u64>();
    (hit, n)
}

/// Whether every element of `out` (in logical order) still holds the poison pattern: what
/// `poisoned_elements` says when its two counts are equal, but it stops at the first written
/// element (usually the first), so judging a written output costs nothing here.
pub(crate) fn all_poisoned(out: &HostTensor) -> bool {
    let poison = poison_pattern(out.dtype);
    let rows = out_rows(out);
    rows.count > 0
        && rows.n0 > 0
        && !(0..rows.count as usize)
            .into_par_iter()
            .with_min_len(rows.min_len)
            .any(|row| {
                let (base, _) = rows.at(row as u64);
                (0..rows.n0).any(|i0| {
                    let off = (base + i0 * rows.nb0) as usize;
                    out.bytes[off..off + rows.elem] != *poison.as_slice()
                })
            })
}

/// The verdict for an output of `n` elements that not one thread wrote: the op did no work at
/// all. Reported apart from a partly unwritten output because that is how the sdpa_prefill
/// incident looked: a request that "succeeded" with nothing in it. It needs no reference.
pub(crate) fn nothing_written(name: &str, n: u64) -> Comparison {
    Comparison {
        verdict: Verdict::SilentFailure,
        numbers: Numbers {
            unwritten: n,
            compared: n,
            first_bad: (n > 0).then_some(0),
            ..Default::default()
        },
        detail: format!(
            "{name}: no error, but no work done: all {n} elements still hold the poison pattern"
        ),
    }
}

pub use crate::model::digest::digest;

/// An output walked row by row: row `r` (over ne1, ne2, ne3) starts at a byte offset
/// computed once, and its ne0 elements are `nb0` apart.
struct Rows {
    count: u64,
    n0: u64,
    nb0: u64,
    elem: usize,
    ne: [u64; 4],
    nb: [u64; 4],
    /// Rows per rayon task: about 16 Ki elements.
    min_len: usize,
}

impl Rows {
    /// The byte offset of row `r` and the flat index of its first element.
    #[inline]
    fn at(&self, r: u64) -> (u64, u64) {
        let i1 = r % self.ne[1];
        let i2 = (r / self.ne[1]) % self.ne[2];
        let i3 = r / (self.ne[1] * self.ne[2]);
        (
            i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3],
            r * self.n0,
        )
    }
}

fn out_rows(out: &HostTensor) -> Rows {
    let ne = out.ne.map(|x| x.max(0) as u64);
    // A block-format tensor has no elements to read here (see `compare`).
    let count = if ne[0] == 0 || out.dtype.is_block() {
        0
    } else {
        ne[1].saturating_mul(ne[2]).saturating_mul(ne[3])
    };
    Rows {
        count,
        n0: ne[0],
        nb0: out.nb[0],
        elem: out.dtype.size() as usize,
        ne: ne.map(|x| x.max(1)),
        nb: out.nb,
        min_len: ((1u64 << 14) / ne[0].max(1)).max(1) as usize,
    }
}

/// Compare one output. `reference` is in the output's logical order.
pub fn compare(name: &str, out: &HostTensor, reference: &[f64], tol: Tolerance) -> Comparison {
    let n = reference.len() as u64;
    if out.dtype.is_block() {
        return Comparison {
            verdict: Verdict::Unsupported,
            numbers: Numbers::default(),
            detail: format!(
                "{name}: a {} output is compared after its ggml build dequantizes it; this one was not",
                out.dtype
            ),
        };
    }
    let acc = accumulate_dtype(out, reference, tol);
    let nmse = if acc.norm > 0.0 {
        acc.err / acc.norm
    } else {
        acc.err
    };
    let mut numbers = Numbers {
        nmse,
        max_abs: acc.max_abs,
        max_rel: acc.max_rel,
        first_bad: None,
        unwritten: acc.unwritten,
        nonfinite: acc.nonfinite,
        compared: n,
        threshold_nmse: tol.nmse,
        ..Numbers::default()
    };
    let (verdict, detail) = verdict_of(name, n, nmse, &acc, tol, &mut numbers);
    numbers.output = Some(name.to_string());
    numbers.output_ne = Some(out.ne);
    numbers.elem_tolerance = Some([tol.elem_abs, tol.elem_rel]);
    if let Some(i) = numbers.first_bad.filter(|&i| i < n) {
        numbers.first_bad_got = Some(out_value(out, i));
        numbers.first_bad_expected = Some(reference[i as usize]);
    }
    Comparison {
        verdict,
        numbers,
        detail,
    }
}

/// The sums and firsts of a plain-type output against its reference, the loop fixed to the
/// output's dtype.
fn accumulate_dtype(out: &HostTensor, reference: &[f64], tol: Tolerance) -> Acc {
    let rows = out_rows(out);
    let poison = poison_pattern(out.dtype);
    // The element size and the decoding are fixed per call, so the inner loop compares a
    // fixed-size array with the poison and decodes without a branch on the dtype.
    match out.dtype {
        DType::F32 => accumulate::<4, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| f32::from_le_bytes(b) as f64,
            true,
        ),
        DType::I32 => accumulate::<4, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| i32::from_le_bytes(b) as f64,
            false,
        ),
        DType::F16 => accumulate::<2, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| half::f16::from_bits(u16::from_le_bytes(b)).to_f64(),
            false,
        ),
        DType::Bf16 => accumulate::<2, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| half::bf16::from_bits(u16::from_le_bytes(b)).to_f64(),
            false,
        ),
        DType::U8 => {
            accumulate::<1, _>(out, &rows, reference, tol, &poison, |b| b[0] as f64, false)
        }
        DType::I8 => accumulate::<1, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| b[0] as i8 as f64,
            false,
        ),
        DType::I16 => accumulate::<2, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| i16::from_le_bytes(b) as f64,
            false,
        ),
        DType::I64 => accumulate::<8, _>(
            out,
            &rows,
            reference,
            tol,
            &poison,
            |b| i64::from_le_bytes(b) as f64,
            false,
        ),
        _ => unreachable!("compare returns before this for block formats"),
    }
}

/// The verdict and its words, worst first: nothing written, some elements unwritten, values
/// not finite, wrong values, else a pass; `numbers.first_bad` is set to the first element of
/// the kind that decided.
fn verdict_of(
    name: &str,
    n: u64,
    nmse: f64,
    acc: &Acc,
    tol: Tolerance,
    numbers: &mut Numbers,
) -> (Verdict, String) {
    if n > 0 && acc.unwritten == n {
        numbers.first_bad = acc.first_unwritten;
        (Verdict::SilentFailure, nothing_written(name, n).detail)
    } else if acc.unwritten > 0 {
        numbers.first_bad = acc.first_unwritten;
        (
            Verdict::UnwrittenOutput,
            format!(
                "{name}: {} of {n} elements still hold the poison pattern (first at flat index {})",
                acc.unwritten,
                acc.first_unwritten.unwrap_or(0)
            ),
        )
    } else if acc.nonfinite > 0 {
        numbers.first_bad = acc.first_nonfinite;
        (
            Verdict::Nonfinite,
            format!(
                "{name}: {} non-finite values where the reference is finite (first at {})",
                acc.nonfinite,
                acc.first_nonfinite.unwrap_or(0)
            ),
        )
    } else if nmse > tol.nmse || nmse.is_nan() {
        numbers.first_bad = acc.first_bad;
        numbers.worst_bad = acc
            .worst_bad
            .map(|(_, i)| i)
            .filter(|&w| Some(w) != acc.first_bad);
        (
            Verdict::WrongValues,
            format!(
                "{name}: NMSE {nmse:.3e} > {:.1e}, max abs {:.3e}{}{}",
                tol.nmse,
                acc.max_abs,
                acc.first_bad
                    .map(|i| format!(", first bad at flat index {i}"))
                    .unwrap_or_default(),
                numbers
                    .worst_bad
                    .map(|w| format!(", worst at flat index {w}"))
                    .unwrap_or_default()
            ),
        )
    } else {
        (
            Verdict::Pass,
            format!("{name}: NMSE {nmse:.3e} <= {:.1e}", tol.nmse),
        )
    }
}

/// Sums and firsts over the elements compared so far.
struct Acc {
    err: f64,
    norm: f64,
    max_abs: f64,
    max_rel: f64,
    first_bad: Option<u64>,
    /// The element past the element tolerance farthest from its reference, and by how much:
    /// where a few values are far off among many a step off (a row never written among rows
    /// rounded differently), this names the far ones.
    worst_bad: Option<(f64, u64)>,
    first_unwritten: Option<u64>,
    first_nonfinite: Option<u64>,
    unwritten: u64,
    nonfinite: u64,
}

impl Acc {
    fn zero() -> Acc {
        Acc {
            err: 0.0,
            norm: 0.0,
            max_abs: 0.0,
            max_rel: 0.0,
            first_bad: None,
            worst_bad: None,
            first_unwritten: None,
            first_nonfinite: None,
            unwritten: 0,
            nonfinite: 0,
        }
    }
    fn merge(a: Acc, b: Acc) -> Acc {
        let min_opt = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) => x,
            (None, y) => y,
        };
        Acc {
            err: a.err + b.err,
            norm: a.norm + b.norm,
            max_abs: a.max_abs.max(b.max_abs),
            max_rel: a.max_rel.max(b.max_rel),
            first_bad: min_opt(a.first_bad, b.first_bad),
            worst_bad: match (a.worst_bad, b.worst_bad) {
                (Some(x), Some(y)) => Some(if y.0 > x.0 || (y.0 == x.0 && y.1 < x.1) {
                    y
                } else {
                    x
                }),
                (x, None) => x,
                (None, y) => y,
            },
            first_unwritten: min_opt(a.first_unwritten, b.first_unwritten),
            first_nonfinite: min_opt(a.first_nonfinite, b.first_nonfinite),
            unwritten: a.unwritten + b.unwritten,
            nonfinite: a.nonfinite + b.nonfinite,
        }
    }
}

/// The comparison's pass over an output of `E`-byte elements that `decode` reads.
fn accumulate<const E: usize, F>(
    out: &HostTensor,
    rows: &Rows,
    reference: &[f64],
    tol: Tolerance,
    poison: &[u8],
    decode: F,
    f32_words: bool,
) -> Acc
where
    F: Fn([u8; E]) -> f64 + Sync,
{
    let n = reference.len() as u64;
    let mut pat = [0u8; E];
    for (d, s) in pat.iter_mut().zip(poison) {
        *d = *s;
    }
    // By rows: the offset of a row is computed once and each element is one stride further,
    // so the inner loop has no division (a 2^31-element output is judged in seconds).
    (0..rows.count as usize)
        .into_par_iter()
        .with_min_len(rows.min_len)
        .fold(Acc::zero, |mut a, row| {
            let (base, flat0) = rows.at(row as u64);
            let len = rows.n0.min(n.saturating_sub(flat0)) as usize;
            let refs = &reference[flat0 as usize..flat0 as usize + len];
            if rows.nb0 == E as u64 {
                // A contiguous row: one slice of bytes beside one of the reference.
                let b0 = base as usize;
                let bytes = &out.bytes[b0..b0 + len * E];
                // f32 rows at an aligned address are read as words (the comparison's speed
                // on big outputs); anything else goes through `plain_block` and `step`.
                let words = if f32_words && E == 4 {
                    bytemuck::try_cast_slice::<u8, u32>(bytes).ok()
                } else {
                    None
                };
                if let Some(words) = words {
                    let pat = u32::from_le_bytes([pat[0], pat[1], pat[2], pat[3]]);
                    for (blk, (wb, rb)) in words.chunks(BLOCK).zip(refs.chunks(BLOCK)).enumerate() {
                        if !plain_f32_block(&mut a, wb, rb, pat, tol) {
                            let first = flat0 + (blk * BLOCK) as u64;
                            let pat = pat.to_le_bytes();
                            for (k, (&w, &r)) in wb.iter().zip(rb).enumerate() {
                                step(
                                    &mut a,
                                    first + k as u64,
                                    w.to_le_bytes(),
                                    r,
                                    &pat,
                                    &|b: [u8; 4]| f32::from_le_bytes(b) as f64,
                                    tol,
                                );
                            }
                        }
                    }
                    return a;
                }
                for (blk, (bb, rb)) in bytes.chunks(BLOCK * E).zip(refs.chunks(BLOCK)).enumerate() {
                    let first = flat0 + (blk * BLOCK) as u64;
                    if !plain_block(&mut a, bb, rb, &pat, &decode, tol) {
                        for (k, (chunk, &r)) in bb.chunks_exact(E).zip(rb).enumerate() {
                            let mut raw = [0u8; E];
                            raw.copy_from_slice(chunk);
                            step(&mut a, first + k as u64, raw, r, &pat, &decode, tol);
                        }
                    }
                }
            } else {
                for (k, &r) in refs.iter().enumerate() {
                    let off = (base + k as u64 * rows.nb0) as usize;
                    let mut raw = [0u8; E];
                    raw.copy_from_slice(&out.bytes[off..off + E]);
                    step(&mut a, flat0 + k as u64, raw, r, &pat, &decode, tol);
                }
            }
            a
        })
        .reduce(Acc::zero, Acc::merge)
}

/// Elements a contiguous row is judged by at a time (see [`plain_block`]).
const BLOCK: usize = 64;

/// A block of contiguous elements in which nothing needs [`step`]'s care (no poison, nothing
/// non-finite or at the float range's edge, nothing past the element tolerance), added to `a`
/// without a branch per element; `false`, with `a` untouched, when something does (then the
/// block is judged element by element). The same sums, maxima and firsts as [`step`], in
/// four interleaved partial sums (so the NMSE may differ from a sequential sum in its last
/// bits); most outputs are entirely such blocks, and this is the comparison's speed.
#[inline(always)]
fn plain_block<const E: usize, F: Fn([u8; E]) -> f64>(
    a: &mut Acc,
    bytes: &[u8],
    refs: &[f64],
    pat: &[u8; E],
    decode: &F,
    tol: Tolerance,
) -> bool {
    const LIMIT: f64 = f32::MAX as f64;
    let (mut err, mut norm) = ([0.0f64; 4], [0.0f64; 4]);
    let (mut max_abs, mut max_rel) = (0.0f64, 0.0f64);
    let mut plain = true;
    for (k, (chunk, &r)) in bytes.chunks_exact(E).zip(refs).enumerate() {
        let mut raw = [0u8; E];
        raw.copy_from_slice(chunk);
        let d = decode(raw);
        let e = (d - r).abs();
        let ra = r.abs();
        // NaN fails every comparison, so a NaN anywhere makes the block not plain.
        plain &=
            raw != *pat && d.abs() < LIMIT && ra < LIMIT && e <= tol.elem_abs + tol.elem_rel * ra;
        err[k % 4] += e * e;
        norm[k % 4] += r * r;
        max_abs = if e > max_abs { e } else { max_abs };
        let rel = if r != 0.0 { e / ra } else { 0.0 };
        max_rel = if rel > max_rel { rel } else { max_rel };
    }
    if plain {
        a.err += (err[0] + err[1]) + (err[2] + err[3]);
        a.norm += (norm[0] + norm[1]) + (norm[2] + norm[3]);
        a.max_abs = a.max_abs.max(max_abs);
        a.max_rel = a.max_rel.max(max_rel);
    }
    plain
}

/// [`plain_block`] for f32 words, four lanes at a time without a branch, so the compiler can
/// use vector instructions: the same test of each element, the same maxima, the sums in four
/// partial sums.
#[inline(always)]
fn plain_f32_block(a: &mut Acc, words: &[u32], refs: &[f64], pat: u32, tol: Tolerance) -> bool {
    const LIMIT: f64 = f32::MAX as f64;
    let (mut err, mut norm) = ([0.0f64; 4], [0.0f64; 4]);
    let (mut max_abs, mut max_rel) = ([0.0f64; 4], [0.0f64; 4]);
    let mut plain = [true; 4];
    let n = words.len().min(refs.len());
    let (w4, wt) = words[..n].split_at(n / 4 * 4);
    let (r4, rt) = refs[..n].split_at(n / 4 * 4);
    let mut lane = |l: usize, w: u32, r: f64| {
        let d = f32::from_bits(w) as f64;
        let e = (d - r).abs();
        let ra = r.abs();
        // NaN fails every comparison, so a NaN makes the block not plain.
        plain[l] &=
            (w != pat) & (d.abs() < LIMIT) & (ra < LIMIT) & (e <= tol.elem_abs + tol.elem_rel * ra);
        err[l] += e * e;
        norm[l] += r * r;
        max_abs[l] = if e > max_abs[l] { e } else { max_abs[l] };
        let rel = if ra > 0.0 { e / ra } else { 0.0 };
        max_rel[l] = if rel > max_rel[l] { rel } else { max_rel[l] };
    };
    for (w, r) in w4.chunks_exact(4).zip(r4.chunks_exact(4)) {
        for l in 0..4 {
            lane(l, w[l], r[l]);
        }
    }
    for (l, (&w, &r)) in wt.iter().zip(rt).enumerate() {
        lane(l, w, r);
    }
    if !plain.iter().all(|&p| p) {
        return false;
    }
    a.err += (err[0] + err[1]) + (err[2] + err[3]);
    a.norm += (norm[0] + norm[1]) + (norm[2] + norm[3]);
    a.max_abs = max_abs.iter().fold(a.max_abs, |m, &x| m.max(x));
    a.max_rel = max_rel.iter().fold(a.max_rel, |m, &x| m.max(x));
    true
}

/// One element of the comparison: `raw` read at flat index `i`, `r` its reference.
#[inline(always)]
fn step<const E: usize, F: Fn([u8; E]) -> f64>(
    a: &mut Acc,
    i: u64,
    raw: [u8; E],
    r: f64,
    pat: &[u8; E],
    decode: &F,
    tol: Tolerance,
) {
    if raw == *pat {
        a.unwritten += 1;
        a.first_unwritten.get_or_insert(i);
        return;
    }
    let d = decode(raw);
    if !d.is_finite() || !r.is_finite() || inf_like(d) || inf_like(r) {
        // test-backend-ops' rule: a value at the float range's edge stands for an infinity
        // of its sign (ggml's CUDA diag_mask_inf writes x - FLT_MAX where the CPU writes
        // -INFINITY, and upstream's harness accepts both).
        let same = (d.is_nan() && r.is_nan())
            || d == r
            || (inf_like(d) && inf_like(r) && d.is_sign_negative() == r.is_sign_negative());
        if !same {
            a.nonfinite += 1;
            a.first_nonfinite.get_or_insert(i);
        }
        return;
    }
    let e = (d - r).abs();
    a.err += e * e;
    a.norm += r * r;
    a.max_abs = a.max_abs.max(e);
    if r != 0.0 {
        a.max_rel = a.max_rel.max(e / r.abs());
    }
    if e > tol.elem_abs + tol.elem_rel * r.abs() {
        a.first_bad.get_or_insert(i);
        if a.worst_bad.is_none_or(|(w, _)| e > w) {
            a.worst_bad = Some((e, i));
        }
    }
}

/// An infinity, or a value as large as the largest f32 (test-backend-ops' `isinf_or_max`).
#[inline]
fn inf_like(x: f64) -> bool {
    x.is_infinite() || x.abs() >= f32::MAX as f64
}

#[inline]
fn out_value(out: &HostTensor, flat: u64) -> f64 {
    let raw = out.raw_at(flat);
    crate::model::host::read_elem(out.dtype, raw, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::digest::words_digest;

    /// `compare`'s sums, maxima, counts and firsts, element by element through `step` alone.
    fn by_steps(out: &HostTensor, reference: &[f64], tol: Tolerance) -> Acc {
        let mut a = Acc::zero();
        let pat: [u8; 4] = crate::model::host::POISON_F32.to_le_bytes();
        for (i, &r) in reference.iter().enumerate() {
            let raw: [u8; 4] = out.raw_at(i as u64).try_into().unwrap();
            step(
                &mut a,
                i as u64,
                raw,
                r,
                &pat,
                &|b| f32::from_le_bytes(b) as f64,
                tol,
            );
        }
        a
    }

    /// `accumulate` over an f32 output, by words (`f32_words`) or by bytes.
    fn by_blocks(out: &HostTensor, reference: &[f64], f32_words: bool) -> Acc {
        let poison = crate::model::host::POISON_F32.to_le_bytes();
        accumulate::<4, _>(
            out,
            &out_rows(out),
            reference,
            Tolerance::F32,
            &poison,
            |b| f32::from_le_bytes(b) as f64,
            f32_words,
        )
    }

    fn assert_same(got: &Acc, want: &Acc, what: &str) {
        assert_eq!(
            (got.unwritten, got.first_unwritten),
            (want.unwritten, want.first_unwritten),
            "{what}"
        );
        assert_eq!(
            (got.nonfinite, got.first_nonfinite),
            (want.nonfinite, want.first_nonfinite),
            "{what}"
        );
        assert_eq!(got.first_bad, want.first_bad, "{what}");
        assert_eq!(
            (got.max_abs, got.max_rel),
            (want.max_abs, want.max_rel),
            "{what}"
        );
        assert!(
            (got.err - want.err).abs() <= 1e-12 * want.err,
            "{what}: {} {}",
            got.err,
            want.err
        );
        assert!((got.norm - want.norm).abs() <= 1e-12 * want.norm, "{what}");
    }

    #[test]
    fn the_block_passes_agree_with_element_by_element() {
        // Rows of 1,001 (15 full blocks, a short one and a lane left over), with poison, NaN,
        // infinities, values past the element tolerance and at the float range's edge
        // sprinkled in some blocks and not others, and zeros in the reference (no relative
        // error there).
        let n = 1001 * 40;
        let r: Vec<f64> = (0..n)
            .map(|i| ((i * 7919) % 2003) as f64 * 0.01 - 10.0)
            .collect();
        assert!(r.contains(&0.0));
        let mut vals: Vec<f32> = r.iter().map(|&x| x as f32).collect();
        vals[3] = f32::NAN;
        vals[64 * 5 + 1] = 1e3;
        vals[1001 * 7 + 1000] = f32::INFINITY;
        vals[1001 * 20 + 130] = f32::MAX;
        vals[1001 * 33 + 64] += 0.5;
        let mut out = HostTensor::from_f32(DType::F32, [1001, 40, 1, 1], &vals);
        let poison = crate::model::host::POISON_F32.to_le_bytes();
        for at in [17usize, 1001 * 12 + 500, n - 1] {
            out.bytes[at * 4..at * 4 + 4].copy_from_slice(&poison);
        }
        let want = by_steps(&out, &r, Tolerance::F32);
        assert_eq!((want.unwritten, want.first_unwritten), (3, Some(17)));
        assert_eq!(want.first_bad, Some(64 * 5 + 1));
        for words in [true, false] {
            assert_same(
                &by_blocks(&out, &r, words),
                &want,
                &format!("words {words}"),
            );
        }
        // An output with nothing special: every block plain. Small errors everywhere, so the
        // maxima come from the blocks' lanes.
        let vals: Vec<f32> = r
            .iter()
            .enumerate()
            .map(|(i, &x)| (x * (1.0 + (i % 13) as f64 * 1e-7)) as f32)
            .collect();
        let clean = HostTensor::from_f32(DType::F32, [1001, 40, 1, 1], &vals);
        let want = by_steps(&clean, &r, Tolerance::F32);
        assert_eq!(
            (want.unwritten, want.nonfinite, want.first_bad),
            (0, 0, None)
        );
        assert!(want.max_rel > 0.0);
        for words in [true, false] {
            assert_same(
                &by_blocks(&clean, &r, words),
                &want,
                &format!("clean, words {words}"),
            );
        }
    }

    #[test]
    fn pass_wrong_unwritten_nonfinite() {
        let r: Vec<f64> = (0..100).map(|i| (i as f64) * 0.5 - 20.0).collect();
        let good = HostTensor::from_f32(
            DType::F32,
            [100, 1, 1, 1],
            &r.iter().map(|&x| x as f32).collect::<Vec<_>>(),
        );
        assert_eq!(
            compare("dst", &good, &r, Tolerance::F32).verdict,
            Verdict::Pass
        );

        let mut bad = good.clone();
        bad.bytes[40..44].copy_from_slice(&7.0f32.to_le_bytes());
        let c = compare("dst", &bad, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(10));
        assert_eq!(c.numbers.first_bad_got, Some(7.0));
        assert_eq!(c.numbers.first_bad_expected, Some(r[10]));
        assert_eq!(c.numbers.output.as_deref(), Some("dst"));
        assert_eq!(c.numbers.first_bad_coords(), Some([10, 0, 0, 0]));
        let said = c.numbers.first_bad_sentence().unwrap();
        assert!(
            said.starts_with("first bad element (10, 0, 0, 0) of `dst`: got 7, expected -15"),
            "{said}"
        );
        assert!(
            said.contains("element tolerance 1e-5 + 1e-3 * |expected|"),
            "{said}"
        );

        let mut unw = good.clone();
        unw.bytes[396..400].copy_from_slice(&crate::model::host::POISON_F32.to_le_bytes());
        let c = compare("dst", &unw, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::UnwrittenOutput);
        assert_eq!(c.numbers.first_bad, Some(99));
        assert!(c.numbers.first_bad_got.is_some_and(f64::is_nan));

        // Every element still poisoned: no error was raised, but nothing was written.
        let mut none = good.clone();
        for c in none.bytes.chunks_mut(4) {
            c.copy_from_slice(&crate::model::host::POISON_F32.to_le_bytes());
        }
        let c = compare("dst", &none, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::SilentFailure);
        assert_eq!((c.numbers.unwritten, c.numbers.compared), (100, 100));
        assert_eq!(c.numbers.first_bad, Some(0));
        assert!(c.detail.contains("no work done"), "{}", c.detail);
        // All but one element poisoned is still a partly written output.
        let mut one = none.clone();
        one.bytes[0..4].copy_from_slice(&(r[0] as f32).to_le_bytes());
        let c = compare("dst", &one, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::UnwrittenOutput);
        assert_eq!(c.numbers.first_bad, Some(1));

        // The float range's edge stands for an infinity of its sign, as test-backend-ops has it.
        let mut rm = r.clone();
        rm[3] = f64::NEG_INFINITY;
        let mut max = good.clone();
        max.bytes[12..16].copy_from_slice(&(-f32::MAX).to_le_bytes());
        assert_eq!(
            compare("dst", &max, &rm, Tolerance::F32).verdict,
            Verdict::Pass
        );
        max.bytes[12..16].copy_from_slice(&f32::MAX.to_le_bytes());
        assert_eq!(
            compare("dst", &max, &rm, Tolerance::F32).verdict,
            Verdict::Nonfinite
        );
        max.bytes[12..16].copy_from_slice(&1.0f32.to_le_bytes());
        assert_eq!(
            compare("dst", &max, &rm, Tolerance::F32).verdict,
            Verdict::Nonfinite
        );

        let mut nf = good.clone();
        nf.bytes[0..4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert_eq!(
            compare("dst", &nf, &r, Tolerance::F32).verdict,
            Verdict::Nonfinite
        );
    }

    #[test]
    fn the_first_bad_element_is_named_by_its_coordinates_in_the_output() {
        // A [4, 3, 2, 1] output; element (1, 2, 1, 0) is flat 1 + 2*4 + 1*12 = 21.
        let r: Vec<f64> = (0..24).map(|i| i as f64 + 1.0).collect();
        let mut out = HostTensor::from_f32(
            DType::F32,
            [4, 3, 2, 1],
            &r.iter().map(|&x| x as f32).collect::<Vec<_>>(),
        );
        out.bytes[84..88].copy_from_slice(&(-3.5f32).to_le_bytes());
        let c = compare("y", &out, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(21));
        assert_eq!(c.numbers.first_bad_coords(), Some([1, 2, 1, 0]));
        assert_eq!(c.numbers.output_ne, Some([4, 3, 2, 1]));
        let said = c.numbers.first_bad_sentence().unwrap();
        assert!(
            said.starts_with("first bad element (1, 2, 1, 0) of `y`: got -3.5, expected 22"),
            "{said}"
        );
        // The record keeps the values through JSON, a NaN included.
        let mut n = c.numbers.clone();
        n.first_bad_got = Some(f64::NAN);
        let line = serde_json::to_string(&n).unwrap();
        assert!(line.contains("\"first_bad_got\":\"NaN\""), "{line}");
        let back: crate::judge::result::Numbers = serde_json::from_str(&line).unwrap();
        assert!(back.first_bad_got.is_some_and(f64::is_nan));
        assert_eq!(back.first_bad_expected, Some(22.0));
        // Numbers from before these fields read back without them.
        let old: crate::judge::result::Numbers = serde_json::from_str(
            r#"{"nmse":1.0,"max_abs":1.0,"max_rel":1.0,"first_bad":3,"unwritten":0,"nonfinite":0,"compared":8,"threshold_nmse":1e-7}"#,
        )
        .unwrap();
        assert_eq!(old.first_bad_coords(), None);
        assert_eq!(
            old.first_bad_sentence().as_deref(),
            Some("first bad element at flat index 3")
        );
    }

    #[test]
    fn the_worst_element_is_named_where_it_is_not_the_first() {
        // 4,096 values: many a small step off from element 100 on, and one far off at 4,000
        // (a row never written among rows rounded differently).
        let r: Vec<f64> = (0..4096).map(|i| ((i % 97) as f64) * 0.02 - 1.0).collect();
        let mut vals: Vec<f32> = r.iter().map(|&x| x as f32).collect();
        for v in vals.iter_mut().skip(100).step_by(50) {
            *v += 0.01;
        }
        vals[4000] = 1.7;
        let out = HostTensor::from_f32(DType::F32, [64, 64, 1, 1], &vals);
        let c = compare("dst", &out, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(100));
        assert_eq!(c.numbers.worst_bad, Some(4000));
        assert!(
            c.detail
                .ends_with(", first bad at flat index 100, worst at flat index 4000"),
            "{}",
            c.detail
        );
        // Where the first is the worst, the detail says it once.
        vals[4000] = r[4000] as f32;
        vals[100] = 1.7;
        let c = compare(
            "dst",
            &HostTensor::from_f32(DType::F32, [64, 64, 1, 1], &vals),
            &r,
            Tolerance::F32,
        );
        assert_eq!(
            (c.numbers.first_bad, c.numbers.worst_bad),
            (Some(100), None)
        );
        assert!(!c.detail.contains("worst"), "{}", c.detail);
    }

    #[test]
    fn a_padded_output_is_judged_by_its_logical_elements() {
        // ne = [5, 3, 2, 1], rows 8 floats apart: padding holds poison and is not looked at.
        let ne = [5i64, 3, 2, 1];
        let poison = poison_pattern(DType::F32);
        let mut bytes = Vec::new();
        for _ in 0..(8 * 3 * 2) {
            bytes.extend_from_slice(&poison);
        }
        let r: Vec<f64> = (0..30).map(|i| i as f64 * 0.25 + 1.0).collect();
        let mut out = HostTensor {
            dtype: DType::F32,
            ne,
            nb: [4, 32, 96, 192],
            bytes,
        };
        for (flat, &v) in r.iter().enumerate() {
            let (i0, row) = (flat % 5, flat / 5);
            let off = row * 32 + i0 * 4;
            let v = if flat == 17 { v as f32 + 3.0 } else { v as f32 };
            out.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        let c = compare("dst", &out, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::WrongValues);
        assert_eq!(c.numbers.first_bad, Some(17));
        assert_eq!(c.numbers.unwritten, 0);
        assert_eq!(poisoned_elements(&out), (0, 30));
        // One element unwritten in the last row.
        out.bytes[5 * 32 + 4 * 4..5 * 32 + 5 * 4].copy_from_slice(&poison);
        let c = compare("dst", &out, &r, Tolerance::F32);
        assert_eq!(c.verdict, Verdict::UnwrittenOutput);
        assert_eq!(c.numbers.first_bad, Some(29));
        assert_eq!(poisoned_elements(&out), (1, 30));
        assert!(!all_poisoned(&out));
        // Every logical element poisoned (the padding between rows is not part of it).
        for flat in 0..30 {
            let off = (flat / 5) * 32 + (flat % 5) * 4;
            out.bytes[off..off + 4].copy_from_slice(&poison);
        }
        assert_eq!(poisoned_elements(&out), (30, 30));
        assert!(all_poisoned(&out));
    }

    #[test]
    fn a_large_output_digest_is_chunked_and_still_tells_bytes_apart() {
        let n = (1 << 18) + 3; // over 1 MiB of f32
        let vals: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let a = HostTensor::from_f32(DType::F32, [n as i64, 1, 1, 1], &vals);
        let mut b = a.clone();
        assert_eq!(digest(&a), digest(&b));
        // One bit flipped anywhere (each lane of a word block, the tail, the second chunk)
        // changes the digest.
        for at in [
            0,
            9,
            17,
            31,
            (1 << 20) - 1,
            1 << 20,
            (1 << 20) + 5,
            b.bytes.len() - 1,
        ] {
            b.bytes[at] ^= 0x80;
            assert_ne!(digest(&a), digest(&b), "bit flipped at byte {at}");
            b.bytes[at] ^= 0x80;
        }
        assert_eq!(digest(&a), digest(&b));
    }

    #[test]
    fn a_digest_tells_apart_swapped_words_and_lengths() {
        let mut x: Vec<u8> = (0..64u8).collect();
        let d = words_digest(&x);
        // Two words in different lanes swapped.
        let (w0, w1): (Vec<u8>, Vec<u8>) = (x[0..8].to_vec(), x[8..16].to_vec());
        x[0..8].copy_from_slice(&w1);
        x[8..16].copy_from_slice(&w0);
        assert_ne!(words_digest(&x), d);
        // Zeros of two lengths.
        assert_ne!(words_digest(&[0u8; 32]), words_digest(&[0u8; 33]));
        assert_ne!(words_digest(&[]), words_digest(&[0u8]));
    }
}

#[cfg(test)]
mod integer_tests {
    use super::*;
    use crate::model::host::poison_pattern;

    /// i8, i16 and i64 outputs: written values compare exactly, a changed value is a wrong
    /// value, and an element still holding the type's poison is an unwritten one.
    #[test]
    fn narrow_and_wide_integers_are_judged_by_their_own_width() {
        for d in [DType::I8, DType::I16, DType::I64] {
            let vals = [0.0f32, 5.0, 15.0, 7.0];
            let want: Vec<f64> = vals.iter().map(|&x| x as f64).collect();
            let out = HostTensor::from_f32(d, [4, 1, 1, 1], &vals);
            assert_eq!(out.bytes.len() as u64, 4 * d.size(), "{d}");
            let ok = compare("dst", &out, &want, Tolerance::for_dtype(d));
            assert_eq!(ok.verdict, Verdict::Pass, "{d}: {}", ok.detail);

            let mut wrong = out.clone();
            let w = d.size() as usize;
            wrong.bytes[w..2 * w]
                .copy_from_slice(&HostTensor::from_f32(d, [1, 1, 1, 1], &[9.0]).bytes);
            let bad = compare("dst", &wrong, &want, Tolerance::for_dtype(d));
            assert_eq!(bad.verdict, Verdict::WrongValues, "{d}: {}", bad.detail);

            let mut unwritten = out.clone();
            unwritten.bytes[2 * w..3 * w].copy_from_slice(&poison_pattern(d));
            assert_eq!(poisoned_elements(&unwritten).0, 1, "{d}");
            let c = compare("dst", &unwritten, &want, Tolerance::for_dtype(d));
            assert_eq!(c.verdict, Verdict::UnwrittenOutput, "{d}: {}", c.detail);
        }
    }
}
