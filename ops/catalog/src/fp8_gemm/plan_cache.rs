//! The incident's plan-cache geometry, as pure arithmetic: M buckets that round up, prefill
//! chunks, and the staging layout each impl sizes. Kept free of device code so the CPU tests
//! pin every number the GPU run depends on.
//!
//! Mila (fp8-gemm-staging-overrun.txt): "On Ada with a 512-row prefill chunk the buckets are
//! 1, 16, 32, ..., 128, 256, 512. Ask for 300 rows and you get the plan built for 512." The
//! staging was sized by the caller's rows (`outer_size * cached_in_features_`), so the GEMM
//! read (bucket - rows) * K bytes past the activation region: 212 * 3072 = 651,264 bytes.

/// Buckets of a plan cache for prefill chunks of `chunk` rows: 1, then steps of 16 up to 128,
/// then doubling from 256 while below the chunk, then the chunk itself. For chunk 512 this
/// is exactly the incident's 1, 16, 32, ..., 128, 256, 512; for Gemma's chunk 64 it is
/// 1, 16, 32, 48, 64.
pub(crate) fn buckets(chunk: u64) -> Vec<u64> {
    let chunk = chunk.max(1);
    let mut v = vec![1u64];
    let mut b = 16;
    while b <= 128 && b < chunk {
        v.push(b);
        b += 16;
    }
    let mut b = 256u64;
    while b < chunk {
        v.push(b);
        let Some(next) = b.checked_mul(2) else { break };
        b = next;
    }
    if *v.last().unwrap_or(&0) != chunk {
        v.push(chunk);
    }
    v
}

/// The smallest bucket >= rows (rows <= chunk, as the caller slices prefill into chunks).
/// `None` for 0 rows or rows past the chunk.
pub(crate) fn bucket_for(rows: u64, chunk: u64) -> Option<u64> {
    if rows == 0 {
        return None;
    }
    buckets(chunk).into_iter().find(|&b| b >= rows)
}

/// The prefill chunks of M rows, as a formula: `full` chunks of `chunk` rows (chunk `i`
/// starting at row `i · chunk`), then a remainder of `tail` rows (0: none). Nothing here grows
/// with M.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunks {
    pub(crate) chunk: u64,
    pub(crate) full: u64,
    pub(crate) tail: u64,
}

impl Chunks {
    pub(crate) fn of(m: u64, chunk: u64) -> Chunks {
        let chunk = chunk.max(1);
        Chunks {
            chunk,
            full: m / chunk,
            tail: m % chunk,
        }
    }
    /// How many chunks there are.
    pub(crate) fn count(&self) -> u64 {
        self.full + u64::from(self.tail > 0)
    }
    /// Rows of chunk `i`; `None` past the last.
    pub(crate) fn rows(&self, i: u64) -> Option<u64> {
        if i < self.full {
            Some(self.chunk)
        } else if i == self.full && self.tail > 0 {
            Some(self.tail)
        } else {
            None
        }
    }
    /// Rows of the last chunk (`None` for M = 0).
    pub(crate) fn last_rows(&self) -> Option<u64> {
        self.count().checked_sub(1).and_then(|i| self.rows(i))
    }
}

/// Rows of each prefill chunk, in order: full chunks, then the remainder. Lazy: a caller that
/// walks every chunk pays per chunk, nothing is built up front.
pub(crate) fn chunk_rows(m: u64, chunk: u64) -> impl Iterator<Item = u64> {
    let c = Chunks::of(m, chunk);
    (0..c.count()).filter_map(move |i| c.rows(i))
}

/// Which rows count a plan is built at and how the staging is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sizing {
    /// `bucketed-short`: plan at the bucket, activation region sized by the caller's rows
    /// (the shipped bug).
    BucketedShort,
    /// `bucketed`: plan at the bucket, activation region sized by the bucket (the fix).
    Bucketed,
    /// `exact-plan`: no cache; plan and staging both at the caller's rows.
    ExactPlan,
}

/// Alignment of the activation region inside the staging buffer (cuBLASLt's default
/// pointer-alignment assumption is 256 bytes).
pub(crate) const REGION_ALIGN: u64 = 256;

