//! `kedge repro`: a failing case in the forms a maintainer uses.
//!
//! (a) the line(s) for upstream's own test suite (`Op::upstream`), with a comment naming the
//!     broken limit (the upstream impl's plan checked against a limits profile) or, when no
//!     launch limit is involved, the verdict kedge saw;
//! (b) the test-backend-ops command that runs just that case (`-p` is a regex over `vars()`);
//! (c) the `kedge run --case '<json>'` one-liner;
//! (d) for every plan kedge launches entirely itself (`Plan::standalone`), a standalone `.cu`
//!     file: the kernel sources, every planned launch with its planned grid/block/shared
//!     memory and argument list (a repeated plan as a C loop nest, row pointers stepped per
//!     level), each followed by an error check, and the `nvcc` command that builds it.

use super::minimize::shrink::Transition;
use kedge_core::contract::op::random_inputs;
use kedge_core::contract::plan::LaunchViolation;
use kedge_core::model::shape::fmt_ne;
use kedge_core::{
    Case, CaseError, CaseResult, DType, Detector, Impl, ImplRole, KernelArg, LimitsProfile, Op,
    Plan, Registry, Role, TensorSpec,
};
use kedge_ops::on_ggml::c_repro::{self, CProgram, Side};
use std::fmt::Write as _;

/// How the kernel source appears in the `.cu` file. Golden tests use `Placeholder` so that a
/// kernel edit does not change the repro's expected text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceMode {
    /// The kernels' source text, so the file builds on its own.
    Embed,
    /// A comment naming each kernel file where its text would be.
    Placeholder,
}

/// What `kedge repro` needs to know.
pub struct ReproInput<'a> {
    /// The registry the case resolves in (with any impls from outside kedge).
    pub reg: &'a Registry,
    /// A validated case (defaults filled).
    pub case: &'a Case,
    /// The limits the upstream launch is checked against, and the `.cu` file's `nvcc -arch`.
    pub profile: &'a LimitsProfile,
    /// What kedge saw when it ran the case, if known (names the verdict in the comment).
    pub result: Option<&'a CaseResult>,
    /// The transition `kedge minimize` found, if any: both sides become lines.
    pub transition: Option<&'a Transition>,
    /// Whether the `.cu` file holds the kernels' text.
    pub sources: SourceMode,
}

/// Parts (a) and (b): the case as upstream's test-backend-ops tests it.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamSection {
    /// Comment lines and `test_cases.emplace_back(...)` lines, in order.
    pub lines: Vec<String>,
    /// `RMS_NORM(type=f32,ne=[...],...)`: what test-backend-ops prints for the case.
    pub vars_line: String,
    /// The `test-backend-ops test -b CUDA0 -o OP -p REGEX` command that runs just the case.
    pub command: String,
}

/// Part (d): a standalone CUDA program that launches the case as kedge plans it.
#[derive(Debug, Clone, PartialEq)]
pub enum CuRepro {
    /// Every launch of the plan is kedge's own: the program.
    Available {
        /// The name the source is written under (`repro.cu`).
        file_name: String,
        /// The program's text.
        source: String,
        /// The `nvcc` command that builds it for the profile's architecture.
        build: String,
        /// Commands that run it: plainly, then under compute-sanitizer memcheck.
        run: Vec<String>,
        /// The inputs' bytes, when the op makes its own and they are too large to embed: the
        /// `.cu` file reads them from `repro.inputs` beside it (`--out` writes both).
        inputs_file: Option<Vec<u8>>,
    },
    /// No program can be written for this case.
    Unavailable {
        /// Why (a plan kedge does not launch entirely itself, an impl that refuses the case,
        /// inputs too large to reproduce).
        why: String,
    },
}

/// A standalone C program against ggml's public API, for a case of a ggml build's impl.
#[derive(Debug, Clone, PartialEq)]
pub enum GgmlRepro {
    /// A ggml build is loaded: the program.
    Available {
        /// The program's source, file name and build command.
        program: CProgram,
        /// `./repro DEVICE SIDE`, one per side, with what each must show.
        run: Vec<String>,
        /// Whether test-backend-ops' constructor line builds the case's layout: `Err(what the
        /// line loses)`.
        layout: Result<(), String>,
        /// Whether the failure is memcheck's (`seen_by_memcheck`): the program then runs
        /// under compute-sanitizer, and test-backend-ops' line does not show it.
        memcheck: bool,
    },
    /// No program can be written (no ggml build loaded, or it cannot build the case's graph).
    Unavailable {
        /// Why.
        why: String,
    },
}

/// Every form of one case's repro; `render` prints them as (a) to (e).
#[derive(Debug, Clone, PartialEq)]
pub struct Repro {
    /// The case's label.
    label: String,
    /// What kedge saw when it ran the case, when a result was given.
    seen: Option<String>,
    /// `Err(why)` when upstream has no such op.
    pub upstream: Result<UpstreamSection, String>,
    /// Part (c): `kedge run --case '<json>'`.
    kedge_run: String,
    /// Part (d): the standalone `.cu` program, or why there is none.
    pub cu: CuRepro,
    /// For a case of a ggml build's impl (`ggml:CUDA0`): the C program.
    pub ggml: Option<GgmlRepro>,
}

