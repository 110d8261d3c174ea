//! Which tool, with which options, and where compute-sanitizer lives.

use super::SanitizerError;
pub use kedge_core::Tool;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Environment variable naming the compute-sanitizer executable, over any search.
pub(crate) const SANITIZER_ENV: &str = "KEDGE_COMPUTE_SANITIZER";

/// Options that only this tool accepts, with the values mature CI uses (NVIDIA CCCL's
/// sanitizer runs). `--padding` puts a red zone after each `cudaMalloc`-family allocation; it
/// does not cover driver virtual-memory mappings, which is what kedge's guard mode uses, so
/// guard mode and padding complement each other.
fn tool_defaults(tool: Tool) -> &'static [(&'static str, &'static str)] {
    match tool {
        Tool::Memcheck => &[
            ("check-device-heap", "yes"),
            ("leak-check", "full"),
            ("padding", "512"),
            ("track-stream-ordered-races", "all"),
        ],
        Tool::Initcheck | Tool::Racecheck | Tool::Synccheck => &[],
    }
}

/// kedge's own kernels (`cuda/big.cu`: inputs drawn on the device, outputs poisoned and
/// scanned, pooled rows) are all named `kedge_*`, and no kernel under test is. Instrumented,
/// they cost more than most kernels they serve: on an H100 under memcheck, drawing a q4_0
/// table of 2^32 values took 20.3 s where it takes 17 ms natively, and drawing and scanning
/// were 566 of the 1,227 s of case time in the first 4,738 cases of ggml's whole sweep. The
/// tools skip them (`--kernel-name-exclude`), except initcheck: it learns that memory was
/// written by watching the kernels that write it, so every drawn input would then read as
/// uninitialized.
pub(crate) const HELPER_KERNELS: &str = "kns=kedge_";

/// The option that leaves [`HELPER_KERNELS`] uninstrumented (compute-sanitizer 2022.1 on;
/// earlier releases called it `--exclude`).
pub(crate) const EXCLUDE_OPTION: &str = "kernel-name-exclude";

/// Whether `help` (what `compute-sanitizer --help` prints) lists `--OPT`.
pub(crate) fn help_lists(help: &str, opt: &str) -> bool {
    let want = format!("--{opt}");
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=')
        .any(|w| w == want)
}

/// Whether the compute-sanitizer at `path` takes `--OPT`: asked once through `--help`, so an
/// older release runs without the option rather than refusing every worker. Not knowing
/// (the tool would not start) is no.
pub(crate) fn accepts_option(path: &Path, opt: &str) -> bool {
    Command::new(path)
        .arg("--help")
        .stdin(std::process::Stdio::null())
        .output()
        .map(|o| help_lists(&String::from_utf8_lossy(&o.stdout), opt))
        .unwrap_or(false)
}

/// `--sanitize memcheck,initcheck`: a comma list, duplicates dropped, order kept.
pub fn parse_tools(s: &str) -> Result<Vec<Tool>, SanitizerError> {
    Tool::parse_list(s).map_err(|_| SanitizerError::UnknownTool(s.to_string()))
}

/// Options every tool accepts. `--report-api-errors explicit` is what makes the case
/// markers appear in the XML; `--print-limit 0` (no limit) because each marker is itself a
/// reported error, and once the tool stops reporting (its default limit is 100) later markers
/// vanish and every later record would be pinned on the wrong case; `--require-cuda-init no`
/// keeps a worker that ran only CPU-side checks from failing; `--error-exitcode 1` lets a
/// shell script see "errors found"; `--show-backtrace device` because the tool unwinds the
/// host stack for every record it reports (a kernel whose every thread reads out of bounds
/// makes that thousands of unwinds a second), kedge reads no host frame (a marker is known by
/// its call and its error, which a stripped binary keeps), and the device frames name the
/// kernel.
const COMMON_DEFAULTS: [(&str, &str); 5] = [
    ("report-api-errors", "explicit"),
    ("print-limit", "0"),
    ("require-cuda-init", "no"),
    ("error-exitcode", "1"),
    ("show-backtrace", "device"),
];

/// Options kedge sets itself: the tool, XML output and the file it goes to.
const RESERVED: [&str; 4] = ["tool", "xml", "save", "log-file"];

/// The compute-sanitizer command line for one tool: defaults, then user overrides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SanitizerConfig {
    tool: Tool,
    /// (option without `--`, value), in command-line order.
    options: Vec<(String, String)>,
}

impl SanitizerConfig {
    /// kedge's defaults for `tool`: the options every tool needs for attribution, then the
    /// tool's own (memcheck: padding, leak check, device heap, stream-ordered races).
    pub fn new(tool: Tool) -> SanitizerConfig {
        let options = COMMON_DEFAULTS
            .iter()
            .chain(tool_defaults(tool))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        SanitizerConfig { tool, options }
    }

