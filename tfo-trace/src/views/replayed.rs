//! What a view that replays recordings says when it is done (`trace --from`, `stalls
//! --from`), as `report` and `top --from` say it: how many events from where, the torn
//! last lines of recorders' segments (a note: a crash leaves them, they are no error), a
//! `--netns` name no event carries (a usage error), and each recording's bad lines (one
//! error line each, exit 1).
use anyhow::{anyhow, Result};

use crate::{cli::Replaying, events::replay::ReplayedAll, units};

pub(crate) fn said(from: &Replaying, r: &ReplayedAll) -> Result<()> {
    let paths: Vec<String> = from.paths.iter().map(|p| p.display().to_string()).collect();
    crate::note!("tfo-trace: {} from {}", units::plural(r.events, "event", "events"), paths.join(", "))?;
    for (path, torn) in &r.torn {
        say_torn(path, *torn)?;
    }
    if let Some(msg) = from.filter.netns_name_unrecorded(&r.netns_names) {
        return Err(crate::events::record::UsageError(msg).into());
    }
    match r.errors.split_last() {
        None => Ok(()),
        Some((last, others)) => {
            for e in others {
                // A failure stays one, whether or not stderr is there to say so.
                let _ = crate::note!("tfo-trace: error: {e}");
            }
            Err(anyhow!("{last}"))
        }
    }
}

/// The note for a recorder's segments cut short by a crash: skipped, and no error.
pub(crate) fn say_torn(path: &std::path::Path, torn: u64) -> Result<(), crate::live::output::OutputClosed> {
    crate::note!(
        "tfo-trace: note: {}: {} skipped (cut short when the recorder stopped: kill -9, a crash or a \
         power cut), the other lines read",
        path.display(),
        units::plural(torn, "torn last line", "torn last lines")
    )
}
