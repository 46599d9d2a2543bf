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
    /// The kernel sent only refused SYN-data (`data_not_acked`) as events, for their
    /// cause, and counted the rest (`export` without a per-destination or per-container
    /// label).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub refusal_events_only: bool,
    /// Events lost in a full ring buffer, and the kernel's other shortfalls ([`Health`]).
    #[serde(flatten)]
    pub health: Health,
    /// Outcomes the kernel counted (null where its table could not be read).
    pub counted: Option<u64>,
    /// Of the outcomes the kernel sends as events (all of them, but for `export` without
    /// a per-destination or per-container label, only refused SYN-data), those counted
    /// after the view last read the ring buffer (a connection that ended as the view
    /// stopped): `events + events_lost + unread == counted` where every outcome is sent,
    /// unless the namespace table was full.
    pub unread: u64,
    /// Cgroup records lost in their full ring (those cgroups were named by a walk).
    pub cgroup_records_lost: u64,
    /// Events whose cgroup no one could name (`container: unknown`).
    pub unnamed: u64,
    /// Records that did not decode (a kernel/userspace mismatch).
    pub malformed: u64,
    /// The `--record` file, if any.
    pub recorded_to: Option<String>,
    /// Events delivered that the recording lacks: writing it failed (a full disk), and
    /// recording stopped there while tracing went on.
    pub unrecorded: u64,
    /// Why writing the recording failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_failed: Option<String>,
    /// `stalls` only: the stalled connections it listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stalled: Option<u64>,
    /// `export` only: what it served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<Served>,
    /// `--names` only: addresses learnt from DNS answers, in how many namespaces, and
    /// answers the kernel dropped because we read them too slowly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub names: Option<crate::names::NamesStats>,
    /// What the namespaces' own counters counted of the outcomes no hook of the backend
    /// sees: its `rows` per namespace and outcome (none where the hooks see every outcome).
    pub kernel_counted: KernelCounted,
}

/// What `export` served: its expositions, and the outcomes in the last one.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Served {
    /// Scrapes of `/metrics` (or `/`) answered with the exposition.
    pub scrapes: u64,
    /// Times `--textfile` was written.
    pub textfile_writes: u64,
    /// `tfo_trace_connections_total` summed over its series in the last exposition served
    /// (a scrape's or the textfile's); null before the first.
    pub outcomes: Option<u64>,
    /// The same sum at the stop: more than `outcomes` where connections ended after the
    /// last exposition served (none served them).
    pub outcomes_at_stop: u64,
}

impl Served {
    /// `n` scrapes were answered with an exposition of `outcomes` (none: nothing served).
    pub fn scraped(&mut self, n: u64, outcomes: u64) {
        if n > 0 {
            self.scrapes += n;
            self.outcomes = Some(outcomes);
        }
    }

    /// The textfile was written with an exposition of `outcomes`.
    pub fn wrote_textfile(&mut self, outcomes: u64) {
        self.textfile_writes += 1;
        self.outcomes = Some(outcomes);
    }

    /// `served 4 scrapes of /metrics, the last with 300 outcomes (tfo_trace_connections_total),
    /// all there were`: what went out, and whether anything came after it.
    fn phrase(&self) -> String {
        let scrapes = units::plural(self.scrapes, "scrape", "scrapes");
        let writes = units::plural(self.textfile_writes, "time", "times");
        let what = match (self.scrapes, self.textfile_writes) {
            (_, 0) => format!("served {scrapes} of /metrics"),
            (0, _) => format!("wrote the textfile {writes}"),
            _ => format!("served {scrapes} of /metrics and wrote the textfile {writes}"),
        };
        let Some(served) = self.outcomes else {
            return format!("{what} ({} outcomes at the stop, none served)", self.outcomes_at_stop);
        };
        let after = self.outcomes_at_stop.saturating_sub(served);
        let tail = if after == 0 {
            "all there were".to_string()
        } else {
            format!("{after} more came after it, not served")
        };
        format!("{what}, the last with {served} outcomes (tfo_trace_connections_total), {tail}")
    }
}

impl Closing {
    /// `40 events, 0 lost, 1 after the last read (41 outcomes counted in the kernel)`, then
    /// each shortfall that happened and where the recording is: the closing line after its
    /// `tfo-trace: `. The events delivered, those lost and those counted after the last read
    /// add up to the kernel's count; where the kernel counted fewer (its namespace table
    /// full: said apart), the count alone. `export` says first what it served (its
    /// events are only refused SYN-data, for their causes, unless it labels destinations
    /// or containers).
    pub fn sentence(&self) -> String {
        let h = &self.health;
        let mut line = String::new();
        if let Some(n) = self.stalled {
            line.push_str(&format!("{}; ", units::plural(n, "stalled connection", "stalled connections")));
        }
        if let Some(served) = &self.served {
            line.push_str(&format!("{}; ", served.phrase()));
        }
        let events = if self.refusal_events_only { "refused SYN-data events" } else { "events" };
        line.push_str(&format!("{} {events}, {} lost", self.events, h.events_lost));
        if let Some(counted) = self.counted {
            if self.unread > 0 {
                line.push_str(&format!(", {} after the last read", self.unread));
            }
            if self.served.is_none() {
                line.push_str(&format!(" ({counted} outcomes counted in the kernel)"));
            }
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
            if let Some(why) = &self.recording_failed {
                let n = units::plural(self.unrecorded, "event", "events");
                line.push_str(&format!(" but for the last {n} (writing it failed: {why})"));
            }
        }
        line
    }