    /// Leave kedge's own kernels (`kedge_*`) uninstrumented, for every tool but
    /// initcheck. A user's `--kernel-name-exclude` given after this replaces it.
    pub fn exclude_helpers(&mut self) -> &mut Self {
        if self.tool != Tool::Initcheck {
            self.options
                .push((EXCLUDE_OPTION.to_string(), HELPER_KERNELS.to_string()));
        }
        self
    }

    /// The options after `--tool`, `--xml` and `--save`, as (name without `--`, value), in
    /// command-line order.
    pub fn options(&self) -> &[(String, String)] {
        &self.options
    }

    /// An option's value, with or without its `--` (`get("padding")`), if it is set.
    pub fn get(&self, opt: &str) -> Option<&str> {
        let opt = opt.trim_start_matches('-');
        self.options
            .iter()
            .find(|(k, _)| k == opt)
            .map(|(_, v)| v.as_str())
    }

    /// Set (override or add) one option: `set("padding", "0")`, `set("--print-limit", "10")`.
    pub fn set(&mut self, opt: &str, value: &str) -> Result<&mut Self, SanitizerError> {
        let opt = opt.trim_start_matches('-');
        if opt.is_empty() || opt.contains(char::is_whitespace) {
            return Err(SanitizerError::BadOption {
                opt: opt.to_string(),
                msg: "expected an option name such as --padding".into(),
            });
        }
        if RESERVED.contains(&opt) {
            return Err(SanitizerError::ReservedOption(format!("--{opt}")));
        }
        if opt == "report-api-errors" && value != "explicit" && value != "all" {
            return Err(SanitizerError::BadOption {
                opt: format!("--{opt}"),
                msg: format!(
                    "'{value}' would hide the kedge_case_marker API records that attribute \
                     findings to cases; use 'explicit' or 'all'"
                ),
            });
        }
        match self.options.iter_mut().find(|(k, _)| k == opt) {
            Some(slot) => slot.1 = value.to_string(),
            None => self.options.push((opt.to_string(), value.to_string())),
        }
        Ok(self)
    }

    /// Drop a default (`unset("leak-check")`). The marker option cannot be dropped.
    pub fn unset(&mut self, opt: &str) -> Result<&mut Self, SanitizerError> {
        let opt = opt.trim_start_matches('-');
        if opt == "report-api-errors" {
            return Err(SanitizerError::ReservedOption(format!("--{opt}")));
        }
        self.options.retain(|(k, _)| k != opt);
        Ok(self)
    }

    /// Apply a user's extra options as one string: `"--padding 0 --print-limit=20"`.
    /// Every option takes a value (`--opt value` or `--opt=value`).
    pub fn apply_args(&mut self, args: &str) -> Result<&mut Self, SanitizerError> {
        let mut it = args.split_whitespace();
        while let Some(tok) = it.next() {
            if !tok.starts_with("--") {
                return Err(SanitizerError::BadOption {
                    opt: tok.to_string(),
                    msg: "expected --option value".into(),
                });
            }
            let (opt, value) = match tok.split_once('=') {
                Some((o, v)) => (o.to_string(), v.to_string()),
                None => {
                    let v = it.next().ok_or_else(|| SanitizerError::BadOption {
                        opt: tok.to_string(),
                        msg: "missing value".into(),
                    })?;
                    (tok.to_string(), v.to_string())
                }
            };
            self.set(&opt, &value)?;
        }
        Ok(self)
    }

    /// The exit status compute-sanitizer returns when it reported errors (if set), so a
    /// supervisor does not mistake it for the worker's own status.
    pub fn error_exitcode(&self) -> Option<i32> {
        self.get("error-exitcode").and_then(|v| v.parse().ok())
    }

    /// Everything between `compute-sanitizer` and `--`.
    pub fn args(&self, xml_out: &Path) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            "--tool".into(),
            self.tool.name().into(),
            "--xml".into(),
            "--save".into(),
            xml_out.as_os_str().to_owned(),
        ];
        for (k, v) in &self.options {
            out.push(format!("--{k}").into());
            out.push(v.into());
        }
        out
    }

    /// `compute-sanitizer --tool T --xml --save FILE [options] -- worker args...`
    pub fn command<S: AsRef<OsStr>>(
        &self,
        sanitizer: &Path,
        xml_out: &Path,
        worker: &Path,
        worker_args: &[S],
    ) -> Command {
        let mut cmd = Command::new(sanitizer);
        cmd.args(self.args(xml_out));
        cmd.arg("--");
        cmd.arg(worker);
        cmd.args(worker_args);
        cmd
    }
}