/// Quote for a POSIX shell: single quotes, with `'` written as `'\''`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Escape ECMAScript regex metacharacters (std::regex's default grammar).
fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for ch in s.chars() {
        if "\\^$.|?*+()[]{}".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// A `-p` regex that selects exactly this case: its whole `vars()`, anchored. (The shape alone
/// is not enough: test-backend-ops has several cases of one shape that differ in a flag, and
/// a run that matches a failing one aborts before the others print.)
pub(crate) fn vars_filter(vars: &str) -> String {
    format!("^{}$", regex_escape(vars))
}

/// The impl whose launch upstream ships (role `Upstream`), else the case's own.
fn upstream_impl(reg: &Registry, op: &'static dyn Op, case: &Case) -> Option<&'static dyn Impl> {
    let impls = reg.impls_of(op);
    impls
        .iter()
        .copied()
        .find(|i| i.role() == ImplRole::Upstream)
        .or_else(|| impls.iter().copied().find(|i| i.name() == case.imp))
}

/// Which dimensions of the case make `v` happen: each dimension above 1 is set to 1 and the
/// case replanned; a dimension whose reduction removes the violation is responsible.
fn responsible_dims(
    imp: &dyn Impl,
    case: &Case,
    profile: &LimitsProfile,
    v: &LaunchViolation,
) -> Vec<usize> {
    (0..4)
        .filter(|&d| case.ne[d] > 1)
        .filter(|&d| {
            let mut c = case.clone();
            c.ne[d] = 1;
            match imp.plan(&c, profile) {
                Ok(p) => !p
                    .violations(profile)
                    .iter()
                    .any(|w| w.kernel == v.kernel && w.dim == v.dim),
                Err(_) => false,
            }
        })
        .collect()
}

/// One comment line per broken launch limit of the upstream impl's plan, e.g.
/// `// ne[2] = 65536 > grid.y limit 65535 (h200)`. Empty when the plan fits.
pub fn limit_comments(reg: &Registry, case: &Case, profile: &LimitsProfile) -> Vec<String> {
    let Ok(op) = reg.op(&case.op) else {
        return Vec::new();
    };
    let Some(imp) = upstream_impl(reg, op, case) else {
        return Vec::new();
    };
    let Ok(plan) = imp.plan(case, profile) else {
        return Vec::new();
    };
    plan.violations(profile)
        .iter()
        .map(|v| {
            let dims = responsible_dims(imp, case, profile, v);
            let p = &profile.name;
            if v.zero {
                return format!("// {} = 0 in {} (must be at least 1; {p})", v.dim, v.kernel);
            }
            match dims.as_slice() {
                [d] if case.ne[*d] as u64 == v.value => format!(
                    "// ne[{d}] = {} > {} limit {} ({p})",
                    case.ne[*d], v.dim, v.limit
                ),
                [d] => format!(
                    "// ne[{d}] = {} puts {} = {} > limit {} ({p})",
                    case.ne[*d], v.dim, v.value, v.limit
                ),
                [] => format!("// {} = {} > limit {} ({p})", v.dim, v.value, v.limit),
                ds => format!(
                    "// {} put {} = {} > limit {} ({p})",
                    ds.iter()
                        .map(|d| format!("ne[{d}] = {}", case.ne[*d]))
                        .collect::<Vec<_>>()
                        .join(", "),
                    v.dim,
                    v.value,
                    v.limit
                ),
            }
        })
        .collect()
}

/// Whether what kedge saw failing was compute-sanitizer memcheck's: an access outside a
/// tensor that changed no value. test-backend-ops puts all of a case's tensors in one buffer,
/// so such an access stays inside that buffer and memcheck reports nothing there (ssm_conv's
/// long-token kernel: 32 memcheck errors in the C program, 0 in test-backend-ops' run of the
/// same case); the C program gives each tensor its own buffer, as kedge does.
fn seen_by_memcheck(input: &ReproInput<'_>) -> bool {
    let failing = match input.transition {
        Some(t) => Some(&t.fail),
        None => input.result,
    };
    failing.is_some_and(|r| r.verdict.is_failure() && r.detector == Detector::Memcheck)
}

/// A wrong-values failure judged on sampled rows, where its bad values would be too few for
/// upstream's comparison of the whole output: the NMSE kedge judged is over the values it
/// compared; spread over all of the output, as test-backend-ops compares it, the same error
/// weighs `compared / total` as much (every bad value is among those compared where a defect
/// is local to rows, a row never written for one). `None` where the failure was judged whole,
/// or its whole-output NMSE would still be over the bound.
fn sampled_note(r: &CaseResult) -> Option<String> {
    if r.verdict != kedge_core::Verdict::WrongValues || !r.facts.contains_key("judged_on") {
        return None;
    }
    let n = r.numbers.as_ref()?;
    let total = n
        .output_ne?
        .iter()
        .map(|&x| x.max(1) as f64)
        .product::<f64>();
    let compared = n.compared as f64;
    if compared <= 0.0 || total <= compared || !n.nmse.is_finite() {
        return None;
    }
    let whole = n.nmse * compared / total;
    (whole <= n.threshold_nmse).then(|| {
        format!(
            "// judged on sampled rows: NMSE {:.3e} over the {} values compared; over the output's {} values, as test-backend-ops compares them, the same errors give about {:.1e}, within its bound of {:.0e}: this line may pass. The C program (e) names the element that differs most.",
            n.nmse, n.compared, total as u64, whole, n.threshold_nmse
        )
    })
}

fn upstream_section(
    input: &ReproInput<'_>,
    op: &dyn Op,
    layout: Option<&Result<(), String>>,
) -> Result<UpstreamSection, String> {
    let case = input.case;
    let up = op.upstream(case).ok_or_else(|| {
        format!(
            "upstream's test-backend-ops has no equivalent of op {}",
            op.name()
        )
    })?;
    let mut lines = Vec::new();
    if let Some(Err(lost)) = layout {
        lines.push(format!(
            "// this line does not reproduce the case's layout: {lost}; test-backend-ops makes its tensors dense (or its own view of a larger tensor) in one buffer. The C program (e) builds the layout kedge ran."
        ));
    }
    if seen_by_memcheck(input) {
        lines.push(
            "// memcheck saw this, not a value: test-backend-ops puts the case's tensors in one buffer, where an access past one tensor stays inside the buffer and memcheck reports nothing (this line runs clean under compute-sanitizer). The C program (e) gives each tensor its own buffer: run it under compute-sanitizer."
                .into(),
        );
    }
    let failing = input.transition.map(|t| &t.fail).or(input.result);
    if let Some(note) = failing.and_then(sampled_note) {
        lines.push(note);
    }
    let limits = limit_comments(input.reg, case, input.profile);
    if limits.is_empty() {
        match input.result {
            Some(r) if r.verdict.is_failure() => lines.push(format!(
                "// kedge: {} ({}) with impl {}: {}",
                r.verdict,
                r.detector,
                r.case.imp,
                first_line(&r.detail)
            )),
            _ => lines.push(format!(
                "// no launch limit of {} is broken by this case's upstream launch",
                input.profile.name
            )),
        }
    } else {
        lines.extend(limits);
    }
    lines.push(up.test_case_line.clone());
    if let Some(t) = input.transition {
        if let Some(pass_up) = op.upstream(&t.pass.case) {
            lines.push(format!(
                "// the passing side of the transition ({} = {}: {}, run by kedge)",
                t.axis,
                t.pass_at,
                t.pass_outcome()
            ));
            lines.push(pass_up.test_case_line);
        }
    }
    let command = format!(
        "test-backend-ops test -b CUDA0 -o {} -p {}",
        up.op_name,
        shell_quote(&vars_filter(&up.vars))
    );
    Ok(UpstreamSection {
        lines,
        vars_line: format!("{}({})", up.op_name, up.vars),
        command,
    })
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The C program of a case of a ggml build's impl (`None` for other impls): the case and,
/// when minimize found a transition, its passing side, in one program.
fn ggml_repro(input: &ReproInput<'_>, op: &dyn Op) -> Option<GgmlRepro> {
    let device = input.case.imp.strip_prefix("ggml:")?;
    let Some(ggml) = kedge_ggml::Ggml::loaded() else {
        return Some(GgmlRepro::Unavailable {
            why: "no ggml build is loaded (--ggml DIR): the program is written from the graph the build makes".into(),
        });
    };
    let case = input.case;
    let seen = |r: &CaseResult| format!("{} ({})", r.verdict, r.detector);
    let fail_about;
    let pass_about;
    let case_about;
    let sides: Vec<Side<'_>> = match input.transition {
        Some(t) => {
            fail_about = format!(
                "the failing side of the transition: {} = {}, kedge saw {}",
                t.axis,
                t.fail_at,
                seen(&t.fail)
            );
            pass_about = format!(
                "the passing side of the transition: {} = {}, kedge saw {}",
                t.axis,
                t.pass_at,
                t.pass_outcome()
            );
            vec![
                Side {
                    name: "fail",
                    about: &fail_about,
                    case: &t.fail.case,
                },
                Side {
                    name: "pass",
                    about: &pass_about,
                    case: &t.pass.case,
                },
            ]
        }
        None => {
            case_about = match input.result {
                Some(r) => format!("the case as kedge ran it: kedge saw {}", seen(r)),
                None => "the case as kedge runs it".into(),
            };
            vec![Side {
                name: "case",
                about: &case_about,
                case,
            }]
        }
    };
    let layout = c_repro::upstream_layout(op, case);
    let memcheck = seen_by_memcheck(input);
    Some(match c_repro::program(ggml, input.reg, device, &sides) {
        Ok(program) => {
            let run = sides
                .iter()
                .map(|x| {
                    let (tool, expect) = match (x.name, memcheck) {
                        ("fail", false) => ("", "  # must print FAIL (exit status 1)"),
                        ("pass", false) => ("", "  # must print PASS (exit status 0)"),
                        ("fail", true) => (
                            "compute-sanitizer --tool memcheck ",
                            "  # must report memcheck errors (natively it may print PASS)",
                        ),
                        ("pass", true) => (
                            "compute-sanitizer --tool memcheck ",
                            "  # must report 0 errors and print PASS",
                        ),
                        (_, true) => ("compute-sanitizer --tool memcheck ", ""),
                        _ => ("", ""),
                    };
                    format!("{tool}./repro {device} {}{expect}", x.name)
                })
                .collect();
            GgmlRepro::Available {
                program,
                run,
                layout,
                memcheck,
            }
        }
        Err(why) => GgmlRepro::Unavailable { why },
    })
}

/// Build every part of the repro.
pub fn build(input: &ReproInput<'_>) -> Result<Repro, CaseError> {
    let (op, imp) = input.reg.resolve(input.case)?;
    let ggml = ggml_repro(input, op);
    let layout = match &ggml {
        Some(GgmlRepro::Available { layout, .. }) => Some(layout),
        _ => None,
    };
    let upstream = upstream_section(input, op, layout);
    let kedge_run = format!("kedge run --case {}", shell_quote(&input.case.to_line()));
    let cu = match cu_file(op, imp, input.case, input.profile, input.sources) {
        Ok(CuFile {
            source,
            inputs_file,
        }) => {
            let arch = format!("sm_{}", input.profile.compute_capability.value);
            CuRepro::Available {
                file_name: "repro.cu".into(),
                source,
                inputs_file,
                build: format!("nvcc -arch={arch} -o repro repro.cu"),
                run: vec![
                    "./repro".into(),
                    "compute-sanitizer --tool memcheck --padding 512 ./repro".into(),
                ],
            }
        }
        Err(why) => CuRepro::Unavailable { why },
    };
    Ok(Repro {
        label: input.case.label(),
        seen: input.result.map(|r| {
            format!(
                "{} ({}) under {}: {}",
                r.verdict,
                r.detector,
                r.under,
                first_line(&r.detail)
            )
        }),
        upstream,
        kedge_run,
        cu,
        ggml,
    })
}

/// Programs longer than this are not printed, only written (`kedge repro --out DIR`).
const MAX_PRINTED_PROGRAM: usize = 256 << 10;

/// The repro as text.
pub fn render(r: &Repro) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# kedge repro: {}", r.label);
    if let Some(seen) = &r.seen {
        let _ = writeln!(s, "# kedge saw: {seen}");
    }
    let _ = writeln!(s);
    upstream_part(&mut s, &r.upstream);
    let _ = writeln!(s);
    let _ = writeln!(s, "## (c) kedge");
    let _ = writeln!(s, "{}", r.kedge_run);
    let _ = writeln!(s);
    cu_part(&mut s, &r.cu);
    if let Some(g) = &r.ggml {
        ggml_part(&mut s, g);
    }
    s
}

/// (a) and (b): the test-backend-ops line and the command that runs just it.
fn upstream_part(s: &mut String, upstream: &Result<UpstreamSection, String>) {
    let _ = writeln!(
        s,
        "## (a) tests/test-backend-ops.cpp, in make_test_cases_eval()"
    );
    match upstream {
        Ok(u) => {
            for l in &u.lines {
                let _ = writeln!(s, "{l}");
            }
            let _ = writeln!(s);
            let _ = writeln!(
                s,
                "## (b) run just that case (after adding the line and rebuilding)"
            );
            let _ = writeln!(s, "{}", u.command);
            let _ = writeln!(s, "# test-backend-ops names it: {}", u.vars_line);
        }
        Err(why) => {
            let _ = writeln!(s, "# none: {why}");
            let _ = writeln!(s);
            let _ = writeln!(s, "## (b) test-backend-ops command");
            let _ = writeln!(s, "# none: {why}");
        }
    }
}

/// (d): the standalone CUDA program, or why there is none.
fn cu_part(s: &mut String, cu: &CuRepro) {
    let _ = writeln!(s, "## (d) standalone CUDA repro (no kedge needed)");
    match cu {
        CuRepro::Available {
            file_name,
            source,
            build,
            run,
            inputs_file,
        } => {
            if let Some(bytes) = inputs_file {
                let _ = writeln!(
                    s,
                    "# reads {INPUTS_FILE} ({} bytes of inputs) beside it: `kedge repro --out DIR` writes both",
                    bytes.len()
                );
            }
            let _ = writeln!(s, "{build}");
            for c in run {
                let _ = writeln!(s, "{c}");
            }
            let _ = writeln!(s, "---- {file_name} ----");
            s.push_str(source);
            if !source.ends_with('\n') {
                s.push('\n');
            }
            let _ = writeln!(s, "---- end of {file_name} ----");
        }
        CuRepro::Unavailable { why } => {
            let _ = writeln!(s, "# not available: {why}");
        }
    }
}

/// (e): the standalone C program against ggml's public API, or why there is none.
fn ggml_part(s: &mut String, g: &GgmlRepro) {
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "## (e) standalone C program against ggml's public API (no kedge needed)"
    );
    match g {
        GgmlRepro::Available {
            program,
            run,
            layout,
            memcheck,
        } => {
            match layout {
                Ok(()) if *memcheck => {
                    let _ = writeln!(
                        s,
                        "# layout: only this program reproduces it, under compute-sanitizer (memcheck saw an access outside a tensor; test-backend-ops' one buffer hides it); the test-backend-ops line in (a) does not"
                    );
                }
                Ok(()) => {
                    let _ = writeln!(
                        s,
                        "# layout: both reproduce it (the case's tensors are dense); the test-backend-ops line is what upstream gates on, this program gives each tensor its own buffer as kedge does"
                    );
                }
                Err(lost) => {
                    let _ = writeln!(
                        s,
                        "# layout: only this program reproduces it ({lost}); the test-backend-ops line in (a) does not"
                    );
                }
            }
            let _ = writeln!(
                s,
                "# `kedge repro --out DIR` writes {}{}",
                c_repro::FILE,
                program
                    .files
                    .iter()
                    .map(|(n, b)| format!(" and {n} ({} bytes of inputs, read beside it)", b.len()))
                    .collect::<String>()
            );
            let _ = writeln!(s, "{}", program.build);
            for c in run {
                let _ = writeln!(s, "{c}");
            }
            if let Some(first) = run.first().filter(|_| !*memcheck) {
                let first = first.split("  #").next().unwrap_or(first);
                let _ = writeln!(s, "compute-sanitizer --tool memcheck --padding 512 {first}");
            }
            if program.source.len() <= MAX_PRINTED_PROGRAM {
                let _ = writeln!(s, "---- {} ----", c_repro::FILE);
                s.push_str(&program.source);
                if !program.source.ends_with('\n') {
                    s.push('\n');
                }
                let _ = writeln!(s, "---- end of {} ----", c_repro::FILE);
            } else {
                let _ = writeln!(
                    s,
                    "# {} is {} bytes (its inputs embedded): not printed; `--out DIR` writes it",
                    c_repro::FILE,
                    program.source.len()
                );
            }
        }
        GgmlRepro::Unavailable { why } => {
            let _ = writeln!(s, "# not available: {why}");
        }
    }
}

