//! Progress on stderr while cases run: a bar on a terminal (failures printed above it), a
//! line per case otherwise (CI logs).

use kedge_core::CaseResult;
use std::io::Write;

/// How a run shows its progress on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A progress bar, with failures printed above it.
    Bar,
    /// A line per case.
    Lines,
    /// Nothing: the caller reports (a multi-GPU sweep, whose GPUs share one count).
    Off,
}

impl Progress {
    /// A bar on a terminal, lines otherwise (CI logs).
    pub fn auto() -> Progress {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            Progress::Bar
        } else {
            Progress::Lines
        }
    }
}

/// Shows verdicts as they arrive: `[done/total] verdict detector case (gpu N)`.
pub struct Ticker {
    mode: Progress,
    bar: Option<indicatif::ProgressBar>,
    total: usize,
}

impl Ticker {
    pub fn new(mode: Progress, total: usize) -> Ticker {
        let bar = (mode == Progress::Bar).then(|| {
            let b = indicatif::ProgressBar::new(total as u64);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b
        });
        Ticker { mode, bar, total }
    }

    /// `r` is the `done`-th result (1-based).
    pub fn case(&self, done: usize, r: &CaseResult) {
        if self.mode == Progress::Off {
            return;
        }
        let line = format!(
            "[{done}/{}] {:<16} {:<12} {}{}",
            self.total,
            r.verdict.name(),
            r.detector.name(),
            r.case.label(),
            r.gpu.map(|g| format!(" (gpu {g})")).unwrap_or_default()
        );
        match &self.bar {
            Some(b) => {
                b.set_position(done as u64);
                if r.verdict.is_failure() {
                    b.println(line);
                }
            }
            None => {
                // A closed stderr is no reason to stop a run.
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }

    pub fn finish(self) {
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
