//! A standalone C program that reproduces a ggml case outside kedge (`kedge repro`).
//!
//! test-backend-ops' constructors build dense tensors (or their own views of a larger tensor)
//! in one buffer; a case whose inputs are views with padded rows, strides or an id tensor as a
//! view of a wider one cannot be written as a constructor line without losing that layout. The
//! program here builds the graph kedge built, call for call: kedge-ggml writes every ggml call
//! of the graph down as C while kedge builds it (`Graph::record`), and the program replays
//! those lines. Each tensor gets its own backend buffer of exactly its alloc size (as kedge
//! gives it), outputs are poisoned first, the inputs are kedge's exact values (regenerated from
//! the seeded SplitMix64 stream, or the bytes, embedded or beside the program, when an op makes
//! its own), and the graph runs on the chosen backend and on the CPU backend, compared as
//! test-backend-ops compares them (NaN and infinity checks, then NMSE against the op's bound),
//! and names the element where they differ most.
//! It prints PASS or FAIL with the numbers and exits 0 or 1 (2: it could not run).
//!
//! One program holds every side it is given (the case, and the passing side of a transition
//! when minimize found one): `./repro DEVICE SIDE`.

use super::exec::build_with;
use super::graph_of;
use kedge_core::contract::op::random_tensor;
use kedge_core::model::host::poison_pattern;
use kedge_core::*;
use kedge_ggml::{c_string, Ggml};
use std::fmt::Write as _;

/// Inputs embedded in the program up to this many bytes (per side); more go in a file beside it.
const MAX_EMBEDDED_BYTES: u64 = 1 << 20;
/// Inputs an op makes itself are written beside the program up to this many bytes (per side).
const MAX_FILE_BYTES: u64 = 1 << 30;

/// One case of the program, by the name it is run with.
#[derive(Debug, Clone, Copy)]
pub struct Side<'a> {
    /// `fail`, `pass`, `case`: what `./repro DEVICE SIDE` takes.
    pub name: &'a str,
    /// What it is, in words ("the failing side of `ne[0]`: 8193 -> 8194").
    pub about: &'a str,
    /// The validated case it runs, of an op kedge can express as a ggml graph.
    pub case: &'a Case,
}

/// The program and what comes with it.
#[derive(Debug, Clone, PartialEq)]
pub struct CProgram {
    /// The C source, to be saved as [`FILE`] and built with `build`.
    pub source: String,
    /// Files the program reads beside it (inputs an op makes itself, too many to embed).
    pub files: Vec<(String, Vec<u8>)>,
    /// The sides, in order (the first runs when none is named).
    pub(crate) sides: Vec<String>,
    /// `cc ... -o repro`, against the loaded build.
    pub build: String,
}

/// The file name of the program.
pub const FILE: &str = "repro.c";

/// The program for `sides` (each a validated case of an op kedge can express as a ggml graph),
/// run on `device` by default. Needs a loaded ggml build (to build the graphs it writes down;
/// no device is opened).
pub fn program(
    ggml: Ggml,
    reg: &Registry,
    device: &str,
    sides: &[Side<'_>],
) -> Result<CProgram, String> {
    if sides.is_empty() {
        return Err("no case to write".into());
    }
    let mut s = String::new();
    let mut files = Vec::new();
    let mut table = Vec::new();
    let mut bodies = String::new();
    for (k, side) in sides.iter().enumerate() {
        let op = reg
            .op(&side.case.op)
            .map_err(|e| format!("{}: {e}", side.name))?;
        let part = side_code(ggml, op, k, side)?;
        bodies.push_str(&part.code);
        table.push(part.entry);
        files.extend(part.file);
    }
    header(&mut s, ggml, device, sides);
    s.push_str(PRELUDE);
    s.push_str(kedge_core::model::rng::C_SOURCE);
    s.push_str(
        "__attribute__((unused)) static float kedge_f32(uint32_t b) { return kedge_f32_bits(b); }\n\n",
    );
    s.push_str(&bodies);
    let _ = writeln!(s, "static const struct kedge_side kedge_sides[] = {{");
    for e in &table {
        let _ = writeln!(s, "    {e},");
    }
    let _ = writeln!(s, "}};");
    let _ = writeln!(
        s,
        "static const int kedge_n_sides = {};\nstatic const char *const kedge_default_device = {};\nstatic const char *const kedge_lib_dir = {};\n",
        sides.len(),
        c_string(device),
        c_string(&ggml.dir().display().to_string())
    );
    s.push_str(MAIN);
    Ok(CProgram {
        source: s,
        files,
        sides: sides.iter().map(|x| x.name.to_string()).collect(),
        build: build_command(ggml),
    })
}

/// `cc ... repro.c ... -o repro` against the loaded build: its headers (`include/` beside
/// `lib/`, as `scripts/build-ggml.sh` lays a build out) and its libraries.
pub(crate) fn build_command(ggml: Ggml) -> String {
    let lib = ggml.dir().display().to_string();
    let inc = ggml
        .dir()
        .parent()
        .map(|p| p.join("include"))
        .filter(|p| p.join("ggml.h").is_file())
        .map_or_else(
            || "GGML_SOURCE/include".to_string(),
            |p| p.display().to_string(),
        );
    format!(
        "cc -std=c11 -O2 -ffp-contract=off {FILE} -I{inc} -L{lib} -Wl,-rpath,{lib} -lggml -lggml-base -lm -o repro"
    )
}

/// Whether test-backend-ops' constructor line builds the case's tensors as kedge does: it
/// allocates each tensor dense (or as its own view of a larger tensor), so a case whose
/// tensors are views with other strides, or whose buffers end at a view's last element, is
/// not reproduced by the line. `Err` says what the line loses.
pub fn upstream_layout(op: &dyn Op, case: &Case) -> Result<(), String> {
    let specs = op.tensors(case).map_err(|e| e.to_string())?;
    let strided: Vec<String> = specs
        .iter()
        .filter(|s| s.nb != kedge_core::model::shape::dense_strides(&s.ne, s.dtype))
        .map(|s| {
            format!(
                "{} `{}` is a view of {} bytes with strides nb=[{},{},{},{}]",
                match s.role {
                    Role::Input => "input",
                    Role::Output => "output",
                },
                s.name,
                s.bytes,
                s.nb[0],
                s.nb[1],
                s.nb[2],
                s.nb[3]
            )
        })
        .collect();
    if strided.is_empty() {
        Ok(())
    } else {
        Err(strided.join("; "))
    }
}

struct SideCode {
    code: String,
    entry: String,
    file: Option<(String, Vec<u8>)>,
}

/// How a side's inputs reach the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Generated,
    Embedded,
    File,
}

