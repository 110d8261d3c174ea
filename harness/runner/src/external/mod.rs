//! Impls from outside kedge: a shared library implementing `harness/include/kedge.h`
//! (`plugin`), or a CUDA source file following the published row-op kernel ABI, compiled by
//! NVRTC (`source`). `ExternalSpec` names them; the command line builds it once and the
//! workers receive it in their `WorkerSpec`, so every process builds the same registry.

pub mod plugin;
pub mod probe;
pub mod source;

pub use plugin::PluginError;
pub use source::{Geometry, SourceError, SourceSpec};

use kedge_core::Registry;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

/// A plugin or source kernel that cannot be added (bad input: exit 2).
#[derive(Debug, Error)]
pub enum ExternalError {
    /// A plugin that could not be loaded or registered.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A source kernel that could not be read, checked or registered.
    #[error("kernel {file}: {error}")]
    Source {
        /// The `.cu` file.
        file: PathBuf,
        /// What went wrong with it.
        error: Box<SourceError>,
    },
    /// `--kernel` without `--kernel-op`, and not exactly one `-o` to take the op from.
    #[error("--kernel needs the op it implements: --kernel-op OP or a single -o OP")]
    KernelOpMissing,
    /// A ggml build that could not be loaded or registered.
    #[error(transparent)]
    Ggml(#[from] kedge_ops::on_ggml::SetupError),
    /// A library that ended the process loading it (in the probe's child): a signal, an
    /// exit, a hang. kedge did not load it.
    #[error(
        "{what} {path}: {how}; it was opened in a separate process first, so kedge did not load it"
    )]
    LoadFailed {
        /// What the library was, for the message: `plugin` or `ggml build`.
        what: &'static str,
        /// The file the child was opening when it ended; before it said any, the plugin file
        /// or ggml build directory given.
        path: PathBuf,
        /// How the child ended: the signal, the exit status, or the time it took.
        how: String,
    },
    /// The probe's child could not be started (exit 5).
    #[error("{path}: cannot check the library before loading it: {msg}")]
    ProbeFailed {
        /// The library to be checked.
        path: PathBuf,
        /// Why the child could not be started.
        msg: String,
    },
}

impl ExternalError {
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            ExternalError::ProbeFailed { .. } => crate::exit::ENVIRONMENT,
            _ => crate::exit::BAD_INPUT,
        }
    }
}

/// A user's ggml build whose backends become impls (`ggml:CUDA0`, `ggml:CPU`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GgmlSpec {
    /// The build's directory (its shared libraries, or `lib/` under it).
    pub dir: PathBuf,
    /// Backend devices to use, ggml's names (`CUDA0`, `CPU`); empty: every one the build has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// The external impls of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExternalSpec {
    /// Shared libraries implementing kedge.h; their impls are `plugin:<name>[:<variant>]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PathBuf>,
    /// NVRTC source kernels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceSpec>,
    /// A ggml build.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ggml: Option<GgmlSpec>,
}

/// What adding an external impl did, for the person running kedge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// The op of the impl added; empty for a ggml build, which adds many.
    op: String,
    /// The impl's name (`plugin:<name>`, `source:<entry>:<geometry>`); empty for a ggml build.
    imp: String,
    pub(crate) note: String,
}

impl ExternalSpec {
    /// No plugin, source kernel or ggml build: the registry is kedge's own.
    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty() && self.sources.is_empty() && self.ggml.is_none()
    }

    /// Absolute paths, so a worker started elsewhere finds the same files.
    pub fn absolute(mut self) -> Self {
        let abs = |p: &PathBuf| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        self.plugins = self.plugins.iter().map(abs).collect();
        for s in &mut self.sources {
            s.file = abs(&s.file);
        }
        if let Some(g) = &mut self.ggml {
            g.dir = abs(&g.dir);
        }
        self
    }

    /// kedge's ops plus these impls, each library loaded in a child process first
    /// (`probe`): a library that crashes or exits while loading is an error naming it, not
    /// the end of this process.
    pub fn registry(&self) -> Result<(Registry, Vec<Added>), ExternalError> {
        if !self.plugins.is_empty() || self.ggml.is_some() {
            let exe = std::env::current_exe().map_err(|e| ExternalError::ProbeFailed {
                path: PathBuf::new(),
                msg: format!("cannot find kedge's own executable: {e}"),
            })?;
            probe::check(self, &exe)?;
        }
        self.registry_here()
    }

    /// `registry` without the child-process check: in a process whose end costs nothing
    /// (a worker, the probe itself), or when the libraries were checked already.
    pub(crate) fn registry_here(&self) -> Result<(Registry, Vec<Added>), ExternalError> {
        let mut reg = kedge_ops::registry();
        let mut added = Vec::new();
        for p in &self.plugins {
            for (op, imp) in plugin::register(&mut reg, p, None)? {
                added.push(Added {
                    note: format!(
                        "plugin {}: impl {imp} of {op} (launch contract not checked: the plugin launches its own kernels)",
                        p.display()
                    ),
                    op,
                    imp,
                });
            }
        }
        for s in &self.sources {
            let a =
                source::add_source_impl(&mut reg, s).map_err(|error| ExternalError::Source {
                    file: s.file.clone(),
                    error: Box::new(error),
                })?;
            added.push(Added {
                note: format!(
                    "source kernel {}: impl {} of {} ({}){}",
                    s.file.display(),
                    a.name,
                    a.op,
                    a.dtypes
                        .iter()
                        .map(|d| d.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    if a.checked {
                        ""
                    } else {
                        " (signature not checked here: NVRTC is not installed)"
                    }
                ),
                op: a.op,
                imp: a.name,
            });
        }
        if let Some(g) = &self.ggml {
            let r = kedge_ops::on_ggml::register(&mut reg, &g.dir, &g.devices)?;
            let devices = r
                .devices
                .iter()
                .map(|(n, d)| format!("{n} ({d})"))
                .collect::<Vec<_>>()
                .join(", ");
            added.push(Added {
                op: String::new(),
                imp: String::new(),
                note: format!(
                    "ggml {} ({}) from {}: {} impls of {} ops on {devices}{}",
                    r.version,
                    r.commit,
                    g.dir.display(),
                    r.impls.len(),
                    r.impls
                        .iter()
                        .map(|(o, _)| o.as_str())
                        .collect::<std::collections::BTreeSet<_>>()
                        .len(),
                    if r.missing.is_empty() {
                        String::new()
                    } else {
                        format!("; {}", r.missing.join("; "))
                    }
                ),
            });
        }
        Ok((reg, added))
    }
}
