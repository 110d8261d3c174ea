//! `results.jsonl`: one `CaseResult` per line, appended and flushed as verdicts arrive, so an
//! interrupted sweep loses nothing and `--resume` can skip what finished.

use kedge_core::CaseResult;
use std::collections::HashSet;
use std::io::{BufRead, Write};
use std::path::Path;

pub struct ResultsWriter {
    file: std::fs::File,
    pub written: usize,
}

impl ResultsWriter {
    /// Open for appending (`resume`) or start fresh.
    pub fn open(path: &Path, resume: bool) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir)?;
            }
        }
        if resume {
            drop_torn_tail(path)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(resume)
            .write(true)
            .truncate(!resume)
            .open(path)?;
        Ok(ResultsWriter { file, written: 0 })
    }
    pub fn write(&mut self, r: &CaseResult) -> std::io::Result<()> {
        writeln!(self.file, "{}", r.to_line())?;
        self.file.flush()?;
        self.written += 1;
        Ok(())
    }
}

/// An interrupted write can leave a last line without its newline: cut it off, so the next
/// verdict starts on a line of its own (that case simply runs again).
fn drop_torn_tail(path: &Path) -> std::io::Result<()> {
    let Ok(bytes) = std::fs::read(path) else {
        return Ok(());
    };
    if bytes.is_empty() || bytes.ends_with(b"\n") {
        return Ok(());
    }
    let keep = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|i| i + 1)
        .unwrap_or(0);
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(keep as u64)
}

/// Read results, skipping a torn last line (an interrupted write) rather than failing.
pub fn read(path: &Path) -> std::io::Result<Vec<CaseResult>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for line in std::io::BufReader::new(f).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        if let Ok(r) = serde_json::from_str::<CaseResult>(&line) {
            out.push(r);
        }
    }
    Ok(out)
}

/// Ids of cases already finished in `path` (for `--resume`), per `under` (native, memcheck...).
pub fn finished_ids(path: &Path, under: &str) -> HashSet<String> {
    read(path)
        .map(|rs| {
            rs.into_iter()
                .filter(|r| r.under == under)
                .map(|r| r.id)
                .collect()
        })
        .unwrap_or_default()
}
