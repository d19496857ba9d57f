//! `commhal-conformance`: the suite on its own (the `commhal conformance` subcommand
//! does the same). Shows what any binary running the suite in process mode must do:
//! dispatch to the child entry first.

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "commhal-conformance", about = "commhal conformance suite")]
struct Cli {
    #[command(flatten)]
    args: commhal_conformance::ConformanceArgs,
}

fn main() {
    if let Some(code) = commhal_conformance::child_main_if_requested() {
        std::process::exit(code);
    }
    let cli = Cli::parse();
    std::process::exit(commhal_conformance::cli_main(cli.args));
}
