//! The columns of `top`'s tables, shared by the terminal UI and the plain rows, and which
//! ones to drop first when the terminal is narrow.
use super::rows::{cells, name_cell, View};
use crate::{
    aggregation::top::{Row, RowKey},
    units,
};

/// A number column: its title, its width, and how to print it.
pub(crate) struct Column {
    pub title: &'static str,
    pub width: usize,
    /// Lower is kept longer when the terminal is narrow.
    pub priority: u8,
    pub cell: fn(&Row) -> String,
    /// Drawn only on a terminal (a graph): plain rows leave it out.
    pub terminal_only: bool,
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

/// In display order. The priorities put what an on-call engineer looks for first: how
/// many connections, how many stalled and whether they stall now, what it cost, the tail
/// latency.
pub(crate) const COLUMNS: [Column; 18] = [
    Column {
        title: "ATTEMPTS",
        width: 8,
        priority: 0,
        cell: |r| r.stats.attempts.to_string(),
        terminal_only: false,
    },
    Column {
        title: "ATT/S",
        width: 7,
        priority: 6,
        cell: |r| units::rate(r.stats.attempts_per_s),
        terminal_only: false,
    },
    Column {
        title: "COOKIE",
        width: 6,
        priority: 10,
        cell: |r| r.stats.cookie_requests.to_string(),
        terminal_only: false,
    },
    Column {
        title: "ACCEPTED",
        width: 8,
        priority: 7,
        cell: |r| r.stats.accepted.to_string(),
        terminal_only: false,
    },
    Column {
        title: "NOT_ACKED",
        width: 9,
        priority: 11,
        cell: |r| r.stats.data_not_acked.to_string(),
        terminal_only: false,
    },
    // Why NOT_ACKED: what most refusals' SYN-ACKs said (docs/outcomes.md).
    Column {
        title: "CAUSE",
        width: 13,
        priority: 17,
        cell: |r| r.stats.refusal_cause.map_or("-", |c| c.name()).to_string(),
        terminal_only: false,
    },
    Column {
        title: "STALLS",
        width: 6,
        priority: 1,
        cell: |r| r.stats.stalls.to_string(),
        terminal_only: false,
    },
    Column {
        title: "STALL/S",
        width: 7,
        priority: 2,
        cell: |r| units::rate(r.stats.stalls_per_s),
        terminal_only: false,
    },
    Column {
        title: "LOST",
        width: 7,
        priority: 3,
        cell: |r| units::duration_us(r.stats.stall_us),
        terminal_only: false,
    },
    Column {
        title: "LOST/S",
        width: 7,
        priority: 5,
        cell: |r| units::duration_per_s(r.stats.lost_per_s),
        terminal_only: false,
    },
    Column {
        title: "SAVED",
        width: 7,
        priority: 15,
        cell: |r| units::duration_us(r.stats.saved_us),
        terminal_only: false,
    },
    Column {
        title: "NET",
        width: 7,
        priority: 16,
        cell: |r| units::net_us(r.stats.net_us),
        terminal_only: false,
    },
    Column {
        title: "OVERFLOW",
        width: 8,
        priority: 12,
        cell: |r| r.stats.queue_overflows.to_string(),
        terminal_only: false,
    },
    Column {
        title: "INVALID",
        width: 7,
        priority: 13,
        cell: |r| r.stats.invalid_cookies.to_string(),
        terminal_only: false,
    },
    Column {
        title: "ALT_KEY",
        width: 7,
        priority: 14,
        cell: |r| r.stats.backup_key_hits.to_string(),
        terminal_only: false,
    },
    Column { title: "P50", width: 7, priority: 9, cell: |r| opt_us(r.stats.p50_us), terminal_only: false },
    Column { title: "P99", width: 7, priority: 4, cell: |r| opt_us(r.stats.p99_us), terminal_only: false },
    Column {
        title: "STALL_HISTORY",
        width: GRAPH_WIDTH,
        priority: 8,
        cell: |r| sparkline(&r.history.last(GRAPH_WIDTH)),
        terminal_only: true,
    },
];

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

/// A table layout: key column widths and the indexes of the number columns shown.
pub(crate) struct Layout {
    pub key_widths: Vec<usize>,
    pub columns: Vec<usize>,
    /// Whether the NAME column is drawn ([`NAME_TITLE`]).
    pub named: bool,
}

impl Layout {
    /// Every column but the graphs, as wide as the rows need (plain output).
    pub(crate) fn full(view: View, rows: &[&Row]) -> Layout {
        let columns = (0..COLUMNS.len()).filter(|&i| !COLUMNS[i].terminal_only).collect();
        let named = named(view, rows);
        Layout { key_widths: key_widths(view, rows, named), columns, named }
    }

