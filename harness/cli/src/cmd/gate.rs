use crate::args::ProfileArg;
use kedge_core::LimitsProfile;
use kedge_runner::console::Out;
use kedge_runner::errors::InputError;
use kedge_runner::events::Events;
use kedge_runner::gate::{
    comment_header, gate, Baseline, BaselineChanges, GateError, KNOWN_FAILURES_HEADER_GENERIC,
};
use kedge_runner::provenance::{check_baseline, ResultsRun};
use kedge_runner::results::{FileKind, OutDir, ResultSet};
use kedge_runner::select::{Corpus, Selection, Suite};
use kedge_runner::{note, Error, Status};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Known failures: a run line (the profile, mode and suite they are of), then JSON lines
    /// {"id":..,"verdict":..,"detector":..,"reason":..,"case":{..}}.
    #[arg(long, required_unless_present_any = ["write_baseline", "update"])]
    baseline: Option<PathBuf>,
    /// results.jsonl files (shards are merged).
    #[arg(required = true)]
    results: Vec<PathBuf>,
    /// Write the results' failures as a new baseline to this file instead of gating. Given
    /// several runs of one suite, a case that fails in one and passes in another is written
    /// as an intermittent failure: its pass does not fail the gate.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["baseline", "update"])]
    write_baseline: Option<PathBuf>,
    /// Rewrite this baseline from the results (their failures and their run) instead of
    /// gating, and print what changed.
    #[arg(long, value_name = "BASELINE", conflicts_with = "baseline")]
    update: Option<PathBuf>,
    /// The cases that must have a result: a suite (generated for --profile) or a plan file
    /// (a sweep's plan.jsonl, or `kedge plan --json`). Cases without one fail the gate.
    #[arg(long, value_name = "SUITE|FILE")]
    expect: Option<String>,
    #[command(flatten)]
    profile: ProfileArg,
    /// text: the gate's lines; github: the same, then GitHub Actions annotations (an error
    /// for each new failure and each known failure that now passes, a notice with the
    /// summary).
    #[arg(long, value_enum, default_value_t = GateFormat::Text)]
    format: GateFormat,
}

/// How the gate's verdict is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum GateFormat {
    Text,
    Github,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let profile = a.profile.get()?;
    let set = ResultSet::load(&a.results)?;
    // One run: one profile, one mode, one suite (exit 2 naming both sides otherwise).
    let run = ResultsRun::load(&a.results)?;
    if let Some(w) = a.write_baseline.as_ref().or(a.update.as_ref()) {
        return write_baseline(&a, w, &set, &run);
    }
    let Some(path) = &a.baseline else {
        return Ok(Status::Ok);
    };
    let baseline = Baseline::load(path)?;
    let mut out = Out::stdout();
    for line in check_baseline(path, baseline.run.as_ref(), &run)? {
        out.text(&format!("{line}\n"));
    }
    let mut outcome = gate(&baseline, &set.results).with_torn(set.torn.clone());
    if let Some(e) = &a.expect {
        let expected = expected_cases(e, &profile)?;
        outcome = outcome.expecting(&expected, &set.results);
        not_run_note(&a.results, &outcome.missing);
    }
    out.text(&outcome.render());
    if a.format == GateFormat::Github {
        out.text(&outcome.render_github());
    }
    Ok(Status::failed_if(!outcome.passed()))
}

