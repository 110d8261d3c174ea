//! The flag groups commands share: one definition each, so a flag means the same in every
//! command that takes it.

use kedge_core::{LimitsProfile, Tool};
use kedge_runner::errors::Error;
use kedge_runner::events::Events;
use kedge_runner::external::{ExternalError, ExternalSpec, Geometry, GgmlSpec, SourceSpec};
use kedge_runner::run::EngineOptions;
use kedge_runner::sanitizer::parse_tools;
use kedge_runner::select::{op_and_vars, profile, split_ops, Selection};
use std::path::PathBuf;
use std::time::Duration;

/// A numeric flag's declared range: a value outside it is a usage error (exit 2) that names
/// the range, never clamped or accepted to fail later.
pub(crate) fn in_range<T>(lo: T, hi: T) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    move |s: &str| {
        // The type's own largest value is no bound a person reads: "1 or more".
        let open = hi.to_string().len() >= 19;
        let words = if open {
            format!("{lo} or more")
        } else {
            format!("{lo}..={hi}")
        };
        let v: T = s
            .trim()
            .parse()
            .map_err(|e| format!("{e}; the range is {words}"))?;
        if v < lo || v > hi {
            return Err(if open {
                format!("{v} is below {lo}, the smallest value allowed")
            } else {
                format!("{v} is outside the range {words}")
            });
        }
        Ok(v)
    }
}

/// The ranges of the numeric flags, declared once.
pub(crate) mod range {
    /// Workers per GPU.
    pub(crate) const JOBS: (usize, usize) = (1, 256);
    /// Cases per sanitized worker.
    pub(crate) const BATCH: (usize, usize) = (1, 4096);
    /// Seconds a case may run: up to a week.
    pub(crate) const TIMEOUT_S: (u64, u64) = (1, 604_800);
    /// MiB of sanitizer records per case (0: no limit).
    pub(crate) const RECORD_CAP_MIB: (u64, u64) = (0, 1 << 20);
    /// GPU ordinals.
    pub(crate) const DEVICE: (u32, u32) = (0, 1023);
    /// Threads per block of a source kernel.
    pub(crate) const BLOCK: (u32, u32) = (1, 1024);
    /// Predicate runs when shrinking (the case itself is the first).
    pub(crate) const BUDGET: (usize, usize) = (1, 1_000_000);
    /// Cases a fuzz run generates.
    pub(crate) const CASES: (usize, usize) = (1, usize::MAX);
    /// Failures a fuzz run shrinks.
    pub(crate) const MAX_SHRINKS: (usize, usize) = (0, 1_000_000);
    /// Timed repetitions of `bench`.
    pub(crate) const REPS: (u32, u32) = (1, 1_000_000);
    /// Untimed runs of `bench` before the timed ones.
    pub(crate) const WARMUP: (u32, u32) = (0, 1_000_000);
    /// Seeds: any 64-bit value.
    pub(crate) const SEED: (u64, u64) = (0, u64::MAX);
    /// Elements of a case's largest tensor (0: no limit).
    pub(crate) const MAX_ELEMENTS: (u64, u64) = (0, u64::MAX);
}

/// `-o OP[,OP]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct OpsArg {
    /// Op(s), comma separated, kedge's names or ggml's (`RMS_NORM`), like test-backend-ops -o;
    /// or one case in test-backend-ops' `OP(vars)` form, as `kedge repro` prints it:
    /// 'RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0)'.
    #[arg(short = 'o', long = "op", value_name = "OP[,OP]")]
    pub(crate) ops: Vec<String>,
}

impl OpsArg {
    /// The values as given, split at the commas between ops (`OP(vars)` kept whole).
    pub(crate) fn list(&self) -> Vec<String> {
        split_ops(&self.ops)
    }
    /// The op names alone (an `OP(vars)` as its op).
    pub(crate) fn names(&self) -> Vec<String> {
        self.list()
            .iter()
            .map(|o| op_and_vars(o).0.to_string())
            .collect()
    }
}