fn side_code(ggml: Ggml, op: &dyn Op, k: usize, side: &Side<'_>) -> Result<SideCode, String> {
    let case = side.case;
    let graph =
        graph_of(&case.op).ok_or_else(|| format!("op {} has no ggml graph in kedge", case.op))?;
    let specs = op
        .tensors(case)
        .map_err(|e| format!("{}: {e}", side.name))?;
    let built = build_with(ggml, case, &specs, graph, true)
        .map_err(|e| format!("{}: building its ggml graph: {e}", side.name))?;
    let rec = built
        .graph
        .recording()
        .ok_or("the graph was not recorded")?
        .clone();
    if let Some(why) = &rec.broken {
        return Err(format!(
            "{}: its graph cannot be written as C ({why})",
            side.name
        ));
    }
    let input_specs: Vec<usize> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Input)
        .map(|(i, _)| i)
        .collect();
    let entry = super::table::TABLE.iter().find(|e| e.name == case.op);
    // kedge's own stream in the op's range, tensor by tensor (one extra tensor in memory at a
    // time).
    let range = entry
        .and_then(|e| e.drawn_range(case))
        .unwrap_or((-1.0, 1.0));
    // An entry that draws every input from kedge's stream, none a block format: the program
    // draws them the same way, so kedge need not draw them to know it (a big case's inputs
    // are gigabytes, and `kedge repro` would hold them twice).
    let all_drawn = entry.is_some_and(|e| e.draws_every_input())
        && input_specs.iter().all(|&i| !specs[i].dtype.is_block());
    let inputs = if all_drawn {
        Vec::new()
    } else {
        op.inputs(case, &specs)
            .map_err(|e| format!("{}: {e}", side.name))?
    };
    if !all_drawn && inputs.len() != input_specs.len() {
        return Err(format!(
            "{}: {} inputs for {} input tensors",
            side.name,
            inputs.len(),
            input_specs.len()
        ));
    }
    // A block-format input as the build quantized it for kedge: its blocks, written out.
    let inputs: Vec<HostTensor> = input_specs
        .iter()
        .zip(inputs)
        .map(|(&i, h)| {
            let s = &specs[i];
            if s.dtype.is_block() {
                let bytes = super::exec::input_bytes(ggml, s, &h)
                    .map_err(|e| format!("{}: {e}", side.name))?;
                Ok(HostTensor::from_bytes(
                    s.dtype,
                    s.ne,
                    s.nb,
                    bytes.into_owned(),
                ))
            } else {
                Ok(h)
            }
        })
        .collect::<Result<_, String>>()?;
    let generated = all_drawn
        || input_specs.iter().zip(&inputs).all(|(&i, h)| {
            let s = &specs[i];
            random_tensor(case.seed, i as u64, s, range.0, range.1).bytes == h.bytes
        });
    // Each input's bytes: what was drawn, or (drawn in the program only) its spec's.
    let lens: Vec<u64> = if all_drawn {
        input_specs.iter().map(|&i| specs[i].bytes).collect()
    } else {
        inputs.iter().map(|h| h.bytes.len() as u64).collect()
    };
    let input_bytes: u64 = lens.iter().sum();
    let source = if generated {
        Source::Generated
    } else if input_bytes <= MAX_EMBEDDED_BYTES {
        Source::Embedded
    } else if input_bytes <= MAX_FILE_BYTES {
        Source::File
    } else {
        return Err(format!(
            "{}: op {} makes its own inputs, {input_bytes} bytes of them: too many to write beside the program",
            side.name, case.op
        ));
    };
    let file_name = format!("repro-{}.inputs", side.name);

    let mut c = String::new();
    let _ = writeln!(
        c,
        "/* ---- side {k} ({}): {} ---- */",
        side.name,
        case.label()
    );
    // Embedded inputs.
    if source == Source::Embedded {
        for (j, h) in inputs.iter().enumerate() {
            let _ = write!(c, "static const unsigned char s{k}_input_{j}[] = {{");
            for (b, byte) in h.bytes.iter().enumerate() {
                if b % 16 == 0 {
                    c.push_str("\n   ");
                }
                let _ = write!(c, " 0x{byte:02x},");
            }
            if h.bytes.is_empty() {
                c.push_str(" 0");
            }
            let _ = writeln!(c, "\n}};");
        }
    }
    // The graph, as kedge built it.
    let _ = writeln!(
        c,
        "static void s{k}_build(struct ggml_context *ctx, struct ggml_tensor **t) {{"
    );
    for l in &rec.lines {
        let _ = writeln!(c, "    {l}");
    }
    let _ = writeln!(c, "}}");
    // The inputs.
    let _ = writeln!(c, "static int s{k}_fill(struct ggml_tensor **t) {{");
    if built.uploads.is_empty() {
        // An op with no input (arange): nothing to write.
        let _ = writeln!(c, "    (void) t;");
    }
    if source == Source::File {
        let _ = writeln!(c, "    FILE *in = fopen({}, \"rb\");", c_string(&file_name));
        let _ = writeln!(
            c,
            "    if (!in) {{ fprintf(stderr, \"cannot open %s beside the program: `kedge repro --out DIR` writes it\\n\", {}); return 2; }}",
            c_string(&file_name)
        );
    }
    for (tensor, spec_i) in &built.uploads {
        let j = input_specs
            .iter()
            .position(|x| x == spec_i)
            .ok_or("an upload of no input")?;
        let spec = &specs[*spec_i];
        let t = tensor.index();
        let bytes = lens[j];
        let _ = writeln!(
            c,
            "    {{ /* {} ({}, {} bytes) */",
            spec.name, spec.dtype, bytes
        );
        let _ = writeln!(
            c,
            "        const size_t n = {bytes}ull; if (ggml_nbytes(t[{t}]) != n) {{ fprintf(stderr, \"input {}: %zu bytes in the graph, {bytes} written\\n\", ggml_nbytes(t[{t}])); return 2; }}",
            spec.name
        );
        match source {
            Source::Embedded => {
                let _ = writeln!(
                    c,
                    "        if (n) ggml_backend_tensor_set(t[{t}], s{k}_input_{j}, 0, n);\n        kedge_dump_bytes(s{k}_input_{j}, n);"
                );
            }
            Source::File | Source::Generated => {
                let _ = writeln!(
                    c,
                    "        unsigned char *h = malloc(n ? n : 1); if (!h) {{ fprintf(stderr, \"out of host memory\\n\"); return 2; }}"
                );
                if source == Source::File {
                    let _ = writeln!(
                        c,
                        "        if (fread(h, 1, n, in) != n) {{ fprintf(stderr, \"%s is short\\n\", {}); free(h); fclose(in); return 2; }}",
                        c_string(&file_name)
                    );
                } else {
                    let _ = writeln!(
                        c,
                        "        {}",
                        fill_call(spec.dtype, case.seed, *spec_i, range)?
                    );
                }
                let _ = writeln!(
                    c,
                    "        if (n) ggml_backend_tensor_set(t[{t}], h, 0, n);\n        kedge_dump_bytes(h, n);\n        free(h);"
                );
            }
        }
        let _ = writeln!(c, "    }}");
    }
    if source == Source::File {
        let _ = writeln!(c, "    fclose(in);");
    }
    let _ = writeln!(c, "    return 0;\n}}");
    // Outputs: tensor numbers, names, poison.
    let out_specs: Vec<&TensorSpec> = specs.iter().filter(|s| s.role == Role::Output).collect();
    let outs: Vec<String> = built
        .outputs
        .iter()
        .map(|t| t.index().to_string())
        .collect();
    let _ = writeln!(
        c,
        "static const int s{k}_outputs[] = {{{}}};",
        outs.join(", ")
    );
    let names: Vec<String> = out_specs.iter().map(|s| c_string(&s.name)).collect();
    let _ = writeln!(
        c,
        "static const char *const s{k}_output_names[] = {{{}}};",
        names.join(", ")
    );
    for (j, spec) in out_specs.iter().enumerate() {
        let p: Vec<String> = poison_pattern(spec.dtype)
            .iter()
            .map(|b| format!("0x{b:02x}"))
            .collect();
        let _ = writeln!(
            c,
            "static const unsigned char s{k}_poison_{j}[] = {{{}}};",
            p.join(", ")
        );
    }
    let poisons: Vec<String> = (0..out_specs.len())
        .map(|j| format!("s{k}_poison_{j}"))
        .collect();
    let lens: Vec<String> = out_specs
        .iter()
        .map(|s| poison_pattern(s.dtype).len().to_string())
        .collect();
    let _ = writeln!(
        c,
        "static const unsigned char *const s{k}_poison[] = {{{}}};\nstatic const size_t s{k}_poison_len[] = {{{}}};\n",
        poisons.join(", "),
        lens.join(", ")
    );
    let nmse = op.tolerance(case).nmse;
    let entry = format!(
        "{{{}, {}, {}, {}, {}, {}, s{k}_build, s{k}_fill, s{k}_outputs, s{k}_output_names, s{k}_poison, s{k}_poison_len, {:e}}}",
        c_string(side.name),
        c_string(side.about),
        c_string(&case.label()),
        c_string(&case.to_line()),
        rec.tensors,
        out_specs.len(),
        nmse
    );
    let file = (source == Source::File).then(|| {
        (
            file_name,
            inputs
                .iter()
                .flat_map(|h| h.bytes.iter().copied())
                .collect(),
        )
    });
    Ok(SideCode {
        code: c,
        entry,
        file,
    })
}

