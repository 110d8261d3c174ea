//! Lines for upstream's own test suite (ggml's test-backend-ops), and the C++ and `vars()`
//! spellings they are written in.

use crate::model::shape::Ne;

/// A line for upstream's own test suite.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamRepro {
    /// e.g. `test_cases.emplace_back(new test_rms_norm(GGML_TYPE_F32, {64, 1, 65536, 1}, false, 1e-6f));`
    pub test_case_line: String,
    /// test-backend-ops `-o` name, e.g. `RMS_NORM`.
    pub op_name: String,
    /// The case's `vars()` string, e.g. `type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0`.
    pub vars: String,
}

/// ggml's float formatting in `vars()`: `%f`-like with 6 decimals.
pub fn ggml_float(x: f64) -> String {
    format!("{x:.6}")
}

/// test-backend-ops' ne list: `{64, 1, 65536, 1}`.
pub fn cpp_ne(ne: &Ne) -> String {
    format!("{{{}, {}, {}, {}}}", ne[0], ne[1], ne[2], ne[3])
}

/// vars()' ne: `[64,1,65536,1]`.
pub fn vars_ne(ne: &Ne) -> String {
    format!("[{},{},{},{}]", ne[0], ne[1], ne[2], ne[3])
}

/// A C float literal for test-backend-ops constructors: `1e-6f`, `0.5f`.
pub fn cpp_float(x: f64) -> String {
    let s = format!("{x:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    if e == 0 {
        let m = if m.contains('.') {
            m.to_string()
        } else {
            format!("{m}.0")
        };
        format!("{m}f")
    } else if (-3..=3).contains(&e) && x.abs() >= 1e-3 {
        let v = format!("{x}");
        let v = if v.contains('.') { v } else { format!("{v}.0") };
        format!("{v}f")
    } else {
        format!("{m}e{e}f")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn cpp_floats() {
        assert_eq!(cpp_float(1e-6), "1e-6f");
        assert_eq!(cpp_float(1e-5), "1e-5f");
        assert_eq!(cpp_float(0.5), "0.5f");
        assert_eq!(cpp_float(1.0), "1.0f");
        assert_eq!(ggml_float(1e-6), "0.000001");
    }
}
