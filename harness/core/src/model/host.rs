//! Host-side tensors: raw bytes with a dtype and a ggml layout (`ne`, byte strides `nb`).

use crate::model::dtype::DType;
use crate::model::shape::{dense_strides, Ne};
use half::{bf16, f16};

/// A tensor on the host, laid out exactly as it will be on the device.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape, ggml order.
    pub ne: Ne,
    /// Byte strides.
    pub nb: [u64; 4],
    /// The bytes, laid out by `nb`.
    pub bytes: Vec<u8>,
}

/// The NaN payloads outputs are poisoned with. A kernel that produces a NaN writes the
/// canonical one, so a surviving payload means "never written".
pub const POISON_F32: u32 = 0x7FC0_DEAD;
/// The f16 poison.
const POISON_F16: u16 = 0x7E5A;
/// The bf16 poison.
const POISON_BF16: u16 = 0x7FDA;
/// The i32 poison.
const POISON_I32: u32 = 0x7EAD_BEEF;
/// The u8 poison.
const POISON_U8: u8 = 0xDB;
/// The integer poison patterns of the narrower and wider integer types (no value a kernel
/// computes from inputs in [0, 16) by accident).
const POISON_I16: u16 = 0x7EAD;
const POISON_I64: u64 = 0x7EAD_BEEF_7EAD_BEEF;

/// `n` zeroed bytes with every page already faulted in, by all threads when `n` is large.
///
/// A fresh allocation's pages are mapped on first write, one fault per 4 KiB page; a driver
/// copy into it (`cuMemcpyDtoH`) takes those faults in one thread, which made the download of
/// a 2 GiB output take seconds. Faulting them in first, in parallel, leaves the copy a copy.
pub(crate) fn zeroed_bytes(n: usize) -> Vec<u8> {
    faulted(vec![0u8; n])
}

/// Big input buffers of the key a worker just let go, offered to the next key's inputs while
/// they are drawn (see `engine::ReferenceCache::inputs`): a buffer of the same size is written
/// over whole instead of 8 GiB of fresh pages being faulted in and zeroed. Empty outside
/// that draw.
static RECYCLED: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Offer a buffer no longer needed to the draw that follows.
pub(crate) fn recycle(buf: Vec<u8>) {
    if let Ok(mut g) = RECYCLED.lock() {
        g.push(buf);
    }
}

/// Bytes of offered buffers taken by [`bytes_to_overwrite`], in this process's life.
static TAKEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Let every offered buffer go.
pub(crate) fn clear_recycled() {
    if let Ok(mut g) = RECYCLED.lock() {
        g.clear();
    }
}

/// Bytes of offered buffers written over rather than made afresh, in this process's life.
pub(crate) fn recycled_taken() -> u64 {
    TAKEN.load(std::sync::atomic::Ordering::Relaxed)
}

/// `n` bytes the caller writes over entirely: an offered buffer of exactly that size (its old
/// contents still in it), or zeros faulted in like `zeroed_bytes`.
pub fn bytes_to_overwrite(n: usize) -> Vec<u8> {
    let found = RECYCLED.lock().ok().and_then(|mut g| {
        let at = g.iter().position(|b| b.len() == n)?;
        TAKEN.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Some(g.swap_remove(at))
    });
    found.unwrap_or_else(|| zeroed_bytes(n))
}

/// `n` zeros of f32, faulted in like [`zeroed_bytes`].
pub(crate) fn zeroed_f32(n: usize) -> Vec<f32> {
    faulted(vec![0f32; n])
}

/// `n` zeros of f64 (a reference), faulted in like `zeroed_bytes`.
pub fn zeroed_f64(n: usize) -> Vec<f64> {
    faulted(vec![0f64; n])
}