/// Which cases of a selection: the same filters in every command.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct FilterArgs {
    /// `-o`: which ops.
    #[command(flatten)]
    pub(crate) ops: OpsArg,
    /// Impl(s), comma separated.
    #[arg(long = "impl", value_name = "IMPL[,IMPL]", value_delimiter = ',')]
    pub(crate) impls: Vec<String>,
    /// Only cases of this dtype (an op named with -o must have it).
    #[arg(long, value_name = "DTYPE")]
    pub(crate) dtype: Option<String>,
    /// Set an op parameter in every case (repeatable), checked against the op's declaration.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub(crate) params: Vec<String>,
    /// Keep cases whose test-backend-ops vars() string matches this regular expression, as
    /// test-backend-ops -p does (or whose kedge label does, for ops without an upstream line).
    #[arg(short = 'p', long, value_name = "REGEX")]
    pub(crate) filter: Option<String>,
    /// Include planted calibration impls in generated suites.
    #[arg(long)]
    pub(crate) include_planted: bool,
}

/// Cases given explicitly.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct CaseArgs {
    /// A case as one JSON line (repeatable).
    #[arg(long = "case", value_name = "JSON")]
    pub(crate) cases: Vec<String>,
    /// A corpus file: one case per line (an empty one is an error).
    #[arg(long, value_name = "FILE")]
    pub(crate) corpus: Option<PathBuf>,
    /// One case from flags (with one -o and one --impl), in ggml order: ne0,ne1,ne2,ne3
    /// (missing trailing dims are 1).
    #[arg(long, value_name = "NE0,NE1,NE2,NE3")]
    pub(crate) ne: Option<String>,
    /// The seed of every case.
    #[arg(long, value_parser = in_range(range::SEED.0, range::SEED.1))]
    pub(crate) seed: Option<u64>,
}

/// `--alloc MODE[,MODE]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct AllocArg {
    /// Allocation mode(s), comma separated: exact, guard, guard-front, canary.
    #[arg(long, value_name = "MODE[,MODE]")]
    pub(crate) alloc: Option<String>,
}

/// What to build a selection from.
pub(crate) fn selection(f: &FilterArgs, c: Option<&CaseArgs>, a: &AllocArg) -> Selection {
    let c = c.cloned().unwrap_or_default();
    if let Some(re) = &f.filter {
        // `-p NAME=VALUE` set a parameter in kedge before it meant what test-backend-ops' -p
        // means: say so when the regex reads like that.
        let plain = re.split_once('=').is_some_and(|(n, v)| {
            !n.is_empty()
                && n.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
                && !v.chars().any(|ch| "[](){}*+?|^$\\,".contains(ch))
        });
        if plain {
            kedge_runner::note!(
                "-p '{re}' keeps the cases whose test-backend-ops vars() match it (as test-backend-ops' -p); to set a parameter in every case: --param {re}"
            );
        }
    }
    Selection {
        cases: c.cases,
        corpus: c.corpus,
        ops: f.ops.list(),
        impls: f.impls.clone(),
        ne: c.ne,
        dtype: f.dtype.clone(),
        params: f.params.clone(),
        seed: c.seed,
        allocs: a.alloc.clone(),
        include_planted: f.include_planted,
        filter: f.filter.clone(),
    }
}

/// `--profile NAME`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ProfileArg {
    /// Built-in limits profile: h200, h100, gb10, rtx3090, ada-12gb, m4-max.
    #[arg(long, default_value = "h200")]
    pub(crate) profile: String,
}

impl ProfileArg {
    /// The built-in profile named; an unknown name is bad input (exit 2).
    pub(crate) fn get(&self) -> Result<LimitsProfile, Error> {
        Ok(profile(&self.profile)?)
    }
}

