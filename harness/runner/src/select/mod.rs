//! Selection: what the user asked for (a suite, a corpus, JSON case lines, one case from
//! flags) narrowed by the same filters everywhere (`-o`, `--impl`, `--dtype`, `-p`,
//! `--filter`, `--alloc`, `--seed`), into validated cases. No filter is ever dropped: an
//! unknown op, impl, dtype or parameter, or a selection left empty, is an error that says why.

mod corpus;
pub mod order;
mod shard;
pub mod suite;

pub use corpus::{Corpus, Expectation, Expected};
pub use shard::{Shard, ShardError};
pub use suite::Suite;

use crate::events::Events;

use kedge_core::{AllocMode, Case, CaseError, DType, Impl, ImplRole, LimitsProfile, Op, Registry};
use regex::Regex;
use serde_json::Value;
use std::path::PathBuf;
use thiserror::Error;

/// Bad input while selecting cases (exit status 2).
#[derive(Debug, Error)]
pub enum SelectError {
    /// A case or filter the ops refuse (an unknown op or impl, a dtype or parameter an op
    /// lacks, a value out of range) where no line or `--case` number names it.
    #[error(transparent)]
    Case(#[from] CaseError),
    /// A case line given with `--case` (numbered from 1 in the order given).
    #[error("--case #{index}: {error}")]
    CaseFlag {
        /// Which `--case`, from 1.
        index: usize,
        /// What is wrong with it.
        error: Box<CaseError>,
    },
    /// A corpus file that cannot be read.
    #[error("cannot read corpus {path}: {source}")]
    Corpus {
        /// The file as given.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: std::io::Error,
    },
    /// A corpus whose text does not parse as case lines (the line is in `error`).
    #[error("{source_name}: {error}")]
    InCorpus {
        /// The corpus in words: its path, or the built-in incidents corpus.
        source_name: String,
        /// The parse error, naming its line.
        error: Box<CaseError>,
    },
    /// A case line that parses but is not a valid case.
    #[error("{source_name}: line {line}: {error}")]
    AtLine {
        /// Where the line came from: a corpus's path, `--case` or a plan file.
        source_name: String,
        /// Its line number, from 1.
        line: usize,
        /// Why the case is refused.
        error: Box<CaseError>,
    },
    /// A corpus with no case line at all: it would select nothing.
    #[error("{source_name}: no case in it (it is empty or only comments), so it selects nothing")]
    EmptyCorpus {
        /// The corpus in words: its path, or the built-in incidents corpus.
        source_name: String,
    },
    /// `--profile` names no built-in limits profile.
    #[error("unknown profile '{name}' (built in: {known})")]
    UnknownProfile {
        /// The name given.
        name: String,
        /// The built-in profiles, comma-separated.
        known: String,
    },
    /// An `--alloc` value that names no allocation mode (the message lists them).
    #[error("{0}")]
    BadAlloc(String),
    /// A `--dtype` value that names no dtype (the message lists them).
    #[error("{0}")]
    BadDtype(String),
    /// An `--ne` value that is not 1 to 4 comma-separated integers.
    #[error("--ne takes 1 to 4 comma-separated dimensions: {0}")]
    BadNe(String),
    /// A `--param` value without `NAME=`.
    #[error("--param takes NAME=VALUE, got '{0}'")]
    BadParamFlag(String),
    /// A `-p`/`--filter` value that is not a regular expression.
    #[error("-p/--filter '{regex}' is not a regular expression: {msg}")]
    BadFilter {
        /// The expression as given.
        regex: String,
        /// The regex crate's reason.
        msg: String,
    },
    /// An `--impl` that none of the selected ops has.
    #[error("no selected op has an impl '{imp}' (impls of {ops}: {known})")]
    UnknownImpl {
        /// The impl as given.
        imp: String,
        /// The selected ops, comma-separated.
        ops: String,
        /// Their impls, comma-separated.
        known: String,
    },
    /// `--ne` without exactly one op and one impl to build the case of.
    #[error("a case from flags (--ne) needs exactly one -o OP and one --impl IMPL")]
    NeedsOneOpImpl,
    /// An op's own declaration yields a case it rejects: a bug in the op.
    #[error("op {op} declared a case it rejects: {case}: {error}")]
    Declared {
        /// The op's name.
        op: String,
        /// The case's label.
        case: String,
        /// Why the op rejects it.
        error: Box<CaseError>,
    },
    /// Nothing left to run, and why.
    #[error("no case selected: {why}")]
    Empty {
        /// Which filters left nothing of which cases, with any hint.
        why: String,
    },
}

/// What the user asked for, as given (the CLI's flags, uninterpreted).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selection {
    /// `--case JSON` (repeatable).
    pub cases: Vec<String>,
    /// `--corpus FILE`.
    pub corpus: Option<PathBuf>,
    /// `-o OP[,OP]`, kedge's names or ggml's (`RMS_NORM`), or test-backend-ops' `OP(vars)`
    /// form for one case (`split_ops` splits them).
    pub ops: Vec<String>,
    /// `--impl IMPL[,IMPL]`.
    pub impls: Vec<String>,
    /// `--ne NE0,NE1,NE2,NE3`: one case from flags.
    pub ne: Option<String>,
    /// `--dtype`.
    pub dtype: Option<String>,
    /// `--param NAME=VALUE` (repeatable): overrides that parameter in every case.
    pub params: Vec<String>,
    /// `--seed`: overrides every case's seed.
    pub seed: Option<u64>,
    /// `--alloc MODE[,MODE]`: every case in each mode (`None`: generated cases `exact`,
    /// given cases their own).
    pub allocs: Option<String>,
    /// `--include-planted`: calibration impls in generated suites.
    pub include_planted: bool,
    /// `-p REGEX` / `--filter REGEX`: keep cases whose upstream `vars()` string matches (as
    /// test-backend-ops' `-p`), or whose kedge label does for ops without an upstream line.
    pub filter: Option<String>,
}

