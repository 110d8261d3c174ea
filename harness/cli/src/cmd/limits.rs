use crate::args::ProfileArg;
use kedge_runner::console::Out;
use kedge_runner::errors::NoGpu;
use kedge_runner::{Error, Status};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// A built-in profile instead of the live device: h200, h100, gb10, rtx3090, ada-12gb,
    /// m4-max.
    #[arg(long)]
    profile: Option<String>,
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: Args) -> Result<Status, Error> {
    let (prof, driver) = match a.profile {
        Some(name) => (ProfileArg { profile: name }.get()?, None),
        None => {
            let dev = kedge_core::cuda::Device::open(0).map_err(|e| NoGpu {
                command: "limits",
                why: e.to_string(),
                hint: Some("--profile NAME prints a built-in profile"),
            })?;
            let driver =
                kedge_core::cuda::driver_text(dev.kernel_driver.as_deref(), dev.driver_version);
            (dev.limits.clone(), Some(driver))
        }
    };
    let mut out = Out::stdout();
    if a.json {
        out.line(serde_json::to_string_pretty(&prof).unwrap_or_default());
    } else {
        if let Some(d) = driver {
            out.line(format!("driver: {d}"));
        }
        out.text(&prof.render());
    }
    Ok(Status::Ok)
}
