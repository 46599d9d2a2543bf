//! What a live view says when it stops, as data ([`Closing`]): events delivered, and every
//! way one could have gone missing (lost in a full ring buffer, though the kernel still
//! counted those; skipped by the kernel, a hook hit again while running; connects the
//! kernel would not let us follow; outcomes it could not count; not decodable), where the
//! recording is, and what the namespaces' own counters counted that no hook of the backend
//! sees. One JSON object on stderr under `--json` or `--json-summary` (what scripts, the
//! tests and `cargo xtask bench` read); otherwise the sentences rendered from it.
use serde::Serialize;

use crate::{
    aggregation::kernel_counted::KernelCounted,
    events::counts::Health,
    live::{counted, output::OutputClosed},
    units,
};

/// The closing summary of a live view.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Closing {
    /// Always 1: tells this object apart on stderr, as `tfo_trace_recording` does a
    /// recording's header; a new version of its fields would be 2.
    pub tfo_trace_closing: u32,
    /// The backend that ran.
    pub backend: String,
    /// Events delivered to the view.
    pub events: u64,
    /// Events lost in a full ring buffer, and the kernel's other shortfalls ([`Health`]).
    #[serde(flatten)]
    pub health: Health,
    /// Outcomes the kernel counted (null where its table could not be read).
    pub counted: Option<u64>,
    /// Of those, counted after the view last read the ring buffer (a connection that ended
    /// as the view stopped): `events + events_lost + unread == counted` unless the
    /// namespace table was full.
    pub unread: u64,
    /// Cgroup records lost in their full ring (those cgroups were named by a walk).
    pub cgroup_records_lost: u64,
    /// Events whose cgroup no one could name (`container: unknown`).
    pub unnamed: u64,
    /// Records that did not decode (a kernel/userspace mismatch).
    pub malformed: u64,
    /// The `--record` file, if any.
    pub recorded_to: Option<String>,
    /// `stalls` only: the stalled connections it listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled: Option<u64>,
    /// `--names` only: addresses learnt from DNS answers, in how many namespaces, and
    /// answers the kernel dropped because we read them too slowly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<crate::names::NamesStats>,
    /// What the namespaces' own counters counted of the outcomes no hook of the backend
    /// sees: its `rows` per namespace and outcome (none where the hooks see every outcome).
    pub kernel_counted: KernelCounted,
}

impl Closing {
    /// `40 events, 0 lost, 1 after the last read (41 outcomes counted in the kernel)`, then
    /// each shortfall that happened and where the recording is: the closing line after its
    /// `tfo-trace: `. The events delivered, those lost and those counted after the last read
    /// add up to the kernel's count; where the kernel counted fewer (its namespace table
    /// full: said apart), the count alone.
    pub fn sentence(&self) -> String {
        let h = &self.health;
        let mut line = String::new();
        if let Some(n) = self.stalled {
            line.push_str(&format!("{}; ", units::plural(n, "stalled connection", "stalled connections")));
        }
        line.push_str(&format!("{} events, {} lost", self.events, h.events_lost));
        if let Some(counted) = self.counted {
            if self.unread > 0 {
                line.push_str(&format!(", {} after the last read", self.unread));
            }
            line.push_str(&format!(" ({counted} outcomes counted in the kernel)"));
        }
        let mut also = |n: u64, what: &str| {
            if n > 0 {
                line.push_str(&format!(", {n} {what}"));
            }
        };
        also(h.hook_runs_missed, "hook runs missed by the kernel (recursion)");
        also(
            h.connects_unfollowed,
            "TFO connects not followed (the kernel refused their map entry: no process or timing in \
             their events)",
        );
        also(h.outcomes_uncounted, "outcomes not counted (the namespace table was full)");
        also(self.cgroup_records_lost, "cgroup records lost (ring full)");
        also(self.unnamed, "from an unknown container (cgroup not named)");
        also(self.malformed, "malformed");
        if let Some(n) = &self.names {
            line.push_str(&format!(
                ", names: {} learnt from DNS answers in {}",
                units::plural(n.learnt, "address", "addresses"),
                units::plural(n.namespaces as u64, "namespace", "namespaces")
            ));
            if n.dropped > 0 {
                line.push_str(&format!(" ({} answers dropped: read too slowly)", n.dropped));
            }
        }
        if let Some(path) = &self.recorded_to {
            line.push_str(&format!(", recorded to {path}"));
        }
        line
    }