/// `-o` values split at the commas between ops: `rms_norm,softmax` → [rms_norm, softmax], and
/// an op in test-backend-ops' `OP(vars)` form, commas and all, stays one:
/// `RMS_NORM(type=f32,ne=[64,1,65536,1]),SOFT_MAX` → [RMS_NORM(...), SOFT_MAX].
pub fn split_ops(raw: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for r in raw {
        let mut depth = 0i32;
        let mut cur = String::new();
        for ch in r.chars() {
            match ch {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ',' if depth <= 0 => {
                    if !cur.trim().is_empty() {
                        out.push(cur.trim().to_string());
                    }
                    cur.clear();
                    continue;
                }
                _ => {}
            }
            cur.push(ch);
        }
        if !cur.trim().is_empty() {
            out.push(cur.trim().to_string());
        }
    }
    out
}

/// An `-o` value's op name, and the `vars()` string of test-backend-ops' `OP(vars)` form (what
/// `kedge repro` prints: `RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0)`).
pub fn op_and_vars(s: &str) -> (&str, Option<&str>) {
    match (s.find('('), s.strip_suffix(')')) {
        (Some(i), Some(inner)) if i > 0 => (s[..i].trim(), Some(&inner[i + 1..])),
        _ => (s, None),
    }
}

/// A comma list: `a,b` → [a, b], blanks dropped.
fn split_list(s: &str) -> Vec<String> {
    s.split(',')
        .map(|x| x.trim().to_string())
        .filter(|x| !x.is_empty())
        .collect()
}

/// `exact,guard` → the modes, in order.
pub(crate) fn parse_allocs(s: &str) -> Result<Vec<AllocMode>, SelectError> {
    let v = split_list(s);
    if v.is_empty() {
        return Err(SelectError::BadAlloc(
            "--alloc names no mode (known: exact, guard, guard-front, canary)".into(),
        ));
    }
    v.iter()
        .map(|m| m.parse::<AllocMode>().map_err(SelectError::BadAlloc))
        .collect()
}

/// `64,1,65536` → [64, 1, 65536, 1].
fn parse_ne(s: &str) -> Result<kedge_core::Ne, SelectError> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.is_empty() || parts.len() > 4 {
        return Err(SelectError::BadNe(format!("got '{s}'")));
    }
    let mut ne = [1i64; 4];
    for (i, p) in parts.iter().enumerate() {
        ne[i] = p
            .parse::<i64>()
            .map_err(|_| SelectError::BadNe(format!("'{p}' is not an integer")))?;
    }
    Ok(ne)
}

