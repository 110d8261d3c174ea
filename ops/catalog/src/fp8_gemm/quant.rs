//! CPU mirrors of the device's quantizers, bit for bit.
//!
//! - FP8 e4m3 (OCP / NVIDIA `__nv_fp8_e4m3`): round to nearest even, saturating to ±448
//!   (the device uses `cvt.rn.satfinite.e4m3x2.f32`; `float8::F8E4M3::from_f32` is the same
//!   conversion: NaN stays NaN (0x7F, sign kept), anything above 464 and ±inf go to ±448,
//!   values in (448, 464] round down to 448, |x| <= 2^-10 goes to ±0).
//! - FP4 e2m1 (OCP MX): sign bit 3, magnitude codes 0..7 = {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
//! - UE8M0 block scales (OCP MX): 2^(e - 127); e = 255 is NaN; e = 0 is 2^-127 (an f32
//!   subnormal). A product e2m1 * 2^s is exact in e4m3 for s in [-8, 6], because every e2m1
//!   value has at most 2 significant bits and e4m3 has 4 (normal range 2^-6..448, subnormal
//!   step 2^-9); kedge's inputs draw s from [-3, 2], so the W upcast is exact and the GEMM sees
//!   exactly the FP4 weights. Out-of-range scales are still mirrored: both sides round the
//!   same f32 product with the same conversion.
//!
//! Only `from_f32`, `to_f32`, `from_bits` and `to_bits` of float8 0.7.0 are used: its `MAX`,
//! `INFINITY` and `is_infinite` are wrong for e4m3 (device-notes.md).

use float8::F8E4M3;

/// e4m3's largest finite value; the activation scale maps the amax onto it.
pub(crate) const E4M3_MAX: f32 = 448.0;

/// e2m1 magnitudes by 3-bit code.
pub(crate) const E2M1_MAGNITUDE: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// f32 -> e4m3 bits, round to nearest even with saturation (the device's
/// `cvt.rn.satfinite.e4m3x2.f32`).
#[inline]
pub(crate) fn e4m3_from_f32(x: f32) -> u8 {
    F8E4M3::from_f32(x).to_bits()
}

/// e4m3 bits -> f32 (exact; 0x7F / 0xFF are NaN).
#[inline]
pub(crate) fn e4m3_to_f32(bits: u8) -> f32 {
    F8E4M3::from_bits(bits).to_f32()
}

/// One e2m1 nibble (low 4 bits of `code`) as f32.
#[inline]
pub(crate) fn e2m1_to_f32(code: u8) -> f32 {
    let mag = E2M1_MAGNITUDE[(code & 7) as usize];
    if code & 8 != 0 {
        -mag
    } else {
        mag
    }
}

/// UE8M0 scale byte as f32: 2^(e-127), NaN for 0xFF. Built from bits exactly as the kernel
/// does, so e = 0 is the subnormal 2^-127.
#[inline]
pub(crate) fn ue8m0_to_f32(e: u8) -> f32 {
    match e {
        0 => f32::from_bits(0x0040_0000),
        255 => f32::NAN,
        _ => f32::from_bits((e as u32) << 23),
    }
}

/// bf16 bits -> f32 (exact).
#[inline]
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// The nibble of element `k` in a row of packed FP4: element 2i in the low nibble of byte i,
/// element 2i+1 in the high nibble (OCP MX / ggml MXFP4 order).
#[inline]
pub(crate) fn fp4_nibble(row: &[u8], k: usize) -> u8 {
    let b = row[k / 2];
    if k & 1 == 0 {
        b & 0x0F
    } else {
        b >> 4
    }
}

/// The W upcast of one element, as the kernel computes it: e2m1 * ue8m0 in f32, then e4m3.
#[inline]
pub(crate) fn upcast_w(code: u8, scale: u8) -> u8 {
    e4m3_from_f32(e2m1_to_f32(code) * ue8m0_to_f32(scale))
}

/// The activation scale of a chunk, as the device computes it: amax / 448 in f32. NaNs are
/// skipped (`fmaxf` ignores them); an all-zero (or degenerate) chunk gets scale 1.
pub(crate) fn act_scale(a: impl IntoIterator<Item = f32>) -> f32 {
    let amax = a.into_iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let s = amax / E4M3_MAX;
    if s > 0.0 && s < 3.4e38 {
        s
    } else {
        1.0
    }
}