    /// Ok, unless the recording lacks events: then one line saying how many, and why (the
    /// command fails after its summary: what it was asked to record is not all there).
    pub fn recording_kept(&self) -> anyhow::Result<()> {
        match (&self.recorded_to, &self.recording_failed) {
            (Some(path), Some(why)) => Err(anyhow::anyhow!(
                "the recording {path} lacks the last {} of the {} events (writing it failed: {why})",
                self.unrecorded,
                self.events
            )),
            _ => Ok(()),
        }
    }

    /// `counted by each namespace's own kernel counters: ...: netns lab-srv:
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

    /// Issue 55, item 7: after serving 300 outcomes the exporter said "0 events, 0 lost,
    /// 300 after the last read": its events are only refused SYN-data, and what it served
    /// is what it is for.
    #[test]
    fn the_exporter_says_what_it_served() {
        let served = |scrapes, textfile_writes, outcomes, outcomes_at_stop| Closing {
            refusal_events_only: true,
            unread: 0,
            served: Some(Served { scrapes, textfile_writes, outcomes, outcomes_at_stop }),
            ..closing(0, 0, Some(300))
        };
        assert_eq!(
            served(4, 0, Some(300), 300).sentence(),
            "served 4 scrapes of /metrics, the last with 300 outcomes (tfo_trace_connections_total), \
             all there were; 0 refused SYN-data events, 0 lost"
        );
        assert_eq!(
            served(1, 0, Some(295), 300).sentence(),
            "served 1 scrape of /metrics, the last with 295 outcomes (tfo_trace_connections_total), \
             5 more came after it, not served; 0 refused SYN-data events, 0 lost"
        );
        assert_eq!(
            served(0, 3, Some(300), 300).sentence(),
            "wrote the textfile 3 times, the last with 300 outcomes (tfo_trace_connections_total), \
             all there were; 0 refused SYN-data events, 0 lost"
        );
        assert_eq!(
            served(0, 0, None, 300).sentence(),
            "served 0 scrapes of /metrics (300 outcomes at the stop, none served); 0 refused SYN-data \
             events, 0 lost"
        );
        let v = serde_json::to_value(served(4, 1, Some(300), 300)).unwrap();
        assert_eq!(v["served"]["scrapes"], 4);
        assert_eq!(v["served"]["outcomes"], 300);
        assert_eq!(v["refusal_events_only"], true);
        let plain = serde_json::to_value(closing(1, 0, Some(1))).unwrap();
        assert!(plain.get("served").is_none() && plain.get("refusal_events_only").is_none(), "{plain}");
    }

    /// Issue 55, item 6: a full disk while recording lost the summary; now the summary
    /// says what the recording lacks, in words and in its JSON, and the command fails
    /// after it.
    #[test]
    fn a_recording_that_failed_says_what_it_lacks() {
        let failed = Closing {
            recorded_to: Some("/mnt/small/r.jsonl".into()),
            unrecorded: 832,
            recording_failed: Some("No space left on device (os error 28)".into()),
            ..closing(1000, 0, Some(1000))
        };
        assert_eq!(
            failed.sentence(),
            "1000 events, 0 lost (1000 outcomes counted in the kernel), recorded to /mnt/small/r.jsonl \
             but for the last 832 events (writing it failed: No space left on device (os error 28))"
        );
        let v = serde_json::to_value(&failed).unwrap();
        assert_eq!((v["unrecorded"].as_u64(), v["events"].as_u64()), (Some(832), Some(1000)));
        assert_eq!(v["recording_failed"], "No space left on device (os error 28)");
        let e = failed.recording_kept().unwrap_err().to_string();
        assert_eq!(
            e,
            "the recording /mnt/small/r.jsonl lacks the last 832 of the 1000 events (writing it failed: \
             No space left on device (os error 28))"
        );
        let kept = Closing { recorded_to: Some("/tmp/r.jsonl".into()), ..closing(5, 0, Some(5)) };
        assert!(kept.recording_kept().is_ok());
        assert!(kept.sentence().ends_with(", recorded to /tmp/r.jsonl"), "{}", kept.sentence());
        assert_eq!(serde_json::to_value(&kept).unwrap()["unrecorded"], 0);
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