/// Inputs above this many bytes are neither compared with kedge's generator nor embedded.
const MAX_CHECKED_INPUT_BYTES: u64 = 256 << 20;
/// Inputs an op generates itself (not kedge's uniform stream) are embedded up to this size.
const MAX_EMBEDDED_INPUT_BYTES: u64 = 1 << 20;

/// kedge's input generator in C: SplitMix64 exactly as `kedge_core::model::rng::Rng`, filling
/// each input as `kedge_core::contract::op::random_tensor` does (floats uniform in [-1, 1), integers in
/// [0, 16)), so the `.cu` file's inputs are bit for bit the ones kedge used.
const RNG_C: &str = kedge_core::model::rng::C_SOURCE;

/// f32 to f16 and bf16 in C, rounded to nearest even as kedge converts its host inputs
/// (`HostTensor::from_f32`), for the `.cu` file of a case with 16-bit inputs: no CUDA header
/// is needed for them.
const HALF_C: &str = r#"/* f32 -> f16 and bf16 bits, rounded to nearest even as kedge converts its inputs on the host,
 * so the file needs no CUDA header for them. */
__attribute__((unused)) static uint16_t kedge_f16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t) (sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0u));
    const int e = (int) exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t) (sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t) sign;
        man |= 0x800000u;
        const uint32_t shift = (uint32_t) (14 - e), mid = 1u << (shift - 1);
        uint32_t h = man >> shift;
        const uint32_t rem = man & ((1u << shift) - 1u);
        if (rem > mid || (rem == mid && (h & 1u))) h++;
        return (uint16_t) (sign | h);
    }
    uint32_t h = sign | ((uint32_t) e << 10) | (man >> 13);
    const uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* a carry moves into the exponent */
    return (uint16_t) h;
}
__attribute__((unused)) static uint16_t kedge_bf16_bits(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t) ((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t) (x >> 16);
}
"#;

