//! Turning command-line flags into cases: a JSON line, a corpus file, flags for one case, or
//! a suite.

use crate::suite::{self, Filter, Suite};
use anyhow::{anyhow, bail, Context, Result};
use kedge_core::{AllocMode, Case, DType, LimitsProfile, Registry};
use std::path::PathBuf;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct Select {
    /// A case as one JSON line (repeatable).
    #[arg(long = "case", value_name = "JSON")]
    pub cases: Vec<String>,
    /// A corpus file: one case per line.
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,
    /// Op(s), comma separated (like test-backend-ops -o).
    #[arg(short = 'o', long = "op", value_name = "OP[,OP]")]
    pub op: Option<String>,
    /// Impl(s), comma separated.
    #[arg(long = "impl", value_name = "IMPL[,IMPL]")]
    pub imp: Option<String>,
    /// Shape in ggml order: ne0,ne1,ne2,ne3 (missing trailing dims are 1).
    #[arg(long, value_name = "NE0,NE1,NE2,NE3")]
    pub ne: Option<String>,
    #[arg(long)]
    pub dtype: Option<String>,
    /// Op parameter NAME=VALUE (repeatable).
    #[arg(short = 'p', long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Allocation mode(s), comma separated: exact, guard, guard-front, canary.
    #[arg(long, value_name = "MODE[,MODE]")]
    pub alloc: Option<String>,
    /// Include planted calibration impls in generated suites.
    #[arg(long)]
    pub include_planted: bool,
}

pub fn split(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .map(|v| {
            v.split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

pub fn parse_allocs(s: &Option<String>) -> Result<Vec<AllocMode>> {
    let v = split(s);
    if v.is_empty() {
        return Ok(vec![AllocMode::Exact]);
    }
    v.iter()
        .map(|m| m.parse::<AllocMode>().map_err(|e| anyhow!(e)))
        .collect()
}

pub fn parse_ne(s: &str) -> Result<kedge_core::Ne> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.is_empty() || parts.len() > 4 {
        bail!("--ne takes 1 to 4 comma-separated dimensions, got '{s}'");
    }
    let mut ne = [1i64; 4];
    for (i, p) in parts.iter().enumerate() {
        ne[i] = p
            .parse::<i64>()
            .map_err(|_| anyhow!("--ne: '{p}' is not an integer"))?;
    }
    Ok(ne)
}

fn parse_param(s: &str) -> Result<(String, serde_json::Value)> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| anyhow!("--param takes NAME=VALUE, got '{s}'"))?;
    let val = serde_json::from_str(v).unwrap_or_else(|_| serde_json::Value::String(v.to_string()));
    Ok((k.trim().to_string(), val))
}

impl Select {
    pub fn filter(&self) -> Result<Filter> {
        Ok(Filter {
            ops: split(&self.op),
            impls: split(&self.imp),
            allocs: parse_allocs(&self.alloc)?,
            include_planted: self.include_planted,
            seed: self.seed.unwrap_or(1),
        })
    }

    /// Explicit cases (JSON lines, corpus, or one case from flags), validated. `None` when
    /// nothing explicit was given (the caller then uses a suite).
    pub fn explicit(&self, reg: &Registry) -> Result<Option<Vec<Case>>, CaseSelectError> {
        let mut numbered: Vec<(usize, Case)> = Vec::new();
        for (i, line) in self.cases.iter().enumerate() {
            let c =
                Case::parse_line(i + 1, line).map_err(|e| CaseSelectError::Case(e.to_string()))?;
            numbered.push((i + 1, c));
        }
        if let Some(p) = &self.corpus {
            let cs = crate::corpus::read_numbered(p)
                .map_err(|e| CaseSelectError::Case(e.to_string()))?;
            numbered.extend(cs);
        }
        if let Some(ne) = &self.ne {
            let ne = parse_ne(ne).map_err(|e| CaseSelectError::Case(e.to_string()))?;
            let ops = split(&self.op);
            let imps = split(&self.imp);
            if ops.len() != 1 || imps.len() != 1 {
                return Err(CaseSelectError::Case(
                    "a case from flags needs exactly one -o OP and one --impl IMPL with --ne"
                        .into(),
                ));
            }
            let op = reg
                .op(&ops[0])
                .map_err(|e| CaseSelectError::Case(e.to_string()))?;
            let dtype = match &self.dtype {
                Some(d) => d.parse::<DType>().map_err(CaseSelectError::Case)?,
                None => op.dtypes()[0],
            };
            let mut c = Case::new(&ops[0], &imps[0], dtype, ne);
            for p in &self.params {
                let (k, v) = parse_param(p).map_err(|e| CaseSelectError::Case(e.to_string()))?;
                c.params.insert(k, v);
            }
            c.seed = self.seed.unwrap_or(1);
            numbered.push((0, c));
        }
        if numbered.is_empty() {
            return Ok(None);
        }
        let allocs = parse_allocs(&self.alloc).map_err(|e| CaseSelectError::Case(e.to_string()))?;
        let explicit_alloc = self.alloc.is_some();
        let mut out = Vec::new();
        for (line, c) in numbered {
            let modes: Vec<AllocMode> = if explicit_alloc {
                allocs.clone()
            } else {
                vec![c.alloc]
            };
            for m in modes {
                let c = c.clone().with_alloc(m);
                let v = c.validate(reg).map_err(|e| {
                    if line > 0 {
                        CaseSelectError::Case(e.at_line(line).to_string())
                    } else {
                        CaseSelectError::Case(e.to_string())
                    }
                })?;
                out.push(v);
            }
        }
        Ok(Some(out))
    }

    /// Explicit cases, or the suite's.
    pub fn cases(
        &self,
        reg: &Registry,
        suite: Suite,
        limits: &LimitsProfile,
        incidents: Option<&std::path::Path>,
    ) -> Result<Vec<Case>, CaseSelectError> {
        if let Some(c) = self.explicit(reg)? {
            return Ok(c);
        }
        let f = self
            .filter()
            .map_err(|e| CaseSelectError::Case(e.to_string()))?;
        for o in &f.ops {
            reg.op(o)
                .map_err(|e| CaseSelectError::Case(e.to_string()))?;
        }
        suite::generate(reg, suite, limits, &f, incidents)
            .context("generating cases")
            .map_err(|e| CaseSelectError::Case(format!("{e:#}")))
    }
}

/// Bad input while selecting cases (exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum CaseSelectError {
    #[error("{0}")]
    Case(String),
}
