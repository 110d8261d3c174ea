use crate::args::{ExtArgs, ProfileArg};
use kedge_core::{Case, CaseResult, LimitsProfile, Registry};
use kedge_runner::console::Out;
use kedge_runner::results::OutDir;
use kedge_runner::workflow::case_input;
use kedge_runner::workflow::minimize::Transition;
use kedge_runner::workflow::repro::{
    self, CuRepro, GgmlRepro, ReproInput, SourceMode, INPUTS_FILE,
};
use kedge_runner::{note, Error, Status};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A case (JSON line), a verdict line (its verdict is named in the comment), or a file
    /// whose first case line is either.
    input: String,
    #[command(flatten)]
    profile: ProfileArg,
    /// Write repro.txt, and repro.cu or (a ggml build's case) repro.c, here (they are also
    /// printed).
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    ext: ExtArgs,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let (reg, _) = a.ext.spec(&[])?.registry()?;
    let prof = a.profile.get()?;
    let (case, result) = case_input(&a.input, &reg)?;
    let out = match &a.out {
        Some(dir) => Some(
            OutDir::open(dir)?
                .reading(Some(std::path::Path::new(&a.input)))
                .writes(&["repro.txt", "repro.cu", INPUTS_FILE])?,
        ),
        None => None,
    };
    show(&reg, &case, &prof, result.as_ref(), None, out.as_ref())?;
    Ok(Status::Ok)
}

/// Print a case's repro, and write repro.txt (and repro.cu) into `out`.
pub(crate) fn show(
    reg: &Registry,
    case: &Case,
    prof: &LimitsProfile,
    result: Option<&CaseResult>,
    transition: Option<&Transition>,
    out: Option<&OutDir>,
) -> Result<(), Error> {
    let r = repro::build(&ReproInput {
        reg,
        case,
        profile: prof,
        result,
        transition,
        sources: SourceMode::Embed,
    })?;
    let text = repro::render(&r);
    Out::stdout().text(&text);
    if let Some(dir) = out {
        note!("wrote {}", dir.write("repro.txt", &text)?.display());
        if let CuRepro::Available {
            source,
            inputs_file,
            ..
        } = &r.cu
        {
            note!("wrote {}", dir.write("repro.cu", source)?.display());
            if let Some(bytes) = inputs_file {
                note!("wrote {}", dir.write_bytes(INPUTS_FILE, bytes)?.display());
            }
        }
        if let Some(GgmlRepro::Available { program, .. }) = &r.ggml {
            note!(
                "wrote {}",
                dir.write(kedge_ops::on_ggml::c_repro::FILE, &program.source)?
                    .display()
            );
            for (name, bytes) in &program.files {
                note!("wrote {}", dir.write_bytes(name, bytes)?.display());
            }
        }
    }
    Ok(())
}