/// `NAME=VALUE`: the value as JSON when it parses (`1e-3`, `true`), else as a string.
fn parse_param(s: &str) -> Result<(String, Value), SelectError> {
    let (k, v) = s
        .split_once('=')
        .filter(|(k, _)| !k.trim().is_empty())
        .ok_or_else(|| SelectError::BadParamFlag(s.to_string()))?;
    let val = serde_json::from_str(v.trim()).unwrap_or_else(|_| Value::String(v.to_string()));
    Ok((k.trim().to_string(), val))
}

/// `-p REGEX`, compiled.
fn parse_filter(r: &str) -> Result<Regex, SelectError> {
    Regex::new(r).map_err(|e| SelectError::BadFilter {
        regex: r.to_string(),
        msg: e.to_string(),
    })
}

/// A built-in limits profile by name.
pub fn profile(name: &str) -> Result<LimitsProfile, SelectError> {
    LimitsProfile::builtin(name).ok_or_else(|| SelectError::UnknownProfile {
        name: name.to_string(),
        known: LimitsProfile::BUILTIN.join(", "),
    })
}

/// The filters of a selection, checked against a registry.
#[derive(Clone)]
pub struct Filters {
    /// The ops selected (all when `-o` was not given), in registry order.
    pub ops: Vec<&'static dyn Op>,
    /// Whether `-o` named them.
    pub(crate) ops_named: bool,
    /// Exact test-backend-ops `vars()` strings asked for with `-o OP(vars)`: (op, vars). A case
    /// of such an op is selected only when its upstream line's vars() is one of them.
    pub(crate) vars: Vec<(String, String)>,
    /// `--impl`: the impls kept (every impl when empty); each is an impl of a selected op.
    pub(crate) impls: Vec<String>,
    /// `--dtype`: only cases in this dtype.
    pub(crate) dtype: Option<DType>,
    /// `--param`: set in every case, each checked against every selected op's declaration.
    pub(crate) params: Vec<(String, Value)>,
    /// `--seed`: every case's seed.
    pub(crate) seed: Option<u64>,
    /// `Some` when `--alloc` was given.
    pub(crate) allocs: Option<Vec<AllocMode>>,
    /// `--include-planted`: generated suites include the planted calibration impls.
    pub(crate) include_planted: bool,
    /// `-p`/`--filter`, compiled.
    pub(crate) regex: Option<Regex>,
    /// The filters as given, for messages.
    given: Vec<String>,
    /// Ops left out because they lack the dtype or a parameter (not named by `-o`).
    pub(crate) left_out: Vec<String>,
}

impl Filters {
    /// Check every filter against the registry.
    pub fn resolve(reg: &Registry, s: &Selection) -> Result<Filters, SelectError> {
        let mut given = Vec::new();
        let named = split_ops(&s.ops);
        let ops_named = !named.is_empty();
        let (ops, vars) = if ops_named {
            given.push(format!("-o {}", named.join(",")));
            named_ops(reg, &named)?
        } else {
            (reg.ops().to_vec(), Vec::new())
        };
        let dtype = match &s.dtype {
            None => None,
            Some(d) => {
                given.push(format!("--dtype {d}"));
                Some(d.parse::<DType>().map_err(SelectError::BadDtype)?)
            }
        };
        let params: Vec<(String, Value)> = s
            .params
            .iter()
            .map(|p| parse_param(p))
            .collect::<Result<_, _>>()?;
        for p in &s.params {
            given.push(format!("--param {p}"));
        }
        let (kept, left_out) = keep_ops(ops, dtype, &params, ops_named, &given)?;
        let impls = s.impls.clone();
        if !impls.is_empty() {
            given.push(format!("--impl {}", impls.join(",")));
            check_impls(reg, &kept, &impls)?;
        }
        let allocs = match &s.allocs {
            None => None,
            Some(a) => {
                given.push(format!("--alloc {a}"));
                Some(parse_allocs(a)?)
            }
        };
        let regex = match &s.filter {
            None => None,
            Some(r) => {
                given.push(format!("-p '{r}'"));
                Some(parse_filter(r)?)
            }
        };
        if let Some(seed) = s.seed {
            given.push(format!("--seed {seed}"));
        }
        Ok(Filters {
            ops: kept,
            ops_named,
            vars,
            impls,
            dtype,
            params,
            seed: s.seed,
            allocs,
            include_planted: s.include_planted,
            regex,
            given,
            left_out,
        })
    }

