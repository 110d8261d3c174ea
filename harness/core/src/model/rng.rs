//! A tiny deterministic generator. Cases replay bit for bit across kedge versions and
//! platforms, so the input stream must not depend on an external crate's algorithm choice.

/// SplitMix64: fixed, portable, good enough to fill test tensors.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The stream of `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    /// A stream derived from a seed and a tensor index, so tensors are independent of
    /// each other's sizes.
    pub fn stream(seed: u64, index: u64) -> Self {
        let mut r = Rng::new(seed.wrapping_add(index.wrapping_mul(0xD1B5_4A32_D192_ED03)));
        r.next_u64();
        r
    }
    /// The same stream `n` draws further on, in constant time: SplitMix64's state only
    /// advances by a fixed increment, so a tensor can be filled in parallel chunks that give
    /// exactly the values one sequential pass gives.
    pub fn skipped(&self, n: u64) -> Self {
        Rng(self.0.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
    }
    /// The next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1) with 24 bits: exactly representable in f32.
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.unit_f32()
    }
    /// Uniform integer in [0, n). `n` must be positive.
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn deterministic_and_never_all_zero() {
        let a: Vec<f32> = {
            let mut r = Rng::stream(7, 0);
            (0..64).map(|_| r.uniform(-1.0, 1.0)).collect()
        };
        let b: Vec<f32> = {
            let mut r = Rng::stream(7, 0);
            (0..64).map(|_| r.uniform(-1.0, 1.0)).collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().any(|&x| x != 0.0));
        let c: Vec<f32> = {
            let mut r = Rng::stream(7, 1);
            (0..64).map(|_| r.uniform(-1.0, 1.0)).collect()
        };
        assert_ne!(a, c);
    }

    #[test]
    fn a_skipped_stream_continues_the_sequential_one() {
        let mut seq = Rng::stream(3, 2);
        let all: Vec<u64> = (0..1000).map(|_| seq.next_u64()).collect();
        let start = Rng::stream(3, 2);
        for k in [0u64, 1, 7, 500, 999] {
            let mut r = start.skipped(k);
            assert_eq!(r.next_u64(), all[k as usize], "draw {k}");
        }
    }
}
