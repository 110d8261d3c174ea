//! What kedge says to a person on stderr, and what it prints for programs on stdout, without
//! ever panicking on a closed stream: `kedge plan | head -1` closes stdout after one line, and
//! the command still ends with the status it would have had.

use crate::events::{Both, Event, Events, JsonLines, Progress, Reporter, Stream};
use crate::results::OutputError;
use kedge_core::{CaseResult, Verdict};
use std::io::Write;
use std::sync::Mutex;

/// Set when a note or the command's stdout could not be written for another reason than a
/// reader that went away (a full disk under `2> log`): the command ends with exit status 5
/// once its work is done (`failed_stream`), instead of having said less than it claims.
static STREAM_FAILED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Did a note or stdout fail to be written (not a closed pipe)?
pub fn failed_stream() -> bool {
    STREAM_FAILED.load(std::sync::atomic::Ordering::Relaxed)
}

fn stream_failed(e: &std::io::Error) {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        STREAM_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Write one line to stderr, prefixed `kedge: `. Never a panic: a reader that went away is
/// ignored, any other failure is remembered for the exit status (`failed_stream`).
pub fn note(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    if let Err(err) = writeln!(e, "kedge: {args}") {
        stream_failed(&err);
    }
}

/// `note!("{} cases", n)`: a line on stderr, prefixed `kedge: `.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        $crate::console::note(format_args!($($arg)*))
    };
}

/// stdout for a command's output. Once the reader has gone (EPIPE), further output is
/// dropped quietly and the command carries on to its status; any other write error is
/// reported once on stderr, output stops, and the command ends with exit status 5.
pub struct Out<W: Write = std::io::Stdout> {
    s: Stream<W>,
}

impl Out<std::io::Stdout> {
    /// The process's stdout.
    pub fn stdout() -> Self {
        Out::new(std::io::stdout())
    }
}

impl<W: Write> Out<W> {
    /// Output to any writer (a test's buffer), with the same closed-reader rules.
    pub fn new(w: W) -> Self {
        Out {
            s: Stream::new("stdout", w),
        }
    }
    /// Has the reader gone (or has writing failed)?
    pub fn closed(&self) -> bool {
        self.s.stopped()
    }
    /// Write `text` as it is.
    pub fn text(&mut self, text: &str) {
        if let Err(e) = self.s.write(text) {
            STREAM_FAILED.store(true, std::sync::atomic::Ordering::Relaxed);
            note(format_args!("{e}; output stopped"));
        }
    }
    /// Write one line.
    pub fn line(&mut self, line: impl std::fmt::Display) {
        if !self.closed() {
            self.text(&format!("{line}\n"));
        }
    }
    /// The writer back, with whatever was written to it.
    pub fn into_inner(self) -> W {
        self.s.into_inner()
    }
}

/// Colour for one stream: on when the stream is a terminal and `NO_COLOR` is unset or empty
/// (no-color.org), off otherwise, so files and pipes get plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    color: bool,
}

impl Style {
    /// For stdout.
    pub fn stdout() -> Style {
        use std::io::IsTerminal;
        Style::detect(std::io::stdout().is_terminal())
    }
    /// For stderr.
    fn stderr() -> Style {
        use std::io::IsTerminal;
        Style::detect(std::io::stderr().is_terminal())
    }
    /// Colour when `terminal` and `NO_COLOR` does not say otherwise.
    fn detect(terminal: bool) -> Style {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Style {
            color: terminal && !no_color,
        }
    }
    /// No colour.
    pub fn plain() -> Style {
        Style { color: false }
    }
    fn paint(self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn code(v: Verdict) -> &'static str {
        match v {
            Verdict::Pass => "32",
            Verdict::Unsupported | Verdict::Skipped => "33",
            _ => "1;31",
        }
    }
    /// The word a result line starts with, right-aligned: `       PASS`, `       FAIL`,
    /// `       SKIP`, `UNSUPPORTED`.
    fn word(self, v: Verdict) -> String {
        let w = match v {
            Verdict::Pass => "PASS",
            Verdict::Skipped => "SKIP",
            Verdict::Unsupported => "UNSUPPORTED",
            _ => "FAIL",
        };
        self.paint(Style::code(v), &format!("{w:>11}"))
    }
    /// The verdict's name, coloured.
    fn verdict(self, v: Verdict) -> String {
        self.paint(Style::code(v), v.name())
    }
    /// Bold.
    fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }
}

