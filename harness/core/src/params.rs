//! Op parameters as data: each op declares its parameters once; cases carry values, and
//! validation fills defaults so a stored case line names every value it ran with.

use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    Float {
        default: f64,
    },
    Int {
        default: i64,
        min: i64,
        max: i64,
    },
    Bool {
        default: bool,
    },
    Choice {
        default: &'static str,
        options: &'static [&'static str],
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub about: &'static str,
}

impl ParamSpec {
    pub const fn float(name: &'static str, default: f64, about: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Float { default },
            about,
        }
    }
    pub const fn int(
        name: &'static str,
        default: i64,
        min: i64,
        max: i64,
        about: &'static str,
    ) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Int { default, min, max },
            about,
        }
    }
    pub const fn boolean(name: &'static str, default: bool, about: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Bool { default },
            about,
        }
    }
    pub const fn choice(
        name: &'static str,
        default: &'static str,
        options: &'static [&'static str],
        about: &'static str,
    ) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Choice { default, options },
            about,
        }
    }

    pub fn default_value(&self) -> Value {
        match self.kind {
            ParamKind::Float { default } => Value::from(default),
            ParamKind::Int { default, .. } => Value::from(default),
            ParamKind::Bool { default } => Value::from(default),
            ParamKind::Choice { default, .. } => Value::from(default),
        }
    }

    /// Check a value against the spec; returns the canonical value or a message.
    pub fn check(&self, v: &Value) -> Result<Value, String> {
        match self.kind {
            ParamKind::Float { .. } => match v.as_f64() {
                Some(x) if x.is_finite() => Ok(Value::from(x)),
                _ => Err(format!("expected a finite number, got {v}")),
            },
            ParamKind::Int { min, max, .. } => match v.as_i64() {
                Some(x) if (min..=max).contains(&x) => Ok(Value::from(x)),
                Some(x) => Err(format!("{x} is outside [{min}, {max}]")),
                None => Err(format!("expected an integer, got {v}")),
            },
            ParamKind::Bool { .. } => v
                .as_bool()
                .map(Value::from)
                .ok_or_else(|| format!("expected true or false, got {v}")),
            ParamKind::Choice { options, .. } => match v.as_str() {
                Some(s) if options.contains(&s) => Ok(Value::from(s)),
                _ => Err(format!("expected one of {}, got {v}", options.join(", "))),
            },
        }
    }
}

/// Parameter values of a case, by name (sorted, so the JSON line is canonical).
pub type Params = BTreeMap<String, Value>;

/// Typed getters used by ops on validated params (defaults were filled by validation).
pub trait ParamsExt {
    fn f64_or(&self, name: &str, default: f64) -> f64;
    fn i64_or(&self, name: &str, default: i64) -> i64;
    fn bool_or(&self, name: &str, default: bool) -> bool;
    fn str_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str;
}

impl ParamsExt for Params {
    fn f64_or(&self, name: &str, default: f64) -> f64 {
        self.get(name).and_then(Value::as_f64).unwrap_or(default)
    }
    fn i64_or(&self, name: &str, default: i64) -> i64 {
        self.get(name).and_then(Value::as_i64).unwrap_or(default)
    }
    fn bool_or(&self, name: &str, default: bool) -> bool {
        self.get(name).and_then(Value::as_bool).unwrap_or(default)
    }
    fn str_or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).and_then(Value::as_str).unwrap_or(default)
    }
}
