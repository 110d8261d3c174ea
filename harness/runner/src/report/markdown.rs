//! `report.md`: the failures first, each with what a person needs to act on it (the first bad
//! element, the tensor a sanitizer address falls in, the op's test-backend-ops line and
//! command, the re-run); then known failures that now pass, leak records, transitions, the
//! counts per op, what each allocation mode can hide, and every result in a collapsed
//! section.

use super::{
    finding_line, md_cell, md_line, order, summarize_with, Counts, FailureSummary, ReportOptions,
    Standing, Summary,
};
use crate::results::ResultSet;
use kedge_core::{AllocMode, CaseResult, Verdict};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// What each allocation mode can and cannot see.
fn alloc_mode_note(mode: AllocMode) -> &'static str {
    match mode {
        AllocMode::Exact => {
            "each tensor and staging buffer is its own allocation of exactly its bytes, so \
             memcheck's bounds are the tensor's bounds and a read one byte past a tensor is \
             reported (test-backend-ops puts all of a case's tensors in one buffer, so memcheck \
             cannot see a read into the neighbour). Natively an overrun is usually silent: it \
             lands in allocator rounding or another allocation."
        }
        AllocMode::Guard => {
            "the tensor's last byte is the last mapped byte before an unmapped page: any read or \
             write past the end faults natively. It cannot see an access before the start (that \
             lands in the mapped granule), and memcheck's --padding does not cover these driver \
             virtual-memory mappings, so under memcheck guard mode and padding complement each \
             other."
        }
        AllocMode::GuardFront => {
            "the tensor's first byte follows an unmapped page: an access before the start faults \
             natively; an access past the end lands in the mapped granule and is not seen."
        }
        AllocMode::Canary => {
            "red zones around each tensor are filled with a pattern and checked after the run: \
             stray writes into them are caught without a sanitizer, but reads past the end are \
             invisible, and so is a write that jumps over the red zone."
        }
    }
}

/// The Markdown report, without a baseline or registry.
pub fn render_markdown(results: &[CaseResult]) -> String {
    render_markdown_with(results, &ReportOptions::default())
}

/// The Markdown report.
fn render_markdown_with(results: &[CaseResult], opts: &ReportOptions<'_>) -> String {
    let s = summarize_with(results, opts);
    body(results, &s)
}

pub(super) fn render(results: &[CaseResult], s: &Summary, set: &ResultSet) -> String {
    let mut md = body(results, s);
    if !set.torn.is_empty() || set.replaced > 0 {
        let _ = writeln!(md, "\n## Merge notes\n");
        if set.replaced > 0 {
            let _ = writeln!(
                md,
                "- {} result line(s) replaced by a later line of the same case and run.",
                set.replaced
            );
        }
        for t in &set.torn {
            let _ = writeln!(md, "- {}", md_line(&t.to_string()));
        }
    }
    md
}

/// One failure: a header line and the facts under it.
pub(super) fn failure_block(md: &mut String, f: &FailureSummary) {
    let standing = match f.standing {
        Some(Standing::Known) => " · known failure",
        Some(Standing::New) => " · **new failure**",
        None => "",
    };
    let _ = writeln!(
        md,
        "**{}** `{}`: {} ({}), under {}, allocation {}{standing}",
        f.label, f.id, f.verdict, f.detector, f.under, f.alloc
    );
    let _ = writeln!(md, "- {}", md_line(&f.detail));
    if let Some(b) = &f.first_bad {
        let _ = writeln!(md, "- {}", md_line(b));
    }
    for x in &f.findings {
        let _ = writeln!(md, "- finding: {}", md_line(&finding_line(x)));
    }
    if !f.also.is_empty() {
        let also: Vec<&str> = f.also.iter().map(|d| d.name()).collect();
        let _ = writeln!(md, "- also seen by: {}", also.join(", "));
    }
    if let Some(r) = &f.reach {
        let _ = writeln!(md, "- reach: {}", md_line(r));
    }
    if let Some(n) = &f.alloc_note {
        let _ = writeln!(md, "- allocation note: {}", md_line(n));
    }
    if let Some(u) = &f.upstream {
        let _ = writeln!(md, "- test-backend-ops: `{}`", u.line);
        let _ = writeln!(md, "- test-backend-ops command: `{}`", u.command);
    }
    let _ = writeln!(md, "- re-run: `{}`\n", f.rerun);
}