/// The C statement that fills `h` (n bytes) as `random_tensor(seed, index, spec, -1, 1)`.
/// An f32 in C, bit for bit (`0.9f` would do too, but a bit pattern cannot be misread).
fn c_float(x: f32) -> String {
    format!("kedge_f32_bits(0x{:08x}u)", x.to_bits())
}

fn fill_call(d: DType, seed: u64, index: usize, (lo, hi): (f32, f32)) -> Result<String, String> {
    let n = match d.size() {
        1 => "n".to_string(),
        w => format!("n / {w}"),
    };
    // A float drawn in the op's own range (test_unary's [-150, 150), test_log's [0.9, 1.1)):
    // the ranged fill, then the 16-bit conversion where the type needs one.
    let ranged = (lo, hi) != (-1.0, 1.0);
    let fill_f32 = |ptr: &str, n: &str| {
        if ranged {
            format!(
                "kedge_fill_f32_in({ptr}, {n}, {seed}ull, {index}ull, {}, {});",
                c_float(lo),
                c_float(hi)
            )
        } else {
            format!("kedge_fill_f32({ptr}, {n}, {seed}ull, {index}ull);")
        }
    };
    if d == DType::F32 && ranged {
        return Ok(fill_f32("(float *) h", &n));
    }
    if let Some(fill) = kedge_core::model::rng::c_fill(d, "h", &n, seed, index as u64) {
        return Ok(fill);
    }
    Ok(match d {
        DType::F16 | DType::Bf16 => {
            let conv = if d == DType::F16 {
                "ggml_fp32_to_fp16_row(tmp, (ggml_fp16_t *) h, (int64_t) (n / 2))"
            } else {
                "ggml_fp32_to_bf16_row(tmp, (ggml_bf16_t *) h, (int64_t) (n / 2))"
            };
            format!(
                "float *tmp = malloc((n / 2 ? n / 2 : 1) * sizeof(float)); if (!tmp) {{ fprintf(stderr, \"out of host memory\\n\"); free(h); return 2; }} {} {conv}; free(tmp);",
                fill_f32("tmp", "n / 2")
            )
        }
        // A block format is quantized from kedge's values by the build (ggml_quantize_chunk);
        // its blocks are written beside the program as any op-made input is.
        d => {
            return Err(format!(
                "a {d} input is quantized by the build, not drawn in C"
            ))
        }
    })
}

