//! Shared by the integration tests that drive a supervisor with a fake worker script.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Write `script` as an executable `fake-worker.sh` in `dir`, beside a `limits.json` (the h200
/// profile) that the scripts send in their `ready` message.
pub fn install_fake_worker(dir: &Path, script: &str) -> PathBuf {
    let limits =
        serde_json::to_string(&kedge_core::LimitsProfile::builtin("h200").unwrap()).unwrap();
    std::fs::write(dir.join("limits.json"), limits).unwrap();
    let p = dir.join("fake-worker.sh");
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}
