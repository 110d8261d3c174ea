//! Op parameters as data: each op declares its parameters once; cases carry values, and
//! validation fills defaults so a stored case line names every value it ran with.

use serde_json::Value;
use std::collections::BTreeMap;

/// A parameter's type, default and range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ParamKind {
    /// A finite float in `min..=max` (the whole finite line unless the op declares less).
    Float {
        /// Its default.
        default: f64,
        /// Smallest value allowed.
        min: f64,
        /// Largest value allowed.
        max: f64,
    },
    /// An integer in `min..=max`.
    Int {
        /// Its default.
        default: i64,
        /// Smallest value allowed.
        min: i64,
        /// Largest value allowed.
        max: i64,
    },
    /// A flag.
    Bool {
        /// Its default.
        default: bool,
    },
    /// One of a list of words.
    Choice {
        /// Its default.
        default: &'static str,
        /// The words allowed.
        options: &'static [&'static str],
    },
}

/// One parameter an op declares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    /// Its name in case lines and `-p NAME=VALUE`.
    pub name: &'static str,
    /// Its type, default and range.
    pub kind: ParamKind,
    /// What it does.
    pub about: &'static str,
}

impl ParamSpec {
    /// A float parameter: any finite value.
    pub const fn float(name: &'static str, default: f64, about: &'static str) -> Self {
        Self::float_in(name, default, -f64::MAX, f64::MAX, about)
    }
    /// A float parameter in `min..=max` (`f64::MAX` for no upper bound).
    pub const fn float_in(
        name: &'static str,
        default: f64,
        min: f64,
        max: f64,
        about: &'static str,
    ) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Float { default, min, max },
            about,
        }
    }
    /// An integer parameter in `min..=max`.
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
    /// A flag.
    pub const fn boolean(name: &'static str, default: bool, about: &'static str) -> Self {
        ParamSpec {
            name,
            kind: ParamKind::Bool { default },
            about,
        }
    }
    /// One of `options`.
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

    /// Its default as a JSON value.
    pub fn default_value(&self) -> Value {
        match self.kind {
            ParamKind::Float { default, .. } => Value::from(default),
            ParamKind::Int { default, .. } => Value::from(default),
            ParamKind::Bool { default } => Value::from(default),
            ParamKind::Choice { default, .. } => Value::from(default),
        }
    }

    /// Check a value against the spec; returns the canonical value or a message.
    pub fn check(&self, v: &Value) -> Result<Value, String> {
        match self.kind {
            ParamKind::Float { min, max, .. } => match v.as_f64() {
                Some(x) if x.is_finite() && (min..=max).contains(&x) => Ok(Value::from(x)),
                Some(x) if x.is_finite() => {
                    Err(format!("{x} is outside {}", float_range(min, max)))
                }
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

/// `[min, max]` in words, an unbounded end as infinity.
fn float_range(min: f64, max: f64) -> String {
    let lo = if min <= -f64::MAX {
        "(-inf".to_string()
    } else {
        format!("[{min}")
    };
    let hi = if max >= f64::MAX {
        "inf)".to_string()
    } else {
        format!("{max}]")
    };
    format!("{lo}, {hi}")
}

/// Parameter values of a case, by name (sorted, so the JSON line is canonical).
pub type Params = BTreeMap<String, Value>;

/// A typed parameter value as it is stored in a case (`params!` writes the calls).
pub fn value_of(v: impl Into<Value>) -> Value {
    v.into()
}

/// An op's parameters as a typed struct. `params!` writes the struct, its defaults and its
/// `ParamSpec` list from one declaration, so a default is written once and every read is typed.
pub trait OpParams: Sized + Default + Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The declared parameters, in declaration order.
    const SPECS: &'static [ParamSpec];
    /// The typed values of a parameter map. Values that are absent take their default; the
    /// map was checked against `SPECS` when the case was validated, so nothing is guessed.
    fn from_params(p: &Params) -> Self;
    /// Every parameter as a case's parameter map.
    fn to_params(&self) -> Params;
    /// The typed values of a case's parameters.
    fn of(case: &(impl HasParams + ?Sized)) -> Self {
        Self::from_params(case.params())
    }
    /// `params` with some set, typed: `set` gets them as they are (absent ones at their
    /// defaults) and changes what it names; every parameter is written back.
    fn set_in(params: &Params, set: impl FnOnce(&mut Self)) -> Params {
        let mut p = Self::from_params(params);
        set(&mut p);
        p.to_params()
    }
}

/// What carries a parameter map (a case): what `OpParams::of` reads.
pub trait HasParams {
    /// The parameter map.
    fn params(&self) -> &Params;
}

/// Check a parameter map against specs: unknown names and bad values are errors; the result
/// holds every declared parameter, defaults filled, in canonical form.
pub fn check_params(
    op: &str,
    specs: &[ParamSpec],
    given: &Params,
) -> Result<Params, crate::error::CaseError> {
    use crate::error::CaseError;
    let mut params = Params::new();
    for (k, v) in given {
        let spec = specs
            .iter()
            .find(|s| s.name == k)
            .ok_or_else(|| CaseError::UnknownParam {
                op: op.to_string(),
                param: k.clone(),
                known: if specs.is_empty() {
                    "none".to_string()
                } else {
                    specs.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
                },
            })?;
        let v = spec.check(v).map_err(|msg| CaseError::BadParam {
            op: op.to_string(),
            param: k.clone(),
            msg,
        })?;
        params.insert(k.clone(), v);
    }
    for s in specs {
        params
            .entry(s.name.to_string())
            .or_insert_with(|| s.default_value());
    }
    Ok(params)
}

/// Reads one typed value for `params!`; absent or mistyped values (impossible after
/// validation) take the declared default.
#[doc(hidden)]
pub trait ParamValue: Sized {
    fn read(v: Option<&Value>, default: Self) -> Self;
}

impl ParamValue for f64 {
    fn read(v: Option<&Value>, default: f64) -> f64 {
        v.and_then(Value::as_f64).unwrap_or(default)
    }
}
impl ParamValue for i64 {
    fn read(v: Option<&Value>, default: i64) -> i64 {
        v.and_then(Value::as_i64).unwrap_or(default)
    }
}
impl ParamValue for bool {
    fn read(v: Option<&Value>, default: bool) -> bool {
        v.and_then(Value::as_bool).unwrap_or(default)
    }
}

/// The name of the field `$field` of a params struct, checked when it compiles: the parameter
/// a boundary moves (`Boundary::param(label, param_name!(GetRowsParams, r), …)`), so no
/// declaration names a parameter by a string the compiler cannot see.
#[macro_export]
macro_rules! param_name {
    ($P:ty, $field:ident) => {{
        let _: fn(&$P) = |p: &$P| {
            let _ = &p.$field;
        };
        stringify!($field)
    }};
}

/// Declare an op's parameters once: the struct, its `Default`, its `ParamSpec` list and the
/// typed reader. Kinds: `float` (any finite value), `float(MIN..=MAX)`, `int(MIN..=MAX)`,
/// `bool`, `choice(["a", "b"])`.
///
/// ```
/// use kedge_core::OpParams;
/// kedge_core::params! {
///     /// Example parameters.
///     pub struct ExampleParams {
///         eps: float = 1e-6, "added to the mean of squares";
///         row_pad: int(0..=4096) = 0, "extra elements after each input row";
///         causal: bool = true, "mask keys after the query";
///         gemm: choice(["cublaslt", "simt"]) = "cublaslt", "which GEMM runs";
///     }
/// }
/// let p = ExampleParams::default();
/// assert_eq!((p.eps, p.row_pad, p.causal, p.gemm), (1e-6, 0, true, "cublaslt"));
/// assert_eq!(ExampleParams::SPECS.len(), 4);
/// let mut m = kedge_core::Params::new();
/// m.insert("gemm".into(), "simt".into());
/// assert_eq!(ExampleParams::from_params(&m).gemm, "simt");
/// ```
#[macro_export]
macro_rules! params {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $( $field:ident : $kind:ident $( ( $extra:expr ) )? = $default:expr , $about:literal ; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        $vis struct $name {
            $( pub $field: $crate::params!(@ty $kind), )*
        }
        impl Default for $name {
            fn default() -> Self {
                $name { $( $field: $default, )* }
            }
        }
        impl $crate::model::params::OpParams for $name {
            const SPECS: &'static [$crate::model::params::ParamSpec] = &[
                $( $crate::params!(@spec $field, $kind, $default, $about $(, $extra)?), )*
            ];
            #[allow(unused_variables)]
            fn from_params(p: &$crate::model::params::Params) -> Self {
                $name {
                    $( $field: $crate::params!(@read p, $field, $kind, $default $(, $extra)?), )*
                }
            }
            #[allow(unused_mut)]
            fn to_params(&self) -> $crate::model::params::Params {
                let mut p = $crate::model::params::Params::new();
                $(
                    p.insert(
                        stringify!($field).to_string(),
                        $crate::model::params::value_of(self.$field),
                    );
                )*
                p
            }
        }
    };
    (@ty float) => { f64 };
    (@ty int) => { i64 };
    (@ty bool) => { bool };
    (@ty choice) => { &'static str };
    (@spec $field:ident, float, $default:expr, $about:literal) => {
        $crate::model::params::ParamSpec::float(stringify!($field), $default, $about)
    };
    (@spec $field:ident, float, $default:expr, $about:literal, $range:expr) => {
        $crate::model::params::ParamSpec::float_in(
            stringify!($field), $default, *$range.start(), *$range.end(), $about)
    };
    (@spec $field:ident, int, $default:expr, $about:literal, $range:expr) => {
        $crate::model::params::ParamSpec::int(
            stringify!($field), $default, *$range.start(), *$range.end(), $about)
    };
    (@spec $field:ident, bool, $default:expr, $about:literal) => {
        $crate::model::params::ParamSpec::boolean(stringify!($field), $default, $about)
    };
    (@spec $field:ident, choice, $default:expr, $about:literal, $options:expr) => {
        $crate::model::params::ParamSpec::choice(stringify!($field), $default, &$options, $about)
    };
    (@read $p:ident, $field:ident, choice, $default:expr, $options:expr) => {{
        let opts: &[&'static str] = &$options;
        $p.get(stringify!($field))
            .and_then(|v| v.as_str())
            .and_then(|s| opts.iter().copied().find(|o| *o == s))
            .unwrap_or($default)
    }};
    (@read $p:ident, $field:ident, int, $default:expr, $range:expr) => {
        <i64 as $crate::model::params::ParamValue>::read($p.get(stringify!($field)), $default)
    };
    (@read $p:ident, $field:ident, float, $default:expr, $range:expr) => {
        <f64 as $crate::model::params::ParamValue>::read($p.get(stringify!($field)), $default)
    };
    (@read $p:ident, $field:ident, $kind:ident, $default:expr) => {
        <$crate::params!(@ty $kind) as $crate::model::params::ParamValue>::read(
            $p.get(stringify!($field)), $default)
    };
}