/// Ask for transparent huge pages (2 MiB) over the aligned inside of `bytes`, not yet
/// faulted in. Advice only: where the kernel has none, nothing changes.
pub(crate) fn advise_huge_pages(bytes: &mut [u8]) {
    const HUGE: usize = 2 << 20;
    let start = (bytes.as_ptr() as usize).next_multiple_of(HUGE);
    let end = (bytes.as_ptr() as usize + bytes.len()) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside `bytes`, which the caller holds mutably.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

/// Fault in the pages of `v`, which is all zero bytes and freshly allocated. From 64 MiB on,
/// the range is first advised for transparent huge pages (2 MiB, where the kernel has them:
/// on the H200 host, faulting in 4 GiB took 0.19 s on 16 threads with 4 KiB pages and 0.08 s
/// with huge pages), then touched by all threads.
fn faulted<T: bytemuck::Pod + Send>(mut v: Vec<T>) -> Vec<T> {
    use rayon::prelude::*;
    const PAGE: usize = 4096;
    const HUGE: usize = 2 << 20;
    const PARALLEL_FROM: usize = 64 << 20;
    let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    if bytes.len() >= PARALLEL_FROM {
        advise_huge_pages(bytes);
        bytes.par_chunks_mut(HUGE).for_each(|c| {
            for i in (0..c.len()).step_by(PAGE) {
                // A write maps the page; the value is the zero it already reads as. Volatile:
                // a store of zero into calloc'd memory is otherwise removed as dead.
                // SAFETY: `i` is inside `c`.
                unsafe { std::ptr::write_volatile(c.as_mut_ptr().add(i), 0) };
            }
        });
    }
    v
}

/// `vals` each encoded in `W` bytes by `f`, one after the other: on every core, in chunks, into
/// a buffer written over whole (an input of 2^31 f16 values took 5.3 s of a case's setup
/// converted on one thread, on the GPU machine's host).
fn encoded<const W: usize>(vals: &[f32], f: impl Fn(f32) -> [u8; W] + Sync) -> Vec<u8> {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 16;
    let mut bytes = bytes_to_overwrite(vals.len() * W);
    bytes
        .par_chunks_mut(CHUNK * W)
        .zip(vals.par_chunks(CHUNK))
        .for_each(|(out, vs)| {
            for (o, &x) in out.chunks_exact_mut(W).zip(vs) {
                o.copy_from_slice(&f(x));
            }
        });
    bytes
}

/// One element of the poison pattern of `dtype`, as bytes.
pub fn poison_pattern(dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F32 => POISON_F32.to_le_bytes().to_vec(),
        DType::F16 => POISON_F16.to_le_bytes().to_vec(),
        DType::Bf16 => POISON_BF16.to_le_bytes().to_vec(),
        DType::I32 => POISON_I32.to_le_bytes().to_vec(),
        DType::U8 | DType::I8 => vec![POISON_U8],
        DType::I16 => POISON_I16.to_le_bytes().to_vec(),
        DType::I64 => POISON_I64.to_le_bytes().to_vec(),
        // One block of the byte pattern: a block still holding it was never written.
        d => vec![POISON_U8; d.size() as usize],
    }
}

impl HostTensor {
    /// A dense tensor from f32 values, converted to `dtype` (round to nearest even).
    pub fn from_f32(dtype: DType, ne: Ne, vals: &[f32]) -> Self {
        // Block formats are quantized by the ggml build that runs them; here the values are
        // kept as f32 (a caller that needs the blocks quantizes these).
        let dtype = if dtype.is_block() { DType::F32 } else { dtype };
        let bytes = match dtype {
            DType::F32 => encoded(vals, |x| x.to_le_bytes()),
            DType::F16 => encoded(vals, |x| f16::from_f32(x).to_bits().to_le_bytes()),
            DType::Bf16 => encoded(vals, |x| bf16::from_f32(x).to_bits().to_le_bytes()),
            DType::I32 => encoded(vals, |x| (x as i32).to_le_bytes()),
            DType::U8 => encoded(vals, |x| [x as u8]),
            DType::I8 => encoded(vals, |x| [(x as i8) as u8]),
            DType::I16 => encoded(vals, |x| (x as i16).to_le_bytes()),
            DType::I64 => encoded(vals, |x| (x as i64).to_le_bytes()),
            _ => encoded(vals, |x| x.to_le_bytes()),
        };
        HostTensor {
            dtype,
            ne,
            nb: dense_strides(&ne, dtype),
            bytes,
        }
    }

