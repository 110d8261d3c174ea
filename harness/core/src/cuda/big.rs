//! Big cases on the device itself: inputs drawn where they live (the same values the host
//! draws for the seed: kedge's SplitMix64 stream is a counter, so element `i` is computed on
//! its own), outputs poisoned and scanned for poison survivors and non-finite values there, and
//! only the rows a sampled judge reads copied back. A 2^31-element case then moves kilobytes
//! across PCIe instead of gigabytes. The kernels are `big.cu` beside this file.
//!
//! These work on raw device pointers of the current context: kedge's own allocations, or a
//! library's (ggml's CUDA buffers live in the same primary context).

use crate::cuda::device::Device;
use crate::cuda::error::{driver, RunError};
use crate::cuda::kernel::{KArg, Kernel};
use crate::model::dtype::DType;
use crate::model::host::poison_pattern;
use crate::model::rng::Rng;
use cudarc::driver::sys;

crate::kernel_source!(BIG = "harness/core/src/cuda/big.cu", "big.cu");

/// The kernels of `big.cu` and the byte sizes of each one's parameters, for the compile test.
pub const KERNELS: &[(Kernel, &[u32])] = &[
    (BIG.entry("kedge_draw_f32"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_draw_f16"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_draw_bf16"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_draw_i32"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_draw_i16"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_draw_i8"), &[8, 8, 8, 4, 4]),
    (BIG.entry("kedge_scan_u32"), &[8, 8, 4, 4, 8]),
    (BIG.entry("kedge_scan_u16"), &[8, 8, 4, 4, 8]),
    (BIG.entry("kedge_scan_block"), &[8, 8, 4, 4, 8]),
    (BIG.entry("kedge_pool_rows"), &[8, 8, 8, 8, 8, 8]),
    (BIG.entry("kedge_distinct_rows"), &[8, 8, 8, 8, 8]),
];

/// Threads per block of the draw and scan kernels, and the most blocks they take (grid-stride
/// loops do the rest).
const THREADS: u64 = 256;
const MAX_BLOCKS: u64 = 1 << 16;

fn grid(n: u64) -> [u64; 3] {
    [n.div_ceil(THREADS).clamp(1, MAX_BLOCKS), 1, 1]
}

/// Whether [`draw_uniform`] can make a tensor of `dtype`: the plain types. A block format is
/// quantized by the library from host values.
pub fn can_draw(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F32 | DType::F16 | DType::Bf16 | DType::I32 | DType::I16 | DType::I8
    )
}

/// Fill `n` elements at `ptr` with what `contract::op::random_tensor(seed, index, .., lo, hi)`
/// draws on the host for a dense tensor of `dtype`: uniform in [lo, hi) rounded to the type,
/// integers in [0, 16).
#[allow(clippy::too_many_arguments)]
pub fn draw_uniform(
    dev: &mut Device,
    ptr: u64,
    dtype: DType,
    n: u64,
    seed: u64,
    index: u64,
    lo: f32,
    hi: f32,
) -> Result<(), RunError> {
    let entry = match dtype {
        DType::F32 => "kedge_draw_f32",
        DType::F16 => "kedge_draw_f16",
        DType::Bf16 => "kedge_draw_bf16",
        DType::I32 => "kedge_draw_i32",
        DType::I16 => "kedge_draw_i16",
        DType::I8 => "kedge_draw_i8",
        d => {
            return Err(RunError::Unsupported(format!(
                "{d} inputs are not drawn on the device"
            )))
        }
    };
    if n == 0 {
        return Ok(());
    }
    let state = Rng::stream(seed, index).state();
    let mut args = [
        KArg::Ptr(ptr),
        KArg::U64(n),
        KArg::U64(state),
        KArg::F32(lo),
        KArg::F32(hi),
    ];
    let k: Kernel = BIG.entry(entry);
    dev.launch(&k, grid(n), [THREADS, 1, 1], 0, &mut args, &entry, true)
}

/// Fill input `index` (`dtype`, shape `ne`, byte strides `nb`) at `ptr` with distinct rows,
/// as the host's `contract::op::distinct_rows(case of seed, spec, index)` makes them (f32
/// only). A thread a row: argsort's `[64, 67108865]` input is 17 GB the host made and uploaded.
pub fn distinct_rows(
    dev: &mut Device,
    ptr: u64,
    dtype: DType,
    ne: [i64; 4],
    nb: [u64; 4],
    seed: u64,
    index: u64,
) -> Result<(), RunError> {
    if dtype != DType::F32 {
        return Err(RunError::Unsupported(format!(
            "distinct rows of {dtype} are not made on the device"
        )));
    }
    let n = ne[0].max(1) as u64;
    let rows = ne[1..].iter().map(|&d| d.max(1) as u64).product::<u64>();
    let pitch = nb[1] / 4;
    // Rows laid out one after the other at `pitch` (a view of a bigger span is not).
    let dense_above = nb[2] == nb[1] * ne[1].max(1) as u64 && nb[3] == nb[2] * ne[2].max(1) as u64;
    if nb[0] != 4 || pitch < n || !dense_above {
        return Err(RunError::Impl(format!(
            "distinct rows of shape {ne:?} and strides {nb:?}: made on the device only for rows laid out one after the other"
        )));
    }
    let state = Rng::stream(seed, index).state();
    let mut args = [
        KArg::Ptr(ptr),
        KArg::U64(rows),
        KArg::U64(n),
        KArg::U64(pitch),
        KArg::U64(state),
    ];
    let entry = "kedge_distinct_rows";
    let k: Kernel = BIG.entry(entry);
    dev.launch(&k, grid(rows), [THREADS, 1, 1], 0, &mut args, &entry, true)
}

/// Fill the input at `ptr` (`bytes` of dense rows of `row` bytes) with rows of `blocks` (a
/// block-format input's pool, `contract::op::BlockPool`: `pool_rows` rows as the library
/// quantized them), row `r` the pool row the picks' stream (at `picks_state`) draws for it:
/// what the host's `pooled_bytes` makes, made where the input lives. The pool crosses PCIe (at
/// most 2^24 values' blocks) instead of the input (gigabytes).
pub fn pool_rows(
    dev: &mut Device,
    ptr: u64,
    bytes: u64,
    row: u64,
    blocks: &[u8],
    pool_rows: u64,
    picks_state: u64,
) -> Result<(), RunError> {
    if row == 0 || !bytes.is_multiple_of(row) || blocks.len() as u64 != row * pool_rows {
        return Err(RunError::Impl(format!(
            "a pool of {pool_rows} rows of {row} bytes ({} bytes given) cannot fill {bytes} bytes",
            blocks.len()
        )));
    }
    let rows = bytes / row;
    if rows == 0 {
        return Ok(());
    }
    let mut staged: sys::CUdeviceptr = 0;
    // SAFETY: an allocation of the pool's size, freed below on every path.
    driver("cuMemAlloc", unsafe {
        sys::cuMemAlloc_v2(&mut staged, blocks.len())
    })?;
    let run = (|| -> Result<(), RunError> {
        // SAFETY: the pool's bytes into the allocation of its size just made, on the stream
        // the kernel runs on (so it reads them copied); `blocks` outlives the synchronizing
        // launch below.
        driver("cuMemcpyHtoDAsync", unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                staged,
                blocks.as_ptr() as *const std::ffi::c_void,
                blocks.len(),
                dev.cu_stream(),
            )
        })?;
        let mut args = [
            KArg::Ptr(ptr),
            KArg::Ptr(staged),
            KArg::U64(row),
            KArg::U64(rows),
            KArg::U64(pool_rows),
            KArg::U64(picks_state),
        ];
        // A warp a row: eight rows a block of 256 threads.
        let blocks_needed = rows.div_ceil(THREADS / 32).clamp(1, MAX_BLOCKS);
        let entry = "kedge_pool_rows";
        dev.launch(
            &BIG.entry(entry),
            [blocks_needed, 1, 1],
            [THREADS, 1, 1],
            0,
            &mut args,
            &entry,
            true,
        )
    })();
    // SAFETY: allocated above, freed once, after the launch synchronized (or failed).
    let freed = driver("cuMemFree", unsafe { sys::cuMemFree_v2(staged) });
    run?;
    freed
}

