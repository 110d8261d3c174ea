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
    /// The generator's state: the next draw is a mix of `state + gamma` (what a device draws
    /// element `i` of the stream from, as `state + (i + 1) * gamma`).
    pub(crate) fn state(&self) -> u64 {
        self.0
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
    fn unit_f32(&mut self) -> f32 {
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

/// The same generator in C, for standalone repros: `kedge_stream(seed, index)` is
/// [`Rng::stream`], `kedge_next` [`Rng::next_u64`], `kedge_uniform` `uniform(-1.0, 1.0)` and
/// `kedge_below16` `below(16)`; `kedge_fill_*` fill a tensor's span as
/// `contract::op::random_tensor` does (`kedge_fill_f32_in` in an op's own range [lo, hi)).
/// Also `kedge_f32_bits`: the float with those bits.
pub const C_SOURCE: &str = r#"__attribute__((unused)) static uint64_t kedge_next(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__attribute__((unused)) static uint64_t kedge_stream(uint64_t seed, uint64_t index) {
    uint64_t s = (seed + index * 0xD1B54A32D192ED03ull) ^ 0x9E3779B97F4A7C15ull;
    kedge_next(&s);
    return s;
}
__attribute__((unused)) static float kedge_uniform(uint64_t *s) {
    const float unit = (float) (kedge_next(s) >> 40) / (float) (1u << 24);
    return -1.0f + 2.0f * unit; /* exact: 2*unit is exact, one rounding either way */
}
__attribute__((unused)) static uint32_t kedge_below16(uint64_t *s) {
    return (uint32_t) (((unsigned __int128) kedge_next(s) * 16u) >> 64);
}
__attribute__((unused)) static void kedge_fill_f32(float *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = kedge_uniform(&s);
}
__attribute__((unused)) static void kedge_fill_f32_in(float *h, size_t n, uint64_t seed, uint64_t index, float lo, float hi) {
    uint64_t s = kedge_stream(seed, index);
    const float d = hi - lo;
    for (size_t i = 0; i < n; i++) {
        const float unit = (float) (kedge_next(&s) >> 40) / (float) (1u << 24);
        /* Each step rounded on its own, as kedge's own draw: no fused multiply-add. */
        volatile float p = d * unit;
        h[i] = lo + p;
    }
}
__attribute__((unused)) static void kedge_fill_i32(int32_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (int32_t) kedge_below16(&s);
}
__attribute__((unused)) static void kedge_fill_u8(uint8_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (uint8_t) kedge_below16(&s);
}
__attribute__((unused)) static void kedge_fill_i8(int8_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (int8_t) kedge_below16(&s);
}
__attribute__((unused)) static void kedge_fill_i16(int16_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (int16_t) kedge_below16(&s);
}
__attribute__((unused)) static void kedge_fill_i64(int64_t *h, size_t n, uint64_t seed, uint64_t index) {
    uint64_t s = kedge_stream(seed, index);
    for (size_t i = 0; i < n; i++) h[i] = (int64_t) kedge_below16(&s);
}
__attribute__((unused)) static float kedge_f32_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
"#;

/// The C statement that fills `n` elements (a C expression) at `ptr` with what
/// `contract::op::random_tensor` draws for a dense tensor of `dtype`, through
/// [`C_SOURCE`]'s `kedge_fill_*`: f32 and the integer types, each at its own width. `None` for
/// a type drawn otherwise (f16 and bf16 go through f32; block formats through the build).
pub fn c_fill(
    dtype: crate::model::dtype::DType,
    ptr: &str,
    n: &str,
    seed: u64,
    index: u64,
) -> Option<String> {
    use crate::model::dtype::DType;
    let (f, ty) = match dtype {
        DType::F32 => ("f32", "float"),
        DType::I32 => ("i32", "int32_t"),
        DType::U8 => ("u8", "uint8_t"),
        DType::I8 => ("i8", "int8_t"),
        DType::I16 => ("i16", "int16_t"),
        DType::I64 => ("i64", "int64_t"),
        _ => return None,
    };
    Some(format!(
        "kedge_fill_{f}(({ty} *) {ptr}, {n}, {seed}ull, {index}ull);"
    ))
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
