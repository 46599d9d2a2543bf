//! `tfo-trace report`: a summary first (connections, destinations, verdicts, time lost, the
//! worst rows), then the client-side rows ranked by time lost (the first `--top` shown, the
//! rest summed in one line), the listeners, and what only the kernel's counters show; live
//! over a window, or from one or several hosts' recordings merged.
//!
//! The model is `aggregation::report` (events in one at a time, nothing kept per event) and
//! the verdicts `aggregation::report::verdict` (pure: kinds, strength, figures). Here, one
//! file per job: `source.rs` reads recordings, or runs live and gathers the kernel's facts
//! at the end (tcp_metrics, counter deltas per namespace, listener queue sizes, keys);
//! `verdict/` says each verdict in words; `text.rs`, `markdown.rs` and `json.rs` render,
//! the first two saying the same `lines.rs`. A recording replayed here has no kernel
//! facts: they describe the machine now, not the one it was recorded on.
mod json;
mod lines;
mod markdown;
mod source;
mod text;
mod verdict;

use std::io::{self, Write};

use anyhow::{bail, Result};

pub use self::source::{host_name, recording_source, Rendered, Source};
use crate::cli::{ReportFormat, ReportOptions, ReportSource};

pub fn run(opts: ReportOptions) -> Result<()> {
    let (group, top) = (opts.group, opts.top);
    let (source, sources, built, errors) = match &opts.source {
        ReportSource::Live { load, duration } => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (s, b) = rt.block_on(source::live(load, *duration, group, top))?;
            (s, Vec::new(), b, Vec::new())
        }
        ReportSource::Recordings { paths, filter, window } => {
            source::from_recordings(paths, filter, *window, group, top)?
        }
    };
    let mut out = io::stdout().lock();
    let r = Rendered { source: &source, sources: &sources, built: &built };
    crate::live::output::stdout_written(render(&mut out, opts.format, &r, &errors))?;
    match errors.len() {
        // Everything the good lines give is printed; each bad line is one error line.
        0 => Ok(()),
        1 => bail!("{}", errors[0]),
        _ => {
            for e in &errors[..errors.len() - 1] {
                // A failure stays one, whether or not stderr is there to say so.
                let _ = crate::note!("tfo-trace: error: {e}");
            }
            bail!("{}", errors[errors.len() - 1])
        }
    }
}

