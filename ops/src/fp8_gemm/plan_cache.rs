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
pub fn buckets(chunk: u64) -> Vec<u64> {
    let chunk = chunk.max(1);
    let mut v = vec![1u64];
    let mut b = 16;
    while b <= 128 && b < chunk {
        v.push(b);
        b += 16;
    }
    let mut b = 256;
    while b < chunk {
        v.push(b);
        b *= 2;
    }
    if *v.last().unwrap_or(&0) != chunk {
        v.push(chunk);
    }
    v
}

/// The smallest bucket >= rows (rows <= chunk, as the caller slices prefill into chunks).
/// `None` for 0 rows or rows past the chunk.
pub fn bucket_for(rows: u64, chunk: u64) -> Option<u64> {
    if rows == 0 {
        return None;
    }
    buckets(chunk).into_iter().find(|&b| b >= rows)
}

/// Rows of each prefill chunk: full chunks, then the remainder.
pub fn chunk_rows(m: u64, chunk: u64) -> Vec<u64> {
    let chunk = chunk.max(1);
    let mut v = Vec::new();
    let mut left = m;
    while left > 0 {
        let r = left.min(chunk);
        v.push(r);
        left -= r;
    }
    v
}

/// Which rows count a plan is built at and how the staging is sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
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
pub const REGION_ALIGN: u64 = 256;

/// One chunk's GEMM and its staging: W region (N x K e4m3) first, activation region
/// (staged_rows x K e4m3) last, so a read past the activations runs off the buffer's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLayout {
    /// First row of the chunk in the caller's M.
    pub row0: u64,
    /// Rows the caller asked for in this chunk.
    pub rows: u64,
    /// Rows the plan (cuBLASLt layouts) is built at: what the GEMM reads.
    pub plan_rows: u64,
    /// Rows the activation region holds.
    pub staged_rows: u64,
    /// Byte offset of the activation region (W region before it, padded to REGION_ALIGN).
    pub a_offset: u64,
    /// Bytes of the whole staging buffer.
    pub staging_bytes: u64,
    /// Bytes the GEMM reads past the end of the activation region: (plan_rows - staged_rows) * K.
    pub bytes_read_past_staging: u64,
}

pub fn w_region_bytes(n: u64, k: u64) -> u64 {
    (n * k).div_ceil(REGION_ALIGN) * REGION_ALIGN
}

/// Chunk layouts of an M x K x N GEMM for one impl.
pub fn layouts(
    sizing: Sizing,
    m: u64,
    k: u64,
    n: u64,
    chunk: u64,
) -> Result<Vec<ChunkLayout>, String> {
    let a_offset = w_region_bytes(n, k);
    let mut row0 = 0;
    let mut out = Vec::new();
    for rows in chunk_rows(m, chunk) {
        let bucket = bucket_for(rows, chunk)
            .ok_or_else(|| format!("no bucket for {rows} rows at chunk {chunk}"))?;
        let (plan_rows, staged_rows) = match sizing {
            Sizing::BucketedShort => (bucket, rows),
            Sizing::Bucketed => (bucket, bucket),
            Sizing::ExactPlan => (rows, rows),
        };
        out.push(ChunkLayout {
            row0,
            rows,
            plan_rows,
            staged_rows,
            a_offset,
            staging_bytes: a_offset + staged_rows * k,
            bytes_read_past_staging: (plan_rows - staged_rows) * k,
        });
        row0 += rows;
    }
    Ok(out)
}

