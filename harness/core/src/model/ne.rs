//! A shape as ggml writes it, and how kedge prints one. Below everything that checks a shape
//! (`model::shape`) and the errors that name one (`error`), so neither depends on the other.

/// A shape in ggml order: `[ne0, ne1, ne2, ne3]`, `ne0` contiguous.
pub type Ne = [i64; 4];

/// `[64,1,65536,1]`.
pub fn fmt_ne(ne: &Ne) -> String {
    format!("[{},{},{},{}]", ne[0], ne[1], ne[2], ne[3])
}