    /// A dense i32 tensor.
    pub fn from_i32(ne: Ne, vals: &[i32]) -> Self {
        HostTensor {
            dtype: DType::I32,
            ne,
            nb: dense_strides(&ne, DType::I32),
            bytes: bytemuck::cast_slice(vals).to_vec(),
        }
    }

    /// A tensor from its bytes as laid out on the device.
    pub fn from_bytes(dtype: DType, ne: Ne, nb: [u64; 4], bytes: Vec<u8>) -> Self {
        HostTensor {
            dtype,
            ne,
            nb,
            bytes,
        }
    }

    /// Element at logical index (i0..i3) as f64.
    #[inline]
    pub fn get(&self, i0: usize, i1: usize, i2: usize, i3: usize) -> f64 {
        let off = i0 as u64 * self.nb[0]
            + i1 as u64 * self.nb[1]
            + i2 as u64 * self.nb[2]
            + i3 as u64 * self.nb[3];
        read_elem(self.dtype, &self.bytes, off as usize)
    }

    /// Row (i1, i2, i3) as f64, into `dst` (its first `ne0` elements). A row of contiguous
    /// f32 is decoded as one slice, without a stride and a dtype per element: the row
    /// references of big cases spent most of their time in [`HostTensor::get`].
    #[inline]
    pub fn row_f64(&self, i1: usize, i2: usize, i3: usize, dst: &mut [f64]) {
        let n0 = (self.ne[0].max(0) as usize).min(dst.len());
        let base =
            (i1 as u64 * self.nb[1] + i2 as u64 * self.nb[2] + i3 as u64 * self.nb[3]) as usize;
        let dst = &mut dst[..n0];
        if self.dtype == DType::F32 && self.nb[0] == 4 {
            let src = &self.bytes[base..base + n0 * 4];
            for (d, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
            }
        } else {
            for (i0, d) in dst.iter_mut().enumerate() {
                *d = read_elem(self.dtype, &self.bytes, base + i0 * self.nb[0] as usize);
            }
        }
    }

    /// Row `r` of the tensor's rows counted in logical order (ne1 fastest, then ne2, ne3) as
    /// f64, into `dst`, as [`HostTensor::row_f64`] decodes it.
    #[inline]
    pub fn flat_row_f64(&self, r: usize, dst: &mut [f64]) {
        let [_, n1, n2, _] = self.ne.map(|n| n.max(1) as usize);
        self.row_f64(r % n1, (r / n1) % n2, r / (n1 * n2), dst);
    }

    /// All elements in logical (ne0-fastest) order as f64: rows decoded as `row_f64` does, a
    /// group of them per task. A whole-judged big case's reference and outputs pass through
    /// here: element by element on one thread, a 2^28-element result took longer than ggml's
    /// CPU backend took to compute it.
    pub fn to_f64(&self) -> Vec<f64> {
        use rayon::prelude::*;
        /// Elements a task decodes, at least a row.
        const PER_TASK: usize = 1 << 16;
        let n0 = self.ne[0].max(0) as usize;
        let n = self
            .ne
            .iter()
            .map(|&x| x.max(0) as usize)
            .product::<usize>();
        let mut out = vec![0f64; n];
        if n == 0 {
            return out;
        }
        let rows_per_task = (PER_TASK / n0).max(1);
        out.par_chunks_mut(n0 * rows_per_task)
            .enumerate()
            .for_each(|(task, chunk)| {
                for (k, dst) in chunk.chunks_mut(n0).enumerate() {
                    self.flat_row_f64(task * rows_per_task + k, dst);
                }
            });
        out
    }

