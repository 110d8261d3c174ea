//! Where kedge writes, and how that fails.

use crate::exit;
use std::path::PathBuf;
use thiserror::Error;

/// Where kedge writes.
#[derive(Debug, Error)]
pub enum OutputError {
    /// Another kedge holds the output directory's lock.
    #[error(
        "{dir} is in use by another kedge ({holder}); wait for it to finish, or give another --out"
    )]
    Locked {
        /// The directory (or the results file) that is held.
        dir: PathBuf,
        /// Who holds it, as far as known: the pid and command line it wrote into the lock
        /// file.
        holder: String,
    },
    /// A results file would be overwritten.
    #[error("{path} already holds results: pass --resume to continue that run, or --force to start over (its results are discarded)")]
    ResultsExist {
        /// The results file.
        path: PathBuf,
    },
    /// A file or directory that cannot be created, read back, written or synced.
    #[error("cannot write {path}: {source}")]
    Write {
        /// What was being written.
        path: PathBuf,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A name kedge writes is a symbolic link: writing through it would change the file it
    /// points to, outside the output directory.
    #[error("{path} is a symbolic link: kedge does not write through a link inside the directory it writes into (it would change the file the link points to); remove the link, or give another output")]
    Link {
        /// The link.
        path: PathBuf,
    },
    /// A file kedge writes has other names: writing it would change them too.
    #[error("{path} has {links} hard links: writing it would change the file under its other names too; remove this name (the others stay), or give another output")]
    HardLinked {
        /// The name kedge would write.
        path: PathBuf,
        /// How many names the file has.
        links: u64,
    },
    /// Something other than a regular file where kedge writes one.
    #[error(
        "{path} is {what}, not a regular file kedge can write; remove it, or give another output"
    )]
    NotAFile {
        /// Where kedge would write.
        path: PathBuf,
        /// What is there, with its article ("a directory", "a named pipe").
        what: &'static str,
    },
    /// An output directory that is something else.
    #[error("cannot write into {path}: it is {what}, not a directory (an output directory is a directory; kedge creates it when missing)")]
    NotADirectory {
        /// The output directory as given.
        path: PathBuf,
        /// What is there, with its article ("a regular file").
        what: &'static str,
    },
    /// A target that holds another kind of file than the one the command writes.
    #[error("{path} is {found}, not {writes}: {command} writes only {writes}; give another file")]
    WrongKind {
        /// The target.
        path: PathBuf,
        /// What it holds, in words (`FileKind::words`).
        found: &'static str,
        /// What the command writes, in words.
        writes: &'static str,
        /// The command or flag that writes it (`gate --write-baseline`).
        command: &'static str,
    },
    /// The console or stdout could not be written (a full disk under `2> log`). A reader that
    /// went away (a closed pipe) is not this: output stops quietly.
    #[error("cannot write to {stream}: {source}")]
    Stream {
        /// `stdout` or `stderr`.
        stream: &'static str,
        /// The system's reason.
        #[source]
        source: std::io::Error,
    },
    /// A target that is one of the command's own inputs.
    #[error("{path} is one of this command's inputs ({input}): writing it would destroy what is being read; give another output")]
    OwnInput {
        /// The target.
        path: PathBuf,
        /// The input it is, as the input was named (another name of the same file, maybe).
        input: PathBuf,
    },
}

impl OutputError {
    /// 2 (bad input) where the command line asks for a write kedge refuses; 5 (environment)
    /// where the file system is in the way.
    pub fn exit_code(&self) -> i32 {
        match self {
            OutputError::ResultsExist { .. }
            | OutputError::WrongKind { .. }
            | OutputError::OwnInput { .. } => exit::BAD_INPUT,
            OutputError::Locked { .. }
            | OutputError::Write { .. }
            | OutputError::Stream { .. }
            | OutputError::Link { .. }
            | OutputError::HardLinked { .. }
            | OutputError::NotAFile { .. }
            | OutputError::NotADirectory { .. } => exit::ENVIRONMENT,
        }
    }
    /// [`OutputError::Write`] for `path`.
    pub(crate) fn write(path: impl Into<PathBuf>, source: std::io::Error) -> OutputError {
        OutputError::Write {
            path: path.into(),
            source,
        }
    }
}