    /// What fits in `width` characters: the key columns (shrunk if they must), then number
    /// columns by priority, shown in display order.
    pub(crate) fn fit(view: View, rows: &[&Row], width: usize) -> Layout {
        // The NAME column only where the address keeps at least its own minimum beside it.
        let named_mins = key_min_widths(view, true);
        let named = named(view, rows) && named_mins.iter().sum::<usize>() + named_mins.len() - 1 <= width;
        let mut key_widths = key_widths(view, rows, named);
        let mins = key_min_widths(view, named);
        // The key columns give way, the last first (a destination's name before its
        // address), down to their minimums to leave room for at least the top-priority
        // numbers (ATTEMPTS, STALLS, STALL/S).
        let room_for_numbers: usize = COLUMNS.iter().filter(|c| c.priority <= 2).map(|c| c.width + 1).sum();
        let wanted = key_widths.iter().sum::<usize>() + key_widths.len() - 1 + room_for_numbers;
        let mut over = wanted.saturating_sub(width);
        for (w, min) in key_widths.iter_mut().zip(&mins).rev() {
            let give = w.saturating_sub(*min.min(&width)).min(over);
            *w -= give;
            over -= give;
        }
        let mut used = key_widths.iter().sum::<usize>() + key_widths.len() - 1;
        let mut by_priority: Vec<usize> = (0..COLUMNS.len()).collect();
        by_priority.sort_by_key(|&i| COLUMNS[i].priority);
        // In priority order, up to the first that does not fit: never a less needed column
        // while a more needed one is left out.
        let mut columns = Vec::new();
        for i in by_priority {
            if used + 1 + COLUMNS[i].width > width {
                break;
            }
            used += 1 + COLUMNS[i].width;
            columns.push(i);
        }
        columns.sort_unstable();
        Layout { key_widths, columns, named }
    }

    pub(crate) fn header(&self, view: View) -> String {
        let mut keys: Vec<String> = key_titles(view).iter().map(|t| (*t).to_string()).collect();
        if self.named {
            keys.push(NAME_TITLE.into());
        }
        self.line(&keys, |i| COLUMNS[i].title.to_string())
    }

    pub(crate) fn row(&self, row: &Row) -> String {
        self.line(&key_cells(row, self.named), |i| (COLUMNS[i].cell)(row))
    }

    fn line(&self, keys: &[String], cell: impl Fn(usize) -> String) -> String {
        let mut out = String::new();
        for (k, w) in keys.iter().zip(&self.key_widths) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("{:<w$}", cut(k, *w), w = *w));
        }
        for &i in &self.columns {
            out.push_str(&format!(" {:>w$}", cell(i), w = COLUMNS[i].width));
        }
        out.trim_end().to_string()
    }
}

/// The key cells of a row, and its NAME if the column is drawn.
fn key_cells(row: &Row, named: bool) -> Vec<String> {
    let mut cells = cells(&row.key);
    if named {
        cells.push(name_cell(row));
    }
    cells
}

fn key_widths(view: View, rows: &[&Row], named: bool) -> Vec<usize> {
    let mins = key_min_widths(view, named);
    let titles = key_titles(view).iter().copied().chain(named.then_some(NAME_TITLE));
    let mut w: Vec<usize> = titles.zip(&mins).map(|(t, m)| t.len().max(*m)).collect();
    for r in rows {
        for (i, c) in key_cells(r, named).iter().enumerate() {
            if let Some(slot) = w.get_mut(i) {
                *slot = (*slot).max(c.chars().count().min(MAX_KEY_WIDTH));
            }
        }
    }
    w
}

/// Cuts `s` to `w` characters, marking the cut with `~` so a cut address is never mistaken
/// for a whole one.
fn cut(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut t: String = s.chars().take(w - 1).collect();
    t.push('~');
    t
}

