//! `kedge worker` (hidden): started by a supervisor, never by a person. Its first stdin line
//! is its typed `WorkerSpec` (GPU, plugins, source kernels); case lines follow.

/// The worker's exit status.
pub(crate) fn run() -> i32 {
    kedge_runner::run::worker::main()
}