    /// Raw element bits at a logical index, for poison detection.
    pub(crate) fn raw_at(&self, flat: u64) -> &[u8] {
        let ne = self.ne.map(|x| x as u64);
        let i0 = flat % ne[0];
        let i1 = (flat / ne[0]) % ne[1];
        let i2 = (flat / (ne[0] * ne[1])) % ne[2];
        let i3 = flat / (ne[0] * ne[1] * ne[2]);
        let off = (i0 * self.nb[0] + i1 * self.nb[1] + i2 * self.nb[2] + i3 * self.nb[3]) as usize;
        &self.bytes[off..off + self.dtype.size() as usize]
    }

    /// Is any element non-zero? Inputs must never be all zeros.
    pub fn any_nonzero(&self) -> bool {
        self.bytes.iter().any(|&b| b != 0)
    }
}

/// The element of `dtype` at byte offset `off`, as f64.
#[inline]
pub(crate) fn read_elem(dtype: DType, bytes: &[u8], off: usize) -> f64 {
    match dtype {
        DType::F32 => {
            f32::from_le_bytes([bytes[off], bytes[off + 1], bytes[off + 2], bytes[off + 3]]) as f64
        }
        DType::F16 => f16::from_bits(u16::from_le_bytes([bytes[off], bytes[off + 1]])).to_f64(),
        DType::Bf16 => bf16::from_bits(u16::from_le_bytes([bytes[off], bytes[off + 1]])).to_f64(),
        DType::I32 => {
            i32::from_le_bytes([bytes[off], bytes[off + 1], bytes[off + 2], bytes[off + 3]]) as f64
        }
        DType::U8 => bytes[off] as f64,
        DType::I8 => bytes[off] as i8 as f64,
        DType::I16 => i16::from_le_bytes([bytes[off], bytes[off + 1]]) as f64,
        DType::I64 => {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[off..off + 8]);
            i64::from_le_bytes(b) as f64
        }
        // Not decoded on the host: a block-format tensor is dequantized by the ggml build
        // that made it before anything reads its values.
        _ => f64::NAN,
    }
}

