//! Output digests: whether two outputs are bit-identical, without keeping either. In the model
//! because a download hashes what it copies (`cuda::device`) and a verdict records it
//! (`judge`); both depend on this, not on each other.

use crate::model::host::HostTensor;
use rayon::prelude::*;

/// A 64-bit digest of an output's bytes: equal digests for two impls on one case say their
/// outputs are bit-identical (the SDPA fix's claim, tested rather than trusted). Each 1 MiB
/// chunk is hashed as 64-bit words in four FNV-style lanes (xor, then multiply by the FNV
/// prime: a changed word always changes its lane), the lanes, the tail bytes and the length
/// mixed at the end; the chunks' digests, in order, are hashed the same way. A word at a time
/// and the chunks in parallel: an 8 GiB output takes a fraction of a second. (Byte-wise
/// FNV-1a took 0.75 s of every 2^31-element case on the H200's 16 cores.)
pub fn digest(out: &HostTensor) -> String {
    if out.bytes.len() <= DIGEST_CHUNK {
        return format!("{:016x}", words_digest(&out.bytes));
    }
    let parts: Vec<u64> = out
        .bytes
        .par_chunks(DIGEST_CHUNK)
        .map(words_digest)
        .collect();
    digest_of_chunks(&parts)
}

/// The bytes [`digest`] hashes apart, in parallel, when an output is longer.
pub(crate) const DIGEST_CHUNK: usize = 1 << 20;

/// [`digest`] of bytes longer than [`DIGEST_CHUNK`], from the hashes ([`words_digest`]) of
/// their chunks in order: a copy that holds each chunk in cache (the download's) hashes it
/// there, and the output is not read again to digest it.
pub(crate) fn digest_of_chunks(chunks: &[u64]) -> String {
    let parts: Vec<u8> = chunks.iter().flat_map(|h| h.to_le_bytes()).collect();
    format!("{:016x}", words_digest(&parts))
}

/// [`digest`]'s hash of one run of bytes (also what finds a quantized pool and its rows).
pub fn words_digest(bytes: &[u8]) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    const BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    // The lanes start apart, so two words swapped between lanes change the digest.
    let mut lanes = [BASIS, BASIS ^ 1, BASIS ^ 2, BASIS ^ 3];
    let mut blocks = bytes.chunks_exact(32);
    for b in &mut blocks {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[8 * k..8 * k + 8]);
            *lane = (*lane ^ u64::from_le_bytes(w)).wrapping_mul(PRIME);
        }
    }
    let mut h = BASIS;
    for lane in lanes {
        h = (h ^ fmix64(lane)).wrapping_mul(PRIME);
    }
    for &b in blocks.remainder() {
        h = (h ^ b as u64).wrapping_mul(PRIME);
    }
    fmix64(h ^ bytes.len() as u64)
}

/// MurmurHash3's finalizer: every input bit reaches every output bit.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^ (k >> 33)
}
