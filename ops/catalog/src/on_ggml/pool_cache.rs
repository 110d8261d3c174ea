//! Quantized pools kept on disk, so the workers of one sweep (and later sweeps) quantize each
//! slow pool once.
//!
//! A worker keeps its last pools in memory (`exec::pool_blocks`), but a worker is replaced
//! after each failure (ggml aborts on a CUDA error), and an i-quant's pool of 2^24 values takes
//! seconds to quantize (iq1_m: 16 s on two cores). A pool is found by what it is made of: a
//! digest of its rows' f32 values, its type and row length, and the ggml build that quantizes
//! it (version, commit, and the base library's size and modification time). The same key is
//! therefore the same bytes, whatever kedge commit drew the values.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// Pools that took less than this to quantize are not written (reading them back would not
/// be faster than quantizing again).
pub(crate) const WORTH_KEEPING: Duration = Duration::from_millis(500);

/// Where pools are kept: `KEDGE_POOL_CACHE`, else `$XDG_CACHE_HOME/kedge/pools`, else
/// `~/.cache/kedge/pools`, else the temporary directory's `kedge-pools`.
pub(crate) fn dir() -> PathBuf {
    kedge_core::model::cache::dir("KEDGE_POOL_CACHE", "pools")
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

/// The file of the pool whose rows' values have the digests `rows` (their bytes, in order),
/// quantized to `ty_name` in rows of `ne0` by `build`.
pub(crate) fn path(dir: &Path, build: &str, ty_name: &str, ne0: i64, rows: &[u8]) -> PathBuf {
    let mut named = Vec::with_capacity(build.len() + ty_name.len() + 10 + rows.len());
    for part in [
        build.as_bytes(),
        &[0],
        ty_name.as_bytes(),
        &[0],
        &ne0.to_le_bytes(),
    ] {
        named.extend_from_slice(part);
    }
    named.extend_from_slice(rows);
    let key = kedge_core::model::digest::words_digest(&named);
    dir.join(format!("{ty_name}-{key:016x}.blocks"))
}

/// The pool's bytes, if a whole one (`len` bytes) is kept at `path`.
pub(crate) fn read(path: &Path, len: usize) -> Option<Vec<u8>> {
    let b = std::fs::read(path).ok()?;
    (b.len() == len).then_some(b)
}

/// The pool kept at `path` (`len` bytes), or the one `make` makes, kept there when it took
/// `WORTH_KEEPING` or more. Workers that want the same pool at once take turns (a lock file
/// beside it, `flock`): the first makes it, the others then read what it kept. The cases
/// around one crossing start together, each in its own worker, and on a fresh machine each
/// made the same i-quant pool with its share of the cores (iq1_m: 14 cases, 97 s of setup on
/// an H100's host). Where the directory cannot hold the lock, each worker makes its own.
pub(crate) fn read_or_make<E>(
    path: &Path,
    len: usize,
    make: impl FnOnce() -> Result<Vec<u8>, E>,
) -> Result<Vec<u8>, E> {
    if let Some(b) = read(path, len) {
        return Ok(b);
    }
    // Held until this returns; the system lets it go if the worker dies.
    let _turn = lock(path);
    if let Some(b) = read(path, len) {
        return Ok(b);
    }
    let t = std::time::Instant::now();
    let b = make()?;
    if b.len() == len && t.elapsed() >= WORTH_KEEPING {
        write(path, &b);
    }
    Ok(b)
}

/// The lock of the pool at `path`, taken (waiting for the worker that holds it), or `None`
/// where it cannot be. An advisory `flock`: closing the file (or the worker's death) lets it go.
#[cfg(unix)]
fn lock(path: &Path) -> Option<std::fs::File> {
    use std::os::fd::AsRawFd;
    std::fs::create_dir_all(path.parent()?).ok()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path.with_extension("lock"))
        .ok()?;
    loop {
        // SAFETY: a descriptor this function owns, open for the call.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Some(f);
        }
        if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return None;
        }
    }
}

#[cfg(not(unix))]
fn lock(_path: &Path) -> Option<()> {
    None
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
    fn workers_wanting_one_pool_at_once_make_it_once() {
        let d = std::env::temp_dir().join(format!("kedge-pool-turns-{}", std::process::id()));
        let p = path(&d, "b", "iq1_m", 256, b"values");
        let made = std::sync::atomic::AtomicUsize::new(0);
        let pool = vec![7u8; 64];
        let got: Vec<Vec<u8>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        read_or_make(&p, 64, || {
                            made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            // Slow enough to be kept, as an i-quant's pool is.
                            std::thread::sleep(WORTH_KEEPING + Duration::from_millis(100));
                            Ok::<_, ()>(pool.clone())
                        })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("worker").expect("pool"))
                .collect()
        });
        assert_eq!(
            made.into_inner(),
            1,
            "one worker makes it, the others read it"
        );
        assert!(got.iter().all(|g| *g == pool));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_quick_pool_is_not_kept_and_a_failure_keeps_nothing() {
        let d = std::env::temp_dir().join(format!("kedge-pool-quick-{}", std::process::id()));
        let p = path(&d, "b", "q4_0", 32, b"values");
        assert_eq!(
            read_or_make(&p, 3, || Ok::<_, ()>(b"abc".to_vec())),
            Ok(b"abc".to_vec())
        );
        assert_eq!(read(&p, 3), None, "made in no time: not worth a file");
        assert_eq!(read_or_make(&p, 3, || Err::<Vec<u8>, _>("no")), Err("no"));
        assert_eq!(read(&p, 3), None);
        let _ = std::fs::remove_dir_all(&d);
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
