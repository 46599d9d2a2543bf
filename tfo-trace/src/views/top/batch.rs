//! `top` without a terminal (`--batch`, or stdout not a TTY): the same four tables as
//! plain rows every interval, or one JSON object per interval with `--json`. Rates are
//! those of the interval that ends with the snapshot.
use std::{
    collections::BTreeMap,
    io::{self, Write},
};

use serde::{
    ser::{SerializeMap, SerializeSeq},
    Serialize, Serializer,
};
use serde_json::{json, Map, Value};

use super::{
    columns::{key_json, Layout},
    header::HeaderInfo,
    rows::{rows, View},
};
use crate::aggregation::{
    kernel_counted::{self, KernelCounted},
    top::{RowStats, Snapshot},
};
use crate::cli::Sort;
use crate::live;

fn stats_json(s: &RowStats) -> Map<String, Value> {
    match serde_json::to_value(s) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// One snapshot as text: a summary line, then each table (its header, then its rows).
pub(crate) fn write_text(
    out: &mut impl Write,
    ts: &str,
    snap: &Snapshot,
    info: &HeaderInfo,
    sort: Sort,
    filter: &str,
) -> io::Result<()> {
    let (c, s) = (&snap.client, &snap.server);
    // key=value for scripts: plain numbers (`-` where no rate was measured).
    let rate = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_else(|| "-".into());
    writeln!(
        out,
        "tfo-trace top {ts} backend={} {}events={} lost={} evicted={} client_attempts={} \
         client_stalls={} client_lost_us={} client_saved_us={} client_net_us={} server_attempts={} server_accepted={} \
         client_attempts_per_s={} client_stalls_per_s={} client_lost_per_s={} server_attempts_per_s={}",
        info.backend,
        fastopen_field(info),
        snap.events,
        info.lost,
        snap.evicted(),
        c.attempts,
        c.stalls,
        c.stall_us,
        c.saved_us,
        c.net_us,
        s.attempts,
        s.accepted,
        rate(c.attempts_per_s),
        rate(c.stalls_per_s),
        rate(c.lost_per_s),
        rate(s.attempts_per_s),
    )?;
    if let Some(line) = counted_text(&snap.kernel_counted, &info.backend) {
        writeln!(out, "{line}")?;
    }
    for p in &info.paused {
        let s = &p.summary;
        writeln!(
            out,
            "tfo_paused netns={} pauses={} without_tfo={} ({})",
            s.netns, s.pauses, s.without_tfo, p.sentence
        )?;
    }
    for view in View::ALL {
        let rows = rows(snap, view, sort, filter);
        let layout = Layout::full(view, &rows, &snap.netns_names);
        writeln!(out)?;
        writeln!(out, "{}", layout.header(view))?;
        for r in rows {
            writeln!(out, "{}", layout.row(r))?;
        }
    }
    writeln!(out)?;
    out.flush()
}

/// `tcp_fastopen=0x1 ` (the namespace tfo-trace runs in), `tcp_fastopen=lab-srv:0x602,
/// 4026532247:0x1 ` (each `--netns` one, by its name or inode); nothing in a replay.
fn fastopen_field(info: &HeaderInfo) -> String {
    if info.tcp_fastopen.is_empty() {
        return String::new();
    }
    let each: Vec<String> = info
        .tcp_fastopen
        .iter()
        .map(|f| {
            let value = f.value.map_or_else(|| "unknown".into(), |t| format!("{:#x}", t.value()));
            f.label().map_or_else(|| value.clone(), |ns| format!("{ns}:{value}"))
        })
        .collect();
    format!("tcp_fastopen={} ", each.join(","))
}

/// `tcp_fastopen`: the one value the header speaks for (tfo-trace's namespace, or the one
/// `--netns`); null in a replay or for several. `tcp_fastopen_netns`: each `--netns` one's.
fn fastopen_json(info: &HeaderInfo) -> (Value, Value) {
    let one = match info.tcp_fastopen.as_slice() {
        [f] => f.value.map(|t| t.value()).into(),
        _ => Value::Null,
    };
    let traced: Vec<Value> = info
        .tcp_fastopen
        .iter()
        .filter_map(|f| {
            let netns = f.netns?;
            Some(json!({"netns": netns, "netns_name": f.netns_name, "value": f.value.map(|t| t.value())}))
        })
        .collect();
    (one, if traced.is_empty() { Value::Null } else { Value::Array(traced) })
}

/// `kernel_counted source=kernel_counter netns=4026532246 server_queue_overflow=3 ...`, one
/// line per namespace where a count moved (key=value for scripts, as the summary line); a
/// line saying why, when the filters keep them out; None where no outcome is counted so.
fn counted_text(counted: &KernelCounted, backend: &str) -> Option<String> {
    if let Some(why) = &counted.unavailable {
        return Some(format!("kernel_counted unavailable: outcomes no {backend} hook sees are {why}"));
    }
    if counted.outcomes.is_empty() && counted.flood.is_empty() {
        return None;
    }
    let mut lines = vec![format!(
        "kernel_counted source={} namespaces={} ({})",
        kernel_counted::SOURCE,
        counted.namespaces,
        live::counted::provenance(backend)
    )];
    let mut per_ns: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (ns, rows) in counted.by_namespace() {
        let each = rows.iter().map(|r| format!("{}_{}={}", r.role.name(), r.outcome.name(), r.count));
        per_ns.entry(ns).or_default().extend(each);
    }
    for r in &counted.flood {
        per_ns.entry(r.netns).or_default().push(format!("{}={}", r.counter, r.count));
    }
    for (ns, each) in per_ns {
        let unnamed =
            counted.unnamed.get(&ns).map(|pid| format!(" unnamed_through_pid={pid}")).unwrap_or_default();
        // The name too where it has one (a name has no space: `ip netns` refuses one).
        let name = counted.netns_names.get(&ns).map(|n| format!(" netns_name={n}")).unwrap_or_default();
        lines.push(format!("kernel_counted netns={ns}{name}{unnamed} {}", each.join(" ")));
    }
    if let Some(left_out) = live::counted::unreadable_phrase(counted) {
        lines.push(format!("kernel_counted unreadable={} ({left_out})", counted.unreadable.len()));
    }
    Some(lines.join("\n"))
}

/// The `kernel_counted` object of a JSON snapshot: null where no outcome is counted so and
/// no flood counter moved.
fn counted_json(counted: &KernelCounted) -> Value {
    if counted.outcomes.is_empty() && counted.flood.is_empty() && counted.unavailable.is_none() {
        return Value::Null;
    }
    let rows: Vec<Value> = counted
        .rows
        .iter()
        .map(|r| {
            json!({
                "netns": r.netns,
                "netns_name": counted.netns_names.get(&r.netns),
                "role": r.role.name(),
                "outcome": r.outcome.name(),
                "count": r.count,
                "counter": r.counter,
            })
        })
        .collect();
    // A listener's SYN flood counters (nstat's names): beside the outcomes, not one.
    let flood: Vec<Value> = counted
        .flood
        .iter()
        .map(|r| {
            json!({
                "netns": r.netns,
                "netns_name": counted.netns_names.get(&r.netns),
                "counter": r.counter,
                "count": r.count,
            })
        })
        .collect();
    json!({
        "source": kernel_counted::SOURCE,
        "outcomes": counted.outcomes.iter().map(|&(r, o)| kernel_counted::outcome_label(r, o)).collect::<Vec<_>>(),
        "namespaces": counted.namespaces,
        "rows": rows,
        "flood": flood,
        "unavailable": counted.unavailable,
        "unreadable": counted.unreadable,
        "unnamed": counted.unnamed,
    })
}

/// A table's rows for JSON, each made as it is written: held whole as JSON values, a
/// snapshot of four 10,000-row tables took ~90 MB for the moment it was written (issue
/// 55: top's peak RSS 143 MB beside a million-connection churn, 42 MB between snapshots).
struct RowsJson<'a> {
    snap: &'a Snapshot,
    view: View,
    sort: Sort,
    filter: &'a str,
}