    /// `counted by each namespace's own kernel counters: ...: netns 4026532246 (lab-srv):
    /// server cookie_requested 3`: said after the closing line (None when nothing moved).
    pub fn kernel_counted_sentence(&self) -> Option<String> {
        let mut namespaces = counted::per_namespace(&self.kernel_counted);
        // What those counts leave out, said wherever they are (never a silent 0).
        namespaces.extend(counted::unreadable_phrase(&self.kernel_counted));
        if namespaces.is_empty() {
            return None;
        }
        Some(format!("{}: {}", counted::provenance(&self.backend), namespaces.join("; ")))
    }

    /// On stderr: one JSON object with `json`; else the closing line (`{prefix}: ...{suffix}`)
    /// and the kernel-counted line if any.
    pub fn say(&self, json: bool, prefix: &str, suffix: &str) -> Result<(), OutputClosed> {
        if json {
            let line = serde_json::to_string(self).unwrap_or_else(|e| format!(r#"{{"error":"{e}"}}"#));
            return crate::note!("{line}");
        }
        crate::note!("{prefix}: {}{suffix}", self.sentence())?;
        if let Some(line) = self.kernel_counted_sentence() {
            crate::note!("tfo-trace: {line}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn closing(events: u64, events_lost: u64, counted: Option<u64>) -> Closing {
        let unread = counted.map_or(0, |c| c.saturating_sub(events + events_lost));
        Closing {
            tfo_trace_closing: 1,
            backend: "tracepoint".into(),
            events,
            health: Health { events_lost, ..Health::default() },
            counted,
            unread,
            ..Closing::default()
        }
    }

    #[test]
    fn the_closing_counts_add_up() {
        assert_eq!(
            closing(40, 0, Some(41)).sentence(),
            "40 events, 0 lost, 1 after the last read (41 outcomes counted in the kernel)"
        );
        assert_eq!(
            closing(40, 2, Some(42)).sentence(),
            "40 events, 2 lost (42 outcomes counted in the kernel)"
        );
        assert_eq!(closing(7, 0, None).sentence(), "7 events, 0 lost");
        // Fewer counted than delivered: the namespace table was full (said apart).
        assert_eq!(closing(9, 0, Some(8)).sentence(), "9 events, 0 lost (8 outcomes counted in the kernel)");
    }

    #[test]
    fn every_shortfall_is_said_and_is_data() {
        let c = Closing {
            health: Health {
                events_lost: 1,
                hook_runs_missed: 2,
                connects_unfollowed: 3,
                outcomes_uncounted: 4,
            },
            malformed: 5,
            stalled: Some(1),
            recorded_to: Some("/tmp/r.jsonl".into()),
            ..closing(10, 1, Some(15))
        };
        let s = c.sentence();
        assert!(s.starts_with("1 stalled connection; 10 events, 1 lost, 4 after the last read"), "{s}");
        for part in [
            ", 2 hook runs missed",
            ", 3 TFO connects not followed",
            ", 4 outcomes not counted",
            ", 5 malformed",
            ", recorded to /tmp/r.jsonl",
        ] {
            assert!(s.contains(part), "{part} in {s}");
        }
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["tfo_trace_closing"], 1);
        for (key, n) in [
            ("events", 10),
            ("events_lost", 1),
            ("hook_runs_missed", 2),
            ("connects_unfollowed", 3),
            ("outcomes_uncounted", 4),
            ("counted", 15),
            ("unread", 4),
            ("malformed", 5),
            ("stalled", 1),
        ] {
            assert_eq!(v[key], n, "{key} in {v}");
        }
        assert_eq!(v["recorded_to"], "/tmp/r.jsonl");
        assert!(serde_json::to_value(closing(1, 0, None)).unwrap().get("stalled").is_none(), "stalls only");
    }
}