/// How cases run on a GPU.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ExecArgs {
    /// Run workers under compute-sanitizer tools, comma separated: memcheck, initcheck,
    /// racecheck, synccheck. Each tool runs the whole selection once.
    #[arg(long, value_name = "TOOL[,TOOL]")]
    pub(crate) sanitize: Option<String>,
    /// Extra compute-sanitizer options, overriding kedge's defaults: "--padding 0".
    #[arg(long, value_name = "OPTIONS", allow_hyphen_values = true)]
    pub(crate) sanitizer_args: Option<String>,
    /// Cases per memcheck worker (its XML is read when it ends; the other tools run one case
    /// per worker). Big enough that a batch outlasts the start of the worker after it.
    #[arg(long, default_value_t = kedge_runner::run::DEFAULT_BATCH, value_parser = in_range(range::BATCH.0, range::BATCH.1))]
    pub(crate) batch: usize,
    /// MiB of sanitizer records one case may write before kedge stops its worker and judges
    /// the records so far (a kernel whose every thread reads out of bounds gets one record per
    /// access); 0: no limit.
    #[arg(long, value_name = "MIB", default_value_t = kedge_runner::run::RECORD_CAP_BYTES >> 20,
          value_parser = in_range(range::RECORD_CAP_MIB.0, range::RECORD_CAP_MIB.1))]
    pub(crate) record_cap: u64,
    /// Leave out cases whose largest tensor has more elements than this; 0: no limit.
    /// Defaults, the same on every machine: `sweep` bounds only a library's host backend
    /// (`ggml:CPU`, which holds every tensor in host memory) at 2^28, `selftest` its fixed
    /// impls' cases at 2^28, `fuzz` every case at 2^26.
    #[arg(long, value_name = "N", value_parser = in_range(range::MAX_ELEMENTS.0, range::MAX_ELEMENTS.1))]
    pub(crate) max_elements: Option<u64>,
    /// How big cases' outputs are judged. auto: a case of 2^20 elements or more whose op's
    /// rows are independent (kedge's kernels, a ggml build's backends) has its inputs drawn
    /// and its outputs scanned (poison, non-finite) where it runs, on the device for a GPU,
    /// and the rows at every crossing, the ends and a seeded sample compared with a reference
    /// of those rows; full: every case whole;
    /// sampled: sampled wherever the op allows, whatever the size (to compare with full).
    #[arg(
        long = "judge",
        value_name = "auto|full|sampled",
        default_value = "auto"
    )]
    pub(crate) judging: kedge_core::judge::sample::Judging,
    /// Seconds a case may run before its worker is killed (verdict `timeout`), beside 15 s
    /// per GiB of its tensors. Default 120, and 600 under a sanitizer (its kernels run many
    /// times slower, and every launch costs it time).
    #[arg(long, value_name = "SECONDS",
          value_parser = in_range(range::TIMEOUT_S.0, range::TIMEOUT_S.1))]
    pub(crate) timeout: Option<u64>,
    /// GPU (ordinal) the workers use; default 0 (`sweep`: every GPU, see --devices).
    #[arg(long, value_name = "N", value_parser = in_range(range::DEVICE.0, range::DEVICE.1))]
    pub(crate) device: Option<u32>,
    /// Workers per GPU, pulling from the one queue (default: half the CPU cores, at most 8).
    /// Cases too big to share the device's memory with the others run one at a time.
    #[arg(long, short = 'j', value_name = "N", value_parser = in_range(range::JOBS.0, range::JOBS.1))]
    pub(crate) jobs: Option<usize>,
}

impl ExecArgs {
    /// The run engine's options from these flags (`--record-cap` in bytes, 0 as no cap;
    /// `--jobs` defaulted); the sanitizer tools are separate (`tools`).
    pub(crate) fn engine(&self) -> EngineOptions {
        let given = self.timeout.map(Duration::from_secs);
        let default = EngineOptions::default();
        EngineOptions {
            timeout: given.unwrap_or(default.timeout),
            sanitized_timeout: given.unwrap_or(default.sanitized_timeout),
            batch: self.batch,
            record_cap: (self.record_cap > 0).then(|| self.record_cap.saturating_mul(1 << 20)),
            sanitizer_args: self.sanitizer_args.clone(),
            events: Events::default(),
            jobs: self.jobs.unwrap_or_else(EngineOptions::default_jobs),
            judging: self.judging,
            ..EngineOptions::default()
        }
    }
    /// The sanitizer tools asked for (empty: natively).
    pub(crate) fn tools(&self) -> Result<Vec<Tool>, Error> {
        match &self.sanitize {
            None => Ok(Vec::new()),
            Some(s) => Ok(parse_tools(s)?),
        }
    }
}