    /// Is `imp` selected? Planted calibration impls only when `planted` or named.
    pub(crate) fn impl_selected(&self, imp: &dyn Impl, planted: bool) -> bool {
        let named = self.impls.iter().any(|i| i == imp.name());
        if !self.impls.is_empty() && !named {
            return false;
        }
        named || planted || !matches!(imp.role(), ImplRole::Planted { .. })
    }

    /// Is the op of this name among the selected ones?
    fn op_selected(&self, name: &str) -> bool {
        self.ops.iter().any(|o| o.name() == name)
    }

    /// The case with the parameter and seed overrides, once per allocation mode asked for
    /// (its own mode when none was).
    pub(crate) fn expand(&self, mut c: Case) -> Vec<Case> {
        for (k, v) in &self.params {
            c.params.insert(k.clone(), v.clone());
        }
        if let Some(s) = self.seed {
            c.seed = s;
        }
        match &self.allocs {
            None => vec![c],
            Some(modes) => modes.iter().map(|&m| c.clone().with_alloc(m)).collect(),
        }
    }

    /// Does a validated case pass `-o OP(vars)` and `-p`/`--filter`? `OP(vars)` selects the
    /// case whose upstream `vars()` string is exactly `vars`; the regex is searched in the op's
    /// upstream `vars()` string (what test-backend-ops' `-p` matches), else in the kedge label.
    pub(crate) fn matches(&self, op: &dyn Op, c: &Case) -> bool {
        let mut wanted = self
            .vars
            .iter()
            .filter(|(o, _)| o == op.name())
            .map(|(_, v)| v)
            .peekable();
        if wanted.peek().is_some() {
            let Some(u) = op.upstream(c) else {
                return false;
            };
            if !wanted.any(|v| *v == u.vars) {
                return false;
            }
        }
        match &self.regex {
            None => true,
            Some(re) => match op.upstream(c) {
                Some(u) => re.is_match(&u.vars),
                None => re.is_match(&c.label()),
            },
        }
    }

    /// Given cases (corpus lines, `--case` lines, incidents) through the filters: op, impl and
    /// dtype select among them, `-p`/`--seed`/`--alloc` override, `--filter` selects; each
    /// is validated, naming its line. `from_flags`: the cases were built from these very
    /// flags (`--ne`), so op, impl and dtype are not filters.
    pub(crate) fn explicit(
        &self,
        reg: &Registry,
        numbered: Vec<(usize, Case)>,
        source: &str,
        from_flags: bool,
    ) -> Result<Vec<Case>, SelectError> {
        let total = numbered.len();
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (line, c) in numbered {
            let op = reg.op(&c.op).map_err(|error| locate(source, line, error))?;
            if !from_flags {
                if self.ops_named && !self.op_selected(op.name()) {
                    continue;
                }
                if !self.impls.is_empty() && !self.impls.contains(&c.imp) {
                    continue;
                }
                if self.dtype.is_some_and(|d| d != c.dtype) {
                    continue;
                }
            }
            for c in self.expand(c) {
                let v = reg
                    .validate(&c)
                    .map_err(|error| locate(source, line, error))?;
                if self.matches(op, &v) && seen.insert(v.id()) {
                    out.push(v);
                }
            }
        }
        if out.is_empty() {
            return Err(SelectError::Empty {
                why: self.why_empty(source, total),
            });
        }
        Ok(out)
    }

    /// Why nothing is left of `total` cases from `what`.
    pub(crate) fn why_empty(&self, what: &str, total: usize) -> String {
        let mut why = if self.given.is_empty() || total == 0 {
            format!("{what} has no case for the selected ops")
        } else {
            format!(
                "{} left none of the {total} cases of {what}",
                self.given.join(" ")
            )
        };
        if !self.left_out.is_empty() {
            why.push_str(&format!(" (ops left out: {})", self.left_out.join(", ")));
        }
        if let Some(hint) = self.param_hint() {
            why.push_str(&format!("; {hint}"));
        }
        why
    }