/// `--write-baseline FILE` and `--update BASELINE`: the results' failures (and their run)
/// become the baseline, written atomically into the file's directory under its lock; an
/// update prints what changed. Results the gate would reject make no baseline.
fn write_baseline(a: &Args, w: &Path, set: &ResultSet, run: &ResultsRun) -> Result<Status, Error> {
    for t in &set.torn {
        note!("{t}");
    }
    // What the gate rejects makes no baseline: it would not hold what the sweep found.
    let why = if !set.torn.is_empty() {
        Some(format!(
            "{} results file(s) cut off mid-write, which the gate rejects",
            set.torn.len()
        ))
    } else if set.results.is_empty() {
        Some("no results in them, which the gate rejects".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        return Err(InputError::NotForBaseline {
            paths: a.results.clone(),
            why,
        }
        .into());
    }
    let command = if a.update.is_some() {
        "gate --update"
    } else {
        "gate --write-baseline"
    };
    let (dir, name) = OutDir::for_file(w, command)?;
    let dir = dir.reading(a.results.iter().chain(&a.baseline).map(PathBuf::as_path));
    dir.check_target(&name, Some((FileKind::Baseline, command)))?;
    // An update keeps the file's own comment header, and its intermittent failures that
    // these results pass.
    let (old, header) = match (&a.update, w.exists()) {
        (Some(_), true) => {
            let text = std::fs::read_to_string(w).map_err(|source| GateError::Io {
                path: w.to_path_buf(),
                source,
            })?;
            (Some(Baseline::parse(w, &text)?), comment_header(&text))
        }
        _ => (None, None),
    };
    // Each file's results as they are: the merged set keeps one result of a case, the last
    // file's, and a case that failed in one run and passed in another is intermittent.
    let mut each = Vec::new();
    for p in &a.results {
        each.extend(ResultSet::load(std::slice::from_ref(p))?.results);
    }
    let b = match &old {
        Some(o) => Baseline::from_results(&each).keeping_intermittent(o, &each),
        None => Baseline::from_results(&each),
    };
    let header = header.unwrap_or_else(|| KNOWN_FAILURES_HEADER_GENERIC.to_string());
    let written = dir.write(&name, &b.to_jsonl_with(Some(&header)))?;
    if a.update.is_some() {
        let changes = BaselineChanges::between(&old.unwrap_or_default(), &b, &set.results);
        Out::stdout().text(&changes.render(w));
    }
    note!(
        "baseline of {} known failures (from {} results{}) written to {}",
        b.entries.len(),
        set.results.len(),
        run.describe()
            .map(|d| format!("; {d}"))
            .unwrap_or_else(|| "; they carry no run metadata, so neither does it".into()),
        written.display()
    );
    Ok(Status::Ok)
}

/// Say which of the missing cases a time-limited sweep left for lack of time: they are in its
/// `not-run.jsonl`, beside its results, and `--resume` runs them.
fn not_run_note(results: &[PathBuf], missing: &[kedge_core::Case]) {
    if missing.is_empty() {
        return;
    }
    let ids: std::collections::HashSet<String> = missing.iter().map(|c| c.id()).collect();
    for r in results {
        let dir = r.parent().unwrap_or(Path::new("."));
        let file = dir.join(kedge_runner::workflow::sweep::NOT_RUN_FILE);
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let Ok(lines) = kedge_core::model::case::parse_corpus(&text) else {
            continue;
        };
        let mut left: Vec<String> = lines
            .iter()
            .map(|(_, c)| c.id())
            .filter(|id| ids.contains(id))
            .collect();
        left.sort();
        left.dedup();
        if !left.is_empty() {
            note!(
                "{} of the missing cases are in {}: the sweep's --max-time ran out before they started (`kedge sweep --resume --out {}` with the sweep's other flags runs them)",
                left.len(),
                file.display(),
                dir.display()
            );
        }
    }
}

/// A suite's cases, or a plan file's.
fn expected_cases(e: &str, profile: &LimitsProfile) -> Result<Vec<kedge_core::Case>, Error> {
    let reg = kedge_ops::registry();
    if let Ok(suite) = e.parse::<Suite>() {
        return Ok(Selection::default().cases(&reg, suite, profile, None, &Events::default())?);
    }
    let corpus = Corpus::read(Path::new(e))?;
    let cases = corpus.cases()?;
    let mut out = Vec::with_capacity(cases.len());
    for (line, c) in cases {
        match reg.validate(&c) {
            Ok(v) => out.push(v),
            // An impl from outside kedge (a plugin, a ggml build) that this process has not
            // loaded: a plan file's lines are already canonical, so the line is the case.
            Err(kedge_core::CaseError::UnknownImpl { .. }) => out.push(c),
            Err(error) => {
                return Err(kedge_runner::select::SelectError::AtLine {
                    source_name: e.to_string(),
                    line,
                    error: Box::new(error),
                }
                .into())
            }
        }
    }
    Ok(out)
}