fn body(results: &[CaseResult], s: &Summary) -> String {
    let mut md = String::new();
    heading(&mut md, s);
    // Failures first: what a person came for.
    failures(&mut md, s);
    if s.judged() {
        fixed_known(&mut md, s);
    }
    if !s.leaks.is_empty() {
        leak_records(&mut md, s);
    }
    transitions(&mut md, s);
    by_op(&mut md, s);
    by_op_and_dtype(&mut md, results);
    alloc_notes(&mut md, results, s);
    // Every result, collapsed: the pass tables are for looking things up.
    every_result(&mut md, results, s);
    md
}

/// The title, the counts, the runs and allocation modes, where the results come from, and
/// the cases not run.
fn heading(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "# kedge report\n");
    let _ = writeln!(md, "{}", s.counts_sentence());
    let runs: Vec<String> = s.by_under.iter().map(|(u, n)| format!("{u} {n}")).collect();
    let allocs: Vec<String> = s.by_alloc.iter().map(|(a, n)| format!("{a} {n}")).collect();
    let _ = writeln!(
        md,
        "Runs: {}. Allocation modes: {}.",
        runs.join(", "),
        allocs.join(", ")
    );
    for d in &s.devices {
        let _ = writeln!(md, "Ran on: {}.", md_line(d));
    }
    for p in &s.provenance {
        let _ = writeln!(md, "{}.", md_line(p));
    }
    let _ = writeln!(md);
    if let Some(n) = &s.not_run {
        let _ = writeln!(md, "{}\n", md_line(&n.sentence()));
        let _ = writeln!(
            md,
            "<details><summary>The {} cases not run</summary>\n",
            n.cases.len()
        );
        for c in &n.cases {
            let _ = writeln!(md, "- {}", md_line(c));
        }
        let _ = writeln!(md, "\n</details>\n");
    }
}

/// The failures, op by op, each op with its counts.
fn failures(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "## Failures\n");
    if s.counts.fail == 0 {
        let _ = writeln!(md, "None.\n");
    }
    for op in s.ops.iter().filter(|o| !o.failures.is_empty()) {
        let _ = writeln!(
            md,
            "### {}\n\n{} of {} results fail: {}.\n",
            op.op,
            op.counts.fail,
            op.counts.results,
            op.counts.by_verdict_text()
        );
        for f in &op.failures {
            failure_block(md, f);
        }
    }
}

/// The baseline's failures that pass now: each is a line to take out of the baseline.
fn fixed_known(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "## Known failures that now pass\n");
    if s.fixed_known.is_empty() {
        let _ = writeln!(md, "None.\n");
    }
    for f in &s.fixed_known {
        let _ = writeln!(
            md,
            "- `{}` {} (known as {}): remove it from the baseline",
            f.id,
            md_line(&f.label),
            f.was
        );
    }
    if !s.fixed_known.is_empty() {
        let _ = writeln!(md);
    }
}

/// The results with leak records, apart from their verdicts.
fn leak_records(md: &mut String, s: &Summary) {
    let _ = writeln!(
        md,
        "## Leak records\n\nMemory the process never freed (compute-sanitizer's leak check); the verdict stands, the leak is reported apart.\n"
    );
    for l in &s.leaks {
        let _ = writeln!(
            md,
            "**{}** `{}`: {}, under {}",
            l.label, l.id, l.verdict, l.under
        );
        for x in &l.findings {
            let _ = writeln!(md, "- {}", md_line(&finding_line(x)));
        }
        let _ = writeln!(md);
    }
}