/// Round an f64 reference value through the output dtype, as the device stores it.
pub fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::Bf16 => bf16::from_f64(x).to_f64(),
        d if d.is_integer() => x.round(),
        _ => x,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `from_f32`, in parallel chunks, gives every element's bytes as one plain pass does, for
    /// every plain type and a length past one chunk that does not divide into chunks.
    #[test]
    fn from_f32_encodes_every_value_as_one_pass_would() {
        let vals: Vec<f32> = (0..70_001)
            .map(|i| match i % 7 {
                0 => f32::NAN,
                1 => -0.0,
                2 => 65_504.0 * 3.0,
                3 => -(i as f32) * 0.37,
                _ => (i % 300) as f32 - 150.25,
            })
            .collect();
        for dtype in [
            DType::F32,
            DType::F16,
            DType::Bf16,
            DType::I32,
            DType::U8,
            DType::I8,
            DType::I16,
            DType::I64,
        ] {
            let want: Vec<u8> = vals
                .iter()
                .flat_map(|&x| -> Vec<u8> {
                    match dtype {
                        DType::F32 => x.to_le_bytes().to_vec(),
                        DType::F16 => f16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                        DType::Bf16 => bf16::from_f32(x).to_bits().to_le_bytes().to_vec(),
                        DType::I32 => (x as i32).to_le_bytes().to_vec(),
                        DType::U8 => vec![x as u8],
                        DType::I8 => vec![(x as i8) as u8],
                        DType::I16 => (x as i16).to_le_bytes().to_vec(),
                        _ => (x as i64).to_le_bytes().to_vec(),
                    }
                })
                .collect();
            let t = HostTensor::from_f32(dtype, [vals.len() as i64, 1, 1, 1], &vals);
            assert_eq!(t.dtype, dtype);
            assert!(t.bytes == want, "{dtype}");
        }
        // A block format keeps its f32 values.
        let t = HostTensor::from_f32(DType::Q4_0, [64, 1, 1, 1], &vals[..64]);
        assert_eq!(t.dtype, DType::F32);
        assert_eq!(t.bytes.len(), 256);
    }

    /// `to_f64`, by rows and in parallel, is the element-by-element read of every element, for
    /// strided and padded tensors of every plain type.
    #[test]
    fn to_f64_reads_every_element_in_logical_order() {
        for dtype in [
            DType::F32,
            DType::F16,
            DType::Bf16,
            DType::I32,
            DType::I16,
            DType::I8,
        ] {
            let ne = [5, 7, 3, 2];
            let size = dtype.size();
            // Rows padded by 3 elements, planes by one row more.
            let nb = [size, size * 8, size * 8 * 8, size * 8 * 8 * 3];
            let bytes = (0..nb[3] * 2)
                .map(|i| (i * 37 % 251) as u8 & 0x3f)
                .collect::<Vec<u8>>();
            let t = HostTensor::from_bytes(dtype, ne, nb, bytes);
            let mut want = Vec::new();
            for i3 in 0..2 {
                for i2 in 0..3 {
                    for i1 in 0..7 {
                        for i0 in 0..5 {
                            want.push(t.get(i0, i1, i2, i3));
                        }
                    }
                }
            }
            let got = t.to_f64();
            assert_eq!(got.len(), want.len(), "{dtype}");
            assert!(
                got.iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{dtype}"
            );
        }
        // More rows than a task takes, rows of one element.
        let t = HostTensor::from_f32(DType::F32, [1, 70_000, 2, 1], &vec![0.5; 140_000]);
        assert_eq!(t.to_f64(), vec![0.5; 140_000]);
    }

    #[test]
    fn big_zeroed_buffers_are_zero_and_whole() {
        // Past the 64 MiB where pages are advised and faulted in by all threads, with a
        // length that is no multiple of a page; and a small one.
        let n = (9 << 20) + 3;
        let v = zeroed_f64(n);
        assert_eq!(v.len(), n);
        assert!(v.iter().all(|&x| x.to_bits() == 0));
        let b = zeroed_bytes(65 << 20);
        assert_eq!(b.len(), 65 << 20);
        assert!(b.iter().all(|&x| x == 0));
        assert_eq!(zeroed_f32(5), vec![0.0; 5]);
    }

    #[test]
    fn an_offered_buffer_of_the_size_is_taken_as_it_is_and_others_are_let_go() {
        // Sizes no f32 draw of another test running beside this one asks for.
        recycle(vec![7u8; 4097]);
        recycle(vec![9u8; 101]);
        let before = recycled_taken();
        assert_eq!(
            bytes_to_overwrite(4097),
            vec![7u8; 4097],
            "taken, not zeroed"
        );
        assert_eq!(recycled_taken() - before, 4097);
        assert_eq!(bytes_to_overwrite(4097), vec![0u8; 4097], "only once");
        clear_recycled();
        assert_eq!(bytes_to_overwrite(101), vec![0u8; 101], "let go");
    }

    #[test]
    fn a_row_decodes_as_its_elements_do() {
        // Contiguous f32 (the slice path), f32 rows with padding between them, and f16 (the
        // element path), each row against `get`.
        let vals: Vec<f32> = (0..60).map(|i| i as f32 * 0.5 - 7.0).collect();
        let dense = HostTensor::from_f32(DType::F32, [5, 4, 3, 1], &vals);
        let mut padded = dense.clone();
        padded.nb = [4, 24, 96, 288];
        padded.bytes = (0..72)
            .flat_map(|i| (i as f32 - 30.0).to_le_bytes())
            .collect();
        let mut half = HostTensor::from_f32(DType::F16, [5, 4, 3, 1], &vals);
        half.nb = [2, 10, 40, 120];
        for t in [&dense, &padded, &half] {
            for i2 in 0..3 {
                for i1 in 0..4 {
                    let mut row = [f64::NAN; 6];
                    t.row_f64(i1, i2, 0, &mut row);
                    for (i0, v) in row.iter().take(5).enumerate() {
                        assert_eq!(*v, t.get(i0, i1, i2, 0), "{:?} ({i0}, {i1}, {i2})", t.nb);
                    }
                    // Only ne0 elements are written.
                    assert!(row[5].is_nan());
                }
            }
        }
        assert!(dense.get(4, 3, 2, 0) != 0.0);
    }
}
