//! The Grafana dashboard (deploy/grafana/tfo-trace.json) tried as a user would find it
//! broken: a real Prometheus scrapes the real exporter while the lab makes a stalling and a
//! healthy destination, and every panel's every query, with the dashboard's template
//! variables filled in as Grafana fills them (their own queries asked of the same
//! Prometheus), must return data: an empty panel fails and is named. Beside it, what
//! Grafana needs of the JSON (the data source a variable, ids unique, an expression in
//! every target, no panel over another), and that the JSON is what its generator
//! (deploy/grafana/dashboard.py, Grafana's foundation SDK) makes.
use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::Value;

use super::{client, lab_exporter, stalls_reach_prometheus, TwoDestinations};
use crate::common::{
    self,
    prometheus::{self, now_unix, url_encode, Prometheus},
    TempDir,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn dashboard() -> Value {
    let path = repo().join("deploy/grafana/tfo-trace.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The panels that show data (rows hold none).
fn panels(d: &Value) -> Vec<&Value> {
    d["panels"].as_array().expect("panels").iter().filter(|p| p["type"] != "row").collect()
}

fn variables(d: &Value) -> &Vec<Value> {
    d["templating"]["list"].as_array().expect("templating.list")
}

/// Grafana's own variables a query may use.
const BUILT_IN: &[&str] = &["__rate_interval", "__interval", "__range"];

/// The names of the `$name` / `${name}` variables `text` uses.
fn variables_used(text: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let name: String =
            rest.trim_start_matches('{').chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() {
            used.insert(name);
        }
    }
    used
}

/// What Grafana needs of the JSON to import it and run every panel on any Prometheus data
/// source: one problem per line.
fn structure_problems(d: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let vars = variables(d);
    let names: BTreeSet<&str> = vars.iter().filter_map(|v| v["name"].as_str()).collect();
    let picks_prometheus = |v: &Value| v["type"] == "datasource" && v["query"] == "prometheus";
    if !vars.iter().any(|v| v["name"] == "datasource" && picks_prometheus(v)) {
        problems.push("no template variable `datasource` of type datasource picking prometheus".into());
    }
    let on_the_variable = |what: String, ds: &Value, problems: &mut Vec<String>| {
        if ds["type"] != "prometheus" || ds["uid"] != "${datasource}" {
            problems.push(format!("{what}: data source {ds}, not the `datasource` variable"));
        }
    };
    for v in vars.iter().filter(|v| v["type"] == "query") {
        let name = v["name"].as_str().unwrap_or("?");
        on_the_variable(format!("variable {name}"), &v["datasource"], &mut problems);
        let query = v["query"].as_str().unwrap_or("");
        for used in variables_used(query) {
            if !names.contains(used.as_str()) {
                problems.push(format!("variable {name}'s query uses ${used}, which is not defined"));
            }
        }
    }
    let mut ids = BTreeSet::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        let title = p["title"].as_str().unwrap_or("(no title)");
        match p["id"].as_u64() {
            Some(id) if !ids.insert(id) => problems.push(format!("panel {title}: id {id} used twice")),
            Some(_) => {}
            None => problems.push(format!("panel {title}: no id")),
        }
    }
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for p in d["panels"].as_array().into_iter().flatten() {
        let title = p["title"].as_str().unwrap_or("(no title)").to_string();
        let g = &p["gridPos"];
        let (x, y, w, h) = (g["x"].as_u64(), g["y"].as_u64(), g["w"].as_u64(), g["h"].as_u64());
        let (Some(x), Some(y), Some(w), Some(h)) = (x, y, w, h) else {
            problems.push(format!("panel {title}: no gridPos"));
            continue;
        };
        if x + w > 24 {
            problems.push(format!("panel {title}: wider than the grid (x {x}, w {w})"));
        }
        for cell in (x..x + w).flat_map(|cx| (y..y + h).map(move |cy| (cx, cy))) {
            if let Some(other) = cells.insert(cell, title.clone()) {
                problems.push(format!("panel {title} lies over panel {other}"));
                break;
            }
        }
    }
    for p in panels(d) {
        let title = p["title"].as_str().unwrap_or("");
        if title.is_empty() || p["description"].as_str().unwrap_or("").is_empty() {
            problems.push(format!("panel {}: no title or no description", p["id"]));
        }
        on_the_variable(format!("panel {title}"), &p["datasource"], &mut problems);
        if !p["options"].is_object() || !p["fieldConfig"]["defaults"].is_object() {
            problems.push(format!("panel {title}: options or fieldConfig.defaults not an object"));
        }
        let targets = p["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            problems.push(format!("panel {title}: no query"));
        }
        let mut refs = BTreeSet::new();
        for t in &targets {
            let ref_id = t["refId"].as_str().unwrap_or("");
            if ref_id.is_empty() || !refs.insert(ref_id.to_string()) {
                problems.push(format!("panel {title}: refId {ref_id:?} missing or used twice"));
            }
            on_the_variable(format!("panel {title} query {ref_id}"), &t["datasource"], &mut problems);
            let expr = t["expr"].as_str().unwrap_or("");
            if expr.trim().is_empty() {
                problems.push(format!("panel {title} query {ref_id}: no expr"));
            }
            for used in variables_used(expr) {
                if !names.contains(used.as_str()) && !BUILT_IN.contains(&used.as_str()) {
                    problems.push(format!("panel {title} query {ref_id} uses ${used}, which is not defined"));
                }
            }
        }
    }
    problems
}

pub(super) fn dashboard_has_what_grafana_needs() {
    let d = dashboard();
    let problems = structure_problems(&d);
    assert!(problems.is_empty(), "deploy/grafana/tfo-trace.json:\n{}", problems.join("\n"));
    eprintln!("{} panels, {} variables", panels(&d).len(), variables(&d).len());
}

/// The committed JSON is what deploy/grafana/dashboard.py makes (with the SDK that `cargo
/// xtask setup` installs from PyPI): nobody edited the output by hand.
pub(super) fn dashboard_is_what_its_generator_makes() {
    let sdk = Command::new("python3").args(["-c", "import grafana_foundation_sdk"]).output();
    if !sdk.is_ok_and(|o| o.status.success()) {
        common::skip("no grafana-foundation-sdk for python3: `cargo xtask setup` (or `cargo xtask grafana`) installs it");
    }
    let out = Command::new("python3").arg(repo().join("deploy/grafana/dashboard.py")).output().unwrap();
    assert!(out.status.success(), "dashboard.py: {}", String::from_utf8_lossy(&out.stderr));
    let made = String::from_utf8_lossy(&out.stdout);
    let committed = std::fs::read_to_string(repo().join("deploy/grafana/tfo-trace.json")).unwrap();
    if let Some((n, (a, b))) = made.lines().zip(committed.lines()).enumerate().find(|(_, (a, b))| a != b) {
        panic!(
            "deploy/grafana/tfo-trace.json line {} is {b:?}, dashboard.py makes {a:?}: run `cargo xtask grafana`",
            n + 1
        );
    }
    assert_eq!(made.lines().count(), committed.lines().count(), "run `cargo xtask grafana`");
}

/// A multi-value variable as Grafana's Prometheus data source puts it into a regex
/// matcher: the All value where one is set, else each value with the regex's special
/// characters escaped (and the escape doubled inside PromQL's string), `(a|b)` for more
/// than one.
fn regex_of(values: &[String], all_value: Option<&str>, all: bool) -> String {
    if let (true, Some(all_value)) = (all, all_value) {
        return all_value.to_string();
    }
    let escaped: Vec<String> = values
        .iter()
        .map(|v| {
            v.chars()
                .map(|c| if "\\^$.|?*+()[]{}'".contains(c) { format!("\\\\{c}") } else { c.to_string() })
                .collect()
        })
        .collect();
    match escaped.as_slice() {
        [one] => one.clone(),
        many => format!("({})", many.join("|")),
    }
}

/// `text` with every variable replaced: the dashboard's, then Grafana's own
/// ($__rate_interval: 4 scrape intervals of the data source's default 15 s).
fn fill(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    // Longest names first, so `$instance` never eats part of a longer name.
    let mut names: Vec<&String> = values.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for name in names {
        out = out.replace(&format!("${{{name}}}"), &values[name]).replace(&format!("${name}"), &values[name]);
    }
    out.replace("$__rate_interval", "1m")
}

/// `label_values(SELECTOR, LABEL)` asked of Prometheus as Grafana asks it (the label's
/// values among the series the selector matches).
fn label_values(prom: &Prometheus, query: &str) -> Vec<String> {
    let inner = query
        .trim()
        .strip_prefix("label_values(")
        .and_then(|q| q.strip_suffix(')'))
        .expect("label_values(...)");
    let (selector, label) = inner.rsplit_once(',').expect("label_values(SELECTOR, LABEL)");
    let target = format!("/api/v1/label/{}/values?match[]={}", label.trim(), url_encode(selector.trim()));
    let (status, body) = prom.get(&target).expect("prometheus answers");
    assert_eq!(status, 200, "{target}: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    v["data"].as_array().into_iter().flatten().filter_map(|s| s.as_str().map(str::to_string)).collect()
}

/// The series selectors of `expr` (`tfo_trace_..{...}`): each must find series of its own,
/// since `or ... * 0` (a destination's 0 where it has none of a series) would hide one that
/// finds none at all, a misspelt name say.
fn selectors(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("tfo_trace_") {
        rest = &rest[at..];
        let name_len = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
        let end = match rest[name_len..].starts_with('{') {
            true => rest.find('}').map_or(rest.len(), |e| e + 1),
            false => name_len,
        };
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    out
}

/// One query's answer: each series' labels and value, and whether any value is a number.
fn answer(prom: &Prometheus, expr: &str) -> (Vec<String>, bool) {
    let result = prom.query_vector(expr);
    let mut finite = false;
    let lines = result
        .iter()
        .map(|s| {
            let value = s["value"][1].as_str().unwrap_or("?");
            finite |= value.parse::<f64>().is_ok_and(f64::is_finite);
            format!("{} = {value}", s["metric"])
        })
        .collect();
    (lines, finite)
}

/// The value of the series of `result` whose `destination` is `dst`.
fn of_destination(prom: &Prometheus, expr: &str, dst: SocketAddr) -> Option<f64> {
    let result = prom.query_vector(expr);
    let s = result.iter().find(|s| s["metric"]["destination"] == dst.to_string().as_str())?;
    s["value"][1].as_str()?.parse().ok()
}

pub(super) fn every_dashboard_panel_shows_the_lab() {
    require_kernel!();
    let (prometheus, _) = match prometheus::binaries() {
        Ok(b) => b,
        Err(why) => common::skip(why),
    };
    let d = dashboard();
    let dir = TempDir::new("dashboard");
    let two = TwoDestinations::create();
    let (lab, clean, blocked) = (&two.lab, two.clean, two.blocked);
    let (exporter, tracer) = lab_exporter(lab, &["--top-destinations", "2"]);
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
         scrape_configs:\n  - job_name: tfo-trace\n    static_configs:\n      - targets: ['{exporter}']\n"
    );
    let prom = Prometheus::start(&prometheus, &dir.0, &config, None);
    prom.wait_for_scrape_after("tfo-trace", now_unix());

    // Each connection to the stalling destination waits a second; the other's are accepted.
    two.cookies_then_stall_blocked();
    let stalling = lab.spawn_client(common::exe(), &client(blocked, 4, 0)).unwrap();
    let healthy = lab.spawn_client(common::exe(), &client(clean, 20, 200)).unwrap();
    let stalled = stalling.wait(common::HANG_LIMIT).unwrap();
    let fine = healthy.wait(common::HANG_LIMIT).unwrap();
    assert_eq!(stalled.ok_count() + fine.ok_count(), 24, "every lab connection completed");
    let dropped = lab.middlebox_dropped().unwrap();
    assert_eq!(dropped, 4, "one SYN-data dropped per connection");
    stalls_reach_prometheus(&prom, blocked, dropped);
    prom.wait_for_scrape_after("tfo-trace", now_unix());

    // The variables, in order, each from its own query with those before it filled in
    // (All picked, as the dashboard opens).
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    let mut empty = Vec::new();
    for v in variables(&d).iter().filter(|v| v["type"] == "query") {
        let name = v["name"].as_str().unwrap().to_string();
        let query = fill(v["query"].as_str().unwrap(), &values);
        let found = label_values(&prom, &query);
        eprintln!("variable {name}: {query} -> {found:?}");
        if found.is_empty() {
            empty.push(format!("variable {name} ({query}) has no value"));
        }
        values.insert(name, regex_of(&found, v["allValue"].as_str(), true));
    }
    assert!(empty.is_empty(), "{}", empty.join("\n"));
    let destinations = label_values(
        &prom,
        &fill(
            variables(&d).iter().find(|v| v["name"] == "destination").unwrap()["query"].as_str().unwrap(),
            &values,
        ),
    );
    for dst in [clean, blocked] {
        assert!(
            destinations.contains(&dst.to_string()),
            "the destination variable offers {dst}: {destinations:?}"
        );
    }
    // With All picked, and with only the stalling destination picked.
    let mut alone = values.clone();
    alone.insert("destination".into(), regex_of(&[blocked.to_string()], None, false));

    for p in panels(&d) {
        let title = p["title"].as_str().unwrap();
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for (picked, vars) in [("all", &values), ("the stalling destination", &alone)] {
                if picked != "all" && !expr.contains("$destination") {
                    continue;
                }
                let filled = fill(expr, vars);
                let (lines, finite) = answer(&prom, &filled);
                eprintln!("panel {title:?} query {} ({picked}): {filled}", t["refId"]);
                for l in &lines {
                    eprintln!("    {l}");
                }
                if !finite {
                    empty.push(format!(
                        "panel {title:?} query {} ({picked}) returns no data: {filled}",
                        t["refId"]
                    ));
                }
                if picked == "all" {
                    for selector in selectors(&filled) {
                        if prom.query_vector(&selector).is_empty() {
                            empty.push(format!(
                                "panel {title:?} query {}: {selector} finds no series",
                                t["refId"]
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(empty.is_empty(), "empty panels:\n{}", empty.join("\n"));

    // What the panels say is what the lab did: the stalls and the time lost are the
    // stalling destination's, every SYN-data to the healthy one was accepted, none to the
    // other.
    let query_of = |title: &str, ref_id: &str| {
        let p = panels(&d)
            .into_iter()
            .find(|p| p["title"] == title)
            .unwrap_or_else(|| panic!("no panel {title:?}"));
        let t = p["targets"].as_array().unwrap().iter().find(|t| t["refId"] == ref_id).unwrap();
        fill(t["expr"].as_str().unwrap(), &values)
    };
    let stall_rate = query_of("Stalls per second", "A");
    assert!(of_destination(&prom, &stall_rate, blocked).is_some_and(|r| r > 0.0), "{stall_rate}");
    assert_eq!(of_destination(&prom, &stall_rate, clean), Some(0.0), "{stall_rate}");
    let lost = query_of("Time lost to stalls", "A");
    assert!(of_destination(&prom, &lost, blocked).is_some_and(|r| r > 0.0), "{lost}");
    let acceptance = query_of("SYN-data acceptance", "A");
    assert_eq!(of_destination(&prom, &acceptance, clean), Some(1.0), "{acceptance}");
    assert_eq!(of_destination(&prom, &acceptance, blocked), Some(0.0), "{acceptance}");
    drop(prom);
    let _ = tracer.stop_lines();
}