fn fill_call(spec: &TensorSpec, index: usize, seed: u64, var: &str) -> Option<String> {
    let n = format!("bytes_{index} / {}", spec.dtype.size());
    if let Some(fill) = kedge_core::model::rng::c_fill(spec.dtype, var, &n, seed, index as u64) {
        return Some(fill);
    }
    Some(match spec.dtype {
        DType::F16 => format!(
            "{{ float *tmp = (float *) malloc(({n}) * sizeof(float)); if (!tmp) {{ fprintf(stderr, \"out of host memory\\n\"); return 1; }} kedge_fill_f32(tmp, {n}, {seed}ull, {index}ull); for (size_t i = 0; i < {n}; i++) ((uint16_t *) {var})[i] = kedge_f16_bits(tmp[i]); free(tmp); }}"
        ),
        DType::Bf16 => format!(
            "{{ float *tmp = (float *) malloc(({n}) * sizeof(float)); if (!tmp) {{ fprintf(stderr, \"out of host memory\\n\"); return 1; }} kedge_fill_f32(tmp, {n}, {seed}ull, {index}ull); for (size_t i = 0; i < {n}; i++) ((uint16_t *) {var})[i] = kedge_bf16_bits(tmp[i]); free(tmp); }}"
        ),
        // kedge's own kernels have no block-format tensors; those are ggml's.
        _ => return None,
    })
}

/// The C expression of a planned argument. `looped`: the launch sits in the repeat loop nest
/// (`i1`, `i2`, `i3` in scope).
fn arg_decl(i: usize, a: &KernelArg, scratch: &[(String, u64)], looped: bool) -> String {
    match a {
        KernelArg::Tensor(t) => format!("void *a{i} = d_{t};"),
        KernelArg::TensorAt {
            index,
            offset,
            step,
        } => {
            let mut off = format!("{offset}ll");
            if looped {
                for (l, s) in step.iter().enumerate() {
                    if *s != 0 {
                        let _ = write!(off, " + (long long) i{} * {s}ll", l + 1);
                    }
                }
            }
            format!("void *a{i} = (void *) ((char *) d_{index} + ({off}));")
        }
        KernelArg::Scratch { name, .. } => {
            let k = scratch.iter().position(|(n, _)| n == name).unwrap_or(0);
            format!("void *a{i} = s_{k}; /* scratch {name}, never written */")
        }
        KernelArg::I32(x) => format!("int a{i} = {x};"),
        KernelArg::U32(x) => format!("unsigned int a{i} = {x}u;"),
        KernelArg::I64(x) => format!("long long a{i} = {x}ll;"),
        KernelArg::U64(x) => format!("unsigned long long a{i} = {x}ull;"),
        KernelArg::F32(x) => format!(
            "float a{i} = kedge_f32_bits(0x{:08x}u); /* {x:e} */",
            x.to_bits()
        ),
    }
}

/// A standalone `.cu` file, and the inputs file it reads when the op's inputs are its own and
/// too large to embed.
struct CuFile {
    /// The program's text.
    source: String,
    /// The inputs' bytes, when the program reads them from `INPUTS_FILE`.
    inputs_file: Option<Vec<u8>>,
}