/// One chunk's GEMM and its staging: W region (N x K e4m3) first, activation region
/// (staged_rows x K e4m3) last, so a read past the activations runs off the buffer's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLayout {
    /// First row of the chunk in the caller's M.
    pub(crate) row0: u64,
    /// Rows the caller asked for in this chunk.
    pub(crate) rows: u64,
    /// Rows the plan (cuBLASLt layouts) is built at: what the GEMM reads.
    pub(crate) plan_rows: u64,
    /// Rows the activation region holds.
    pub(crate) staged_rows: u64,
    /// Byte offset of the activation region (W region before it, padded to REGION_ALIGN).
    pub(crate) a_offset: u64,
    /// Bytes of the whole staging buffer.
    pub(crate) staging_bytes: u64,
    /// Bytes the GEMM reads past the end of the activation region: (plan_rows - staged_rows) * K.
    pub(crate) bytes_read_past_staging: u64,
}

/// Bytes of the W region, padded to REGION_ALIGN; `None` past 64 bits.
pub(crate) fn w_region_bytes(n: u64, k: u64) -> Option<u64> {
    n.checked_mul(k)?
        .div_ceil(REGION_ALIGN)
        .checked_mul(REGION_ALIGN)
}

/// The chunk layouts of an M x K x N GEMM for one impl, as a formula: every full chunk has
/// the same layout (`full`, at row 0; chunk `i` starts at row `i · chunk`), the remainder has
/// its own (`tail`). Its size does not depend on M.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLayouts {
    pub(crate) chunks: Chunks,
    /// The layout of chunk 0 when it is a full chunk (every full chunk is this one, moved).
    pub(crate) full: Option<ChunkLayout>,
    /// The remainder's layout, at its own row0.
    pub(crate) tail: Option<ChunkLayout>,
}

impl ChunkLayouts {
    /// How many chunks there are.
    pub(crate) fn count(&self) -> u64 {
        self.chunks.count()
    }
    /// Chunk `i`'s layout; `None` past the last.
    pub(crate) fn chunk(&self, i: u64) -> Option<ChunkLayout> {
        if i < self.chunks.full {
            self.full.map(|f| ChunkLayout {
                row0: i * self.chunks.chunk,
                ..f
            })
        } else if i == self.chunks.full {
            self.tail
        } else {
            None
        }
    }
    /// Chunk 0 (M >= 1 always has one).
    pub(crate) fn first(&self) -> Option<ChunkLayout> {
        self.chunk(0)
    }
    /// Every chunk's layout, in order (lazy).
    pub(crate) fn iter(&self) -> impl Iterator<Item = ChunkLayout> + '_ {
        (0..self.count()).filter_map(|i| self.chunk(i))
    }
    /// The distinct layouts: the full chunks' (if any), then the remainder's (if any).
    pub(crate) fn shapes(&self) -> impl Iterator<Item = ChunkLayout> {
        self.full.into_iter().chain(self.tail)
    }
    /// Bytes read past the staging over all chunks.
    pub(crate) fn bytes_read_past_staging(&self) -> u64 {
        let full = self.full.map_or(0, |f| f.bytes_read_past_staging);
        let tail = self.tail.map_or(0, |t| t.bytes_read_past_staging);
        full.saturating_mul(self.chunks.full).saturating_add(tail)
    }
    /// The largest staging any chunk asks for.
    pub(crate) fn max_staging_bytes(&self) -> u64 {
        self.shapes().map(|c| c.staging_bytes).max().unwrap_or(0)
    }
    /// The most rows any chunk's plan is built at.
    pub(crate) fn max_plan_rows(&self) -> u64 {
        self.shapes().map(|c| c.plan_rows).max().unwrap_or(1)
    }
}

/// One chunk's layout, with byte counts checked against 64 bits.
fn layout(
    sizing: Sizing,
    row0: u64,
    rows: u64,
    chunk: u64,
    k: u64,
    a_offset: u64,
) -> Result<ChunkLayout, String> {
    let bucket = bucket_for(rows, chunk)
        .ok_or_else(|| format!("no bucket for {rows} rows at chunk {chunk}"))?;
    let (plan_rows, staged_rows) = match sizing {
        Sizing::BucketedShort => (bucket, rows),
        Sizing::Bucketed => (bucket, bucket),
        Sizing::ExactPlan => (rows, rows),
    };
    let too_big =
        || format!("the staging of {staged_rows} rows of K = {k} does not fit in 64 bits");
    Ok(ChunkLayout {
        row0,
        rows,
        plan_rows,
        staged_rows,
        a_offset,
        staging_bytes: staged_rows
            .checked_mul(k)
            .and_then(|a| a.checked_add(a_offset))
            .ok_or_else(too_big)?,
        bytes_read_past_staging: (plan_rows - staged_rows)
            .checked_mul(k)
            .ok_or_else(too_big)?,
    })
}

