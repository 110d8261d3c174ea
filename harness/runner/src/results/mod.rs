//! `results.jsonl`: written one verdict per line as each arrives (flushed, so an interrupted
//! sweep loses nothing and `--resume` skips what finished), read back and merged across
//! shards. One writer per output directory (`OutDir` holds its lock); nothing is written
//! through a link, whole files are replaced atomically (`outfile`), and a command refuses a
//! target of another kind than it writes (`kind`) or one of its own inputs.

mod error;
mod kind;
mod outdir;
pub(crate) mod outfile;
mod reader;
mod writer;

pub use error::OutputError;
pub use kind::FileKind;
pub use outdir::{OutDir, OutMode, REPORT_FILES};
pub(crate) use reader::finished_ids;
pub use reader::{ResultSet, ResultsError, TornLine};
pub use writer::ResultsWriter;

use kedge_core::CaseResult;

/// One shell word: `'...'` with any `'` inside escaped.
pub(crate) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The one-line command that re-runs a case.
pub fn rerun_command(r: &CaseResult) -> String {
    let mut cmd = format!("kedge run --case {}", shell_quote(&r.case.to_line()));
    if let Some(t) = r.under.tool() {
        // A sanitizer finding needs the sanitizer to be seen again.
        cmd.push_str(&format!(" --sanitize {t}"));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, DType, Detector, Tool, Under, Verdict};

    #[test]
    fn rerun_command_quotes_the_case_line_and_names_the_tool() {
        let mut c = Case::new("x", "y", DType::F32, [1, 1, 1, 1]);
        c.params.insert("name".into(), "it's".into());
        let mut r = CaseResult::new(&c, Verdict::Pass, Detector::None, "");
        let cmd = rerun_command(&r);
        assert!(cmd.starts_with("kedge run --case '{"), "{cmd}");
        assert!(cmd.contains(r"it'\''s"), "{cmd}");
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
        r.under = Under::Tool(Tool::Memcheck);
        assert!(rerun_command(&r).ends_with(" --sanitize memcheck"));
    }
}
