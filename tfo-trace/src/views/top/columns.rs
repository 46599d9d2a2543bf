//! The columns of `top`'s tables, shared by the terminal UI and the plain rows, and which
//! ones to drop first when the terminal is narrow.
//!
//! What a narrow terminal keeps is what an on-call engineer looks for first: how many
//! connections, how many had their SYN-data refused (and why), how many stalled and
//! whether they stall now, what it cost; then the tail latency and the rest. A column only
//! one role fills (NOT_ACKED is the client's, INVALID the server's) goes last in the
//! table of the other role, where it is always 0. The breakpoints this makes, for the
//! destinations' table (a 21-column address): 60 columns keep ATTEMPTS NOT_ACKED STALLS
//! LOST, 80 add STALL/S and CAUSE, 100 LOST/S and P99, 120 the stall graph, 140 ACCEPTED
//! ATT/S P50, 170 COOKIE SAVED NET; the server's columns from 190 (the tests below check
//! them).
use super::rows::{cells, name_cell, View};
use crate::{
    aggregation::top::{Row, RowKey},
    events::Role,
    units::{self, Align},
};
use std::{collections::BTreeMap, sync::Arc};

/// A number column: its title, its width, and how to print it.
pub(crate) struct Column {
    pub title: &'static str,
    pub width: usize,
    /// Lower is kept longer when the terminal is narrow.
    pub priority: u8,
    pub cell: fn(&Row) -> String,
    /// Drawn only on a terminal (a graph): plain rows leave it out.
    pub terminal_only: bool,
    /// The role whose events fill it, if only one does: in the other role's table it is
    /// always 0, and goes last.
    pub role: Option<Role>,
}

fn opt_us(v: Option<u64>) -> String {
    v.map(units::duration_us).unwrap_or_else(|| "-".into())
}

/// Refreshes the per-row graph shows, one character each.
pub(crate) const GRAPH_WIDTH: usize = 20;

/// A graph of stalls per refresh, one character each, oldest first: `·` for none, then
/// eight heights scaled to the largest sample (any stall is at least `▁`).
pub(crate) fn sparkline(samples: &[u32]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = samples.iter().copied().max().unwrap_or(0).max(1);
    samples
        .iter()
        .map(|&n| {
            if n == 0 {
                '·'
            } else {
                let level = (u64::from(n) * 8).div_ceil(u64::from(max)).clamp(1, 8);
                BARS[level as usize - 1]
            }
        })
        .collect()
}

