//! Step 3, loss: `trace` with a 4096-byte ring buffer (34 events) at rising rates, 2 s
//! each, until the first event is lost.
use std::time::Duration;

use anyhow::Result;

use super::{
    config::{Config, Mode},
    cost::Run,
    env::Env,
};

/// Runs at fractions of `max_rate`, then unpaced with `threads` and twice as many threads,
/// stopping at the first run that lost an event: (threads, target rate or 0 for the
/// maximum, the run).
pub(super) fn ring_sweep(env: &Env, threads: u32, max_rate: f64) -> Result<Vec<(u32, u32, Run)>> {
    let mut sweep = Vec::new();
    let mut steps: Vec<(u32, u32)> =
        [0.05, 0.1, 0.2, 0.4, 0.7].iter().map(|f| (threads, (max_rate * f) as u32)).collect();
    steps.push((threads, 0));
    steps.push((threads * 2, 0));
    for (t, rate) in steps {
        let r = env.measure(Config::Trace, Mode::Tfo, t, rate, Duration::from_secs(2), Some(4096))?;
        println!(
            "bench: ring 4096 B, target {} conn/s x{t}: {:.0} conn/s, {} events, {} lost",
            if rate == 0 { "max".to_string() } else { rate.to_string() },
            r.load.rate,
            r.events.unwrap_or(0),
            r.lost.unwrap_or(0)
        );
        let lost = r.lost.unwrap_or(0) > 0;
        sweep.push((t, rate, r));
        if lost {
            break;
        }
    }
    Ok(sweep)
}