/// How the `.cu` file gets the inputs kedge used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InputSource {
    /// kedge's generator, in C.
    Generated,
    /// The bytes, embedded in the file.
    Embedded,
    /// The bytes, read from `repro.inputs` beside the file.
    File,
}

/// The name of the inputs file a `.cu` repro reads (in spec order, each input's bytes).
pub const INPUTS_FILE: &str = "repro.inputs";

/// The standalone `.cu` text, or why there is none.
fn cu_file(
    op: &dyn Op,
    imp: &dyn Impl,
    case: &Case,
    profile: &LimitsProfile,
    sources: SourceMode,
) -> Result<CuFile, String> {
    let specs = op.tensors(case).map_err(|e| format!("bad case: {e}"))?;
    let plan = imp
        .plan(case, profile)
        .map_err(|why| format!("impl {} refuses the case: {why}", imp.name()))?;
    check_standalone(imp, &plan, specs.len())?;
    let mut files: Vec<kedge_core::Kernel> = Vec::new();
    for l in &plan.launches {
        if !files.iter().any(|f| f.file == l.kernel.file) {
            files.push(l.kernel);
        }
    }
    // Inputs: kedge's own generator when the op uses it, else embedded bytes when small.
    let input_bytes: u64 = specs
        .iter()
        .filter(|s| s.role == Role::Input)
        .map(|s| s.bytes)
        .sum();
    if input_bytes > MAX_CHECKED_INPUT_BYTES {
        return Err(format!(
            "the inputs are {input_bytes} bytes: too large to reproduce their values outside kedge"
        ));
    }
    let inputs = op
        .inputs(case, &specs)
        .map_err(|e| format!("bad case: {e}"))?;
    let source = if inputs == random_inputs(case.seed, &specs) {
        InputSource::Generated
    } else if input_bytes > MAX_EMBEDDED_INPUT_BYTES {
        InputSource::File
    } else {
        InputSource::Embedded
    };
    let mut s = String::new();
    header(&mut s, op, case, profile, source);
    kernel_sources(&mut s, &files, sources);
    input_code(&mut s, &specs, &inputs, source);
    fail_helpers(&mut s, plan.repetitions() > 1);
    main_fn(&mut s, &plan, &specs, case.seed, source);
    let inputs_file = (source == InputSource::File).then(|| {
        inputs
            .iter()
            .flat_map(|h| h.bytes.iter().copied())
            .collect::<Vec<u8>>()
    });
    Ok(CuFile {
        source: s,
        inputs_file,
    })
}

/// A plan a standalone program can launch: every launch names tensors the case has.
fn check_standalone(imp: &dyn Impl, plan: &Plan, tensors: usize) -> Result<(), String> {
    plan.standalone().map_err(|why| {
        format!(
            "impl {}: {why}; only kedge can run it (the kedge line above)",
            imp.name()
        )
    })?;
    for l in &plan.launches {
        for a in &l.args {
            let t = match a {
                KernelArg::Tensor(t) | KernelArg::TensorAt { index: t, .. } => *t,
                _ => continue,
            };
            if t >= tensors {
                return Err(format!(
                    "launch {l} names tensor {t}, but the case has {tensors}"
                ));
            }
        }
    }
    Ok(())
}

/// The includes and each kernel file's text (or where it goes).
fn kernel_sources(s: &mut String, files: &[kedge_core::Kernel], sources: SourceMode) {
    let _ = writeln!(s, "#include <cuda_runtime.h>");
    let _ = writeln!(s, "#include <stdint.h>");
    let _ = writeln!(s, "#include <stdio.h>");
    let _ = writeln!(s, "#include <stdlib.h>");
    let _ = writeln!(s, "#include <string.h>");
    let _ = writeln!(s);
    for k in files {
        let _ = writeln!(s, "// ---- kernel source: {} ----", k.file);
        match sources {
            SourceMode::Embed => {
                s.push_str(k.source);
                if !k.source.ends_with('\n') {
                    s.push('\n');
                }
            }
            SourceMode::Placeholder => {
                let _ = writeln!(s, "// [the text of {} is inserted here]", k.file);
            }
        }
        let _ = writeln!(s, "// ---- end of {} ----", k.file);
        let _ = writeln!(s);
    }
}

/// kedge's input generator in C, and the inputs' bytes when they are embedded.
fn input_code(
    s: &mut String,
    specs: &[TensorSpec],
    inputs: &[kedge_core::HostTensor],
    source: InputSource,
) {
    let _ = writeln!(
        s,
        "// ---- kedge's input generator (harness/core/src/model/rng.rs) ----"
    );
    s.push_str(RNG_C);
    if specs
        .iter()
        .any(|t| t.role == Role::Input && matches!(t.dtype, DType::F16 | DType::Bf16))
    {
        s.push_str(HALF_C);
    }
    let _ = writeln!(s);
    if source != InputSource::Embedded {
        return;
    }
    for (i, (spec, h)) in specs
        .iter()
        .filter(|t| t.role == Role::Input)
        .zip(inputs.iter())
        .enumerate()
    {
        let _ = writeln!(s, "// input {i} ({}), {} bytes", spec.name, h.bytes.len());
        let _ = write!(s, "static const unsigned char kedge_input_{i}[] = {{");
        for (j, b) in h.bytes.iter().enumerate() {
            if j % 16 == 0 {
                s.push_str("\n   ");
            }
            let _ = write!(s, " 0x{b:02x},");
        }
        let _ = writeln!(s, "\n}};");
    }
    let _ = writeln!(s);
}

/// `kedge_fail` (and `kedge_fail_at` for a repeated launch) and `CHECK`.
fn fail_helpers(s: &mut String, repeated: bool) {
    let _ = writeln!(
        s,
        "static int kedge_fail(const char *what, cudaError_t e) {{"
    );
    let _ = writeln!(
        s,
        "    fprintf(stderr, \"%s: %s (%s)\\n\", what, cudaGetErrorName(e), cudaGetErrorString(e));"
    );
    let _ = writeln!(s, "    return 1;");
    let _ = writeln!(s, "}}");
    if repeated {
        let _ = writeln!(
            s,
            "static int kedge_fail_at(const char *what, unsigned long long i1, unsigned long long i2, unsigned long long i3, cudaError_t e) {{"
        );
        let _ = writeln!(
            s,
            "    fprintf(stderr, \"%s at repeat (%llu, %llu, %llu): %s (%s)\\n\", what, i1, i2, i3, cudaGetErrorName(e), cudaGetErrorString(e));"
        );
        let _ = writeln!(s, "    return 1;");
        let _ = writeln!(s, "}}");
    }
    let _ = writeln!(s, "#define CHECK(what, call) do {{ cudaError_t e_ = (call); if (e_ != cudaSuccess) return kedge_fail(what, e_); }} while (0)");
    let _ = writeln!(s);
}

