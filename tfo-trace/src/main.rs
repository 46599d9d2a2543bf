use std::process::ExitCode;

use tfo_trace::{
    aggregation::metrics::Breakdown,
    cli::{Cli, Command},
    views::{self, session::PrivilegeError},
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
    tfo_trace::views::logging::init(level);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            match err.downcast_ref::<PrivilegeError>() {
                Some(p) => eprintln!("tfo-trace: {p}"),
                None => eprintln!("tfo-trace: error: {err:#}"),
            }
            ExitCode::from(1)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Trace(a) => runtime()?.block_on(views::trace::run(views::trace::TraceOptions {
            load: a.probe.load_options(),
            json: a.json,
            duration: a.duration,
            record: a.record,
        })),
        Command::Stalls(a) => runtime()?.block_on(views::stalls::run(views::stalls::StallsOptions {
            load: a.probe.load_options(),
            json: a.json,
            duration: a.duration,
            record: a.record,
        })),
        Command::Top(a) => runtime()?.block_on(views::top::run(views::top::TopOptions {
            load: a.probe.load_options(),
            interval: a.delay,
            count: a.count,
            duration: a.duration,
            batch: a.batch,
            json: a.json,
            sort: a.sort,
            filter: a.filter,
            view: tfo_trace::aggregation::table::View::Destinations,
            max_groups: a.max_groups,
            record: a.record,
            from: a.from,
        })),
        Command::Report(a) => views::report::run(a),
        Command::Doctor(a) => views::doctor::run(a.json),
        Command::Export(a) => runtime()?.block_on(views::export::run(views::export::ExportOptions {
            load: a.probe.load_options(),
            listen: (!a.web_disable).then_some(a.web_listen_address),
            textfile: a.textfile,
            interval: a.interval,
            breakdown: match (a.top_destinations, a.top_containers) {
                (Some(k), _) => Some(Breakdown::Destinations(k.into())),
                (None, Some(k)) => Some(Breakdown::Containers(k.into())),
                (None, None) => None,
            },
            netns: a.probe.filter.netns.clone(),
            duration: a.duration,
        })),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "tfo-trace", &mut std::io::stdout());
            Ok(())
        }
        Command::Man(a) => views::man::run(a.command.as_deref(), a.dir.as_deref()),
        Command::Demo(a) => runtime()?.block_on(views::demo::run(a)),
        Command::LabServer(a) => tfo_trace::lab::traffic::run_server(&a),
        Command::LabClient(a) => tfo_trace::lab::traffic::run_client(&a),
        Command::LabLoad(a) => tfo_trace::lab::load::run(&a),
        Command::LabSoak(a) => tfo_trace::lab::soak::run(&a),
        Command::Floor(a) => runtime()?.block_on(views::floor::run(a)),
    }
}