/// In display order. The priorities (see the module's doc): refusals, stalls, time lost,
/// then how they go now, why the SYN-data was refused, the tail latency.
pub(crate) const COLUMNS: [Column; 18] = [
    Column {
        title: "ATTEMPTS",
        width: 8,
        priority: 0,
        cell: |r| r.stats.attempts.to_string(),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "ATT/S",
        width: 7,
        priority: 10,
        cell: |r| units::rate(r.stats.attempts_per_s),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "COOKIE",
        width: 6,
        priority: 12,
        cell: |r| r.stats.cookie_requests.to_string(),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "ACCEPTED",
        width: 8,
        priority: 9,
        cell: |r| r.stats.accepted.to_string(),
        terminal_only: false,
        role: None,
    },
    // The client's refusals: SYN-data its SYN-ACK did not acknowledge (ActiveFail).
    Column {
        title: "NOT_ACKED",
        width: 9,
        priority: 1,
        cell: |r| r.stats.data_not_acked.to_string(),
        terminal_only: false,
        role: Some(Role::Client),
    },
    // Why NOT_ACKED: what most refusals' SYN-ACKs said (docs/outcomes.md).
    Column {
        title: "CAUSE",
        width: 13,
        priority: 5,
        cell: |r| r.stats.refusal_cause.map_or("-", |c| c.name()).to_string(),
        terminal_only: false,
        role: Some(Role::Client),
    },
    Column {
        title: "STALLS",
        width: 6,
        priority: 2,
        cell: |r| r.stats.stalls.to_string(),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "STALL/S",
        width: 7,
        priority: 4,
        cell: |r| units::rate(r.stats.stalls_per_s),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "LOST",
        width: 7,
        priority: 3,
        cell: |r| units::duration_us(r.stats.stall_us),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "LOST/S",
        width: 7,
        priority: 6,
        cell: |r| units::duration_per_s(r.stats.lost_per_s),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "SAVED",
        width: 7,
        priority: 13,
        cell: |r| units::duration_us(r.stats.saved_us),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "NET",
        width: 7,
        priority: 14,
        cell: |r| units::net_us(r.stats.net_us),
        terminal_only: false,
        role: None,
    },
    // The server's refusals: a full TFO queue, a cookie that failed its check.
    Column {
        title: "OVERFLOW",
        width: 8,
        priority: 1,
        cell: |r| r.stats.queue_overflows.to_string(),
        terminal_only: false,
        role: Some(Role::Server),
    },
    Column {
        title: "INVALID",
        width: 7,
        priority: 1,
        cell: |r| r.stats.invalid_cookies.to_string(),
        terminal_only: false,
        role: Some(Role::Server),
    },
    Column {
        title: "ALT_KEY",
        width: 7,
        priority: 15,
        cell: |r| r.stats.backup_key_hits.to_string(),
        terminal_only: false,
        role: Some(Role::Server),
    },
    Column {
        title: "P50",
        width: 7,
        priority: 11,
        cell: |r| opt_us(r.stats.p50_us),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "P99",
        width: 7,
        priority: 7,
        cell: |r| opt_us(r.stats.p99_us),
        terminal_only: false,
        role: None,
    },
    Column {
        title: "STALL_HISTORY",
        width: GRAPH_WIDTH,
        priority: 8,
        cell: |r| sparkline(&r.history.last(GRAPH_WIDTH)),
        terminal_only: true,
        role: None,
    },
];

/// The columns in the order `view`'s table keeps them on a narrow terminal: by priority,
/// those of the role the table is not about last.
fn kept_first(view: View) -> Vec<usize> {
    let other_role = |c: &Column| match (view, c.role) {
        (View::Destinations, Some(Role::Server)) | (View::Listeners, Some(Role::Client)) => 1,
        _ => 0,
    };
    let mut order: Vec<usize> = (0..COLUMNS.len()).collect();
    order.sort_by_key(|&i| (other_role(&COLUMNS[i]), COLUMNS[i].priority));
    order
}

/// The titles of the key columns of a view.
pub(crate) fn key_titles(view: View) -> &'static [&'static str] {
    match view {
        View::Destinations => &["DESTINATION"],
        View::Listeners => &["LISTENER", "NETNS"],
        View::Processes => &["PID", "COMM"],
        View::Containers => &["CONTAINER", "ROLE"],
    }
}

/// Minimum widths of the key columns (addresses grow up to `MAX_KEY_WIDTH`), with the
/// NAME column's if `named`.
fn key_min_widths(view: View, named: bool) -> Vec<usize> {
    let mut mins = match view {
        View::Destinations => vec![21],
        View::Listeners => vec![21, 10],
        View::Processes => vec![7, 15],
        // A container id as `docker ps` shortens it; names grow as addresses do.
        View::Containers => vec![12, 6],
    };
    if named {
        mins.push(NAME_TITLE.len());
    }
    mins
}

/// Whether a table of `view` with `rows` shows the NAME column.
fn named(view: View, rows: &[&Row]) -> bool {
    view == View::Destinations && rows.iter().any(|r| r.name.is_some())
}

/// IPv6 address:port is at most 47 characters; wider keys are cut with `~`.
pub(crate) const MAX_KEY_WIDTH: usize = 47;

/// The destinations' name column (`--names`), after DESTINATION: drawn where a row shown
/// has a name ([`Row::name`]), so a trace without names loses no room to a column of `-`.
pub(crate) const NAME_TITLE: &str = "NAME";

