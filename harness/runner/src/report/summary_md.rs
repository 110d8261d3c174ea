//! `summary.md`: short enough for a CI step summary. The counts, the new failures (all
//! failures without a baseline), known failures that now pass, the transitions found (both
//! sides ran), and per op a boundary matrix. Long lists are cut with a pointer to report.md.

use super::matrix::Cell;
use super::{md_line, probe_lines, ProbeLine, ReportOptions, Standing, Summary, Transition};
use kedge_core::CaseResult;
use std::collections::HashSet;
use std::fmt::Write as _;

/// The most items of one list `summary.md` shows; the rest are in report.md.
const LIST_LIMIT: usize = 50;

/// `summary.md` for results.
pub fn render_summary_md(results: &[CaseResult], opts: &ReportOptions<'_>) -> String {
    let s = super::summarize_with(results, opts);
    render(results, &s, opts)
}

fn first_line(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    if line.chars().count() > max {
        let cut: String = line.chars().take(max).collect();
        format!("{cut}…")
    } else {
        line.to_string()
    }
}

fn more(md: &mut String, shown: usize, total: usize) {
    if total > shown {
        let _ = writeln!(md, "- … and {} more: see report.md", total - shown);
    }
}

pub(super) fn render(results: &[CaseResult], s: &Summary, _opts: &ReportOptions<'_>) -> String {
    let mut md = String::new();
    let transitions: Vec<&Transition> = s.ops.iter().flat_map(|o| o.transitions.iter()).collect();
    heading(&mut md, s);
    counts_table(&mut md, s, transitions.len());
    new_failures(&mut md, s);
    if s.judged() {
        fixed_known(&mut md, s);
    }
    transition_list(&mut md, &transitions);
    boundary_matrices(&mut md, results, s);
    md
}

/// The title, the counts in a sentence, where the results come from, and the cases not run.
fn heading(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "# kedge summary\n");
    let _ = writeln!(md, "**{}**\n", s.counts_sentence());
    for d in &s.devices {
        let _ = writeln!(md, "Ran on: {}.  ", md_line(d));
    }
    for p in &s.provenance {
        let _ = writeln!(md, "{}.  ", md_line(p));
    }
    if !s.devices.is_empty() || !s.provenance.is_empty() {
        let _ = writeln!(md);
    }
    if let Some(n) = &s.not_run {
        let _ = writeln!(md, "{}\n", md_line(&n.sentence()));
        const SHOWN: usize = 10;
        for c in n.cases.iter().take(SHOWN) {
            let _ = writeln!(md, "- {}", md_line(c));
        }
        if n.cases.len() > SHOWN {
            let _ = writeln!(md, "- … and {} more: see {}", n.cases.len() - SHOWN, n.file);
        }
        let _ = writeln!(md);
    }
}