fn header(s: &mut String, ggml: Ggml, device: &str, sides: &[Side<'_>]) {
    let _ = writeln!(
        s,
        "// kedge repro (ggml {} {}): {}",
        ggml.version(),
        ggml.commit(),
        sides[0].case.label()
    );
    for x in sides {
        let _ = writeln!(s, "// side {}: {}", x.name, x.about);
        let _ = writeln!(s, "//   case: {}", x.case.to_line());
    }
    let _ = writeln!(s, "//");
    let _ = writeln!(s, "// build: {}", build_command(ggml));
    let run: Vec<String> = sides
        .iter()
        .map(|x| format!("./repro {device} {}", x.name))
        .collect();
    let _ = writeln!(s, "// run:   {}", run.join("; "));
    let _ = writeln!(
        s,
        "//        (./repro DEVICE SIDE: DEVICE is a ggml device name, CUDA0 or CPU; the first GPU"
    );
    let _ = writeln!(
        s,
        "//        when none is given; SIDE one of the sides above, the first when none is given)"
    );
    let _ = writeln!(
        s,
        "//        memory errors: compute-sanitizer --tool memcheck --padding 512 ./repro {device}"
    );
    let _ = writeln!(s, "//");
    for l in [
        "// The graph is the one kedge built, call for call (views with the same strides and",
        "// offsets). Every tensor gets its own buffer of exactly its alloc size, as kedge gives it",
        "// (test-backend-ops puts a case's tensors in one buffer, where memcheck cannot see a read",
        "// from one into the next). Outputs are filled with kedge's poison first (a NaN for float",
        "// types), then the inputs are written: kedge's values, from its SplitMix64 stream or the",
        "// bytes kedge drew. The graph runs on DEVICE and on the CPU backend, and each output is",
        "// compared as test-backend-ops compares it: NaN and infinity checks, then NMSE against the",
        "// op's bound. Prints PASS or FAIL with the numbers; exit status 0 (PASS), 1 (FAIL, or ggml",
        "// aborted on DEVICE), 2 (it could not run: no such device or side, unsupported, inputs).",
    ] {
        let _ = writeln!(s, "{l}");
    }
    let _ = writeln!(s);
}

/// Headers and the side table's type.
const PRELUDE: &str = r#"#include "ggml.h"
#include "ggml-backend.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kedge_side {
    const char *name;
    const char *about;
    const char *label;
    const char *case_line;
    int n_tensors;
    int n_outputs;
    void (*build)(struct ggml_context *ctx, struct ggml_tensor **t);
    int (*fill)(struct ggml_tensor **t);
    const int *outputs;
    const char *const *output_names;
    const unsigned char *const *poison;
    const size_t *poison_len;
    double max_nmse;
};

/* KEDGE_REPRO_DUMP_INPUTS=FILE: the bytes written into each input, in order (to check them
 * against kedge's). Written on the first backend's run only. */
static FILE *kedge_dump = NULL;
static int kedge_dumping = 0;
__attribute__((unused)) static void kedge_dump_bytes(const void *p, size_t n) {
    if (kedge_dump && kedge_dumping && n) fwrite(p, 1, n, kedge_dump);
}

"#;

/// Everything that does not depend on the case: running a side on a backend, comparing, main.
const MAIN: &str = r#"/* Which backend is running, for the abort hook: 1 the device under test, 2 the CPU reference. */
static int kedge_phase = 0;
static const char *kedge_phase_name = "";

static void kedge_on_abort(const char *msg) {
    fflush(stdout);
    if (kedge_phase == 1) {
        fprintf(stdout, "FAIL: ggml aborted on %s: %s\n", kedge_phase_name, msg);
        fflush(stdout);
        _Exit(1);
    }
    fprintf(stdout, "could not run: ggml aborted on %s (the reference): %s\n", kedge_phase_name, msg);
    fflush(stdout);
    _Exit(2);
}

/* An output's elements as floats (as test-backend-ops' tensor_to_float), and how many still hold
 * the poison. */
static float *kedge_to_float(const struct ggml_tensor *x, const unsigned char *poison, size_t plen, size_t *n_out, size_t *poisoned) {
    const size_t n = (size_t) ggml_nelements(x);
    const size_t nbytes = ggml_nbytes(x);
    float *v = malloc((n ? n : 1) * sizeof(float));
    unsigned char *buf = malloc(nbytes ? nbytes : 1);
    if (!v || !buf) { free(v); free(buf); return NULL; }
    if (nbytes) ggml_backend_tensor_get(x, buf, 0, nbytes);
    size_t k = 0;
    *poisoned = 0;
    for (int64_t i3 = 0; i3 < x->ne[3]; i3++)
    for (int64_t i2 = 0; i2 < x->ne[2]; i2++)
    for (int64_t i1 = 0; i1 < x->ne[1]; i1++)
    for (int64_t i0 = 0; i0 < x->ne[0]; i0++) {
        const unsigned char *p = buf + i3 * x->nb[3] + i2 * x->nb[2] + i1 * x->nb[1] + i0 * x->nb[0];
        float f;
        switch (x->type) {
            case GGML_TYPE_F32: memcpy(&f, p, 4); break;
            case GGML_TYPE_F16: { ggml_fp16_t h; memcpy(&h, p, 2); f = ggml_fp16_to_fp32(h); break; }
            case GGML_TYPE_BF16: { ggml_bf16_t h; memcpy(&h, p, 2); f = ggml_bf16_to_fp32(h); break; }
            case GGML_TYPE_I32: { int32_t i; memcpy(&i, p, 4); f = (float) i; break; }
            case GGML_TYPE_I64: { int64_t i; memcpy(&i, p, 8); f = (float) i; break; }
            case GGML_TYPE_I16: { int16_t i; memcpy(&i, p, 2); f = (float) i; break; }
            case GGML_TYPE_I8: { int8_t i; memcpy(&i, p, 1); f = (float) i; break; }
            default: free(v); free(buf); return NULL;
        }
        if (plen && memcmp(p, poison, plen) == 0) (*poisoned)++;
        v[k++] = f;
    }
    free(buf);
    *n_out = k;
    return v;
}