    /// When `-p` holds `NAME=VALUE` for a parameter of a selected op: the old meaning of `-p`
    /// (it set the parameter; now it is test-backend-ops' regex), and the flag that does that.
    fn param_hint(&self) -> Option<String> {
        let re = self.regex.as_ref()?.as_str();
        let (name, value) = re.split_once('=')?;
        let param = self
            .ops
            .iter()
            .any(|o| o.params().iter().any(|p| p.name == name));
        param.then(|| {
            format!(
                "-p is a regular expression over each case's test-backend-ops vars() (as test-backend-ops' -p); to set parameter {name} in every case, use --param {name}={value}"
            )
        })
    }
}

/// `vars()` strings asked for with `-o OP(vars)`: (op, vars).
type OpVars = Vec<(String, String)>;

/// The ops `-o` names, each once in the order first named, and the `vars()` strings of those
/// named in test-backend-ops' `OP(vars)` form: (op, vars).
fn named_ops(
    reg: &Registry,
    named: &[String],
) -> Result<(Vec<&'static dyn Op>, OpVars), SelectError> {
    let mut ops: Vec<&'static dyn Op> = Vec::new();
    let mut vars = Vec::new();
    for entry in named {
        let (name, v) = op_and_vars(entry);
        let op = reg.op(name)?;
        if let Some(v) = v {
            vars.push((op.name().to_string(), v.to_string()));
        }
        if !ops.iter().any(|o| o.name() == op.name()) {
            ops.push(op);
        }
    }
    Ok((ops, vars))
}

/// The ops that have what `--dtype` and `--param` ask for, and the others as the list of ops
/// left out words them; no op kept is an error naming the flags `given`.
fn keep_ops(
    ops: Vec<&'static dyn Op>,
    dtype: Option<DType>,
    params: &[(String, Value)],
    ops_named: bool,
    given: &[String],
) -> Result<(Vec<&'static dyn Op>, Vec<String>), SelectError> {
    let mut left_out = Vec::new();
    let mut kept = Vec::new();
    for op in ops {
        match op_lacks(op, dtype, params, ops_named)? {
            Some(why) => left_out.push(why),
            None => kept.push(op),
        }
    }
    if kept.is_empty() {
        return Err(SelectError::Empty {
            why: format!(
                "no op has what {} asks for ({})",
                given.join(" "),
                left_out.join(", ")
            ),
        });
    }
    Ok((kept, left_out))
}

/// What `--dtype` or `--param` asks of `op` that it lacks, as the list of ops left out words
/// it (`None`: it has all of it). An op `-o` named is not left out: what it lacks is the
/// error, and so is a parameter value its declaration refuses.
fn op_lacks(
    op: &'static dyn Op,
    dtype: Option<DType>,
    params: &[(String, Value)],
    ops_named: bool,
) -> Result<Option<String>, SelectError> {
    let lacks_dtype = dtype.filter(|d| !op.dtypes().contains(d));
    if let Some(d) = lacks_dtype {
        if ops_named {
            return Err(CaseError::UnsupportedDtype {
                op: op.name().to_string(),
                dtype: d,
                known: names(op.dtypes().iter().map(|d| d.name())),
            }
            .into());
        }
        return Ok(Some(format!("{} (no {d})", op.name())));
    }
    let mut missing = None;
    for (k, v) in params {
        match op.params().iter().find(|p| p.name == k) {
            Some(spec) => {
                spec.check(v).map_err(|msg| CaseError::BadParam {
                    op: op.name().to_string(),
                    param: k.clone(),
                    msg,
                })?;
            }
            None => {
                missing = Some(k.clone());
                break;
            }
        }
    }
    if let Some(k) = missing {
        if ops_named {
            return Err(CaseError::UnknownParam {
                op: op.name().to_string(),
                param: k,
                known: if op.params().is_empty() {
                    "none".into()
                } else {
                    names(op.params().iter().map(|p| p.name))
                },
            }
            .into());
        }
        return Ok(Some(format!("{} (no parameter {k})", op.name())));
    }
    Ok(None)
}

