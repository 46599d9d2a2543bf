//! tfo-trace's integration tests, one executable (one link, not one per file), one module
//! per file: a test is `MODULE::TEST`, selected by name (`cargo test --test integration --
//! stalls::`: the module's tests). `common/harness.rs` runs them, one module after another.
#[macro_use]
mod common;

mod bad_recordings;
mod capabilities;
mod churn;
mod cli;
mod containers;
mod cookie_changes;
mod dist;
mod export;
mod export_http;
mod exposure;
mod faults;
mod filters;
mod flight_recorder;
mod kernel_facts;
mod kernel_scenarios;
mod lab;
mod names;
mod oracles;
mod plain_cost;
mod recording;
mod refusal_causes;
mod report;
mod server_outcomes;
mod server_speaks_first;
mod stalled_reader;
mod stalls;
mod top;
mod verdicts;

fn main() -> std::process::ExitCode {
    common::harness::run(vec![
        bad_recordings::tests(),
        capabilities::tests(),
        churn::tests(),
        cli::tests(),
        containers::tests(),
        cookie_changes::tests(),
        dist::tests(),
        export::tests(),
        export_http::tests(),
        exposure::tests(),
        faults::tests(),
        filters::tests(),
        flight_recorder::tests(),
        kernel_facts::tests(),
        kernel_scenarios::tests(),
        lab::tests(),
        names::tests(),
        oracles::tests(),
        plain_cost::tests(),
        recording::tests(),
        refusal_causes::tests(),
        report::tests(),
        server_outcomes::tests(),
        server_speaks_first::tests(),
        stalled_reader::tests(),
        stalls::tests(),
        top::tests(),
        verdicts::tests(),
    ])
}