/// One result as a person reads it, as cargo-nextest prints a test:
/// `       FAIL [  12ms] rms_norm/ggml f32 ne=[64,1,65536,1] eps=1e-6 seed=1 (exact) launch-error (driver)`.
pub fn result_line(style: Style, r: &CaseResult) -> String {
    let mut s = format!(
        "{} [{}] {}",
        style.word(r.verdict),
        crate::report::ms_text(r.ms),
        r.case.label()
    );
    if r.under != kedge_core::Under::Native {
        s.push_str(&format!(" [{}]", r.under));
    }
    if r.verdict != Verdict::Pass {
        s.push_str(&format!(" {} ({})", style.verdict(r.verdict), r.detector));
    }
    if crate::report::has_leaks(r) {
        s.push_str(" + leak records");
    }
    s
}

/// What to read under a failing result's line: its detail, the first bad element, the
/// sanitizer findings with the tensor they fall in, and the command that runs it again.
pub fn detail_lines(r: &CaseResult) -> Vec<String> {
    let mut v = vec![r.detail.lines().next().unwrap_or("").to_string()];
    if matches!(
        r.verdict,
        Verdict::WrongValues | Verdict::Nonfinite | Verdict::UnwrittenOutput
    ) {
        if let Some(b) = r.numbers.as_ref().and_then(|n| n.first_bad_sentence()) {
            v.push(b);
        }
    }
    for f in &r.findings {
        v.push(crate::report::finding_line(
            &crate::report::FindingSummary {
                finding: f.clone(),
                location: f.locate(&r.observed.allocations),
            },
        ));
    }
    if r.verdict.is_failure() {
        v.push(format!("re-run: {}", crate::results::rerun_command(r)));
    }
    v
}

/// The closing lines after a run, as cargo-nextest ends: a summary line, then every failure
/// again, one line each (at most `limit`; `more(n)` says where the other n are).
pub fn summary_text(
    style: Style,
    results: &[CaseResult],
    wall_ms: Option<f64>,
    limit: usize,
    more: impl Fn(usize) -> String,
) -> String {
    let summary = Event::summary_listing(results, std::path::PathBuf::new(), limit);
    closing(style, &summary, wall_ms, more)
}

/// A summary event's closing lines (`Event::Summary`), as `summary_text` draws them.
fn summary_of(style: Style, event: &Event) -> String {
    let report = match event {
        Event::Summary { report, .. } => report.display().to_string(),
        _ => String::new(),
    };
    closing(style, event, None, |n| format!("{n} more: see {report}"))
}

/// The summary line, each listed failure's line, and `more(n)` for the `n` not listed.
fn closing(
    style: Style,
    event: &Event,
    wall_ms: Option<f64>,
    more: impl Fn(usize) -> String,
) -> String {
    let Event::Summary {
        results,
        passed,
        failed,
        unsupported,
        skipped,
        failures,
        more: not_listed,
        ..
    } = event
    else {
        return String::new();
    };
    let mut s = String::from("------------\n");
    let time = wall_ms
        .map(|ms| format!(" [{}]", crate::report::ms_text(ms)))
        .unwrap_or_default();
    s.push_str(&format!(
        "{}{time} {results} results: {passed} passed, {} failed, {unsupported} unsupported, {skipped} skipped\n",
        style.bold(&format!("{:>11}", "Summary")),
        if *failed > 0 {
            style.paint("1;31", &failed.to_string())
        } else {
            "0".into()
        },
    ));
    for r in failures {
        s.push_str(&result_line(style, r));
        s.push('\n');
    }
    if *not_listed > 0 {
        s.push_str(&format!("{:>11} {}\n", "...", more(*not_listed)));
    }
    s
}

/// The console: a line per event on stderr (`kedge: ...`), verdicts as progress (a bar on a
/// terminal with failures above it, a line per case otherwise), the closing summary as
/// cargo-nextest ends.
pub struct Console {
    progress: Progress,
    state: Mutex<ConsoleState>,
}

struct ConsoleState {
    err: Stream<Box<dyn Write + Send>>,
    bar: Option<indicatif::ProgressBar>,
}

impl Console {
    /// The console on stderr.
    pub fn new(progress: Progress) -> Console {
        Console::to(progress, Box::new(std::io::stderr()))
    }
    /// The console on `w` (a test's buffer).
    pub fn to(progress: Progress, w: Box<dyn Write + Send>) -> Console {
        Console {
            progress,
            state: Mutex::new(ConsoleState {
                err: Stream::new("stderr", w),
                bar: None,
            }),
        }
    }
}