/// Every impl `--impl` names is an impl of one of the kept ops.
fn check_impls(
    reg: &Registry,
    kept: &[&'static dyn Op],
    impls: &[String],
) -> Result<(), SelectError> {
    let mut known: Vec<String> = Vec::new();
    for op in kept {
        for i in reg.impls_of(*op) {
            if !known.iter().any(|k| k == i.name()) {
                known.push(i.name().to_string());
            }
        }
    }
    for imp in impls {
        if !known.contains(imp) {
            return Err(SelectError::UnknownImpl {
                imp: imp.clone(),
                ops: names(kept.iter().map(|o| o.name())),
                known: known.join(", "),
            });
        }
    }
    Ok(())
}

fn locate(source: &str, line: usize, error: CaseError) -> SelectError {
    match line {
        0 => SelectError::Case(error),
        _ if source == "--case" => SelectError::CaseFlag {
            index: line,
            error: Box::new(error),
        },
        _ => SelectError::AtLine {
            source_name: source.to_string(),
            line,
            error: Box::new(error),
        },
    }
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    it.collect::<Vec<_>>().join(", ")
}

impl Selection {
    /// Does `-o` name single cases in test-backend-ops' `OP(vars)` form? (Commands that run
    /// the smoke suite by default look for them in the default suite.)
    pub(crate) fn names_cases(&self) -> bool {
        split_ops(&self.ops)
            .iter()
            .any(|o| op_and_vars(o).1.is_some())
    }

    /// Were cases given explicitly (JSON lines, a corpus, or `--ne`)?
    pub(crate) fn is_explicit(&self) -> bool {
        !self.cases.is_empty() || self.corpus.is_some() || self.ne.is_some()
    }

    /// The selected cases: the explicit ones when given, else the suite's (generated for
    /// `limits`). `incidents` overrides the built-in incidents corpus. What a suite leaves out
    /// (probes the ops refuse, incidents of ops this build lacks) is told to `events`.
    pub fn cases(
        &self,
        reg: &Registry,
        suite: Suite,
        limits: &LimitsProfile,
        incidents: Option<&std::path::Path>,
        events: &Events,
    ) -> Result<Vec<Case>, SelectError> {
        let f = Filters::resolve(reg, self)?;
        if !self.is_explicit() {
            return suite::generate(reg, suite, limits, &f, incidents, events);
        }
        let mut out = Vec::new();
        if !self.cases.is_empty() {
            let mut numbered = Vec::new();
            for (i, line) in self.cases.iter().enumerate() {
                let c = Case::parse_line(i + 1, line).map_err(|error| SelectError::CaseFlag {
                    index: i + 1,
                    error: Box::new(error),
                })?;
                numbered.push((i + 1, c));
            }
            out.extend(f.explicit(reg, numbered, "--case", false)?);
        }
        if let Some(p) = &self.corpus {
            let corpus = Corpus::read(p)?;
            let cases = corpus.cases()?;
            out.extend(f.explicit(reg, cases, &corpus.source.to_string(), false)?);
        }
        if let Some(ne) = &self.ne {
            out.extend(self.case_from_flags(reg, &f, ne)?);
        }
        Ok(out)
    }

    fn case_from_flags(
        &self,
        reg: &Registry,
        f: &Filters,
        ne: &str,
    ) -> Result<Vec<Case>, SelectError> {
        let ne = parse_ne(ne)?;
        let ([op], [imp]) = (f.ops.as_slice(), self.impls.as_slice()) else {
            return Err(SelectError::NeedsOneOpImpl);
        };
        if !f.ops_named {
            return Err(SelectError::NeedsOneOpImpl);
        }
        let dtype = f.dtype.unwrap_or(op.dtypes()[0]);
        let c = Case::new(op.name(), imp, dtype, ne);
        f.explicit(reg, vec![(0, c)], "flags", true)
    }
}

/// Elements of a case's largest tensor: what `--max-elements` bounds. (The product of `ne` is
/// not a size for every op: a GEMM's ne = [K, M, N] multiplies to its work.) A case whose
/// tensors cannot be described counts as the product of its `ne`.
pub(crate) fn largest_tensor_elements(reg: &Registry, c: &Case) -> u64 {
    let product = |ne: &kedge_core::Ne| {
        ne.iter()
            .map(|&x| x.max(0) as u64)
            .fold(1u64, u64::saturating_mul)
    };
    match reg.op(&c.op).and_then(|op| op.tensors(c)) {
        Ok(specs) => specs
            .iter()
            .map(|t| product(&t.ne))
            .max()
            .unwrap_or_else(|| product(&c.ne)),
        Err(_) => product(&c.ne),
    }
}

/// `--max-elements N`: the largest tensor a case may have. 0 means no limit, in every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxElements(Option<u64>);

impl MaxElements {
    /// No limit.
    pub(crate) const NONE: MaxElements = MaxElements(None);
    /// The flag's value, or `default` when it was not given; 0 is no limit.
    pub fn from_flag(flag: Option<u64>, default: Option<u64>) -> MaxElements {
        MaxElements(match flag {
            Some(0) => None,
            Some(n) => Some(n),
            None => default,
        })
    }
    /// The most elements a case's largest tensor may have; `None`: no limit.
    pub(crate) fn limit(self) -> Option<u64> {
        self.0
    }
    /// Keep the cases within the limit; returns how many were left out.
    pub(crate) fn retain(self, reg: &Registry, cases: &mut Vec<Case>) -> usize {
        let Some(max) = self.0 else { return 0 };
        let before = cases.len();
        cases.retain(|c| largest_tensor_elements(reg, c) <= max);
        before - cases.len()
    }
    /// Is the case within the limit (its largest tensor, as `largest_tensor_elements` counts)?
    pub(crate) fn allows(self, reg: &Registry, c: &Case) -> bool {
        self.0
            .is_none_or(|max| largest_tensor_elements(reg, c) <= max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg() -> Registry {
        kedge_ops::registry()
    }
    fn h200() -> LimitsProfile {
        LimitsProfile::builtin("h200").unwrap()
    }
    fn sel() -> Selection {
        Selection::default()
    }

    #[test]
    fn max_elements_zero_is_no_limit() {
        assert_eq!(MaxElements::from_flag(Some(0), Some(5)).limit(), None);
        assert_eq!(MaxElements::from_flag(None, Some(5)).limit(), Some(5));
        assert_eq!(MaxElements::from_flag(Some(7), None).limit(), Some(7));
    }

    #[test]
    fn ggml_spelling_and_unknown_names() {
        let r = reg();
        let s = Selection {
            ops: vec!["RMS_NORM".into()],
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap();
        assert!(cases.iter().all(|c| c.op == "rms_norm"));
        let s = Selection {
            ops: vec!["nosuch".into()],
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("unknown op 'nosuch'"), "{e}");
        assert!(e.to_string().contains("rms_norm"), "{e}");
        let s = Selection {
            impls: vec!["nosuch".into()],
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("'nosuch'"), "{e}");
        assert!(e.to_string().contains("clamped"), "{e}");
    }

    #[test]
    fn dtype_and_params_apply_in_suite_mode() {
        let r = reg();
        let s = Selection {
            ops: vec!["sdpa_prefill".into()],
            dtype: Some("f16".into()),
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("does not support dtype f16"), "{e}");
        // rms_norm takes bf16: its cases are bf16.
        let s = Selection {
            ops: vec!["rms_norm".into()],
            dtype: Some("bf16".into()),
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Default, &h200(), None, &Events::default())
            .unwrap();
        assert!(!cases.is_empty());
        assert!(cases.iter().all(|c| c.dtype == DType::Bf16));
        let s = Selection {
            ops: vec!["rms_norm".into()],
            dtype: Some("f32".into()),
            params: vec!["eps=0.001".into()],
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Default, &h200(), None, &Events::default())
            .unwrap();
        assert!(!cases.is_empty());
        assert!(cases
            .iter()
            .all(|c| c.params["eps"] == serde_json::json!(0.001)));
        let s = Selection {
            ops: vec!["rms_norm".into()],
            params: vec!["eps=-x".into()],
            ..sel()
        };
        assert!(s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .is_err());
        let s = Selection {
            ops: vec!["rms_norm".into()],
            params: vec!["epz=1".into()],
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("no parameter 'epz'"), "{e}");
    }

    #[test]
    fn ops_split_between_ops_and_keep_an_op_vars_form_whole() {
        let raw = vec![
            "RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0),softmax".to_string(),
            "norm, l2_norm".to_string(),
        ];
        let ops = split_ops(&raw);
        assert_eq!(
            ops,
            [
                "RMS_NORM(type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0)",
                "softmax",
                "norm",
                "l2_norm"
            ]
        );
        assert_eq!(
            op_and_vars(&ops[0]),
            (
                "RMS_NORM",
                Some("type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0")
            )
        );
        assert_eq!(op_and_vars("softmax"), ("softmax", None));
        // An OP(vars) selects exactly that upstream case.
        let r = reg();
        let s = Selection {
            ops: vec![ops[0].clone()],
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Default, &h200(), None, &Events::default())
            .unwrap();
        assert!(!cases.is_empty());
        assert!(cases
            .iter()
            .all(|c| c.ne == [64, 1, 65536, 1] && c.op == "rms_norm"));
        assert!(s.names_cases());
        // A -p that reads NAME=VALUE for a parameter says what sets one.
        let s = Selection {
            ops: vec!["rms_norm".into()],
            filter: Some("row_pad=3".into()),
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("use --param row_pad=3"), "{e}");
    }

    #[test]
    fn filter_matches_upstream_vars_and_empty_is_an_error() {
        let r = reg();
        let s = Selection {
            ops: vec!["rms_norm".into()],
            impls: vec!["ggml".into()],
            filter: Some(r"type=f32,ne=\[64,1,65536,1\]".into()),
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Boundary, &h200(), None, &Events::default())
            .unwrap();
        assert_eq!(cases.len(), 1);
        assert_eq!(cases[0].ne, [64, 1, 65536, 1]);
        let s = Selection {
            filter: Some("nothing-matches-this".into()),
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(matches!(e, SelectError::Empty { .. }), "{e}");
        assert!(e.to_string().contains("-p 'nothing-matches-this'"), "{e}");
        let s = Selection {
            filter: Some("(".into()),
            ..sel()
        };
        assert!(matches!(
            s.cases(&r, Suite::Smoke, &h200(), None, &Events::default()),
            Err(SelectError::BadFilter { .. })
        ));
    }

    #[test]
    fn the_boundary_suite_has_both_sides_of_the_grid_limit() {
        let r = reg();
        let s = Selection {
            ops: vec!["rms_norm".into()],
            impls: vec!["ggml".into()],
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Boundary, &h200(), None, &Events::default())
            .unwrap();
        for v in [65535, 65536] {
            assert!(cases.iter().any(|c| c.ne[2] == v), "ne[2] = {v} missing");
            assert!(cases.iter().any(|c| c.ne[3] == v), "ne[3] = {v} missing");
        }
    }

    #[test]
    fn the_incidents_suite_is_the_incidents_of_this_builds_ops() {
        let r = reg();
        let cases = sel()
            .cases(&r, Suite::Incidents, &h200(), None, &Events::default())
            .unwrap();
        assert!(cases
            .iter()
            .any(|c| c.op == "rms_norm" && c.ne == [64, 1, 65536, 1]));
        assert!(cases.iter().all(|c| r.op(&c.op).is_ok()));
        // A corpus given by the user is bad input when it names an op kedge does not know.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("c.jsonl");
        std::fs::write(
            &p,
            r#"{"op":"nosuch","impl":"ggml","dtype":"f32","ne":[1,1,1,1]}"#,
        )
        .unwrap();
        let s = Selection {
            corpus: Some(p),
            ..sel()
        };
        let e = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap_err();
        assert!(e.to_string().contains("unknown op 'nosuch'"), "{e}");
    }

    #[test]
    fn explicit_cases_take_the_same_filters() {
        let r = reg();
        let line = r#"{"op":"rms_norm","impl":"ggml","dtype":"f32","ne":[64,1,2,1]}"#;
        let s = Selection {
            cases: vec![line.into()],
            params: vec!["eps=0.5".into()],
            allocs: Some("exact,guard".into()),
            seed: Some(9),
            ..sel()
        };
        let cases = s
            .cases(&r, Suite::Smoke, &h200(), None, &Events::default())
            .unwrap();
        assert_eq!(cases.len(), 2);
        assert!(cases.iter().all(|c| c.seed == 9 && c.params["eps"] == 0.5));
        let s = Selection {
            cases: vec![line.into()],
            impls: vec!["clamped".into()],
            ..sel()
        };
        assert!(matches!(
            s.cases(&r, Suite::Smoke, &h200(), None, &Events::default()),
            Err(SelectError::Empty { .. })
        ));
        let s = Selection {
            ne: Some("64,1,65536".into()),
            ops: vec!["rms_norm".into()],
            ..sel()
        };
        assert!(matches!(
            s.cases(&r, Suite::Smoke, &h200(), None, &Events::default()),
            Err(SelectError::NeedsOneOpImpl)
        ));
    }
}
