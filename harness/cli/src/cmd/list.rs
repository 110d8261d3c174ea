use crate::args::{ExtArgs, OpsArg, ProfileArg};
use kedge_runner::console::Out;
use kedge_runner::select::{suite, Filters, Selection};
use kedge_runner::{Error, Status};

#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    ops: OpsArg,
    #[command(flatten)]
    profile: ProfileArg,
    #[command(flatten)]
    ext: ExtArgs,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let prof = a.profile.get()?;
    let (reg, _) = a.ext.spec(&a.ops.names())?.registry()?;
    let f = Filters::resolve(
        &reg,
        &Selection {
            ops: a.ops.list(),
            ..Selection::default()
        },
    )?;
    let mut out = Out::stdout();
    for o in &f.ops {
        out.line(format!("{} — {}", o.name(), o.about()));
        if let Some(u) = o.upstream_name() {
            out.line(format!("  upstream: {u}"));
        }
        let dtypes: Vec<&str> = o.dtypes().iter().map(|d| d.name()).collect();
        out.line(format!("  dtypes: {}", dtypes.join(", ")));
        for p in o.params() {
            out.line(format!(
                "  param {} (default {}): {}",
                p.name,
                p.default_value(),
                p.about
            ));
        }
        for i in reg.impls_of(*o) {
            out.line(format!(
                "  impl {:<24} [{}] {}",
                i.name(),
                i.role().name(),
                i.about()
            ));
        }
        for b in suite::boundaries(*o, &prof, o.dtypes()[0]) {
            out.line(format!(
                "  boundary {} at {} (probes {:?}) — reach: {}",
                b.label,
                b.at,
                b.probe_values(),
                b.reach.0
            ));
        }
    }
    Ok(Status::Ok)
}