/// One activation quantized: e4m3(a / scale), IEEE f32 division as the kernel does it
/// (NVRTC compiles `/` with -prec-div=true by default).
#[inline]
pub(crate) fn quantize_act(a: f32, scale: f32) -> u8 {
    e4m3_from_f32(a / scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_known_bit_patterns() {
        // Normal values: sign | eeee | mmm, bias 7.
        assert_eq!(e4m3_from_f32(1.0), 0x38);
        assert_eq!(e4m3_from_f32(-1.0), 0xB8);
        assert_eq!(e4m3_from_f32(1.5), 0x3C);
        assert_eq!(e4m3_from_f32(448.0), 0x7E);
        assert_eq!(e4m3_from_f32(-448.0), 0xFE);
        assert_eq!(e4m3_from_f32(2f32.powi(-6)), 0x08); // smallest normal
        assert_eq!(e4m3_from_f32(0.0), 0x00);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
        // Subnormals: step 2^-9; 2^-9 is 0x01, 7 * 2^-9 is 0x07.
        assert_eq!(e4m3_from_f32(2f32.powi(-9)), 0x01);
        assert_eq!(e4m3_from_f32(7.0 * 2f32.powi(-9)), 0x07);
        assert_eq!(e4m3_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(e4m3_to_f32(0x07), 7.0 * 2f32.powi(-9));
        // Half the smallest subnormal ties to even (0); just above rounds up.
        assert_eq!(e4m3_from_f32(2f32.powi(-10)), 0x00);
        assert_eq!(e4m3_from_f32(2f32.powi(-10) * 1.01), 0x01);
        // 1.5 * 2^-9 ties between 0x01 and 0x02: even is 0x02.
        assert_eq!(e4m3_from_f32(1.5 * 2f32.powi(-9)), 0x02);
        // Round half to even in the normal range: 1 + 1/16 is halfway 1.0 (0x38) / 1.125 (0x39).
        assert_eq!(e4m3_from_f32(1.0625), 0x38);
        // 1.125 + 1/16 is halfway 1.125 (0x39, odd) / 1.25 (0x3A): goes to even 0x3A.
        assert_eq!(e4m3_from_f32(1.1875), 0x3A);
    }

    #[test]
    fn e4m3_saturates_instead_of_nan() {
        // 416 < x <= 464 rounds to 448; past that, saturation to the max finite, never NaN.
        assert_eq!(e4m3_from_f32(449.0), 0x7E);
        assert_eq!(e4m3_from_f32(464.0), 0x7E);
        assert_eq!(e4m3_from_f32(465.0), 0x7E);
        assert_eq!(e4m3_from_f32(1e6), 0x7E);
        assert_eq!(e4m3_from_f32(-1e6), 0xFE);
        assert_eq!(e4m3_from_f32(f32::INFINITY), 0x7E);
        assert_eq!(e4m3_from_f32(f32::NEG_INFINITY), 0xFE);
        // NaN stays NaN (the only NaN encoding, S.1111.111).
        assert_eq!(e4m3_from_f32(f32::NAN) & 0x7F, 0x7F);
        assert!(e4m3_to_f32(0x7F).is_nan());
        assert!(e4m3_to_f32(0xFF).is_nan());
        // 0x7E is finite (e4m3 has no infinity): float8's is_infinite is not used for this.
        assert_eq!(e4m3_to_f32(0x7E), 448.0);
    }

    #[test]
    fn e4m3_round_trips_every_finite_code() {
        for b in 0u8..=255 {
            if b & 0x7F == 0x7F {
                continue;
            }
            let v = e4m3_to_f32(b);
            assert_eq!(e4m3_from_f32(v), b, "code {b:#04x} = {v}");
        }
    }

    #[test]
    fn e2m1_table_and_signs() {
        let want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        for (c, w) in want.iter().enumerate() {
            assert_eq!(e2m1_to_f32(c as u8), *w);
            assert_eq!(e2m1_to_f32(c as u8 | 8), -*w);
        }
        // -0 is code 8.
        assert!(e2m1_to_f32(8).is_sign_negative());
        // Packing: element 0 low nibble, element 1 high nibble.
        let row = [0x7Au8, 0x1F];
        assert_eq!(fp4_nibble(&row, 0), 0xA);
        assert_eq!(fp4_nibble(&row, 1), 0x7);
        assert_eq!(fp4_nibble(&row, 2), 0xF);
        assert_eq!(fp4_nibble(&row, 3), 0x1);
        assert_eq!(e2m1_to_f32(0xA), -1.0);
        assert_eq!(e2m1_to_f32(0xF), -6.0);
    }

    #[test]
    fn ue8m0_scales() {
        assert_eq!(ue8m0_to_f32(127), 1.0);
        assert_eq!(ue8m0_to_f32(124), 0.125);
        assert_eq!(ue8m0_to_f32(129), 4.0);
        assert_eq!(ue8m0_to_f32(0), 2f32.powi(-127));
        assert!(ue8m0_to_f32(255).is_nan());
    }

    #[test]
    fn upcast_is_exact_for_scales_minus8_to_6() {
        for s in -8i32..=6 {
            let e = (127 + s) as u8;
            for c in 0u8..16 {
                let exact = e2m1_to_f32(c) * 2f32.powi(s);
                assert_eq!(e4m3_to_f32(upcast_w(c, e)), exact, "code {c} scale 2^{s}");
            }
        }
        // Outside the range it is not exact, and both sides saturate/round the same way:
        // 6 * 2^7 = 768 saturates to 448.
        assert_eq!(upcast_w(7, 134), 0x7E);
    }

    #[test]
    fn activation_scale_and_quantization() {
        let a = [0.25f32, -3.5, 1.0, 0.0];
        let s = act_scale(a);
        assert_eq!(s, 3.5 / 448.0);
        // The amax element lands on +-448 (or saturates there if the division rounds up).
        assert_eq!(quantize_act(-3.5, s), 0xFE);
        assert_eq!(e4m3_to_f32(quantize_act(1.0, s)), 128.0);
        // All zeros: scale 1, quantized zeros.
        assert_eq!(act_scale([0.0f32, -0.0]), 1.0);
        // NaN is skipped by the max (fmaxf semantics).
        assert_eq!(act_scale([f32::NAN, 2.0]), 2.0 / 448.0);
    }
}