/// Chunk layouts of an M x K x N GEMM for one impl.
pub(crate) fn layouts(
    sizing: Sizing,
    m: u64,
    k: u64,
    n: u64,
    chunk: u64,
) -> Result<ChunkLayouts, String> {
    let a_offset = w_region_bytes(n, k)
        .ok_or_else(|| format!("the weight region N x K = {n} x {k} does not fit in 64 bits"))?;
    let chunks = Chunks::of(m, chunk);
    let full = if chunks.full > 0 {
        Some(layout(sizing, 0, chunks.chunk, chunks.chunk, k, a_offset)?)
    } else {
        None
    };
    let tail = if chunks.tail > 0 {
        Some(layout(
            sizing,
            chunks.full * chunks.chunk,
            chunks.tail,
            chunks.chunk,
            k,
            a_offset,
        )?)
    } else {
        None
    };
    Ok(ChunkLayouts { chunks, full, tail })
}

/// Bytes an earlier, larger layer left in the grow-only pool: its staging at `prior_rows`
/// rows (the same W region, an activation region of `prior_rows` x K).
pub(crate) fn prior_pool_bytes(prior_rows: u64, k: u64, n: u64) -> Option<u64> {
    if prior_rows == 0 {
        Some(0)
    } else {
        w_region_bytes(n, k)?.checked_add(prior_rows.checked_mul(k)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[test]
    fn incident_buckets_at_chunk_512() {
        assert_eq!(
            buckets(512),
            vec![1, 16, 32, 48, 64, 80, 96, 112, 128, 256, 512]
        );
        assert_eq!(buckets(64), vec![1, 16, 32, 48, 64]);
        assert_eq!(
            buckets(1024),
            vec![1, 16, 32, 48, 64, 80, 96, 112, 128, 256, 512, 1024]
        );
        assert_eq!(
            buckets(300),
            vec![1, 16, 32, 48, 64, 80, 96, 112, 128, 256, 300]
        );
        assert_eq!(buckets(1), vec![1]);
        // Bounded whatever the chunk: at most 1 + 8 + 8 + 1 buckets up to chunk 2^16.
        assert!(buckets(1 << 16).len() <= 18);
    }

    #[test]
    fn bucket_function_is_the_smallest_bucket_that_fits() {
        let b = buckets(512);
        // rows 1..=512: the bucket is the smallest one >= rows, checked against a scan.
        for rows in 1..=512u64 {
            let got = bucket_for(rows, 512).unwrap();
            assert!(got >= rows && b.contains(&got));
            let prev = b.iter().copied().filter(|&x| x < got).max().unwrap_or(0);
            assert!(
                prev < rows,
                "rows {rows}: bucket {got} but {prev} also fits"
            );
        }
    }

    /// Every edge, -1 / at / +1; the blog's 40-token prompt takes bucket 48.
    #[rstest]
    #[case(1, Some(1))]
    #[case(2, Some(16))]
    #[case(15, Some(16))]
    #[case(16, Some(16))]
    #[case(17, Some(32))]
    #[case(40, Some(48))]
    #[case(47, Some(48))]
    #[case(48, Some(48))]
    #[case(49, Some(64))]
    #[case(127, Some(128))]
    #[case(128, Some(128))]
    #[case(129, Some(256))]
    #[case(255, Some(256))]
    #[case(256, Some(256))]
    #[case(257, Some(512))]
    #[case(300, Some(512))]
    #[case(511, Some(512))]
    #[case(512, Some(512))]
    #[case(513, None)]
    #[case(0, None)]
    fn bucket_at_every_edge(#[case] rows: u64, #[case] want: Option<u64>) {
        assert_eq!(bucket_for(rows, 512), want, "rows {rows}");
    }

    #[rstest]
    #[case(511, &[511])]
    #[case(512, &[512])]
    #[case(513, &[512, 1])]
    #[case(1000, &[512, 488])]
    #[case(0, &[])]
    fn chunks_across_the_chunk_size(#[case] m: u64, #[case] want: &[u64]) {
        assert_eq!(chunk_rows(m, 512).collect::<Vec<_>>(), want);
        let c = Chunks::of(m, 512);
        assert_eq!(c.count(), want.len() as u64);
        assert_eq!(c.last_rows(), want.last().copied());
    }

    #[test]
    fn chunks_are_a_formula_at_any_m() {
        let m = (1u64 << 40) + 1;
        let c = Chunks::of(m, 512);
        assert_eq!((c.full, c.tail, c.count()), (1 << 31, 1, (1 << 31) + 1));
        assert_eq!(c.rows((1 << 31) - 1), Some(512));
        assert_eq!(c.rows(1 << 31), Some(1));
        assert_eq!(c.rows((1 << 31) + 1), None);
        let ls = layouts(Sizing::BucketedShort, m, 3072, 3072, 512).unwrap();
        assert_eq!(ls.count(), (1 << 31) + 1);
        let last = ls.chunk(1 << 31).unwrap();
        assert_eq!((last.row0, last.rows, last.plan_rows), (1 << 40, 1, 1));
        assert_eq!(ls.chunk(7).unwrap().row0, 7 * 512);
        assert_eq!(ls.bytes_read_past_staging(), 0);
        // A walk over every chunk agrees with the formula (at an M one can walk).
        let ls = layouts(Sizing::BucketedShort, 5 * 512 + 300, 64, 40, 512).unwrap();
        let walked: Vec<_> = ls.iter().collect();
        assert_eq!(walked.len(), 6);
        assert_eq!(walked.iter().map(|c| c.rows).sum::<u64>(), 5 * 512 + 300);
        for (i, c) in walked.iter().enumerate() {
            assert_eq!(c.row0, i as u64 * 512);
        }
        assert_eq!(
            ls.bytes_read_past_staging(),
            walked
                .iter()
                .map(|c| c.bytes_read_past_staging)
                .sum::<u64>()
        );
    }

    #[test]
    fn incident_staging_arithmetic() {
        let (m, k, n) = (300, 3072, 3072);
        let short = layouts(Sizing::BucketedShort, m, k, n, 512).unwrap();
        assert_eq!(short.count(), 1);
        let c = short.first().unwrap();
        assert_eq!((c.rows, c.plan_rows, c.staged_rows), (300, 512, 300));
        assert_eq!(c.a_offset, 3072 * 3072);
        assert_eq!(c.staging_bytes, 3072 * 3072 + 300 * 3072);
        // The blog's number: 212 rows x 3072 = 651,264 bytes read past the staging.
        assert_eq!(c.bytes_read_past_staging, 651_264);
        assert_eq!(short.bytes_read_past_staging(), 651_264);
        let fixed = layouts(Sizing::Bucketed, m, k, n, 512)
            .unwrap()
            .first()
            .unwrap();
        assert_eq!(fixed.staged_rows, 512);
        assert_eq!(fixed.staging_bytes, 3072 * 3072 + 512 * 3072);
        assert_eq!(fixed.bytes_read_past_staging, 0);
        let exact = layouts(Sizing::ExactPlan, m, k, n, 512)
            .unwrap()
            .first()
            .unwrap();
        assert_eq!((exact.plan_rows, exact.staged_rows), (300, 300));
        assert_eq!(exact.bytes_read_past_staging, 0);
    }

    #[test]
    fn staging_arithmetic_across_chunks_and_alignment() {
        // M = 1000 at chunk 512: a full chunk (exact bucket) and 488 rows in bucket 512.
        let short = layouts(Sizing::BucketedShort, 1000, 64, 40, 512).unwrap();
        assert_eq!(short.count(), 2);
        let (c0, c1) = (short.chunk(0).unwrap(), short.chunk(1).unwrap());
        assert_eq!((c0.row0, c0.rows), (0, 512));
        assert_eq!(c0.bytes_read_past_staging, 0);
        assert_eq!((c1.row0, c1.rows), (512, 488));
        assert_eq!(c1.bytes_read_past_staging, 24 * 64);
        // W region 40 x 64 = 2560 bytes, already a multiple of 256; 40 x 24 = 960 pads to 1024.
        assert_eq!(c0.a_offset, 2560);
        assert_eq!(
            layouts(Sizing::Bucketed, 5, 24, 40, 512)
                .unwrap()
                .first()
                .unwrap()
                .a_offset,
            1024
        );
        // An exact bucket reads nothing past, in every sizing.
        for s in [Sizing::BucketedShort, Sizing::Bucketed, Sizing::ExactPlan] {
            assert_eq!(
                layouts(s, 256, 3072, 16, 512)
                    .unwrap()
                    .first()
                    .unwrap()
                    .bytes_read_past_staging,
                0
            );
        }
        assert_eq!(
            prior_pool_bytes(512, 3072, 3072),
            Some(3072 * 3072 + 512 * 3072)
        );
        assert_eq!(prior_pool_bytes(0, 3072, 3072), Some(0));
        assert!(layouts(Sizing::Bucketed, 1, u64::MAX / 2, 4, 512).is_err());
    }
}