impl Serialize for RowsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let rows = rows(self.snap, self.view, self.sort, self.filter);
        let mut seq = s.serialize_seq(Some(rows.len()))?;
        for r in rows {
            let mut m = key_json(r, &self.snap.netns_names);
            m.extend(stats_json(&r.stats));
            seq.serialize_element(&m)?;
        }
        seq.end()
    }
}

/// One value of the snapshot's object: small ones made before, tables as they are written.
enum Entry<'a> {
    Value(&'a Value),
    Rows(&'a RowsJson<'a>),
}

impl Serialize for Entry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Entry::Value(v) => v.serialize(s),
            Entry::Rows(r) => r.serialize(s),
        }
    }
}

/// The snapshot's object, keys in the order serde_json's own map writes them (sorted).
struct SnapshotJson<'a> {
    fields: Map<String, Value>,
    tables: Vec<(&'static str, RowsJson<'a>)>,
}

impl Serialize for SnapshotJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<(&str, Entry<'_>)> =
            self.fields.iter().map(|(k, v)| (k.as_str(), Entry::Value(v))).collect();
        entries.extend(self.tables.iter().map(|(k, t)| (*k, Entry::Rows(t))));
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut map = s.serialize_map(Some(entries.len()))?;
        for (k, v) in &entries {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// One snapshot as one JSON line.
pub(crate) fn write_json(
    out: &mut impl Write,
    ts: &str,
    snap: &Snapshot,
    info: &HeaderInfo,
    sort: Sort,
    filter: &str,
) -> io::Result<()> {
    let table = |view: View| RowsJson { snap, view, sort, filter };
    let (tcp_fastopen, tcp_fastopen_netns) = fastopen_json(info);
    let Value::Object(fields) = json!({
        "ts": ts,
        "interval_s": info.interval.as_secs_f64(),
        "backend": info.backend,
        "tcp_fastopen": tcp_fastopen,
        "tcp_fastopen_netns": tcp_fastopen_netns,
        "events": snap.events,
        "lost": info.lost,
        "evicted": {
            "destinations": snap.destinations.evicted,
            "listeners": snap.listeners.evicted,
            "processes": snap.processes.evicted,
            "containers": snap.containers.evicted,
        },
        "totals": { "client": stats_json(&snap.client), "server": stats_json(&snap.server) },
        "rate_interval_s": snap.rate_interval.map(|d| d.as_secs_f64()),
        "stall_history": snap.stall_history.last(crate::aggregation::top::rates::HOST_HISTORY),
        "handshake_histogram": snap.decades.as_map(),
        "kernel_counted": counted_json(&snap.kernel_counted),
        "tfo_paused": info.paused,
    }) else {
        unreachable!("json!({{..}}) is an object")
    };
    let tables = vec![
        ("destinations", table(View::Destinations)),
        ("listeners", table(View::Listeners)),
        ("processes", table(View::Processes)),
        ("containers", table(View::Containers)),
    ];
    // Many small writes: buffered, one flush per line.
    let mut w = io::BufWriter::with_capacity(64 * 1024, &mut *out);
    serde_json::to_writer(&mut w, &SnapshotJson { fields, tables })?;
    w.write_all(b"\n")?;
    w.into_inner().map_err(|e| e.into_error())?.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregation::top::{
        model_of,
        tests::{demo_events, demo_events_in_a_container, demo_refreshes, named_demo_events},
    };
    use crate::events::{Outcome, Role};
    use std::time::Duration;

    fn info() -> HeaderInfo {
        HeaderInfo {
            backend: "tracepoint".into(),
            tcp_fastopen: vec![super::super::header::FastopenOf {
                netns: None,
                netns_name: None,
                value: Some(crate::kernel::sysctl::TcpFastopen(0x1)),
            }],
            interval: Duration::from_secs(1),
            lost: 3,
            color: false,
            live: true,
            paused: Vec::new(),
        }
    }

    #[test]
    fn text_has_the_four_tables() {
        let snap = demo_refreshes(0).snapshot();
        let mut out = Vec::new();
        write_text(&mut out, "T", &snap, &info(), Sort::Stalls, "").unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("tfo-trace top T backend=tracepoint tcp_fastopen=0x1 events=21 lost=3"));
        assert!(lines[0].contains("client_stalls=2"));
        // The last refresh's rates, after the totals (whose names stay).
        assert!(lines[0].contains(
            "client_attempts_per_s=1.000 client_stalls_per_s=1.000 client_lost_per_s=1.023 server_attempts_per_s=3.000"
        ));
        assert_eq!(lines[2].split_whitespace().next(), Some("DESTINATION"));
        // Sorted by stalls: the middlebox destination first.
        let bad: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(bad[..10], ["198.18.0.3:8080", "3", "1.00", "1", "0", "0", "-", "2", "1.00", "2.03s"]);
        assert_eq!(bad.len(), 18, "every column but the graph in plain output");
        assert!(text.contains("\nLISTENER"));
        assert!(text.contains("\nPID"));
        assert!(lines.iter().any(|l| l.starts_with("200 ") && l.contains("nginx")));
        // No event came from a container: the host's rows, one per role, have every event.
        let at = lines.iter().position(|l| l.starts_with("CONTAINER ")).unwrap();
        let host = |i: usize| lines[at + i].split_whitespace().take(3).collect::<Vec<_>>();
        assert_eq!((host(1), host(2)), (vec!["-", "client", "11"], vec!["-", "server", "10"]), "{text}");
        assert_eq!(lines[at + 3], "", "two rows");
    }

    /// Issue 55, item 8: a listener's namespace by its name where the events carry one (a
    /// recording's `netns_name`), as every view names it; the inode stays for scripts.
    #[test]
    fn listeners_name_their_namespace_where_known() {
        let named: Vec<crate::events::Event> = demo_events()
            .into_iter()
            .map(|e| crate::events::Event {
                netns_name: (e.role == Role::Server).then(|| "tfolab-7-srv".into()),
                ..e
            })
            .collect();
        let snap = model_of(&named).snapshot();
        let mut out = Vec::new();
        write_text(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let text = String::from_utf8(out).unwrap();
        let row = text.lines().find(|l| l.starts_with("198.18.0.2:8081 ")).unwrap();
        assert_eq!(row.split_whitespace().nth(1), Some("tfolab-7-srv"), "{text}");
        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let l = &v["listeners"][0];
        assert_eq!((l["netns"].as_u64(), l["netns_name"].as_str()), (Some(4026532246), Some("tfolab-7-srv")));
        let unnamed = model_of(&demo_events()).snapshot();
        let mut out = Vec::new();
        write_json(&mut out, "T", &unnamed, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert!(v["listeners"][0]["netns_name"].is_null(), "{v}");
    }

    #[test]
    fn json_is_one_line_with_all_tables() {
        let snap = model_of(&demo_events()).snapshot();
        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["events"], 21);
        assert_eq!(v["tcp_fastopen"], 1);
        assert_eq!(v["lost"], 3);
        assert_eq!(v["handshake_histogram"]["ge_1s"], 2);
        assert_eq!(v["totals"]["client"]["stalls"], 2);
        let d = &v["destinations"][1];
        assert_eq!(d["destination"], "198.18.0.3:8080");
        assert_eq!(d["stalls"], 2);
        assert_eq!(d["stall_us"], 2_028_900);
        assert_eq!(v["listeners"][0]["netns"], 4026532246u32);
        assert_eq!(v["processes"].as_array().unwrap().len(), 2);
        assert_eq!(v["evicted"]["destinations"], 0);
        assert_eq!(v["evicted"]["containers"], 0);
        let host = &v["containers"][0];
        assert_eq!((&host["container"], &host["role"]), (&Value::Null, &json!("client")), "null: the host");
        assert_eq!(host["attempts"], 11);
        assert_eq!(v["containers"].as_array().unwrap().len(), 2);
        // A replay: the rate fields are there, null.
        assert_eq!(d["stalls_per_s"], Value::Null);
        assert_eq!(v["totals"]["client"]["stalls_per_s"], Value::Null);
        assert_eq!(v["rate_interval_s"], Value::Null);
    }

    #[test]
    fn json_names_each_container() {
        let snap = model_of(&demo_events_in_a_container()).snapshot();
        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_str(&String::from_utf8(out).unwrap()).unwrap();
        let rows = v["containers"].as_array().unwrap();
        let named: Vec<(&Value, &str, u64)> = rows
            .iter()
            .map(|r| (&r["container"], r["role"].as_str().unwrap(), r["attempts"].as_u64().unwrap()))
            .collect();
        // By attempts: the host's first; the id shortened as `docker ps` does.
        let docker = json!("4f1e6d9a0c2b");
        assert_eq!(
            named,
            [
                (&Value::Null, "client", 8),
                (&Value::Null, "server", 8),
                (&docker, "client", 3),
                (&docker, "server", 2)
            ]
        );
        assert_eq!(rows[2]["accepted"], 2, "a cookie request, then two accepted: {}", rows[2]);
        assert_eq!(rows[3]["accepted"], 2, "two server children: {}", rows[3]);
    }

    #[test]
    fn json_carries_the_rates_beside_the_totals() {
        let snap = demo_refreshes(1).snapshot();
        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_str(&String::from_utf8(out).unwrap()).unwrap();
        let d = &v["destinations"][1];
        assert_eq!((d["destination"].as_str(), d["stalls"].as_u64()), (Some("198.18.0.3:8080"), Some(2)));
        // The quiet refresh after the stalls: 0 per second, the totals unchanged.
        assert_eq!((d["attempts_per_s"].as_f64(), d["stalls_per_s"].as_f64()), (Some(0.0), Some(0.0)));
        assert_eq!(d["lost_per_s"].as_f64(), Some(0.0));
        assert_eq!(v["totals"]["client"]["stalls_per_s"].as_f64(), Some(0.0));
        assert_eq!(v["rate_interval_s"].as_f64(), Some(1.0));
        assert_eq!(v["stall_history"], serde_json::json!([0, 0, 0, 0, 0, 1, 1, 0]));
    }

    /// The container table counts each connection once, as the destination and listener
    /// tables do: a container's client connections on one row, its server ones on another
    /// (the host's row summed client and server events: 21 for 11 + 10 connections).
    #[test]
    fn containers_count_each_connection_once() {
        let snap = model_of(&demo_events()).snapshot();
        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_str(&String::from_utf8(out).unwrap()).unwrap();
        let attempts = |table: &str, role: Option<&str>| -> u64 {
            let rows = v[table].as_array().unwrap().iter();
            rows.filter(|r| role.is_none_or(|role| r["role"] == role))
                .map(|r| r["attempts"].as_u64().unwrap())
                .sum()
        };
        assert_eq!(attempts("containers", Some("client")), attempts("destinations", None), "{v}");
        assert_eq!(attempts("containers", Some("server")), attempts("listeners", None), "{v}");
        assert_eq!(attempts("destinations", None), 11);
    }

    /// `kernel_counted.outcomes` reads the same in `top --json` as in the closing summary
    /// (which serializes the whole [`KernelCounted`]): `"client/active_disabled"`.
    #[test]
    fn kernel_counted_outcomes_have_one_form() {
        let counted = KernelCounted {
            outcomes: vec![(Role::Client, Outcome::ActiveDisabled), (Role::Server, Outcome::CookieRequested)],
            namespaces: 1,
            ..KernelCounted::default()
        };
        let want = json!(["client/active_disabled", "server/cookie_requested"]);
        assert_eq!(counted_json(&counted)["outcomes"], want, "top --json");
        assert_eq!(serde_json::to_value(&counted).unwrap()["outcomes"], want, "the closing summary");
    }

    /// `--names`: `--batch` shows the destinations' NAME column (`-` where none is known,
    /// a long one cut as a key is), `--json` their whole `dname` (null where none).
    #[test]
    fn batch_text_and_json_name_destinations() {
        let snap = model_of(&named_demo_events()).snapshot();
        let mut out = Vec::new();
        write_text(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let text = String::from_utf8(out).unwrap();
        let tokens = |first: &str| -> Vec<String> {
            let line =
                text.lines().find(|l| l.starts_with(first)).unwrap_or_else(|| panic!("{first}: {text}"));
            line.split_whitespace().map(String::from).collect()
        };
        assert_eq!(tokens("DESTINATION")[..3], ["DESTINATION", "NAME", "ATTEMPTS"]);
        assert_eq!(tokens("198.18.0.2:8080 ")[..3], ["198.18.0.2:8080", "api.example", "8"]);
        assert_eq!(tokens("198.18.0.3:8080 ")[..3], ["198.18.0.3:8080", "-", "3"]);
        let cut = format!("{}~", &crate::aggregation::top::tests::LONG_NAME[..46]);
        assert_eq!(tokens("[fd00:7f0::2]:8080 ")[..3], ["[fd00:7f0::2]:8080", cut.as_str(), "1"]);
        assert_eq!(tokens("LISTENER")[..3], ["LISTENER", "NETNS", "ATTEMPTS"], "destinations only");

        let mut out = Vec::new();
        write_json(&mut out, "T", &snap, &info(), Sort::Attempts, "").unwrap();
        let v: Value = serde_json::from_str(&String::from_utf8(out).unwrap()).unwrap();
        let named: Vec<(&Value, &Value)> =
            v["destinations"].as_array().unwrap().iter().map(|d| (&d["destination"], &d["dname"])).collect();
        assert_eq!(
            named,
            [
                (&json!("198.18.0.2:8080"), &json!("api.example")),
                (&json!("198.18.0.3:8080"), &Value::Null),
                (&json!("[fd00:7f0::2]:8080"), &json!(crate::aggregation::top::tests::LONG_NAME)),
            ]
        );
        assert!(v["listeners"][0].get("dname").is_none(), "destinations only");
    }
}