/// `main`: the tensors, the scratch, the launches, each checked.
fn main_fn(s: &mut String, plan: &Plan, specs: &[TensorSpec], seed: u64, source: InputSource) {
    let mut scratch: Vec<(String, u64)> = Vec::new();
    for a in plan.launches.iter().flat_map(|l| &l.args) {
        if let KernelArg::Scratch { name, bytes } = a {
            if !scratch.iter().any(|(n, _)| n == name) {
                scratch.push((name.clone(), *bytes));
            }
        }
    }
    let _ = writeln!(s, "int main(void) {{");
    if source == InputSource::File {
        let _ = writeln!(
            s,
            "    FILE *kedge_inputs = fopen(\"{INPUTS_FILE}\", \"rb\");"
        );
        let _ = writeln!(
            s,
            "    if (!kedge_inputs) {{ fprintf(stderr, \"cannot open {INPUTS_FILE}: write it with `kedge repro --out DIR`\\n\"); return 1; }}"
        );
    }
    tensors(s, specs, seed, source);
    if source == InputSource::File {
        let _ = writeln!(s, "    fclose(kedge_inputs);");
    }
    for (k, (name, bytes)) in scratch.iter().enumerate() {
        let _ = writeln!(s, "    // scratch {name}: {bytes} bytes, never written");
        let _ = writeln!(s, "    void *s_{k} = NULL;");
        let _ = writeln!(
            s,
            "    CHECK(\"cudaMalloc {name}\", cudaMalloc(&s_{k}, {bytes}ull));"
        );
    }
    let _ = writeln!(
        s,
        "    CHECK(\"synchronize after setup\", cudaDeviceSynchronize());"
    );
    launches(s, plan, &scratch);
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "    printf(\"%llu launch(es) completed without a CUDA error\\n\", {}ull);",
        plan.launch_count()
    );
    let _ = writeln!(s, "    return 0;");
    let _ = writeln!(s, "}}");
}

fn header(s: &mut String, op: &dyn Op, case: &Case, profile: &LimitsProfile, source: InputSource) {
    let arch = format!("sm_{}", profile.compute_capability.value);
    let _ = writeln!(s, "// kedge repro: {}", case.label());
    let _ = writeln!(s, "// case: {}", case.to_line());
    let _ = writeln!(
        s,
        "// build: nvcc -arch={arch} -o repro repro.cu && ./repro"
    );
    let _ = writeln!(
        s,
        "// memory errors: compute-sanitizer --tool memcheck --padding 512 ./repro"
    );
    let _ = writeln!(
        s,
        "//   (--padding keeps back-to-back allocations from hiding a one-element overrun)"
    );
    let _ = writeln!(s, "//");
    let _ = writeln!(
        s,
        "// Tensors: one cudaMalloc each, of exactly the bytes kedge allocates (its `exact` mode)."
    );
    if case.alloc != kedge_core::AllocMode::Exact {
        let _ = writeln!(
            s,
            "// kedge ran this case with `--alloc {}`; this file has no guard pages or red zones, so",
            case.alloc
        );
        let _ = writeln!(
            s,
            "// an out-of-bounds access shows up here only under compute-sanitizer (command above)."
        );
    }
    match source {
        InputSource::Generated => {
            let _ = writeln!(
                s,
                "// Inputs: the values kedge used, from the same generator (SplitMix64, seed {}).",
                case.seed
            );
        }
        InputSource::Embedded => {
            let _ = writeln!(
                s,
                "// Inputs: the bytes kedge used, embedded (op {} makes its own inputs).",
                op.name()
            );
        }
        InputSource::File => {
            let _ = writeln!(
                s,
                "// Inputs: the bytes kedge used, read from {INPUTS_FILE} beside this file (op {} makes\n// its own inputs, too many to embed); `kedge repro --out DIR` writes both.",
                op.name()
            );
        }
    }
    let _ = writeln!(
        s,
        "// Outputs: filled with 0xFF bytes before the launch (a NaN for float types)."
    );
    let _ = writeln!(
        s,
        "// Every launch is followed by cudaGetLastError() and cudaDeviceSynchronize(); the first"
    );
    let _ = writeln!(s, "// error is printed and the exit status is 1. Values are not compared here (kedge does that).");
    let _ = writeln!(s);
}

fn tensors(s: &mut String, specs: &[TensorSpec], seed: u64, source: InputSource) {
    let mut input_i = 0usize;
    for (t, spec) in specs.iter().enumerate() {
        let role = match spec.role {
            Role::Input => "input",
            Role::Output => "output",
        };
        let _ = writeln!(
            s,
            "    // tensor {t}: {} ({role}, {}, ne={}, nb=[{},{},{},{}])",
            spec.name,
            spec.dtype,
            fmt_ne(&spec.ne),
            spec.nb[0],
            spec.nb[1],
            spec.nb[2],
            spec.nb[3]
        );
        let _ = writeln!(s, "    const size_t bytes_{t} = {}ull;", spec.bytes);
        let _ = writeln!(s, "    void *d_{t} = NULL;");
        let _ = writeln!(
            s,
            "    CHECK(\"cudaMalloc {}\", cudaMalloc(&d_{t}, bytes_{t}));",
            spec.name
        );
        match spec.role {
            Role::Input => {
                let _ = writeln!(s, "    {{");
                if source == InputSource::File {
                    let _ = writeln!(s, "        void *h = malloc(bytes_{t});");
                    let _ = writeln!(
                        s,
                        "        if (!h) {{ fprintf(stderr, \"out of host memory\\n\"); return 1; }}"
                    );
                    let _ = writeln!(
                        s,
                        "        if (fread(h, 1, bytes_{t}, kedge_inputs) != bytes_{t}) {{ fprintf(stderr, \"{INPUTS_FILE} is short\\n\"); return 1; }}"
                    );
                    let _ = writeln!(
                        s,
                        "        CHECK(\"upload {}\", cudaMemcpy(d_{t}, h, bytes_{t}, cudaMemcpyHostToDevice));",
                        spec.name
                    );
                    let _ = writeln!(s, "        free(h);");
                } else if source == InputSource::Generated {
                    let _ = writeln!(s, "        void *h = malloc(bytes_{t});");
                    let _ = writeln!(
                        s,
                        "        if (!h) {{ fprintf(stderr, \"out of host memory\\n\"); return 1; }}"
                    );
                    if let Some(call) = fill_call(spec, t, seed, "h") {
                        let _ = writeln!(s, "        {call}");
                    }
                    let _ = writeln!(
                        s,
                        "        CHECK(\"upload {}\", cudaMemcpy(d_{t}, h, bytes_{t}, cudaMemcpyHostToDevice));",
                        spec.name
                    );
                    let _ = writeln!(s, "        free(h);");
                } else {
                    let _ = writeln!(
                        s,
                        "        CHECK(\"upload {}\", cudaMemcpy(d_{t}, kedge_input_{input_i}, bytes_{t}, cudaMemcpyHostToDevice));",
                        spec.name
                    );
                }
                let _ = writeln!(s, "    }}");
                input_i += 1;
            }
            Role::Output => {
                let _ = writeln!(
                    s,
                    "    CHECK(\"poison {}\", cudaMemset(d_{t}, 0xFF, bytes_{t}));",
                    spec.name
                );
            }
        }
    }
}