/// The counts as one table row; a baseline adds its columns (new, known, known now passing).
fn counts_table(md: &mut String, s: &Summary, transitions: usize) {
    let c = &s.counts;
    let judged = s.judged();
    let _ = writeln!(
        md,
        "| results | cases | pass | fail |{} unsupported | skipped | leak records | transitions |",
        if judged {
            " new | known | known now passing |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        md,
        "|---:|---:|---:|---:|{}---:|---:|---:|---:|",
        if judged { "---:|---:|---:|" } else { "" }
    );
    let _ = writeln!(
        md,
        "| {} | {} | {} | {} |{} {} | {} | {} | {} |\n",
        c.results,
        s.cases,
        c.pass,
        c.fail,
        if judged {
            format!(
                " {} | {} | {} |",
                s.new_failures.unwrap_or(0),
                s.known_failures.unwrap_or(0),
                s.fixed_known.len()
            )
        } else {
            String::new()
        },
        c.unsupported,
        c.skipped,
        c.with_leaks,
        transitions
    );
}

/// New failures (every failure without a baseline), at most `LIST_LIMIT` of them.
fn new_failures(md: &mut String, s: &Summary) {
    let listed: Vec<_> = s
        .failures()
        .filter(|f| f.standing != Some(Standing::Known))
        .collect();
    let title = if s.judged() {
        "New failures"
    } else {
        "Failures"
    };
    let _ = writeln!(md, "## {title} ({})\n", listed.len());
    if listed.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for f in listed.iter().take(LIST_LIMIT) {
        let _ = writeln!(
            md,
            "- `{}` {}: **{}** ({}), {}: {}",
            f.id,
            md_line(&f.label),
            f.verdict,
            f.detector,
            f.under,
            md_line(&first_line(&f.detail, 200))
        );
    }
    more(md, LIST_LIMIT.min(listed.len()), listed.len());
    let _ = writeln!(md);
}

/// The baseline's failures that pass now: each is a line to take out of the baseline.
fn fixed_known(md: &mut String, s: &Summary) {
    let _ = writeln!(
        md,
        "## Known failures that now pass ({})\n",
        s.fixed_known.len()
    );
    if s.fixed_known.is_empty() {
        let _ = writeln!(md, "None.");
    }
    for f in s.fixed_known.iter().take(LIST_LIMIT) {
        let _ = writeln!(
            md,
            "- `{}` {} (known as {}): remove it from the baseline",
            f.id,
            md_line(&f.label),
            f.was
        );
    }
    more(md, LIST_LIMIT.min(s.fixed_known.len()), s.fixed_known.len());
    let _ = writeln!(md);
}

/// The transitions found, op after op, at most `LIST_LIMIT` of them.
fn transition_list(md: &mut String, transitions: &[&Transition]) {
    let _ = writeln!(md, "## Transitions ({})\n", transitions.len());
    if transitions.is_empty() {
        let _ = writeln!(
            md,
            "None among the values tested (both sides must have run)."
        );
    }
    for t in transitions.iter().take(LIST_LIMIT) {
        let _ = writeln!(
            md,
            "- {}/{} {} `{}` on {}, {}, {}: {}",
            t.op,
            t.imp,
            t.dtype,
            t.axis,
            md_line(&t.fixed),
            t.alloc,
            t.under,
            t.sentence()
        );
    }
    more(md, LIST_LIMIT.min(transitions.len()), transitions.len());
    let _ = writeln!(md);
}

/// Boundary matrices, op by op; an op with a failing cell is shown open.
fn boundary_matrices(md: &mut String, results: &[CaseResult], s: &Summary) {
    let known: HashSet<&str> = s
        .failures()
        .filter(|f| f.standing == Some(Standing::Known))
        .map(|f| f.id.as_str())
        .collect();
    let lines = probe_lines(results);
    let _ = writeln!(md, "## Boundary matrix\n");
    if lines.is_empty() {
        let _ = writeln!(
            md,
            "No probe lines: no two results differ in one dimension or parameter only."
        );
    } else {
        let _ = writeln!(
            md,
            "Each table is one line of probes (the values of the dimension or parameter a boundary moves, everything else fixed); rows are impl · allocation · run. A cell is `pass` or the verdict{}; `—`: not run.\n",
            if s.judged() {
                ", in bold when it is a new failure"
            } else {
                ", in bold when it fails"
            }
        );
    }
    let mut ops: Vec<&str> = lines.iter().map(|l| l.op.as_str()).collect();
    ops.dedup();
    for op in ops {
        let of_op: Vec<_> = lines.iter().filter(|l| l.op == op).collect();
        op_matrices(md, op, &of_op, &known);
    }
}

/// One op's probe lines in a `<details>` block, open where there is something new to look at
/// (any failure, without a baseline).
fn op_matrices(md: &mut String, op: &str, of_op: &[&ProbeLine], known: &HashSet<&str>) {
    let failing = of_op.iter().filter(|l| l.has_failure()).count();
    let new_here = of_op.iter().any(|l| {
        l.rows
            .iter()
            .flat_map(|r| r.cells.iter().flatten())
            .any(|c| c.verdict.is_failure() && !known.contains(c.id.as_str()))
    });
    let _ = writeln!(
        md,
        "<details{}>\n<summary><b>{op}</b>: {} probe line(s), {failing} with failures</summary>\n",
        if new_here { " open" } else { "" },
        of_op.len()
    );
    for l in of_op {
        probe_table(md, l, known);
    }
    let _ = writeln!(md, "</details>\n");
}

/// One probe line as a table: the values across, a row per impl · allocation · run.
fn probe_table(md: &mut String, l: &ProbeLine, known: &HashSet<&str>) {
    let _ = writeln!(md, "`{}` on {} ({})\n", l.axis, md_line(&l.fixed), l.dtype);
    let head: Vec<String> = l.values.iter().map(|v| v.to_string()).collect();
    let _ = writeln!(md, "| impl · allocation · run | {} |", head.join(" | "));
    let _ = writeln!(md, "|---|{}", "---|".repeat(l.values.len()));
    for row in &l.rows {
        let cells: Vec<String> = row.cells.iter().map(|c| cell(c.as_ref(), known)).collect();
        let _ = writeln!(
            md,
            "| {} · {} · {} | {} |",
            row.imp,
            row.alloc,
            row.under,
            cells.join(" | ")
        );
    }
    let _ = writeln!(md);
}

/// A cell's text: `—` where the row has no result, else the verdict, in bold when it is a
/// failure the baseline does not know, marked when the result has leak records.
fn cell(c: Option<&Cell>, known: &HashSet<&str>) -> String {
    match c {
        None => "—".to_string(),
        Some(c) => {
            let mut t = c.verdict.to_string();
            if c.verdict.is_failure() && !known.contains(c.id.as_str()) {
                t = format!("**{t}**");
            }
            if c.leaks {
                t.push_str(" (leak)");
            }
            t
        }
    }
}
