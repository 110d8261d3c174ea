//! What kedge says to a person on stderr, and what it prints for programs on stdout, without
//! ever panicking on a closed stream: `kedge plan | head -1` closes stdout after one line, and
//! the command still ends with the status it would have had.

use std::io::Write;

/// Write one line to stderr, prefixed `kedge: `. A closed or full stderr is ignored: a note
/// is never worth a panic.
pub fn note(args: std::fmt::Arguments<'_>) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "kedge: {args}");
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
/// reported once on stderr and output stops.
pub struct Out<W: Write = std::io::Stdout> {
    w: W,
    closed: bool,
}

impl Out<std::io::Stdout> {
    pub fn stdout() -> Self {
        Out::new(std::io::stdout())
    }
}

impl<W: Write> Out<W> {
    pub fn new(w: W) -> Self {
        Out { w, closed: false }
    }
    /// Has the reader gone?
    pub fn closed(&self) -> bool {
        self.closed
    }
    /// Write `text` as it is.
    pub fn text(&mut self, text: &str) {
        if self.closed {
            return;
        }
        if let Err(e) = self
            .w
            .write_all(text.as_bytes())
            .and_then(|_| self.w.flush())
        {
            self.closed = true;
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                note(format_args!("stdout: {e}; output stopped"));
            }
        }
    }
    /// Write one line.
    pub fn line(&mut self, line: impl std::fmt::Display) {
        if !self.closed {
            self.text(&format!("{line}\n"));
        }
    }
    pub fn into_inner(self) -> W {
        self.w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