pub fn render(w: &mut impl Write, format: ReportFormat, r: &Rendered, errors: &[String]) -> io::Result<()> {
    match format {
        ReportFormat::Json => json::write(w, r, errors)?,
        ReportFormat::Text => text::write(w, r)?,
        ReportFormat::Markdown => markdown::write(w, r)?,
    }
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::{text::lost_line, *};
    use crate::{
        aggregation::report::{grouping::GroupBy, Built, Facts, GroupOptions, ReportBuilder},
        events::{Event, Outcome, Timestamp},
    };

    fn event(outcome: &str, daddr: &str, sport: u16, data: u32, stall_us: u64) -> Event {
        let mut e: Event = serde_json::from_value(serde_json::json!({
            "ts": "2026-11-30T08:00:00.000000000Z", "role": "client", "outcome": outcome,
            "family": 4, "saddr": "198.18.0.1", "sport": sport, "daddr": daddr, "dport": 8080,
            "netns": 7, "pid": 1, "comm": "c|x", "syn_data_bytes": data, "cookie_len": null,
            "exp_option": false, "retransmits": u32::from(stall_us > 0), "handshake_us": 1_000 + stall_us,
            "stall_us": stall_us,
        }))
        .unwrap();
        e.ts = Timestamp::from_unix_ns(u128::from(sport));
        e
    }

    fn source(events: u64) -> Source {
        Source {
            kind: "recording",
            path: Some("/tmp/r.jsonl".into()),
            host: Some("h".into()),
            kernel: Some("6.18".into()),
            backend: Some("tracepoint".into()),
            start: Some("2026-11-30T08:00:00.000000000Z".into()),
            events,
            events_lost: None,
            window_s: None,
            segments: Some(1),
            bad_lines: 0,
            torn_lines: 0,
            since: None,
            until: None,
        }
    }

    fn build(events: &[Event], group: GroupBy, top: Option<usize>) -> Built {
        let mut b = ReportBuilder::new(GroupOptions { by: group, ..Default::default() }, false);
        let h = b.host("h");
        events.iter().for_each(|e| b.add(e, h));
        b.finish(Facts::default(), top)
    }

    fn dropped3() -> Vec<Event> {
        (0..3).map(|i| event("syn_retransmitted", "198.18.0.3", 40000 + i, 64, 1_020_000)).collect()
    }

    fn rendered(built: &Built, format: ReportFormat, errors: &[String]) -> String {
        let s = source(built.summary.events);
        let mut out = Vec::new();
        render(&mut out, format, &Rendered { source: &s, sources: std::slice::from_ref(&s), built }, errors)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn markdown_says_no_time_lost_as_the_text_does() {
        let mut events = dropped3();
        events.push(event("accepted", "198.18.0.2", 41000, 64, 0));
        let b = build(&events, GroupBy::Destination, None);
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        let healthy = m.lines().find(|l| l.starts_with("| 198.18.0.2:8080 ")).unwrap();
        assert!(!healthy.contains("0us"), "{healthy}");
        assert!(healthy.contains("| no time lost | - |"), "{healthy}");
        assert!(rendered(&b, ReportFormat::Text, &[]).contains("added latency: no time lost"));
    }

    #[test]
    fn three_formats() {
        let b = build(&dropped3(), GroupBy::Destination, Some(20));
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.starts_with("tfo-trace report: 3 events, from the recording /tmp/r.jsonl"), "{text}");
        assert!(text.contains("\n  verdict: SYN-data to 198.18.0.3:8080 was dropped on the path in 3 of 3 connections, +1.02s each"), "{text}");
        assert!(text.contains("\n  evidence (moderate: 3 of 3 connections)\n"), "{text}");
        assert!(
            text.contains("added latency: 3.06s lost in total: 1.02s per stalled connection (3)"),
            "{text}"
        );
        // The summary comes first.
        let summary = text.find("\nSummary\n").unwrap();
        assert!(summary < text.find("198.18.0.3:8080 (netns 7)").unwrap(), "{text}");
        assert!(text.contains("  3 client connections to 1 destination\n"), "{text}");
        assert!(text.contains("  verdicts (one per destination): 1 syn_data_dropped\n"), "{text}");
        assert!(
            text.contains("  time lost: 3.06s in 3 stalled connections (syn_data_dropped 3, 3.06s)\n"),
            "{text}"
        );
        assert!(text.contains("  worst: 198.18.0.3:8080 3.06s (syn_data_dropped, moderate)\n"), "{text}");

        let json = rendered(&b, ReportFormat::Json, &["r: line 5: truncated".into()]);
        let j: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(j["destinations"][0]["syn_data_dropped"], 3);
        assert_eq!(j["destinations"][0]["netns"], 7);
        assert_eq!(j["destinations"][0]["verdict"]["kind"], "syn_data_dropped");
        assert_eq!(j["destinations"][0]["verdict"]["strength"], "moderate");
        assert_eq!(j["destinations"][0]["verdict"]["support"]["connections"], 3);
        assert_eq!(j["source"]["backend"], "tracepoint");
        assert_eq!(j["replay_error"], "r: line 5: truncated");
        assert_eq!(j["summary"]["verdicts"]["syn_data_dropped"], 1);
        assert_eq!(j["summary"]["lost_us_by_cause"]["syn_data_dropped"], 3_060_000);
        assert_eq!(j["rest"], serde_json::Value::Null);

        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.starts_with("# tfo-trace report\n"), "{m}");
        assert!(
            m.contains("| 198.18.0.3:8080 | 7 | 3 | 0 | 3 | 0 | 3.06s | 1.02s | - | -3.06s | SYN-data to"),
            "{m}"
        );
        assert!(m.contains("| moderate: 3 of 3 connections |"), "{m}");
    }

    #[test]
    fn top_rows_and_the_rest_in_one_line() {
        let mut events = dropped3();
        for i in 0..5u16 {
            events.push(event("accepted", &format!("198.18.1.{i}"), 41000 + i, 64, 0));
        }
        let b = build(&events, GroupBy::Destination, Some(2));
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(
            text.contains("Destinations by time lost (client side, the 2 that lost the most time of 6)"),
            "{text}"
        );
        assert!(
            text.contains(
                "... and 4 more destinations: 4 connections, no time lost (4 healthy) (--all shows them)"
            ),
            "{text}"
        );
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        assert_eq!(j["destinations"].as_array().unwrap().len(), 2);
        assert_eq!(j["destinations"][0]["destination"], "198.18.0.3:8080");
        assert_eq!(j["rest"]["groups"], 4);
        assert_eq!(j["summary"]["groups"], 6);
        let all = build(&events, GroupBy::Destination, None);
        assert!(!rendered(&all, ReportFormat::Text, &[]).contains("more destinations"));

        // By prefix: one row for the /24 with both of its destinations' evidence.
        let b = build(&events, GroupBy::Prefix, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.contains("\n198.18.1.0/24 (5 destinations)\n"), "{text}");
        assert!(text.contains("Prefixes by time lost"), "{text}");
        assert!(text.contains("in 2 prefixes"), "{text}");
    }

    #[test]
    fn data_not_acked_is_told_apart_from_time_lost() {
        let mut events = dropped3();
        events.push(event("data_not_acked", "198.18.0.3", 40010, 64, 0));
        events.push(event("data_not_acked", "198.18.0.3", 40011, 64, 0));
        let b = build(&events, GroupBy::Destination, None);
        let mut d = b.rows().next().unwrap();
        assert_eq!(
            lost_line(&d),
            "3.06s lost in total: 1.02s per stalled connection (3), 612ms per connection; gain forgone: 2 \
             SYN-data refused, ~2ms (the round trip a working TFO saves each; against no TFO no time lost: \
             the data went at once on the SYN-ACK)"
        );
        // Issue 51, item 3: refused SYN-data is a gain forgone, never in the balance.
        assert_eq!(d.net_us, -3_060_000, "the stalls alone: {d:?}");
        (d.stalled, d.lost_us_total) = (0, 0);
        assert!(
            lost_line(&d).starts_with("no time lost to SYN timeouts; gain forgone: 2 SYN-data refused, ~2ms"),
            "{}",
            lost_line(&d)
        );
        d.extra_round_trips = 0;
        assert_eq!(lost_line(&d), "no time lost");
        assert_eq!(Outcome::DataNotAcked.name(), "data_not_acked");
    }

    #[test]
    fn names_in_text_json_and_markdown() {
        let named = |mut e: Event, n: &str| {
            e.dname = Some(n.into());
            e
        };
        let mut events: Vec<Event> = dropped3().into_iter().map(|e| named(e, "api.example")).collect();
        events.push(named(event("accepted", "198.18.0.3", 40100, 64, 0), "www.example"));
        events.push(named(event("accepted", "198.18.0.4", 40101, 64, 0), "api.example"));
        events.push(event("accepted", "198.18.0.5", 40102, 64, 0));

        // By destination: each row lists the names of its address.
        let b = build(&events, GroupBy::Destination, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(
            text.contains(
                "\n198.18.0.3:8080 (netns 7)\n  names: api.example, www.example\n  connections: 4  "
            ),
            "{text}"
        );
        assert!(
            text.contains("\n198.18.0.5:8080 (netns 7)\n  connections: 1  "),
            "no names, no line: {text}"
        );
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        let d = &j["destinations"][0];
        assert_eq!(d["destination"], "198.18.0.3:8080");
        assert_eq!(d["names"], serde_json::json!(["api.example", "www.example"]));
        assert_eq!(d["more_names"], 0);
        assert!(d.get("addresses").is_none(), "{d}");
        assert_eq!(j["destinations"][2]["names"], serde_json::json!([]));
        assert!(j["summary"].get("unnamed_groups").is_none());
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.contains("| 198.18.0.3:8080 (api.example, www.example) | 7 | 4 |"), "{m}");

        // By name: one row per name, its addresses as evidence; the address without a name
        // keeps its own row.
        let b = build(&events, GroupBy::Name, None);
        let text = rendered(&b, ReportFormat::Text, &[]);
        assert!(text.contains("\nNames by time lost (client side)\n"), "{text}");
        assert!(
            text.contains(
                "  6 client connections to 3 destinations, in 2 names and 1 address without a name\n"
            ),
            "{text}"
        );
        assert!(text.contains("  verdicts (one per name): 1 syn_data_dropped, 2 healthy\n"), "{text}");
        assert!(text.contains("\napi.example (2 destinations)\n  connections: 4  "), "{text}");
        assert!(
            text.contains(
                "\n    - address 198.18.0.3:8080: 3 connections (syn_retransmitted=3), 3.06s lost\n    \
                 - address 198.18.0.4:8080: 1 connection (accepted=1), no time lost\n"
            ),
            "{text}"
        );
        assert!(text.contains("\n198.18.0.5:8080 (netns 7)\n"), "{text}");
        let j: serde_json::Value = serde_json::from_str(&rendered(&b, ReportFormat::Json, &[])).unwrap();
        assert_eq!(j["summary"]["group_by"], "name");
        assert_eq!(
            (j["summary"]["groups"].clone(), j["summary"]["unnamed_groups"].clone()),
            (3.into(), 1.into())
        );
        let api = &j["destinations"][0];
        assert_eq!(
            (api["destination"].clone(), api["group"].clone()),
            ("api.example".into(), "api.example".into())
        );
        assert_eq!(api["names"], serde_json::json!(["api.example"]));
        assert_eq!(api["netns"], serde_json::Value::Null);
        assert_eq!(api["destinations"], 2);
        assert_eq!(api["verdict"]["kind"], "syn_data_dropped");
        let addrs = api["addresses"].as_array().unwrap();
        assert_eq!(addrs.len(), 2);
        assert_eq!(addrs[0]["address"], "198.18.0.3:8080");
        assert_eq!(addrs[0]["netns"], 7);
        assert_eq!(addrs[0]["connections"], 3);
        assert_eq!(addrs[0]["outcomes"], serde_json::json!({"syn_retransmitted": 3}));
        assert_eq!((addrs[0]["showing"].clone(), addrs[0]["of"].clone()), (3.into(), 3.into()));
        assert_eq!(addrs[0]["lost_us_total"], 3_060_000);
        assert_eq!(addrs[1]["outcomes"], serde_json::json!({"accepted": 1}));
        let unnamed =
            j["destinations"].as_array().unwrap().iter().find(|d| d["destination"] == "198.18.0.5:8080");
        assert_eq!(unnamed.unwrap()["names"], serde_json::json!([]));
        let m = rendered(&b, ReportFormat::Markdown, &[]);
        assert!(m.contains("\n| api.example | - | 4 |"), "{m}");
        assert!(m.contains("\n- address 198.18.0.3:8080"), "{m}");
    }

    #[test]
    fn empty_report_says_so() {
        let b = build(&[], GroupBy::Destination, Some(20));
        assert!(rendered(&b, ReportFormat::Text, &[]).contains("no TFO connections seen"));
    }
}
