// As in lib.rs: stdout and stderr go through `live::output` (a closed pipe ends quietly).
#![deny(clippy::print_stdout, clippy::print_stderr)]

use std::{
    io::{self, Write as _},
    process::ExitCode,
};

use tfo_trace::{
    cli::{Cli, Command},
    events::record::UsageError,
    live::{output, session::PrivilegeError},
    views,
};

/// The static (musl) builds allocate as tfo_trace::alloc says; the glibc build with glibc.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: tfo_trace::alloc::Allocator = tfo_trace::alloc::Allocator;

fn main() -> ExitCode {
    let cli = Cli::parse_checked(); // usage errors: clap's message, exit 2
    let level = match cli.verbose {
        0 => log::LevelFilter::Warn,
        1 => log::LevelFilter::Info,
        _ => log::LevelFilter::Debug,
    };
    tfo_trace::live::logging::init(level);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // A reader that went away (`| head -1`) ends any command quietly.
        Err(err) if output::is_output_closed(&err) => ExitCode::SUCCESS,
        Err(err) if err.is::<UsageError>() => {
            let _ = tfo_trace::note!("tfo-trace: error: {err}");
            ExitCode::from(2)
        }
        Err(err) => {
            // Written as a note is, so a closed stderr cannot make this a panic; the exit
            // code still says it failed.
            let _ = match err.downcast_ref::<PrivilegeError>() {
                Some(p) => tfo_trace::note!("tfo-trace: {p}"),
                None => tfo_trace::note!("tfo-trace: error: {err:#}"),
            };
            ExitCode::from(1)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Trace(a) => runtime()?.block_on(views::trace::run(a.options())),
        Command::Stalls(a) => runtime()?.block_on(views::stalls::run(a.options())),
        Command::Top(a) => runtime()?.block_on(views::top::run(a.options())),
        Command::Report(a) => views::report::run(a.options()),
        Command::Doctor(a) => views::doctor::run(a.json),
        Command::Export(a) => runtime()?.block_on(views::export::run(a.options())),
        Command::Completions { shell } => {
            let mut cmd = Cli::visible_command();
            // Into memory first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "tfo-trace", &mut script);
            output::stdout_written(io::stdout().lock().write_all(&script))
        }
        Command::Man(a) => views::man::run(a.command.as_deref(), a.dir.as_deref()),
        Command::Demo(a) => runtime()?.block_on(views::demo::run(a.options())),
        Command::LabServer(a) => tfo_trace::lab::traffic::run_server(&a),
        Command::LabClient(a) => tfo_trace::lab::traffic::run_client(&a),
        #[cfg(feature = "fixtures")]
        Command::LabLoad(a) => tfo_trace::lab::load::run(&a),
        #[cfg(feature = "fixtures")]
        Command::LabSoak(a) => tfo_trace::lab::soak::run(&a),
        #[cfg(feature = "fixtures")]
        Command::Floor(a) => runtime()?.block_on(views::floor::run(a.options())),
    }
}