/// Fill `bytes` at `ptr` with the poison of `dtype`.
pub fn poison(dev: &Device, ptr: u64, bytes: u64, dtype: DType) -> Result<(), RunError> {
    let p = poison_pattern(dtype);
    let stream = dev.cu_stream();
    // SAFETY: the caller's range of `bytes` at `ptr` is device memory of this context.
    unsafe {
        match p.len() {
            4 if ptr.is_multiple_of(4) => driver(
                "cuMemsetD32Async",
                sys::cuMemsetD32Async(
                    ptr,
                    u32::from_le_bytes([p[0], p[1], p[2], p[3]]),
                    (bytes / 4) as usize,
                    stream,
                ),
            )?,
            2 if ptr.is_multiple_of(2) => driver(
                "cuMemsetD16Async",
                sys::cuMemsetD16Async(
                    ptr,
                    u16::from_le_bytes([p[0], p[1]]),
                    (bytes / 2) as usize,
                    stream,
                ),
            )?,
            _ => driver(
                "cuMemsetD8Async",
                sys::cuMemsetD8Async(ptr, p[0], bytes as usize, stream),
            )?,
        }
    }
    dev.synchronize("poisoning an output")
}

/// What a scan of an output found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scan {
    /// Elements still holding the poison (never written).
    pub(crate) unwritten: u64,
    /// Non-finite elements (poison apart).
    pub(crate) nonfinite: u64,
    /// Elements scanned.
    pub(crate) elements: u64,
}

