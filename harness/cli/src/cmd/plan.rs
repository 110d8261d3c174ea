use crate::args::{selection, AllocArg, CaseArgs, ExtArgs, FilterArgs, ProfileArg};
use kedge_runner::console::Out;
use kedge_runner::events::Events;
use kedge_runner::select::Suite;
use kedge_runner::workflow::plan::plan_case;
use kedge_runner::{note, Error, Status};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    cases: CaseArgs,
    #[command(flatten)]
    alloc: AllocArg,
    /// Suite when no explicit case is given.
    #[arg(long, default_value = "default")]
    suite: Suite,
    #[command(flatten)]
    profile: ProfileArg,
    /// Only print cases whose plan breaks the profile.
    #[arg(long)]
    violations_only: bool,
    /// One JSON line per case (its CPU-side result): a plan file `kedge gate --expect` reads.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    ext: ExtArgs,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let prof = a.profile.get()?;
    let (reg, _) = a.ext.spec(&a.filter.ops.names())?.registry()?;
    let sel = a.ext.narrow(selection(&a.filter, Some(&a.cases), &a.alloc));
    let cases = sel.cases(&reg, a.suite, &prof, None, &Events::default())?;
    let mut out = Out::stdout();
    let mut broken = 0usize;
    for c in &cases {
        let p = plan_case(&reg, c, &prof);
        broken += usize::from(p.broken());
        if a.violations_only && !p.broken() {
            continue;
        }
        if a.json {
            out.line(p.result.to_line());
        } else {
            out.text(&p.render(&prof.name));
        }
    }
    note!(
        "{} cases planned against {}: {broken} break its limits",
        cases.len(),
        prof.name
    );
    Ok(Status::failed_if(broken > 0))
}