/// Every planned launch, inside the plan's repeat loop nest when it has one.
fn launches(s: &mut String, plan: &Plan, scratch: &[(String, u64)]) {
    let clamp = |x: u64| x.min(u32::MAX as u64);
    let looped = plan.repetitions() > 1;
    let mut ind = "    ".to_string();
    if looped {
        let [n1, n2, n3] = plan.repeat;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "    // the launch list runs once per point of the repeat [{n1}, {n2}, {n3}] (innermost first)"
        );
        for (l, n) in [(3, n3), (2, n2), (1, n1)] {
            let _ = writeln!(
                s,
                "{ind}for (unsigned long long i{l} = 0; i{l} < {n}ull; i{l}++) {{"
            );
            ind.push_str("    ");
        }
    }
    for (li, l) in plan.launches.iter().enumerate() {
        let _ = writeln!(s);
        let _ = writeln!(s, "{ind}// launch {li}: {l}");
        let _ = writeln!(s, "{ind}{{");
        for (i, a) in l.args.iter().enumerate() {
            let _ = writeln!(s, "{ind}    {}", arg_decl(i, a, scratch, looped));
        }
        let refs: Vec<String> = (0..l.args.len()).map(|i| format!("&a{i}")).collect();
        let _ = writeln!(s, "{ind}    void *args[] = {{{}}};", refs.join(", "));
        let entry = l.kernel.entry;
        if l.smem > 48 * 1024 {
            let _ = writeln!(
                s,
                "{ind}    CHECK(\"cudaFuncSetAttribute {entry}\", cudaFuncSetAttribute((const void *) {entry}, cudaFuncAttributeMaxDynamicSharedMemorySize, {}));",
                l.smem
            );
        }
        let _ = writeln!(
            s,
            "{ind}    const dim3 grid({}u, {}u, {}u), block({}u, {}u, {}u);",
            clamp(l.grid[0]),
            clamp(l.grid[1]),
            clamp(l.grid[2]),
            clamp(l.block[0]),
            clamp(l.block[1]),
            clamp(l.block[2])
        );
        let _ = writeln!(
            s,
            "{ind}    cudaError_t e = cudaLaunchKernel((const void *) {entry}, grid, block, args, {}, 0);",
            clamp(l.smem)
        );
        let _ = writeln!(s, "{ind}    if (e == cudaSuccess) e = cudaGetLastError();");
        let fail = |what: &str| {
            if looped {
                format!("kedge_fail_at(\"{what}\", i1, i2, i3, e)")
            } else {
                format!("kedge_fail(\"{what}\", e)")
            }
        };
        let _ = writeln!(
            s,
            "{ind}    if (e != cudaSuccess) return {};",
            fail(&format!("launch {li}: {l}"))
        );
        let _ = writeln!(s, "{ind}    e = cudaDeviceSynchronize();");
        let _ = writeln!(
            s,
            "{ind}    if (e != cudaSuccess) return {};",
            fail(&format!("synchronize after launch {li}: {l}"))
        );
        let _ = writeln!(s, "{ind}}}");
    }
    if looped {
        for _ in 0..3 {
            ind.truncate(ind.len() - 4);
            let _ = writeln!(s, "{ind}}}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sampled_failure_too_small_for_the_whole_outputs_nmse_says_the_line_may_pass() {
        let case = Case::new("set_rows", "ggml:CUDA0", DType::F32, [64, 67_108_865, 1, 1]);
        let mut r = CaseResult::new(
            &case,
            kedge_core::Verdict::WrongValues,
            Detector::Reference,
            "dst: NMSE 1.2e-3 > 1e-7",
        );
        r.numbers = Some(kedge_core::judge::result::Numbers {
            nmse: 1.2e-3,
            output_ne: Some([64, 67_108_865, 1, 1]),
            compared: 1 << 18,
            threshold_nmse: 1e-7,
            ..Default::default()
        });
        // Judged whole: no note.
        assert_eq!(sampled_note(&r), None);
        r.facts
            .insert("judged_on".into(), "64 of 67108865 rows".into());
        let note = sampled_note(&r).expect("a note");
        assert!(
            note.contains("about 7.3e-8, within its bound of 1e-7"),
            "{note}"
        );
        // Over the bound even spread over the whole output: no note.
        r.numbers.as_mut().expect("numbers").nmse = 1.0;
        assert_eq!(sampled_note(&r), None);
        // Another verdict: no note.
        r.numbers.as_mut().expect("numbers").nmse = 1.2e-3;
        r.verdict = kedge_core::Verdict::DeviceFault;
        assert_eq!(sampled_note(&r), None);
    }

    #[test]
    fn escaping() {
        assert_eq!(regex_escape("ne=[64,1,65536,1]"), "ne=\\[64,1,65536,1\\]");
        assert_eq!(regex_escape("eps=0.000001"), "eps=0\\.000001");
        assert_eq!(shell_quote("a'b"), "'a'\\''b'");
        assert_eq!(
            vars_filter("type=f32,ne=[64,1,65536,1],v=0,eps=0.000001,inplace=0"),
            "^type=f32,ne=\\[64,1,65536,1\\],v=0,eps=0\\.000001,inplace=0$"
        );
        assert_eq!(vars_filter("type=f32,n=3"), "^type=f32,n=3$");
    }

    /// A launch repeated per row: the standalone file loops over the repeat, stepping the
    /// row pointers by their planned strides.
    #[test]
    fn a_repeated_plan_becomes_a_loop_nest() {
        use kedge_core::{Kernel, KernelImpl, LaunchPlan, Refusal};
        const ROW_COPY: Kernel = Kernel {
            file: "row_copy.cu",
            source: "extern \"C\" __global__ void row_copy(const float *x, float *y, int n) {\n    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i];\n}\n",
            entry: "row_copy",
        };
        fn per_row(c: &Case, _: &LimitsProfile) -> Result<Plan, Refusal> {
            let [n0, n1, n2, n3] = c.ne;
            let row = n0 * 4;
            let step = [row, row * n1, row * n1 * n2];
            let l = LaunchPlan::new(ROW_COPY, [1, 1, 1], [32, 1, 1], 0).args(vec![
                KernelArg::TensorAt {
                    index: 0,
                    offset: 0,
                    step,
                },
                KernelArg::TensorAt {
                    index: 1,
                    offset: 0,
                    step,
                },
                KernelArg::I32(n0 as i32),
            ]);
            Ok(Plan::single(l).repeated([n1 as u64, n2 as u64, n3 as u64]))
        }
        let mut reg = kedge_ops::registry();
        reg.add_impl(
            "rms_norm",
            Box::new(KernelImpl {
                name: "per-row",
                role: ImplRole::Fixed,
                about: "one launch per row",
                plan: per_row,
            }),
        )
        .unwrap();
        let h200 = LimitsProfile::builtin("h200").unwrap();
        let c = reg
            .validate(&Case::new("rms_norm", "per-row", DType::F32, [8, 3, 2, 1]))
            .unwrap();
        let (op, imp) = reg.resolve(&c).unwrap();
        let cu = cu_file(op, imp, &c, &h200, SourceMode::Embed)
            .unwrap()
            .source;
        for want in [
            "for (unsigned long long i3 = 0; i3 < 1ull; i3++) {",
            "for (unsigned long long i2 = 0; i2 < 2ull; i2++) {",
            "for (unsigned long long i1 = 0; i1 < 3ull; i1++) {",
            "void *a0 = (void *) ((char *) d_0 + (0ll + (long long) i1 * 32ll + (long long) i2 * 96ll + (long long) i3 * 192ll));",
            "void *a1 = (void *) ((char *) d_1 + (0ll + (long long) i1 * 32ll",
            "return kedge_fail_at(\"launch 0: row_copy grid=(1,1,1) block=(32,1,1) smem=0\", i1, i2, i3, e);",
            "printf(\"%llu launch(es) completed without a CUDA error\\n\", 6ull);",
        ] {
            assert!(cu.contains(want), "missing {want}:\n{cu}");
        }
    }

    /// The C conversions to f16 and bf16 give the bits kedge's host conversion gives
    /// (`HostTensor::from_f32`), on the generator's values and at the edges: ties to even,
    /// the subnormal range, overflow, infinities, NaN, signed zeros.
    fn check_half_bits(cc: &str, dir: &std::path::Path) {
        let mut r = kedge_core::model::rng::Rng::stream(7, 0);
        let mut vals: Vec<f32> = (0..512).map(|_| r.uniform(-1.0, 1.0)).collect();
        for e in -30..20 {
            for m in [1.0f32, 1.0004883, 1.0009766, 1.5, 1.9995117, 1.0019531] {
                vals.push(m * 2f32.powi(e));
                vals.push(-m * 2f32.powi(e));
            }
        }
        vals.extend([
            0.0,
            -0.0,
            65504.0,
            65519.0,
            65520.0,
            1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            5.9604645e-8,
            2.9802322e-8,
            2.9802326e-8,
            8.940697e-8,
            1.0 + 2f32.powi(-8),
            1.0 + 3.0 * 2f32.powi(-8),
        ]);
        let list: Vec<String> = vals
            .iter()
            .map(|v| format!("0x{:08x}u", v.to_bits()))
            .collect();
        let prog = format!(
            "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n{RNG_C}{HALF_C}\nstatic const uint32_t v[] = {{{}}};\nint main(void) {{ for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) printf(\"%04x %04x\\n\", kedge_f16_bits(kedge_f32_bits(v[k])), kedge_bf16_bits(kedge_f32_bits(v[k]))); return 0; }}\n",
            list.join(", ")
        );
        let c = dir.join("half.c");
        let exe = dir.join("half");
        std::fs::write(&c, prog).unwrap();
        let ok = std::process::Command::new(cc)
            .arg("-O2")
            .arg("-o")
            .arg(&exe)
            .arg(&c)
            .status()
            .unwrap();
        assert!(ok.success());
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        // One value converted as kedge converts its host inputs.
        let bits = |d: DType, v: f32| {
            let t = kedge_core::HostTensor::from_f32(d, [1, 1, 1, 1], &[v]);
            format!("{:04x}", u16::from_le_bytes([t.bytes[0], t.bytes[1]]))
        };
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), vals.len());
        for (line, &v) in lines.iter().zip(&vals) {
            let want = format!("{} {}", bits(DType::F16, v), bits(DType::Bf16, v));
            assert_eq!(*line, want, "{v:e} (0x{:08x})", v.to_bits());
        }
    }

    /// The C generator gives the same values as kedge's Rust one: compiled with the host C
    /// compiler (the part of the `.cu` file that runs on the host is plain C).
    #[test]
    fn c_generator_matches_kedge_rng() {
        let cc = std::env::var("CC")
            .ok()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "cc".into());
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("rng.c");
        let exe = dir.path().join("rng");
        let prog = format!(
            "#include <stdint.h>\n#include <stdio.h>\n#include <string.h>\n#include <stdlib.h>\n{RNG_C}\nint main(void) {{ float f[64], g[64], w[64]; int32_t i[64]; kedge_fill_f32(f, 64, 7, 0); kedge_fill_i32(i, 64, 7, 3); kedge_fill_f32_in(g, 64, 7, 1, -150.0f, 150.0f); kedge_fill_f32_in(w, 64, 7, 2, 0.9f, 1.1f); for (int k = 0; k < 64; k++) {{ uint32_t b, c, e; memcpy(&b, &f[k], 4); memcpy(&c, &g[k], 4); memcpy(&e, &w[k], 4); printf(\"%08x %d %08x %08x\\n\", b, i[k], c, e); }} return 0; }}\n"
        );
        std::fs::write(&c, prog).unwrap();
        let built = std::process::Command::new(&cc)
            .arg("-O2")
            .arg("-o")
            .arg(&exe)
            .arg(&c)
            .status();
        // kedge-ops' build compiles C with the same compiler, so it is there wherever this
        // test builds.
        match built {
            Ok(s) if s.success() => {}
            other => panic!("this test compiles C with {cc} (CC, else cc): {other:?}"),
        }
        let out = std::process::Command::new(&exe).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        check_half_bits(&cc, dir.path());
        let mut rf = kedge_core::model::rng::Rng::stream(7, 0);
        let mut ri = kedge_core::model::rng::Rng::stream(7, 3);
        // An op's own range (test_unary's, test_log's): every bit as the host draws it.
        let mut rg = kedge_core::model::rng::Rng::stream(7, 1);
        let mut rw = kedge_core::model::rng::Rng::stream(7, 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 64);
        for line in lines {
            let v: Vec<&str> = line.split(' ').collect();
            assert_eq!(v.len(), 4, "{line}");
            let hex = |x: &str| u32::from_str_radix(x, 16).unwrap();
            assert_eq!(hex(v[0]), rf.uniform(-1.0, 1.0).to_bits());
            assert_eq!(v[1].parse::<u64>().unwrap(), ri.below(16));
            assert_eq!(hex(v[2]), rg.uniform(-150.0, 150.0).to_bits(), "{line}");
            assert_eq!(hex(v[3]), rw.uniform(0.9, 1.1).to_bits(), "{line}");
        }
    }
}