impl Scan {
    /// What `scan` counts, over dense bytes on the host (a host backend's output).
    pub fn of_bytes(bytes: &[u8], dtype: DType) -> Scan {
        let p = poison_pattern(dtype);
        let e = dtype.size() as usize;
        let mut s = Scan::default();
        if e == 0 {
            return s;
        }
        if dtype.is_block() {
            // Blocks still holding the poison in every byte, counted in elements.
            let block = dtype.block();
            for x in bytes.chunks_exact(e) {
                s.elements += block;
                if x == p.as_slice() {
                    s.unwritten += block;
                }
            }
            return s;
        }
        for x in bytes.chunks_exact(e) {
            s.elements += 1;
            if x == p.as_slice() {
                s.unwritten += 1;
                continue;
            }
            if dtype.is_nonfinite(x) {
                s.nonfinite += 1;
            }
        }
        s
    }
}

/// Whether [`scan`] can read an output of `dtype`: the plain types [`draw_uniform`] makes, i8
/// and i16, and the block formats (their never-written blocks counted, in elements).
pub fn can_scan(dtype: DType) -> bool {
    can_draw(dtype) || dtype.is_block() || matches!(dtype, DType::I8 | DType::I16)
}

/// Count the poison survivors and non-finite values of `n` dense elements of `dtype` at `ptr`
/// (for a block format: the elements of its blocks that still hold the poison in every byte,
/// and no non-finite count).
pub fn scan(dev: &mut Device, ptr: u64, dtype: DType, n: u64) -> Result<Scan, RunError> {
    // A block format, and i8 as blocks of one byte.
    if dtype.is_block() || dtype == DType::I8 {
        return scan_blocks(dev, ptr, dtype, n);
    }
    let (entry, exp_mask) = match dtype {
        DType::F32 => ("kedge_scan_u32", 0x7F80_0000u32),
        DType::I32 => ("kedge_scan_u32", 0),
        DType::I16 => ("kedge_scan_u16", 0),
        DType::F16 => ("kedge_scan_u16", 0x7C00),
        DType::Bf16 => ("kedge_scan_u16", 0x7F80),
        d => {
            return Err(RunError::Unsupported(format!(
                "{d} outputs are not scanned on the device"
            )))
        }
    };
    let p = poison_pattern(dtype);
    let poison = if p.len() == 4 {
        u32::from_le_bytes([p[0], p[1], p[2], p[3]])
    } else {
        u16::from_le_bytes([p[0], p[1]]) as u32
    };
    let counted = counts(dev, entry, ptr, n, poison, exp_mask)?;
    Ok(Scan {
        unwritten: counted[0],
        nonfinite: counted[1],
        elements: n,
    })
}

/// [`scan`] of a block format (or i8, a block of one byte): `kedge_scan_block` over its
/// `n / block` blocks.
fn scan_blocks(dev: &mut Device, ptr: u64, dtype: DType, n: u64) -> Result<Scan, RunError> {
    let (block, size) = (dtype.block().max(1), dtype.size());
    let p = poison_pattern(dtype);
    let Some(&byte) = p.first().filter(|_| p.iter().all(|&b| b == p[0])) else {
        return Err(RunError::Unsupported(format!(
            "{dtype} outputs are not scanned on the device (their poison is not one byte)"
        )));
    };
    let blocks = n / block;
    let counted = counts(
        dev,
        "kedge_scan_block",
        ptr,
        blocks,
        size as u32,
        u32::from(byte),
    )?;
    Ok(Scan {
        unwritten: counted[0].saturating_mul(block),
        nonfinite: 0,
        elements: n,
    })
}