static bool kedge_inf_or_max(float f) { return isinf(f) || f == FLT_MAX || f == -FLT_MAX; }

/* test-backend-ops' nmse: mse(a, b) / mse(a, 0), a the device under test. */
static double kedge_nmse(const float *a, const float *b, size_t n) {
    double mse_a_b = 0.0, mse_a_0 = 0.0;
    for (size_t i = 0; i < n; i++) {
        float a_i = a[i], b_i = b[i];
        mse_a_b += (a_i - b_i) * (a_i - b_i);
        mse_a_0 += a_i * a_i;
    }
    return mse_a_b / mse_a_0;
}

struct kedge_outputs { float **v; size_t *n; size_t *poisoned; };

/* Build, allocate (one buffer per tensor), poison, fill, compute, read back. 0: ran; 1: the
 * backend failed the compute; 2: it could not run. */
static int kedge_run(const struct kedge_side *s, ggml_backend_t be, struct kedge_outputs *out) {
    const size_t slots = (size_t) s->n_tensors + 64;
    struct ggml_init_params ip = { ggml_tensor_overhead() * slots + ggml_graph_overhead_custom(slots, false), NULL, true };
    struct ggml_context *ctx = ggml_init(ip);
    if (!ctx) { fprintf(stderr, "ggml_init failed\n"); return 2; }
    struct ggml_tensor **t = calloc((size_t) s->n_tensors + 1, sizeof *t);
    if (!t) { fprintf(stderr, "out of host memory\n"); return 2; }
    s->build(ctx, t);
    struct ggml_cgraph *g = ggml_new_graph_custom(ctx, slots, false);
    for (int o = 0; o < s->n_outputs; o++) {
        ggml_set_output(t[s->outputs[o]]);
        ggml_build_forward_expand(g, t[s->outputs[o]]);
    }
    for (struct ggml_tensor *x = ggml_get_first_tensor(ctx); x; x = ggml_get_next_tensor(ctx, x)) {
        if (!ggml_backend_supports_op(be, x)) {
            printf("could not run: %s does not support %s (%s, %s)\n", ggml_backend_name(be), ggml_op_desc(x), x->name, ggml_type_name(x->type));
            return 2;
        }
    }
    /* One buffer per tensor, of exactly its alloc size; views share their source's. */
    ggml_backend_buffer_type_t buft = ggml_backend_get_default_buffer_type(be);
    size_t n_bufs = 0, cap = 16;
    ggml_backend_buffer_t *bufs = malloc(cap * sizeof *bufs);
    if (!bufs) { fprintf(stderr, "out of host memory\n"); return 2; }
    for (struct ggml_tensor *x = ggml_get_first_tensor(ctx); x; x = ggml_get_next_tensor(ctx, x)) {
        if (x->view_src) {
            if (ggml_backend_view_init(x) != GGML_STATUS_SUCCESS) { printf("could not run: a view of %s\n", x->name); return 2; }
            continue;
        }
        size_t n = ggml_backend_buft_get_alloc_size(buft, x);
        ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(buft, n ? n : 1);
        if (!b) { printf("could not run: %s could not allocate %zu bytes for %s\n", ggml_backend_name(be), n, x->name); return 2; }
        if (n_bufs == cap) {
            cap *= 2;
            ggml_backend_buffer_t *more = realloc(bufs, cap * sizeof *bufs);
            if (!more) { fprintf(stderr, "out of host memory\n"); return 2; }
            bufs = more;
        }
        bufs[n_bufs++] = b;
        if (ggml_backend_tensor_alloc(b, x, ggml_backend_buffer_get_base(b)) != GGML_STATUS_SUCCESS) { printf("could not run: placing %s\n", x->name); return 2; }
    }
    /* Outputs poisoned first, inputs written after (an output that is a view of an input then
     * starts from the input's values). */
    for (int o = 0; o < s->n_outputs; o++) {
        struct ggml_tensor *x = t[s->outputs[o]];
        const size_t n = ggml_nbytes(x);
        unsigned char *p = malloc(n ? n : 1);
        if (!p) { fprintf(stderr, "out of host memory\n"); return 2; }
        for (size_t i = 0; i < n; i++) p[i] = s->poison[o][i % s->poison_len[o]];
        if (n) ggml_backend_tensor_set(x, p, 0, n);
        free(p);
    }
    int rc = s->fill(t);
    if (rc) return rc;
    enum ggml_status st = ggml_backend_graph_compute(be, g);
    if (st != GGML_STATUS_SUCCESS) {
        printf("%s: ggml_backend_graph_compute: %s\n", ggml_backend_name(be), ggml_status_to_string(st));
        return 1;
    }
    for (int o = 0; o < s->n_outputs; o++) {
        out->v[o] = kedge_to_float(t[s->outputs[o]], s->poison[o], s->poison_len[o], &out->n[o], &out->poisoned[o]);
        if (!out->v[o]) { fprintf(stderr, "reading output %s failed\n", s->output_names[o]); return 2; }
    }
    for (size_t i = 0; i < n_bufs; i++) ggml_backend_buffer_free(bufs[i]);
    free(bufs);
    free(t);
    ggml_free(ctx);
    return 0;
}

static ggml_backend_dev_t kedge_device(const char *name) {
    if (name) return ggml_backend_dev_by_name(name);
    ggml_backend_dev_t d = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_GPU);
    return d ? d : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_IGPU);
}

static void kedge_list_devices(void) {
    fprintf(stderr, "devices of this ggml build:");
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) fprintf(stderr, " %s", ggml_backend_dev_name(ggml_backend_dev_get(i)));
    fprintf(stderr, "\n");
}