/// The `ip netns` names of the listeners' namespaces, by inode: their NETNS cells.
pub(crate) type NetnsNames = BTreeMap<u32, Arc<str>>;

/// A table layout: key column widths and the indexes of the number columns shown.
pub(crate) struct Layout {
    pub key_widths: Vec<usize>,
    pub columns: Vec<usize>,
    /// Whether the NAME column is drawn ([`NAME_TITLE`]).
    pub named: bool,
    /// The names the NETNS cells take ([`units::netns`]).
    netns_names: NetnsNames,
}

impl Layout {
    /// Every column but the graphs, as wide as the rows need (plain output).
    pub(crate) fn full(view: View, rows: &[&Row], netns_names: &NetnsNames) -> Layout {
        let columns = (0..COLUMNS.len()).filter(|&i| !COLUMNS[i].terminal_only).collect();
        let named = named(view, rows);
        Layout {
            key_widths: key_widths(view, rows, named, netns_names),
            columns,
            named,
            netns_names: netns_names.clone(),
        }
    }

    /// What fits in `width` terminal columns: the key columns (shrunk if they must), then
    /// number columns in the order the view keeps them ([`kept_first`]), shown in display
    /// order.
    pub(crate) fn fit(view: View, rows: &[&Row], width: usize, netns_names: &NetnsNames) -> Layout {
        // The NAME column only where the address keeps at least its own minimum beside it.
        let named_mins = key_min_widths(view, true);
        let named = named(view, rows) && named_mins.iter().sum::<usize>() + named_mins.len() - 1 <= width;
        let mut key_widths = key_widths(view, rows, named, netns_names);
        let mins = key_min_widths(view, named);
        let kept = kept_first(view);
        // The key columns give way, the last first (a destination's name before its
        // address), down to their minimums to leave room for at least the first three
        // numbers (connections, refusals, stalls).
        let room_for_numbers: usize = kept.iter().take(3).map(|&i| COLUMNS[i].width + 1).sum();
        let wanted = key_widths.iter().sum::<usize>() + key_widths.len() - 1 + room_for_numbers;
        let mut over = wanted.saturating_sub(width);
        for (w, min) in key_widths.iter_mut().zip(&mins).rev() {
            let give = w.saturating_sub(*min.min(&width)).min(over);
            *w -= give;
            over -= give;
        }
        let mut used = key_widths.iter().sum::<usize>() + key_widths.len() - 1;
        // In that order, up to the first that does not fit: never a less needed column
        // while a more needed one is left out.
        let mut columns = Vec::new();
        for i in kept {
            if used + 1 + COLUMNS[i].width > width {
                break;
            }
            used += 1 + COLUMNS[i].width;
            columns.push(i);
        }
        columns.sort_unstable();
        Layout { key_widths, columns, named, netns_names: netns_names.clone() }
    }

    pub(crate) fn header(&self, view: View) -> String {
        let mut keys: Vec<String> = key_titles(view).iter().map(|t| (*t).to_string()).collect();
        if self.named {
            keys.push(NAME_TITLE.into());
        }
        self.line(&keys, |i| COLUMNS[i].title.to_string())
    }

    pub(crate) fn row(&self, row: &Row) -> String {
        self.line(&key_cells(row, self.named, &self.netns_names), |i| (COLUMNS[i].cell)(row))
    }

    /// Key cells cut to their columns, numbers right-aligned in theirs: by the terminal
    /// columns each takes ([`units::cut`], [`units::pad`]), so a wide character in a name
    /// never pushes a row past its width.
    fn line(&self, keys: &[String], cell: impl Fn(usize) -> String) -> String {
        let mut out = String::new();
        for (k, w) in keys.iter().zip(&self.key_widths) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&units::pad(&units::cut(k, *w), *w, Align::Left));
        }
        for &i in &self.columns {
            out.push(' ');
            // A number is never cut (a script reads it whole); one wider than its column
            // (a hundred million attempts) pushes the rest along.
            out.push_str(&units::pad(&cell(i), COLUMNS[i].width, Align::Right));
        }
        out.trim_end().to_string()
    }
}