/// Key cells of a row for JSON: named fields instead of columns. A destination's name
/// (`--names`, [`Row::name`]) is `dname`, as in an event; null where none is known.
pub(crate) fn key_json(row: &Row) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match &row.key {
        RowKey::Destination(a) => {
            m.insert("destination".into(), a.to_string().into());
            m.insert("dname".into(), row.name.as_deref().into());
        }
        RowKey::Listener { addr, netns } => {
            m.insert("listener".into(), addr.to_string().into());
            m.insert("netns".into(), (*netns).into());
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
    };

    #[test]
    fn narrow_layouts_drop_low_priority_columns_first() {
        let s = model_of(&demo_events()).snapshot();
        let rows = rows(&s, View::Destinations, Sort::Attempts, "");
        let titles = |l: &Layout| l.columns.iter().map(|&i| COLUMNS[i].title).collect::<Vec<_>>();
        let wide = Layout::fit(View::Destinations, &rows, 200);
        assert_eq!(wide.columns.len(), COLUMNS.len(), "everything fits in 200");
        let narrow = Layout::fit(View::Destinations, &rows, 60);
        // P99 and the rest do not fit; COOKIE, lower in priority but narrower, would: it is
        // not shown while ACCEPTED, P99 and the others more needed are not.
        assert_eq!(titles(&narrow), ["ATTEMPTS", "STALLS", "STALL/S", "LOST"]);
        for w in [20, 40, 60, 80, 100, 120, 150, 200] {
            let l = Layout::fit(View::Destinations, &rows, w);
            for r in &rows {
                assert!(l.row(r).chars().count() <= w, "{w}: {:?}", l.row(r));
            }
            assert!(l.header(View::Destinations).chars().count() <= w);
        }
        let full = Layout::full(View::Destinations, &rows);
        assert!(full.header(View::Destinations).starts_with("DESTINATION"));
        assert!(!full.header(View::Destinations).contains("STALL_HISTORY"), "no graph in plain rows");
        assert_eq!(full.columns.len(), COLUMNS.len() - 1);
        assert!(full.row(rows[0]).starts_with("198.18.0.2:8080"));
    }

    /// `--names`: a NAME column after DESTINATION where a row has a name (`-` for one
    /// without), cut with `~` past the widest key; on a narrow terminal it gives way before
    /// the address does, and goes where even its title would not fit.
    #[test]
    fn named_destinations_get_a_name_column_that_gives_way_first() {
        let s = model_of(&named_demo_events()).snapshot();
        let rows = rows(&s, View::Destinations, Sort::Attempts, "");
        let full = Layout::full(View::Destinations, &rows);
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

        let narrow = Layout::fit(View::Destinations, &rows, 60);
        assert_eq!(narrow.key_widths, [21, 14], "the name gave way, the address did not");
        assert!(
            narrow.row(rows[2]).starts_with("[fd00:7f0::2]:8080    a-very-long-s~ "),
            "{}",
            narrow.row(rows[2])
        );
        for w in [20, 25, 26, 40, 60, 80, 100, 120, 150, 200] {
            let l = Layout::fit(View::Destinations, &rows, w);
            assert_eq!(l.named, w >= 26, "{w}");
            for r in &rows {
                assert!(l.row(r).chars().count() <= w, "{w}: {:?}", l.row(r));
            }
            assert!(l.header(View::Destinations).chars().count() <= w);
        }
        // No name anywhere (no `--names`): no column, as before.
        let plain = model_of(&demo_events()).snapshot();
        let plain_rows = super::super::rows::rows(&plain, View::Destinations, Sort::Attempts, "");
        assert!(!Layout::full(View::Destinations, &plain_rows).header(View::Destinations).contains("NAME"));
        // Nor on the other tables.
        let listeners = super::super::rows::rows(&s, View::Listeners, Sort::Attempts, "");
        assert!(!Layout::full(View::Listeners, &listeners).named);
    }

    #[test]
    fn sparkline_scales_to_the_largest_and_keeps_any_stall_visible() {
        assert_eq!(sparkline(&[]), "");
        assert_eq!(sparkline(&[0, 0, 0]), "···");
        assert_eq!(sparkline(&[0, 1, 8, 4, 0]), "·▁█▄·");
        assert_eq!(sparkline(&[1, 1000]), "▁█", "a single stall beside many still shows");
    }

    #[test]
    fn cut_marks_the_cut() {
        assert_eq!(cut("[fd00:7f0:1::2]:8080", 10), "[fd00:7f0~");
        assert_eq!(cut("abc", 3), "abc");
    }
}