/// Bytes an earlier, larger layer left in the grow-only pool: its staging at `prior_rows`
/// rows (the same W region, an activation region of `prior_rows` x K).
pub fn prior_pool_bytes(prior_rows: u64, k: u64, n: u64) -> u64 {
    if prior_rows == 0 {
        0
    } else {
        w_region_bytes(n, k) + prior_rows * k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }

    #[test]
    fn bucket_function_at_every_edge() {
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
        // Every edge, -1 / at / +1.
        let edges = [
            (1, 1),
            (2, 16),
            (15, 16),
            (16, 16),
            (17, 32),
            (47, 48),
            (48, 48),
            (49, 64),
            (127, 128),
            (128, 128),
            (129, 256),
            (255, 256),
            (256, 256),
            (257, 512),
            (300, 512),
            (511, 512),
            (512, 512),
        ];
        for (rows, want) in edges {
            assert_eq!(bucket_for(rows, 512), Some(want), "rows {rows}");
        }
        assert_eq!(bucket_for(513, 512), None);
        assert_eq!(bucket_for(0, 512), None);
        // The blog's 40-token prompt takes bucket 48.
        assert_eq!(bucket_for(40, 512), Some(48));
    }

    #[test]
    fn chunks_across_the_chunk_size() {
        assert_eq!(chunk_rows(511, 512), vec![511]);
        assert_eq!(chunk_rows(512, 512), vec![512]);
        assert_eq!(chunk_rows(513, 512), vec![512, 1]);
        assert_eq!(chunk_rows(1000, 512), vec![512, 488]);
        assert_eq!(chunk_rows(0, 512), Vec::<u64>::new());
    }

    #[test]
    fn incident_staging_arithmetic() {
        let (m, k, n) = (300, 3072, 3072);
        let short = layouts(Sizing::BucketedShort, m, k, n, 512).unwrap();
        assert_eq!(short.len(), 1);
        let c = short[0];
        assert_eq!((c.rows, c.plan_rows, c.staged_rows), (300, 512, 300));
        assert_eq!(c.a_offset, 3072 * 3072);
        assert_eq!(c.staging_bytes, 3072 * 3072 + 300 * 3072);
        // The blog's number: 212 rows x 3072 = 651,264 bytes read past the staging.
        assert_eq!(c.bytes_read_past_staging, 651_264);
        let fixed = layouts(Sizing::Bucketed, m, k, n, 512).unwrap()[0];
        assert_eq!(fixed.staged_rows, 512);
        assert_eq!(fixed.staging_bytes, 3072 * 3072 + 512 * 3072);
        assert_eq!(fixed.bytes_read_past_staging, 0);
        let exact = layouts(Sizing::ExactPlan, m, k, n, 512).unwrap()[0];
        assert_eq!((exact.plan_rows, exact.staged_rows), (300, 300));
        assert_eq!(exact.bytes_read_past_staging, 0);
    }

    #[test]
    fn staging_arithmetic_across_chunks_and_alignment() {
        // M = 1000 at chunk 512: a full chunk (exact bucket) and 488 rows in bucket 512.
        let short = layouts(Sizing::BucketedShort, 1000, 64, 40, 512).unwrap();
        assert_eq!(short.len(), 2);
        assert_eq!((short[0].row0, short[0].rows), (0, 512));
        assert_eq!(short[0].bytes_read_past_staging, 0);
        assert_eq!((short[1].row0, short[1].rows), (512, 488));
        assert_eq!(short[1].bytes_read_past_staging, 24 * 64);
        // W region 40 x 64 = 2560 bytes, already a multiple of 256; 40 x 24 = 960 pads to 1024.
        assert_eq!(short[0].a_offset, 2560);
        assert_eq!(
            layouts(Sizing::Bucketed, 5, 24, 40, 512).unwrap()[0].a_offset,
            1024
        );
        // An exact bucket reads nothing past, in every sizing.
        for s in [Sizing::BucketedShort, Sizing::Bucketed, Sizing::ExactPlan] {
            assert_eq!(
                layouts(s, 256, 3072, 16, 512).unwrap()[0].bytes_read_past_staging,
                0
            );
        }
        assert_eq!(prior_pool_bytes(512, 3072, 3072), 3072 * 3072 + 512 * 3072);
        assert_eq!(prior_pool_bytes(0, 3072, 3072), 0);
    }
}