/// Impls from outside kedge.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ExtArgs {
    /// A shared library implementing kedge.h (repeatable). Its impls are `plugin:<name>`.
    #[arg(long = "plugin", value_name = "PATH")]
    pub(crate) plugins: Vec<PathBuf>,
    /// A CUDA source file with a kernel following kedge's published row-op ABI (kedge.h).
    #[arg(long, value_name = "FILE.cu", requires = "entry")]
    pub(crate) kernel: Option<PathBuf>,
    /// The kernel's `extern "C"` entry name.
    #[arg(long, value_name = "NAME")]
    pub(crate) entry: Option<String>,
    /// The op the kernel implements (default: the single -o OP).
    #[arg(long, value_name = "OP")]
    pub(crate) kernel_op: Option<String>,
    /// Grid mapping for the source kernel: ggml (grid = rows, channels, samples) or clamped.
    #[arg(long, default_value = "clamped")]
    pub(crate) geometry: Geometry,
    /// Threads per block for the source kernel.
    #[arg(long, default_value_t = 256, value_parser = in_range(range::BLOCK.0, range::BLOCK.1))]
    pub(crate) block: u32,
    /// A ggml build (its shared libraries: libggml-base, libggml and the backends, linked or
    /// as loadable modules): each backend device becomes an impl, `ggml:CUDA0`, `ggml:CPU`.
    #[arg(long, value_name = "DIR")]
    pub(crate) ggml: Option<PathBuf>,
    /// Only these of the ggml build's devices (ggml's names, comma separated: CUDA0,CPU).
    #[arg(long, value_name = "LIST", requires = "ggml", value_delimiter = ',')]
    pub(crate) ggml_device: Vec<String>,
    /// Test these backends of the ggml build, as test-backend-ops -b does: only their impls
    /// (`-b CUDA0` selects `ggml:CUDA0`), and only those devices loaded.
    #[arg(
        short = 'b',
        long = "backend",
        value_name = "BACKEND[,BACKEND]",
        requires = "ggml",
        value_delimiter = ','
    )]
    pub(crate) backends: Vec<String>,
}

impl ExtArgs {
    /// `sel` narrowed to the `-b` backends' impls (`ggml:BACKEND`), beside any `--impl`.
    pub(crate) fn narrow(&self, mut sel: Selection) -> Selection {
        for b in &self.backends {
            let imp = format!("ggml:{b}");
            if !sel.impls.contains(&imp) {
                sel.impls.push(imp);
            }
        }
        sel
    }

    /// The external impls; `ops` are the -o names (a source kernel's op when --kernel-op is
    /// not given and exactly one op is).
    pub(crate) fn spec(&self, ops: &[String]) -> Result<ExternalSpec, Error> {
        let mut spec = ExternalSpec {
            plugins: self.plugins.clone(),
            sources: Vec::new(),
            ggml: self.ggml.as_ref().map(|dir| GgmlSpec {
                dir: dir.clone(),
                devices: self.ggml_device.iter().chain(&self.backends).fold(
                    Vec::new(),
                    |mut v, d| {
                        if !v.contains(d) {
                            v.push(d.clone());
                        }
                        v
                    },
                ),
            }),
        };
        if let (Some(file), Some(entry)) = (&self.kernel, &self.entry) {
            let op = match (&self.kernel_op, ops) {
                (Some(o), _) => o.clone(),
                (None, [one]) => one.clone(),
                _ => return Err(ExternalError::KernelOpMissing.into()),
            };
            let mut s = SourceSpec::new(&op, file, entry, self.geometry);
            s.block = self.block;
            spec.sources.push(s);
        }
        Ok(spec.absolute())
    }
}

/// `--resume` / `--force` for a results file that is already there.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct ResumeArgs {
    /// Continue the run in --out: keep results.jsonl, skip finished cases.
    #[arg(long, conflicts_with = "force")]
    pub(crate) resume: bool,
    /// Start over in --out: the results already there are discarded.
    #[arg(long)]
    pub(crate) force: bool,
}

impl ResumeArgs {
    /// What to do with a results file already in `--out`.
    pub(crate) fn mode(&self) -> kedge_runner::results::OutMode {
        kedge_runner::results::OutMode::of_flags(self.resume, self.force)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct WithExec {
        #[command(flatten)]
        exec: ExecArgs,
    }

    fn engine(args: &[&str]) -> EngineOptions {
        let argv = std::iter::once("kedge").chain(args.iter().copied());
        WithExec::try_parse_from(argv).unwrap().exec.engine()
    }

    #[test]
    fn a_sanitizer_gets_a_longer_timeout_unless_one_is_given() {
        let e = engine(&[]);
        assert_eq!(e.timeout, Duration::from_secs(120));
        assert_eq!(e.sanitized_timeout, Duration::from_secs(600));
        let e = engine(&["--timeout", "30"]);
        assert_eq!(e.timeout, Duration::from_secs(30));
        assert_eq!(e.sanitized_timeout, Duration::from_secs(30));
    }
}
