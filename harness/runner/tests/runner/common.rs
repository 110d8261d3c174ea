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

/// A time budget's clock for fake workers that record each case they are sent as a line of
/// `seen` in their folder: one second per case answered, so where a time-limited run stops does
/// not depend on this machine's speed.
pub struct Answered(pub PathBuf);

impl kedge_runner::run::budget::Clock for Answered {
    fn elapsed(&self) -> std::time::Duration {
        let n = std::fs::read_to_string(&self.0).map_or(0, |t| t.lines().count());
        std::time::Duration::from_secs(n as u64)
    }
}

/// The cases such a fake worker was sent, in order.
pub fn seen(dir: &Path) -> Vec<kedge_core::Case> {
    std::fs::read_to_string(dir.join("seen"))
        .unwrap_or_default()
        .lines()
        .map(|l| kedge_core::Case::parse_line(1, l).unwrap())
        .collect()
}