/// The key cells of a row, and its NAME if the column is drawn.
fn key_cells(row: &Row, named: bool, netns_names: &NetnsNames) -> Vec<String> {
    let mut cells = cells(&row.key, netns_names);
    if named {
        cells.push(name_cell(row));
    }
    cells
}

fn key_widths(view: View, rows: &[&Row], named: bool, netns_names: &NetnsNames) -> Vec<usize> {
    let mins = key_min_widths(view, named);
    let titles = key_titles(view).iter().copied().chain(named.then_some(NAME_TITLE));
    let mut w: Vec<usize> = titles.zip(&mins).map(|(t, m)| t.len().max(*m)).collect();
    for r in rows {
        for (i, c) in key_cells(r, named, netns_names).iter().enumerate() {
            if let Some(slot) = w.get_mut(i) {
                *slot = (*slot).max(units::width(c).min(MAX_KEY_WIDTH));
            }
        }
    }
    w
}

/// Key cells of a row for JSON: named fields instead of columns. A destination's name
/// (`--names`, [`Row::name`]) is `dname`, as in an event; a listener's namespace `netns`
/// (its inode) and `netns_name`; null where none is known.
pub(crate) fn key_json(row: &Row, netns_names: &NetnsNames) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match &row.key {
        RowKey::Destination(a) => {
            m.insert("destination".into(), a.to_string().into());
            m.insert("dname".into(), row.name.as_deref().into());
        }
        RowKey::Listener { addr, netns } => {
            m.insert("listener".into(), addr.to_string().into());
            m.insert("netns".into(), (*netns).into());
            m.insert("netns_name".into(), netns_names.get(netns).map(|n| &**n).into());
        }
        RowKey::Process { pid, comm } => {
            m.insert("pid".into(), (*pid).into());
            m.insert("comm".into(), (**comm).into());
        }
        RowKey::Container { label, role } => {
            // null: the host (no container, unit or cgroup below the root).
            m.insert("container".into(), label.as_deref().into());
            m.insert("role".into(), role.name().into());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::super::rows::rows;
    use super::*;
    use crate::{
        aggregation::top::{
            model_of,
            tests::{demo_events, named_demo_events, LONG_NAME},
        },
        cli::Sort,
        events::{Event, Outcome},
    };

    fn none() -> NetnsNames {
        NetnsNames::new()
    }

    fn titles(l: &Layout) -> Vec<&'static str> {
        l.columns.iter().map(|&i| COLUMNS[i].title).collect()
    }

    #[test]
    fn narrow_layouts_drop_low_priority_columns_first() {
        let s = model_of(&demo_events()).snapshot();
        let rows = rows(&s, View::Destinations, Sort::Attempts, "");
        let wide = Layout::fit(View::Destinations, &rows, 200, &none());
        assert_eq!(wide.columns.len(), COLUMNS.len(), "everything fits in 200");
        let narrow = Layout::fit(View::Destinations, &rows, 60, &none());
        // CAUSE and the rest do not fit; COOKIE, lower in priority but narrower, would: it
        // is not shown while STALL/S, CAUSE and the others more needed are not.
        assert_eq!(titles(&narrow), ["ATTEMPTS", "NOT_ACKED", "STALLS", "LOST"]);
        for w in [20, 40, 60, 80, 100, 120, 150, 200] {
            let l = Layout::fit(View::Destinations, &rows, w, &none());
            for r in &rows {
                assert!(units::width(&l.row(r)) <= w, "{w}: {:?}", l.row(r));
            }
            assert!(units::width(&l.header(View::Destinations)) <= w);
        }
        let full = Layout::full(View::Destinations, &rows, &none());
        assert!(full.header(View::Destinations).starts_with("DESTINATION"));
        assert!(!full.header(View::Destinations).contains("STALL_HISTORY"), "no graph in plain rows");
        assert_eq!(full.columns.len(), COLUMNS.len() - 1);
        assert!(full.row(rows[0]).starts_with("198.18.0.2:8080"));
    }

    /// Issue 55, item 4: at 80 columns a row read ATTEMPTS 5, STALLS 0, LOST 0 for a
    /// destination whose every SYN-data was refused. The columns each width keeps: the
    /// refusals, stalls and time lost first, then how they go now and why; a column of
    /// the other role's last (bandwhich-style breakpoints, one per step of width).
    #[test]
    fn breakpoints_keep_refusals_stalls_and_time_lost_first() {
        let s = model_of(&demo_events()).snapshot();
        let at = |view, w| {
            let rows = rows(&s, view, Sort::Attempts, "");
            titles(&Layout::fit(view, &rows, w, &none()))
        };
        let dest = |w| at(View::Destinations, w);
        assert_eq!(dest(60), ["ATTEMPTS", "NOT_ACKED", "STALLS", "LOST"]);
        assert_eq!(dest(80), ["ATTEMPTS", "NOT_ACKED", "CAUSE", "STALLS", "STALL/S", "LOST"]);
        assert_eq!(
            dest(100),
            ["ATTEMPTS", "NOT_ACKED", "CAUSE", "STALLS", "STALL/S", "LOST", "LOST/S", "P99"]
        );
        assert_eq!(
            dest(120),
            ["ATTEMPTS", "NOT_ACKED", "CAUSE", "STALLS", "STALL/S", "LOST", "LOST/S", "P99", "STALL_HISTORY"]
        );
        let d140 = dest(140);
        assert!(["ATT/S", "ACCEPTED", "P50"].iter().all(|t| d140.contains(t)), "{d140:?}");
        assert!(!d140.contains(&"COOKIE"), "{d140:?}");
        let d170 = dest(170);
        assert!(["COOKIE", "SAVED", "NET"].iter().all(|t| d170.contains(t)), "{d170:?}");
        assert!(
            !d170.iter().any(|t| ["OVERFLOW", "INVALID", "ALT_KEY"].contains(t)),
            "server's last: {d170:?}"
        );
        assert_eq!(dest(190).len(), COLUMNS.len());
        // A listener: the server's refusals after ATTEMPTS, the client's columns last.
        let listen = |w| at(View::Listeners, w);
        assert_eq!(listen(80), ["ATTEMPTS", "STALLS", "LOST", "OVERFLOW", "INVALID"]);
        assert!(!listen(150).iter().any(|t| ["NOT_ACKED", "CAUSE"].contains(t)), "{:?}", listen(150));
        // Processes and containers hold both roles: both refusals early.
        let procs = at(View::Processes, 80);
        assert_eq!(procs[..4], ["ATTEMPTS", "NOT_ACKED", "STALLS", "LOST"], "{procs:?}");
        assert!(procs.contains(&"OVERFLOW") && procs.contains(&"INVALID"), "{procs:?}");
    }

    /// `--names`: a NAME column after DESTINATION where a row has a name (`-` for one
    /// without), cut with `~` past the widest key; on a narrow terminal it gives way before
    /// the address does, and goes where even its title would not fit.
    #[test]
    fn named_destinations_get_a_name_column_that_gives_way_first() {
        let s = model_of(&named_demo_events()).snapshot();
        let rows = rows(&s, View::Destinations, Sort::Attempts, "");
        let full = Layout::full(View::Destinations, &rows, &none());
        assert_eq!(full.key_widths, [21, MAX_KEY_WIDTH]);
        assert!(full
            .header(View::Destinations)
            .starts_with(&format!("{:<21} {:<47} ATTEMPTS", "DESTINATION", "NAME")));
        let texts: Vec<String> = rows.iter().map(|r| full.row(r)).collect();
        assert!(
            texts[0].starts_with(&format!("{:<21} {:<47} {:>8} ", "198.18.0.2:8080", "api.example", 8)),
            "{texts:?}"
        );
        assert!(
            texts[1].starts_with(&format!("{:<21} {:<47} {:>8} ", "198.18.0.3:8080", "-", 3)),
            "{texts:?}"
        );
        let cut = format!("{}~", &LONG_NAME[..46]);
        assert!(texts[2].starts_with(&format!("{:<21} {cut} {:>8} ", "[fd00:7f0::2]:8080", 1)), "{texts:?}");

        let narrow = Layout::fit(View::Destinations, &rows, 60, &none());
        assert_eq!(narrow.key_widths, [21, 12], "the name gave way, the address did not");
        assert!(
            narrow.row(rows[2]).starts_with("[fd00:7f0::2]:8080    a-very-long~ "),
            "{}",
            narrow.row(rows[2])
        );
        for w in [20, 25, 26, 40, 60, 80, 100, 120, 150, 200] {
            let l = Layout::fit(View::Destinations, &rows, w, &none());
            assert_eq!(l.named, w >= 26, "{w}");
            for r in &rows {
                assert!(units::width(&l.row(r)) <= w, "{w}: {:?}", l.row(r));
            }
            assert!(units::width(&l.header(View::Destinations)) <= w);
        }
        // No name anywhere (no `--names`): no column, as before.
        let plain = model_of(&demo_events()).snapshot();
        let plain_rows = super::super::rows::rows(&plain, View::Destinations, Sort::Attempts, "");
        assert!(!Layout::full(View::Destinations, &plain_rows, &none())
            .header(View::Destinations)
            .contains("NAME"));
        // Nor on the other tables.
        let listeners = super::super::rows::rows(&s, View::Listeners, Sort::Attempts, "");
        assert!(!Layout::full(View::Listeners, &listeners, &none()).named);
    }

    /// Issue 55, item 5: a process named in wide characters (CJK: two columns each) kept
    /// its row to the terminal's width only by chance: cells are cut and padded by the
    /// columns they take, so the numbers stay under their titles.
    #[test]
    fn wide_characters_keep_every_cell_under_its_title() {
        use crate::aggregation::top::tests::client;
        let events: Vec<Event> = ["数据库客户", "aデータベ", "curl"]
            .iter()
            .enumerate()
            .map(|(i, comm)| Event {
                pid: 300 + i as u32,
                comm: (*comm).into(),
                ..client(Outcome::Accepted, 2, 8080, 130, 0)
            })
            .collect();
        let s = model_of(&events).snapshot();
        let rows = rows(&s, View::Processes, Sort::Name, "");
        for w in [40, 60, 80, 120, 200] {
            let l = Layout::fit(View::Processes, &rows, w, &none());
            let header = l.header(View::Processes);
            // The header is ASCII: a byte is a column.
            let end = header.find("ATTEMPTS").map(|at| at + "ATTEMPTS".len());
            for r in &rows {
                let line = l.row(r);
                assert!(units::width(&line) <= w, "{w}: {line:?}");
                // The count's last digit right under the title's last letter.
                let mut columns = 0;
                let upto: String = line
                    .chars()
                    .take_while(|c| {
                        columns += unicode_width::UnicodeWidthChar::width(*c).unwrap_or(0);
                        Some(columns) <= end
                    })
                    .collect();
                assert!(upto.ends_with('1'), "{w}: {line:?} under {header:?}");
            }
        }
        let l = Layout::fit(View::Processes, &rows, 80, &none());
        let first = rows.iter().find(|r| matches!(&r.key, RowKey::Process { pid: 300, .. })).unwrap();
        assert!(l.row(first).starts_with("300     数据库客户      "), "{:?}", l.row(first));
    }

    #[test]
    fn sparkline_scales_to_the_largest_and_keeps_any_stall_visible() {
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[0, 0, 0]), "···");
        assert_eq!(sparkline(&[0, 1, 8, 4, 0]), "·▁█▄·");
        assert_eq!(sparkline(&[1, 1000]), "▁█", "a single stall beside many still shows");
    }
}