/// Find compute-sanitizer: `$KEDGE_COMPUTE_SANITIZER`, then `PATH`, then `$CUDA_HOME/bin`,
/// `$CUDA_PATH/bin`, `/usr/local/cuda/bin` (and the toolkit's `compute-sanitizer/` dir).
pub(crate) fn find_sanitizer() -> Result<PathBuf, SanitizerError> {
    find_sanitizer_with(|k| std::env::var_os(k))
}

/// As `find_sanitizer`, reading the environment through `env` (tests).
fn find_sanitizer_with(env: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, SanitizerError> {
    if let Some(p) = env(SANITIZER_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(SanitizerError::BadOverride { path: p })
        };
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(path) = env("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = env(var).filter(|h| !h.is_empty()) {
            let h = PathBuf::from(h);
            dirs.push(h.join("bin"));
            dirs.push(h.join("compute-sanitizer"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/bin"));
    dirs.push(PathBuf::from("/usr/local/cuda/compute-sanitizer"));
    for d in &dirs {
        let cand = d.join("compute-sanitizer");
        if is_executable(&cand) {
            return Ok(cand);
        }
    }
    Err(SanitizerError::NotFound {
        looked: format!(
            "${SANITIZER_ENV}, PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin ({} dirs)",
            dirs.len()
        ),
    })
}

fn is_executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args_str(c: &SanitizerConfig) -> Vec<String> {
        c.args(Path::new("/tmp/x.xml"))
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn memcheck_defaults_are_ccccl_ones_plus_markers() {
        let c = SanitizerConfig::new(Tool::Memcheck);
        let a = args_str(&c).join(" ");
        assert!(
            a.starts_with("--tool memcheck --xml --save /tmp/x.xml "),
            "{a}"
        );
        for want in [
            "--report-api-errors explicit",
            "--print-limit 0",
            "--require-cuda-init no",
            "--error-exitcode 1",
            "--show-backtrace device",
            "--check-device-heap yes",
            "--leak-check full",
            "--padding 512",
            "--track-stream-ordered-races all",
        ] {
            assert!(a.contains(want), "missing {want} in {a}");
        }
        assert_eq!(c.error_exitcode(), Some(1));
    }

    #[test]
    fn memcheck_only_options_stay_off_other_tools() {
        for t in [Tool::Initcheck, Tool::Racecheck, Tool::Synccheck] {
            let a = args_str(&SanitizerConfig::new(t)).join(" ");
            assert!(a.contains(&format!("--tool {t}")));
            assert!(a.contains("--report-api-errors explicit"), "{a}");
            for memcheck_only in [
                "--padding",
                "--leak-check",
                "--check-device-heap",
                "--track",
            ] {
                assert!(!a.contains(memcheck_only), "{t}: {a}");
            }
        }
    }

    #[test]
    fn helper_kernels_are_left_out_by_every_tool_but_initcheck() {
        for t in [Tool::Memcheck, Tool::Racecheck, Tool::Synccheck] {
            let mut c = SanitizerConfig::new(t);
            c.exclude_helpers();
            let a = args_str(&c).join(" ");
            assert!(a.contains("--kernel-name-exclude kns=kedge_"), "{t}: {a}");
        }
        let mut c = SanitizerConfig::new(Tool::Initcheck);
        c.exclude_helpers();
        assert_eq!(c.get("kernel-name-exclude"), None);
        // A user's own filter replaces kedge's rather than adding a second one.
        let mut c = SanitizerConfig::new(Tool::Memcheck);
        c.exclude_helpers();
        c.apply_args("--kernel-name-exclude kns=none_of_these")
            .unwrap();
        let a = args_str(&c).join(" ");
        assert_eq!(a.matches("--kernel-name-exclude").count(), 1, "{a}");
        assert!(a.contains("--kernel-name-exclude kns=none_of_these"), "{a}");
    }

    #[test]
    fn an_option_is_known_from_the_help_text() {
        let help = "  --kernel-name <value>    Filter kernels.\n  \
                    --kernel-name-exclude <value>  Exclude kernels.\n  --padding arg";
        assert!(help_lists(help, "kernel-name-exclude"));
        assert!(help_lists(help, "kernel-name"));
        assert!(help_lists(help, "padding"));
        // A prefix of a listed option is not that option.
        assert!(!help_lists(
            "  --kernel-name-exclude <value>",
            "kernel-name"
        ));
        assert!(!help_lists(
            "  --exclude arg  Exclude kernels.",
            "kernel-name-exclude"
        ));
        assert!(!help_lists("", "kernel-name-exclude"));
    }

    #[cfg(unix)]
    #[test]
    fn a_tool_that_will_not_start_takes_no_option() {
        assert!(!accepts_option(
            Path::new("/nonexistent/compute-sanitizer"),
            "kernel-name-exclude"
        ));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("compute-sanitizer");
        std::fs::write(
            &p,
            "#!/bin/sh\necho '  --kernel-name-exclude <value>  Exclude kernels.'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(accepts_option(&p, "kernel-name-exclude"));
        assert!(!accepts_option(&p, "no-such-option"));
    }

    #[test]
    fn user_overrides_replace_and_extend() {
        let mut c = SanitizerConfig::new(Tool::Memcheck);
        c.apply_args("--padding 0 --print-limit=2000").unwrap();
        c.unset("--leak-check").unwrap();
        let a = args_str(&c).join(" ");
        assert!(a.contains("--padding 0"), "{a}");
        assert!(!a.contains("--padding 512"), "{a}");
        assert!(a.contains("--print-limit 2000"), "{a}");
        assert_eq!(a.matches("--print-limit").count(), 1);
        assert!(!a.contains("--leak-check"), "{a}");
        assert_eq!(a.matches("--padding").count(), 1);
    }

    #[test]
    fn marker_option_and_reserved_options_are_protected() {
        let mut c = SanitizerConfig::new(Tool::Memcheck);
        assert!(matches!(
            c.set("report-api-errors", "no"),
            Err(SanitizerError::BadOption { .. })
        ));
        assert!(c.unset("report-api-errors").is_err());
        assert!(c.set("report-api-errors", "all").is_ok());
        assert!(matches!(
            c.apply_args("--save other.xml"),
            Err(SanitizerError::ReservedOption(_))
        ));
        assert!(c.apply_args("--padding").is_err());
        assert!(c.apply_args("padding 3").is_err());
    }

    #[test]
    fn command_puts_worker_after_double_dash() {
        let c = SanitizerConfig::new(Tool::Racecheck);
        let cmd = c.command(
            Path::new("/opt/cs/compute-sanitizer"),
            Path::new("/tmp/r.xml"),
            Path::new("/bin/kedge"),
            &["worker", "--alloc", "exact"],
        );
        assert_eq!(cmd.get_program(), "/opt/cs/compute-sanitizer");
        let a: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let dd = a.iter().position(|x| x == "--").unwrap();
        assert_eq!(&a[dd + 1..], ["/bin/kedge", "worker", "--alloc", "exact"]);
        assert_eq!(&a[..2], ["--tool", "racecheck"]);
    }

    #[test]
    fn tool_list_parses_and_rejects_unknown() {
        assert_eq!(
            parse_tools("memcheck,racecheck,memcheck").unwrap(),
            vec![Tool::Memcheck, Tool::Racecheck]
        );
        let e = parse_tools("memcheck,asan").unwrap_err().to_string();
        assert!(e.contains("asan") && e.contains("synccheck"), "{e}");
        assert!(parse_tools("").is_err());
    }

    #[cfg(unix)]
    fn fake_exe(dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = dir.join("compute-sanitizer");
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[cfg(unix)]
    #[test]
    fn finds_override_path_and_cuda_home() {
        let d = tempfile::tempdir().unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let exe = fake_exe(&bin);
        // Through CUDA_HOME.
        let home = d.path().as_os_str().to_owned();
        let got = find_sanitizer_with(|k| (k == "CUDA_HOME").then(|| home.clone())).unwrap();
        assert_eq!(got, exe);
        // Through PATH.
        let path = bin.as_os_str().to_owned();
        let got = find_sanitizer_with(|k| (k == "PATH").then(|| path.clone())).unwrap();
        assert_eq!(got, exe);
        // The override wins, and a bad override is an error, not a fallback.
        let o = exe.as_os_str().to_owned();
        assert_eq!(
            find_sanitizer_with(|k| (k == SANITIZER_ENV).then(|| o.clone())).unwrap(),
            exe
        );
        let bad = d.path().join("nope").into_os_string();
        assert!(matches!(
            find_sanitizer_with(|k| (k == SANITIZER_ENV).then(|| bad.clone())),
            Err(SanitizerError::BadOverride { .. })
        ));
    }

    #[test]
    fn missing_sanitizer_names_what_to_install() {
        let d = tempfile::tempdir().unwrap();
        let empty = d.path().as_os_str().to_owned();
        // Only an empty PATH: a machine without the toolkit (unless /usr/local/cuda has it).
        match find_sanitizer_with(|k| (k == "PATH").then(|| empty.clone())) {
            Ok(p) => assert!(p.starts_with("/usr/local/cuda"), "{}", p.display()),
            Err(e) => {
                let m = e.to_string();
                assert!(m.starts_with("compute-sanitizer not found: install the CUDA toolkit (it ships in $CUDA_HOME/bin) or set KEDGE_COMPUTE_SANITIZER"), "{m}");
            }
        }
    }
}