/// The transitions found, op by op.
fn transitions(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "## Transitions\n");
    let any = s.ops.iter().any(|o| !o.transitions.is_empty());
    if !any {
        let _ = writeln!(md, "None among the values tested.\n");
    }
    for op in s.ops.iter().filter(|o| !o.transitions.is_empty()) {
        let _ = writeln!(md, "### {}\n", op.op);
        for t in &op.transitions {
            let _ = writeln!(
                md,
                "- `{}` {} {}, {}, {}: `{}` {}",
                t.imp,
                t.dtype,
                t.fixed,
                t.alloc,
                t.under,
                t.axis,
                t.sentence()
            );
        }
        let _ = writeln!(md);
    }
}

/// The counts of each op, one table row per op.
fn by_op(md: &mut String, s: &Summary) {
    let _ = writeln!(md, "## By op\n");
    let _ = writeln!(
        md,
        "| op | results | pass | fail | unsupported | skipped | failures by verdict | transitions |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---|---:|");
    for op in &s.ops {
        let k = &op.counts;
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            op.op,
            k.results,
            k.pass,
            k.fail,
            k.unsupported,
            k.skipped,
            k.by_verdict_text(),
            op.transitions.len()
        );
    }
}

/// The counts of each (op, dtype) pair, one table row each, with the failures by verdict and
/// the detector that saw them: how the whole space of types came out.
fn by_op_and_dtype(md: &mut String, results: &[CaseResult]) {
    /// A pair's counts, and its failures by `verdict (detector)`.
    type Row = (Counts, BTreeMap<String, usize>);
    let mut rows: BTreeMap<(&str, String), Row> = BTreeMap::new();
    for r in results {
        let (counts, failures) = rows
            .entry((r.case.op.as_str(), r.case.dtype.to_string()))
            .or_default();
        counts.add(r);
        if !matches!(
            r.verdict,
            Verdict::Pass | Verdict::Unsupported | Verdict::Skipped
        ) {
            *failures
                .entry(format!("{} ({})", r.verdict, r.detector))
                .or_default() += 1;
        }
    }
    let _ = writeln!(md, "\n## By op and dtype\n");
    let _ = writeln!(
        md,
        "| op | dtype | results | pass | fail | unsupported | skipped | failures by verdict (detector) |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---|");
    for ((op, dtype), (k, failures)) in &rows {
        let failures = if failures.is_empty() {
            "none".to_string()
        } else {
            failures
                .iter()
                .map(|(v, n)| format!("{v} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            md,
            "| {op} | {dtype} | {} | {} | {} | {} | {} | {failures} |",
            k.results, k.pass, k.fail, k.unsupported, k.skipped
        );
    }
}

/// What each allocation mode that ran can hide, then the cases' own allocation notes.
fn alloc_notes(md: &mut String, results: &[CaseResult], s: &Summary) {
    let _ = writeln!(md, "\n## What each allocation mode can hide\n");
    for mode in s.by_alloc.keys() {
        let _ = writeln!(md, "- **{mode}**: {}", alloc_mode_note(*mode));
    }
    let notes: BTreeSet<&str> = results
        .iter()
        .filter_map(|r| r.alloc_note.as_deref())
        .collect();
    for n in notes {
        let _ = writeln!(md, "- case note: {}", md_line(n));
    }
}

/// Every result in a collapsed section, a table per op.
fn every_result(md: &mut String, results: &[CaseResult], s: &Summary) {
    let sorted = order(results);
    let _ = writeln!(
        md,
        "\n## Every result\n\n<details>\n<summary>{} results, op by op</summary>\n",
        s.counts.results
    );
    for op in &s.ops {
        let _ = writeln!(md, "### {}\n", op.op);
        let _ = writeln!(
            md,
            "| id | case | allocation | under | verdict | detector | ms |"
        );
        let _ = writeln!(md, "|---|---|---|---|---|---|---:|");
        for r in sorted.iter().filter(|r| r.case.op == op.op) {
            let verdict = if super::has_leaks(r) {
                format!("{} (leak)", r.verdict)
            } else {
                r.verdict.to_string()
            };
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {} | {} | {:.3} |",
                r.id,
                md_cell(&r.case.label()),
                r.case.alloc,
                r.under,
                verdict,
                r.detector,
                r.ms
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "</details>");
}
