//! `kedge`: the command line (the library's `main`).

fn main() -> std::process::ExitCode {
    kedge::main()
}
