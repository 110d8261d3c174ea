//! Quantized pools kept on disk, so the workers of one sweep (and later sweeps) quantize each
//! slow pool once.
//!
//! A worker keeps its last pools in memory (`exec::pool_blocks`), but the big cases' workers
//! are replaced after each case to give their device memory back, and an i-quant's pool of
//! 2^24 values takes seconds to quantize (iq1_m: 16 s on two cores). A pool is found by what
//! it is made of: a digest of its f32 values, its type and row length, and the ggml build that
//! quantizes it (version, commit, and the base library's size and modification time). The same
//! key is therefore the same bytes, whatever kedge commit drew the values.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Pools that took less than this to quantize are not written (reading them back would not
/// be faster than quantizing again).
pub(crate) const WORTH_KEEPING: Duration = Duration::from_millis(500);

/// Where pools are kept: `KEDGE_POOL_CACHE`, else `$XDG_CACHE_HOME/kedge/pools`, else
/// `~/.cache/kedge/pools`, else the temporary directory's `kedge-pools`.
pub(crate) fn dir() -> PathBuf {
    if let Some(p) = std::env::var_os("KEDGE_POOL_CACHE") {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("kedge").join("pools");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("kedge").join("pools");
    }
    std::env::temp_dir().join("kedge-pools")
}

/// The build's identity as a pool's key takes it.
pub(crate) fn build_id(version: &str, commit: &str, lib_dir: &Path) -> String {
    let lib = ["libggml-base.so", "libggml-base.dylib", "ggml-base.dll"]
        .iter()
        .map(|n| lib_dir.join(n))
        .find_map(|p| std::fs::metadata(p).ok());
    let (size, mtime) = lib
        .map(|m| {
            let t = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            (m.len(), t)
        })
        .unwrap_or((0, 0));
    format!("{version}|{commit}|{}|{size}|{mtime}", lib_dir.display())
}

/// A 128-bit digest of `parts`: two lanes, each a bijective xor-multiply-rotate step per
/// 8 bytes, so no two inputs of one length that differ in one word meet; the lengths are
/// mixed in. Not a cryptographic hash (nothing here is adversarial) but about ten times as
/// fast as SHA-256 with the CPU's help: a pool's 64 MB of values is hashed twice per pool.
pub(crate) fn digest(parts: &[&[u8]]) -> [u8; 16] {
    const M: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xC2B2_AE3D_27D4_EB4F];
    let mut h = [0x243F_6A88_85A3_08D3u64, 0x1319_8A2E_0370_7344];
    let mut step = |w: u64| {
        h[0] = (h[0] ^ w).wrapping_mul(M[0]).rotate_left(29);
        h[1] = (h[1] ^ w).wrapping_mul(M[1]).rotate_left(31);
    };
    for part in parts {
        let mut words = part.chunks_exact(8);
        for c in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            step(u64::from_le_bytes(b));
        }
        let mut b = [0u8; 8];
        let tail = words.remainder();
        b[..tail.len()].copy_from_slice(tail);
        step(u64::from_le_bytes(b));
        step(part.len() as u64);
    }
    // Final avalanche of each lane (SplitMix64's), the other lane folded in.
    let fin = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (a, b) = (
        fin(h[0] ^ h[1].rotate_left(17)),
        fin(h[1] ^ h[0].rotate_left(43)),
    );
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_le_bytes());
    out[8..].copy_from_slice(&b.to_le_bytes());
    out
}

/// The file of the pool of `values` quantized to `ty_name` in rows of `ne0` by `build`.
pub(crate) fn path(dir: &Path, build: &str, ty_name: &str, ne0: i64, values: &[u8]) -> PathBuf {
    let d = digest(&[
        build.as_bytes(),
        ty_name.as_bytes(),
        &ne0.to_le_bytes(),
        values,
    ]);
    let key: String = d.iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("{ty_name}-{key}.blocks"))
}

/// The pool's bytes, if a whole one (`len` bytes) is kept at `path`.
pub(crate) fn read(path: &Path, len: usize) -> Option<Vec<u8>> {
    let b = std::fs::read(path).ok()?;
    (b.len() == len).then_some(b)
}

/// Keep `bytes` at `path`: written beside it and renamed, so a reader never sees part of a
/// pool. A failure (a full or read-only disk) only means the next worker quantizes again.
pub(crate) fn write(path: &Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = path.with_extension(format!("{}.part", std::process::id()));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_found_by_its_values_type_row_length_and_build() {
        let d = Path::new("/x");
        let v: Vec<u8> = (0..64u8).collect();
        let p = path(d, "b1", "iq1_m", 256, &v);
        assert_eq!(p, path(d, "b1", "iq1_m", 256, &v));
        let mut w = v.clone();
        w[63] ^= 1;
        for other in [
            path(d, "b2", "iq1_m", 256, &v),
            path(d, "b1", "iq2_xs", 256, &v),
            path(d, "b1", "iq1_m", 512, &v),
            path(d, "b1", "iq1_m", 256, &w),
        ] {
            assert_ne!(p, other);
        }
    }

    #[test]
    fn the_digest_sees_every_byte_and_where_parts_split() {
        let v: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
        let d = digest(&[&v]);
        for i in [0, 7, 8, 500, 999] {
            let mut w = v.clone();
            w[i] ^= 0x10;
            assert_ne!(digest(&[&w]), d, "byte {i}");
        }
        assert_ne!(digest(&[&v[..999]]), d);
        assert_ne!(digest(&[&v[..500], &v[500..]]), d);
        assert_ne!(digest(&[b"ab", b"c"]), digest(&[b"a", b"bc"]));
        assert_eq!(digest(&[&v]), d);
    }

    #[test]
    fn a_kept_pool_reads_back_whole_or_not_at_all() {
        let d = std::env::temp_dir().join(format!("kedge-pool-test-{}", std::process::id()));
        let p = path(&d, "b", "q4_0", 32, b"values");
        assert_eq!(read(&p, 3), None);
        write(&p, b"abc");
        assert_eq!(read(&p, 3), Some(b"abc".to_vec()));
        // A file of another length is not this pool.
        assert_eq!(read(&p, 4), None);
        let left: Vec<_> = std::fs::read_dir(&d)
            .map(|r| r.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(left.len(), 1, "no part file left: {left:?}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
