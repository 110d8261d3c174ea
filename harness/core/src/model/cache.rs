//! Where kedge keeps what it can make again (NVRTC images, quantized pools): one place per
//! kind, so a user can find and remove each.

use std::path::PathBuf;

/// The folder of the cache `name`: the variable `var` where it is set, else
/// `$XDG_CACHE_HOME/kedge/NAME`, else `~/.cache/kedge/NAME`, else the temporary directory's
/// `kedge-NAME`.
pub fn dir(var: &str, name: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(p).join("kedge").join(name);
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("kedge").join(name);
    }
    std::env::temp_dir().join(format!("kedge-{name}"))
}