int main(int argc, char **argv) {
    if (argc > 3 || (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(stderr, "usage: %s [DEVICE [SIDE]]  (DEVICE: a ggml device, e.g. %s or CPU; SIDE:", argv[0], kedge_default_device);
        for (int i = 0; i < kedge_n_sides; i++) fprintf(stderr, " %s", kedge_sides[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    const char *dev_name = argc > 1 ? argv[1] : NULL;
    const struct kedge_side *s = &kedge_sides[0];
    if (argc > 2) {
        s = NULL;
        for (int i = 0; i < kedge_n_sides; i++) if (strcmp(argv[2], kedge_sides[i].name) == 0) s = &kedge_sides[i];
        if (!s) { fprintf(stderr, "no side '%s' (sides:", argv[2]); for (int i = 0; i < kedge_n_sides; i++) fprintf(stderr, " %s", kedge_sides[i].name); fprintf(stderr, ")\n"); return 2; }
    }
    ggml_set_abort_callback(kedge_on_abort);
    if (ggml_backend_reg_count() == 0) {
        /* Backends as loadable modules (GGML_BACKEND_DL): from KEDGE_GGML_LIB, else the build kedge used. */
        const char *dir = getenv("KEDGE_GGML_LIB");
        ggml_backend_load_all_from_path(dir ? dir : kedge_lib_dir);
    }
    ggml_backend_dev_t dev = kedge_device(dev_name);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    if (!dev) {
        fprintf(stderr, "no device %s\n", dev_name ? dev_name : "of GPU type (name one: ./repro CPU)");
        kedge_list_devices();
        return 2;
    }
    if (!cpu) { fprintf(stderr, "no CPU device: the reference needs one\n"); kedge_list_devices(); return 2; }
    ggml_backend_t be = ggml_backend_dev_init(dev, NULL);
    ggml_backend_t ref = ggml_backend_dev_init(cpu, NULL);
    if (!be || !ref) { fprintf(stderr, "could not start the %s backend\n", be ? "CPU" : ggml_backend_dev_name(dev)); return 2; }
    printf("kedge repro (ggml %s %s): %s\n", ggml_version(), ggml_commit(), s->label);
    printf("side %s: %s\n", s->name, s->about);
    printf("case: %s\n", s->case_line);
    printf("%s (%s) against %s (the reference)\n", ggml_backend_dev_name(dev), ggml_backend_dev_description(dev), ggml_backend_dev_name(cpu));
    fflush(stdout);

    float *v1[16], *v2[16];
    size_t n1[16], n2[16], p1[16], p2[16];
    if (s->n_outputs > 16) { fprintf(stderr, "too many outputs\n"); return 2; }
    struct kedge_outputs o1 = { v1, n1, p1 }, o2 = { v2, n2, p2 };
    const char *dump = getenv("KEDGE_REPRO_DUMP_INPUTS");
    if (dump && !(kedge_dump = fopen(dump, "wb"))) { fprintf(stderr, "cannot write %s\n", dump); return 2; }
    kedge_phase = 1; kedge_phase_name = ggml_backend_dev_name(dev);
    kedge_dumping = 1;
    int rc = kedge_run(s, be, &o1);
    kedge_dumping = 0;
    if (kedge_dump) fclose(kedge_dump);
    if (rc == 1) { printf("FAIL\n"); return 1; }
    if (rc) return 2;
    kedge_phase = 2; kedge_phase_name = ggml_backend_dev_name(cpu);
    rc = kedge_run(s, ref, &o2);
    if (rc) { printf("could not run: the reference failed\n"); return 2; }
    kedge_phase = 0;

    bool fail = false;
    for (int o = 0; o < s->n_outputs; o++) {
        const char *name = s->output_names[o];
        if (n1[o] != n2[o]) { printf("  %s: %zu elements on %s, %zu on the CPU\n", name, n1[o], ggml_backend_dev_name(dev), n2[o]); fail = true; continue; }
        if (p1[o]) printf("  %s: %zu of %zu elements still hold the poison written before the run (never written)\n", name, p1[o], n1[o]);
        bool bad = false;
        for (size_t i = 0; i < n1[o] && !bad; i++) {
            const float a = v1[o][i], b = v2[o][i];
            if (isnan(a) || isnan(b)) {
                printf("  %s: NaN at element %zu (%s = %g, CPU = %g)\n", name, i, ggml_backend_dev_name(dev), a, b);
                bad = true;
            } else if (kedge_inf_or_max(a) || kedge_inf_or_max(b)) {
                if (!(kedge_inf_or_max(a) && kedge_inf_or_max(b)) || signbit(a) != signbit(b)) {
                    printf("  %s: infinity mismatch at element %zu (%s = %g, CPU = %g)\n", name, i, ggml_backend_dev_name(dev), a, b);
                    bad = true;
                }
            }
        }
        const double err = kedge_nmse(v1[o], v2[o], n1[o]);
        if (isnan(err)) {
            /* 0/0 (every value 0) or inf - inf (the same infinities on both): test-backend-ops
             * compares NaN > max, which does not fail. */
            printf("  %s: NMSE undefined (every value 0, or infinities in the same places) (max %.9g)\n", name, s->max_nmse);
        } else {
            printf("  %s: NMSE = %.9g (max %.9g)\n", name, err, s->max_nmse);
        }
        /* Where the outputs differ most: a few values far off in billions (a row never
         * written) hardly move the NMSE, and this names them. */
        size_t worst = 0;
        double largest = 0.0;
        for (size_t i = 0; i < n1[o]; i++) {
            const double d = fabs((double) v1[o][i] - (double) v2[o][i]);
            if (d > largest) { largest = d; worst = i; }
        }
        if (largest > 0.0) {
            printf("  %s: largest difference %.9g at element %zu (%s = %.9g, CPU = %.9g)\n", name, largest, worst, ggml_backend_dev_name(dev), v1[o][worst], v2[o][worst]);
        } else {
            printf("  %s: largest difference 0\n", name);
        }
        if (bad || err > s->max_nmse) fail = true;
        free(v1[o]);
        free(v2[o]);
    }
    printf("%s\n", fail ? "FAIL" : "PASS");
    ggml_backend_free(be);
    ggml_backend_free(ref);
    return fail ? 1 : 0;
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use kedge_ggml::Ggml;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// A CPU-only build of the pinned ggml with its headers (`scripts/build-ggml.sh`), from
    /// `KEDGE_GGML_DIR`.
    fn build_dir() -> PathBuf {
        match std::env::var_os("KEDGE_GGML_DIR") {
            Some(d) if !d.is_empty() => d.into(),
            _ => panic!("this test needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"),
        }
    }

    fn case(op: &str, imp: &str, d: DType, ne: Ne, params: &[(&str, serde_json::Value)]) -> Case {
        let mut c = Case::new(op, imp, d, ne);
        for (k, v) in params {
            c.params.insert(k.to_string(), v.clone());
        }
        c
    }

    /// Write the program (and its files) into `dir`, build it with the command it prints.
    fn build(dir: &Path, p: &CProgram) {
        std::fs::write(dir.join(FILE), &p.source).unwrap();
        for (name, bytes) in &p.files {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        // The command it prints, with every warning an error here.
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!("{} -Wall -Wextra -Werror", p.build))
            .current_dir(dir)
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "{}\n{}",
            p.build,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `./repro ARGS` in `dir`, the inputs it wrote dumped: (status, stdout, the dump).
    fn run(dir: &Path, args: &[&str]) -> (i32, String, Vec<u8>) {
        let dump = dir.join("dump.bin");
        let _ = std::fs::remove_file(&dump);
        let out = Command::new(dir.join("repro"))
            .args(args)
            .current_dir(dir)
            .env("KEDGE_REPRO_DUMP_INPUTS", &dump)
            .output()
            .expect("the program runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.code().unwrap_or(-1),
            text,
            std::fs::read(&dump).unwrap_or_default(),
        )
    }

    /// kedge's inputs of a case, in the order the program writes them (its graph's uploads).
    fn kedge_inputs(ggml: Ggml, op: &dyn Op, c: &Case) -> Vec<u8> {
        let specs = op.tensors(c).unwrap();
        let inputs = op.inputs(c, &specs).unwrap();
        let input_specs: Vec<usize> = specs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.role == Role::Input)
            .map(|(i, _)| i)
            .collect();
        let built = build_with(ggml, c, &specs, graph_of(&c.op).unwrap(), false).unwrap();
        built
            .uploads
            .iter()
            .flat_map(|(_, i)| {
                let j = input_specs.iter().position(|x| x == i).unwrap();
                inputs[j].bytes.clone()
            })
            .collect()
    }

    fn need_cc() {
        let ok = Command::new("cc")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "this test needs a C compiler (cc)");
    }

    /// The one-sided program of `c`, built with every warning an error and run on the CPU
    /// backend: it passes and writes exactly kedge's input bytes. The files it has beside it
    /// and its output, or what went wrong.
    fn program_passes(ggml: Ggml, reg: &Registry, c: &Case) -> Result<(usize, String), String> {
        let op = reg.op(&c.op).map_err(|e| format!("{}: {e}", c.label()))?;
        let p = program(
            ggml,
            reg,
            "CPU",
            &[Side {
                name: "case",
                about: "the case as kedge ran it",
                case: c,
            }],
        )
        .map_err(|e| format!("{}: {e}", c.label()))?;
        let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
        build(tmp.path(), &p);
        let (rc, out, dump) = run(tmp.path(), &["CPU"]);
        if rc != 0 || !out.contains("\nPASS\n") {
            return Err(format!("{}: exit {rc}:\n{out}", c.label()));
        }
        let want = kedge_inputs(ggml, op, c);
        if dump != want {
            return Err(format!(
                "{}: the program's inputs are not kedge's ({} bytes against {})",
                c.label(),
                dump.len(),
                want.len()
            ));
        }
        Ok((p.files.len(), out))
    }

    /// kedge's own ops and table ops, dense and padded or strided, with kedge's stream, with
    /// inputs an op makes itself (embedded, and in a file beside the program): each program
    /// builds against the build's headers with the command it prints, writes exactly kedge's
    /// input bytes, and on the CPU backend against the CPU reference reports PASS with NMSE 0.
    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn programs_build_kedges_graph_with_its_inputs_and_pass_on_the_cpu() {
        let gdir = build_dir();
        need_cc();
        let ggml = Ggml::load(&gdir).expect("the build loads");
        let mut reg = crate::registry();
        crate::on_ggml::register(&mut reg, &gdir, &["CPU".to_string()]).expect("registers");
        use serde_json::json;
        let cases = [
            // The padded-rows cumsum the constructor cannot express.
            case(
                "cumsum",
                "ggml:CPU",
                DType::F32,
                [8194, 2, 1, 1],
                &[("row_pad", json!(7))],
            ),
            case(
                "rms_norm",
                "ggml:CPU",
                DType::F32,
                [100, 4, 2, 2],
                &[("row_pad", json!(3))],
            ),
            case(
                "softmax",
                "ggml:CPU",
                DType::F32,
                [64, 4, 3, 1],
                &[("mask", json!(true)), ("scale", json!(0.125))],
            ),
            case("add_id", "ggml:CPU", DType::F32, [64, 5, 3, 1], &[]),
            case("gelu", "ggml:CUDA0", DType::F32, [64, 5, 4, 3], &[]),
            case("gelu", "ggml:CUDA0", DType::F16, [67, 5, 4, 3], &[]),
            // Drawn in the op's own range ([-150, 150), [0.9, 1.1)) in C, past what would be
            // embedded: generated, not a file beside the program.
            case("gelu", "ggml:CUDA0", DType::F16, [300_000, 2, 1, 1], &[]),
            case("log", "ggml:CUDA0", DType::F32, [300_000, 2, 1, 1], &[]),
            case(
                "argmax",
                "ggml:CUDA0",
                DType::F32,
                [300, 3, 1, 1],
                &[("row_pad", json!(5))],
            ),
            case(
                "cpy",
                "ggml:CUDA0",
                DType::F32,
                [40, 3, 2, 1],
                &[("dst", json!("f32")), ("dst_row_pad", json!(3))],
            ),
            case(
                "top_k",
                "ggml:CUDA0",
                DType::F32,
                [1000, 3, 1, 1],
                &[("k", json!(40))],
            ),
            case(
                "mul_mat_id",
                "ggml:CUDA0",
                DType::F32,
                [64, 16, 3, 1],
                &[("n_mats", json!(4)), ("n_used", json!(0))],
            ),
            // Inputs the op makes itself, more than can be embedded: a file beside the program.
            case("argsort", "ggml:CUDA0", DType::F32, [70000, 4, 1, 1], &[]),
            // Integer tensors filled in C at their own width.
            case("concat", "ggml:CUDA0", DType::I8, [5, 4, 3, 2], &[]),
            case("concat", "ggml:CUDA0", DType::I16, [5, 4, 3, 2], &[]),
            case("concat", "ggml:CUDA0", DType::I64, [5, 4, 3, 2], &[]),
            case(
                "set_rows",
                "ggml:CUDA0",
                DType::F16,
                [64, 11, 2, 1],
                &[("r", json!(7)), ("type_idx", json!("i64"))],
            ),
            // A trained parameter (ggml_set_param), a hinted product, an op with no input.
            case(
                "opt_step_adamw",
                "ggml:CUDA0",
                DType::F32,
                [10, 5, 4, 3],
                &[],
            ),
            case(
                "mul_mat_hadamard",
                "ggml:CUDA0",
                DType::F32,
                [64, 64, 3, 1],
                &[],
            ),
            case("arange", "ggml:CUDA0", DType::F32, [37, 1, 1, 1], &[]),
        ];
        let mut files = 0;
        for c in &cases {
            match program_passes(ggml, &reg, c) {
                Ok((n, out)) => {
                    files += n;
                    assert!(out.contains(": NMSE = 0 (max"), "{}:\n{out}", c.label());
                    assert!(
                        out.contains(": largest difference 0\n"),
                        "{}:\n{out}",
                        c.label()
                    );
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(files, 1, "only argsort's inputs go beside the program");
    }

    /// Every entry of ggml's table: the program of its first smoke case, in its first dtype,
    /// builds warning-free, writes exactly kedge's input bytes and passes on the CPU backend
    /// against the CPU reference, so a failure found in any op comes with a program that runs.
    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn every_table_entry_has_a_program_that_runs_on_the_cpu() {
        let gdir = build_dir();
        need_cc();
        let ggml = Ggml::load(&gdir).expect("the build loads");
        let mut reg = crate::registry();
        crate::on_ggml::register(&mut reg, &gdir, &["CPU".to_string()]).expect("registers");
        let h200 = kedge_core::LimitsProfile::builtin("h200").expect("a profile");
        let mut failures = Vec::new();
        for e in crate::on_ggml::table::TABLE {
            let Some((c, _)) = crate::on_ggml::table::cases(e, &h200)
                .into_iter()
                .find(|(c, origin)| origin.starts_with("smoke 0 ") && c.dtype == e.dtypes[0])
            else {
                failures.push(format!("{}: no first smoke case", e.name));
                continue;
            };
            let c = Case {
                imp: "ggml:CUDA0".to_string(),
                ..c
            };
            if let Err(e) = program_passes(ggml, &reg, &c) {
                failures.push(e);
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// The padded cumsum keeps its layout in the program (a view with the padded row stride) and
    /// is said not to be what test-backend-ops' line builds; both sides of a transition are one
    /// program, each run by name.
    #[test]
    #[cfg_attr(
        not(kedge_have_ggml),
        ignore = "needs a ggml build: set KEDGE_GGML_DIR (scripts/build-ggml.sh)"
    )]
    fn a_padded_case_keeps_its_strides_and_both_sides_run_from_one_program() {
        let gdir = build_dir();
        need_cc();
        let ggml = Ggml::load(&gdir).expect("the build loads");
        let mut reg = crate::registry();
        crate::on_ggml::register(&mut reg, &gdir, &["CPU".to_string()]).expect("registers");
        let pad = |n: i64| {
            case(
                "cumsum",
                "ggml:CPU",
                DType::F32,
                [n, 2, 1, 1],
                &[("row_pad", serde_json::json!(7))],
            )
        };
        let (fail, pass) = (pad(8194), pad(8193));
        let op = reg.op("cumsum").unwrap();
        let why = upstream_layout(op, &fail).unwrap_err();
        assert!(
            why.contains("input `x` is a view") && why.contains("nb=[4,32804,65608,65608]"),
            "{why}"
        );
        assert!(upstream_layout(op, &pad(8194).with_param("row_pad", 0)).is_ok());
        let p = program(
            ggml,
            &reg,
            "CPU",
            &[
                Side {
                    name: "fail",
                    about: "fails",
                    case: &fail,
                },
                Side {
                    name: "pass",
                    about: "passes",
                    case: &pass,
                },
            ],
        )
        .unwrap();
        assert!(
            p.source.contains("t[1] = ggml_view_4d(ctx, t[0], 8194LL, 2LL, 1LL, 1LL, (size_t) 32804ull, (size_t) 65608ull, (size_t) 65608ull, (size_t) 0ull);"),
            "{}",
            p.source
        );
        assert!(p.source.contains("ggml_cumsum(ctx, t[1])"));
        assert_eq!(p.sides, vec!["fail", "pass"]);
        let tmp = tempfile::tempdir().unwrap();
        build(tmp.path(), &p);
        for side in ["fail", "pass"] {
            let (rc, out, dump) = run(tmp.path(), &["CPU", side]);
            assert_eq!(rc, 0, "{side}:\n{out}");
            assert!(out.contains(&format!("side {side}: ")), "{out}");
            let c = if side == "fail" { &fail } else { &pass };
            assert_eq!(dump, kedge_inputs(ggml, op, c), "{side}");
        }
        let (rc, out, _) = run(tmp.path(), &["CPU", "neither"]);
        assert_eq!(rc, 2, "{out}");
        assert!(
            out.contains("no side 'neither' (sides: fail pass)"),
            "{out}"
        );
        let (rc, out, _) = run(tmp.path(), &["NOSUCH0"]);
        assert_eq!(rc, 2, "{out}");
        assert!(
            out.contains("no device NOSUCH0") && out.contains("CPU"),
            "{out}"
        );
    }
}