/// Run scan kernel `entry` over `n` units at `ptr` with its two 32-bit parameters; its two
/// counts.
fn counts(
    dev: &mut Device,
    entry: &'static str,
    ptr: u64,
    n: u64,
    a: u32,
    b: u32,
) -> Result<[u64; 2], RunError> {
    let mut counts: sys::CUdeviceptr = 0;
    // SAFETY: a 16-byte allocation, freed below on every path.
    driver("cuMemAlloc", unsafe { sys::cuMemAlloc_v2(&mut counts, 16) })?;
    let run = (|| -> Result<[u64; 2], RunError> {
        // SAFETY: the 16 bytes just allocated.
        driver("cuMemsetD8Async", unsafe {
            sys::cuMemsetD8Async(counts, 0, 16, dev.cu_stream())
        })?;
        if n > 0 {
            let mut args = [
                KArg::Ptr(ptr),
                KArg::U64(n),
                KArg::U32(a),
                KArg::U32(b),
                KArg::Ptr(counts),
            ];
            dev.launch(
                &BIG.entry(entry),
                grid(n),
                [THREADS, 1, 1],
                0,
                &mut args,
                &entry,
                true,
            )?;
        }
        let mut host = [0u64; 2];
        // SAFETY: 16 bytes into a 16-byte host array.
        driver("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(host.as_mut_ptr() as *mut std::ffi::c_void, counts, 16)
        })?;
        Ok(host)
    })();
    // SAFETY: allocated above, freed once.
    let freed = driver("cuMemFree", unsafe { sys::cuMemFree_v2(counts) });
    let host = run?;
    freed?;
    Ok(host)
}

/// Copy `bytes` at `ptr` back to the host.
pub fn read(dev: &Device, ptr: u64, bytes: usize) -> Result<Vec<u8>, RunError> {
    let mut out = vec![0u8; bytes];
    if bytes > 0 {
        dev.synchronize("before a read-back")?;
        // SAFETY: `bytes` of device memory at `ptr` (the caller's) into a buffer of that size.
        driver("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr() as *mut std::ffi::c_void, ptr, bytes)
        })?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_scan_counts_poisoned_blocks_in_elements_and_plain_poison_and_nonfinite() {
        // Three q4_0 blocks (18 bytes, 32 values each): the middle one never written.
        let p = poison_pattern(DType::Q4_0);
        let mut bytes = vec![1u8; 18];
        bytes.extend(&p);
        bytes.extend(vec![2u8; 18]);
        let s = Scan::of_bytes(&bytes, DType::Q4_0);
        assert_eq!((s.unwritten, s.nonfinite, s.elements), (32, 0, 96));
        // One poison byte short of a block is a written block.
        bytes[18] = 0;
        assert_eq!(Scan::of_bytes(&bytes, DType::Q4_0).unwritten, 0);
        // f32: a poison survivor, an infinity, two plain values.
        let mut f = Vec::new();
        for x in [
            f32::from_bits(crate::model::host::POISON_F32),
            f32::INFINITY,
            1.0,
            -2.0,
        ] {
            f.extend(x.to_le_bytes());
        }
        let s = Scan::of_bytes(&f, DType::F32);
        assert_eq!((s.unwritten, s.nonfinite, s.elements), (1, 1, 4));
        assert!(can_scan(DType::Q4K) && can_scan(DType::F16) && can_scan(DType::I8));
        assert!(!can_scan(DType::U8) && !can_scan(DType::I64));
    }

    /// `kedge_draw_i32`, `_i16` and `_i8` as written in big.cu: element `i` is the top four
    /// bits of SplitMix64's mix of `state + (i + 1) * gamma`.
    fn device_integer(state: u64, i: u64) -> i64 {
        let mut z = state.wrapping_add((i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 60) as i64
    }

    #[test]
    fn the_device_draws_the_hosts_integers_at_every_width() {
        use crate::contract::op::random_tensor;
        for dtype in [DType::I32, DType::I16, DType::I8] {
            assert!(can_draw(dtype), "{dtype}");
            let spec = crate::TensorSpec::dense("x", crate::Role::Input, dtype, [1000, 3, 1, 1])
                .expect("a spec");
            let (seed, index) = (7, 2);
            let host = random_tensor(seed, index, &spec, -1.0, 1.0);
            let state = Rng::stream(seed, index).state();
            let w = dtype.size() as usize;
            for (i, b) in host.bytes.chunks_exact(w).enumerate() {
                let v = match w {
                    4 => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                    2 => i64::from(i16::from_le_bytes([b[0], b[1]])),
                    _ => i64::from(b[0] as i8),
                };
                assert_eq!(v, device_integer(state, i as u64), "{dtype} element {i}");
            }
        }
    }
}