impl Reporter for Console {
    fn report(&self, event: &Event) -> Result<(), OutputError> {
        let Ok(mut st) = self.state.lock() else {
            return Ok(());
        };
        match event {
            Event::RunStarted { cases, .. } if self.progress == Progress::Bar => {
                let b = indicatif::ProgressBar::new(*cases as u64);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}",
                    )
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                );
                st.bar = Some(b);
                Ok(())
            }
            Event::CaseFinished {
                done,
                total,
                result,
            } => {
                let line = progress_line(*done, *total, result);
                match (&st.bar, self.progress) {
                    (_, Progress::Off) => Ok(()),
                    (Some(b), _) => {
                        b.set_position(*done as u64);
                        if result.verdict.is_failure() {
                            b.println(line);
                        }
                        Ok(())
                    }
                    (None, _) => st.err.write(&format!("{line}\n")),
                }
            }
            Event::RunEnded { .. } => {
                if let Some(b) = st.bar.take() {
                    b.finish_and_clear();
                }
                Ok(())
            }
            Event::Summary { .. } => {
                let text = summary_of(Style::stderr(), event);
                st.err.write(&text)
            }
            e => match (e.human(), &st.bar) {
                // Above a progress bar that is being drawn, so neither garbles the other.
                (Some(line), Some(b)) => {
                    b.println(format!("kedge: {line}"));
                    Ok(())
                }
                (Some(line), None) => st.err.write(&format!("kedge: {line}\n")),
                (None, _) => Ok(()),
            },
        }
    }
}

/// `[done/total] verdict detector case (gpu N)`: one verdict as progress.
fn progress_line(done: usize, total: usize, r: &CaseResult) -> String {
    format!(
        "[{done}/{total}] {:<16} {:<12} {}{}",
        r.verdict.name(),
        r.detector.name(),
        r.case.label(),
        r.gpu.map(|g| format!(" (gpu {g})")).unwrap_or_default()
    )
}

impl Events {
    /// Events to stderr, as a person reads them; progress drawn as `progress` says.
    pub fn console(progress: Progress) -> Events {
        Events::new(Console::new(progress))
    }
    /// Events to the console and, one JSON object a line, to stdout.
    pub fn console_and_json(progress: Progress) -> Events {
        Events::new(Both(Console::new(progress), JsonLines::stdout()))
    }
}

impl Default for Events {
    /// The console, its progress a bar on a terminal and lines otherwise.
    fn default() -> Self {
        Events::console(Progress::auto())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_core::{Case, DType, Detector};

    fn res(ne2: i64, v: Verdict, d: Detector, ms: f64) -> CaseResult {
        let c = Case::new("rms_norm", "ggml", DType::F32, [64, 1, ne2, 1]);
        let mut r = CaseResult::new(&c, v, d, "launch refused: grid.y 65536 > 65535");
        r.ms = ms;
        r
    }

    #[test]
    fn result_lines_read_like_a_test_runner_and_colour_only_when_asked() {
        let fail = res(65536, Verdict::LaunchError, Detector::Driver, 12.0);
        let line = result_line(Style::plain(), &fail);
        assert_eq!(
            line,
            "       FAIL [  12ms] rms_norm/ggml f32 ne=[64,1,65536,1] seed=1 (exact) launch-error (driver)"
        );
        let pass = res(1, Verdict::Pass, Detector::None, 1.4);
        assert_eq!(
            result_line(Style::plain(), &pass),
            "       PASS [   1ms] rms_norm/ggml f32 ne=[64,1,1,1] seed=1 (exact)"
        );
        let coloured = result_line(Style { color: true }, &fail);
        assert!(
            coloured.contains("\x1b[1;31m       FAIL\x1b[0m"),
            "{coloured:?}"
        );
        assert!(
            coloured.contains("\x1b[1;31mlaunch-error\x1b[0m"),
            "{coloured:?}"
        );
        assert!(!line.contains('\x1b'));
        let text = summary_text(
            Style::plain(),
            &[pass, fail.clone()],
            Some(1200.0),
            50,
            |n| format!("{n} more"),
        );
        assert!(
            text.contains(
                "    Summary [ 1.20s] 2 results: 1 passed, 1 failed, 0 unsupported, 0 skipped"
            ),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("{}\n", result_line(Style::plain(), &fail))),
            "{text}"
        );
        let cut = summary_text(Style::plain(), &[fail.clone(), fail], None, 1, |n| {
            format!("{n} more: see report.md")
        });
        assert!(
            cut.ends_with("        ... 1 more: see report.md\n"),
            "{cut}"
        );
        let d = detail_lines(&res(65536, Verdict::LaunchError, Detector::Driver, 1.0));
        assert!(d[1].starts_with("re-run: kedge run --case '"), "{d:?}");
    }

    #[test]
    fn no_color_turns_colour_off_on_a_terminal() {
        // Only the decision is tested here: the environment is the process's own.
        assert!(!Style::detect(false).color);
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            assert!(!Style::detect(true).color);
        } else {
            assert!(Style::detect(true).color);
        }
    }

    struct Gone;
    impl Write for Gone {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_closed_reader_stops_output_without_a_panic() {
        let mut o = Out::new(Gone);
        o.line("one");
        assert!(o.closed());
        o.line("two");
        let mut v = Out::new(Vec::new());
        v.line("a");
        v.text("b\n");
        assert_eq!(v.into_inner(), b"a\nb\n");
    }
}
