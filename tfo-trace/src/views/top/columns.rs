//! The columns of `top`'s tables, shared by the terminal UI and the plain rows, and which
//! ones to drop first when the terminal is narrow.
use crate::aggregation::table::{GroupKey, Row, RowStats, View};

/// A number column: its title, its width, and how to print it.
pub struct Column {
    pub title: &'static str,
    pub width: usize,
    /// Lower is kept longer when the terminal is narrow.
    pub priority: u8,
    pub cell: fn(&RowStats) -> String,
}

/// Durations in at most 7 characters: `0.12ms`, `123.4ms`, `1.02s`, `1234s`.
pub fn fmt_us(us: u64) -> String {
    if us < 1_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else if us < 999_950 {
        format!("{:.1}ms", us as f64 / 1e3)
    } else if us < 100_000_000 {
        format!("{:.2}s", us as f64 / 1e6)
    } else {
        format!("{:.0}s", us as f64 / 1e6)
    }
}

fn opt_us(v: Option<u64>) -> String {
    v.map(fmt_us).unwrap_or_else(|| "-".into())
}

/// In display order. The priorities put what an on-call engineer looks for first: how
/// many connections, how many stalled, what it cost, the tail latency.
pub const COLUMNS: [Column; 11] = [
    Column { title: "ATTEMPTS", width: 8, priority: 0, cell: |s| s.attempts.to_string() },
    Column { title: "COOKIE", width: 6, priority: 6, cell: |s| s.cookie_requests.to_string() },
    Column { title: "ACCEPTED", width: 8, priority: 4, cell: |s| s.accepted.to_string() },
    Column { title: "NOT_ACKED", width: 9, priority: 7, cell: |s| s.data_not_acked.to_string() },
    Column { title: "STALLS", width: 6, priority: 1, cell: |s| s.stalls.to_string() },
    Column {
        title: "LOST",
        width: 7,
        priority: 2,
        cell: |s| if s.stall_us == 0 { "0".into() } else { fmt_us(s.stall_us) },
    },
    Column { title: "OVERFLOW", width: 8, priority: 8, cell: |s| s.queue_overflows.to_string() },
    Column { title: "INVALID", width: 7, priority: 9, cell: |s| s.invalid_cookies.to_string() },
    Column { title: "ALT_KEY", width: 7, priority: 10, cell: |s| s.backup_key_hits.to_string() },
    Column { title: "P50", width: 7, priority: 5, cell: |s| opt_us(s.p50_us) },
    Column { title: "P99", width: 7, priority: 3, cell: |s| opt_us(s.p99_us) },
];

/// The titles of the key columns of a view.
pub fn key_titles(view: View) -> &'static [&'static str] {
    match view {
        View::Destinations => &["DESTINATION"],
        View::Listeners => &["LISTENER", "NETNS"],
        View::Processes => &["PID", "COMM"],
    }
}

/// Minimum widths of the key columns (addresses grow up to `MAX_KEY_WIDTH`).
fn key_min_widths(view: View) -> &'static [usize] {
    match view {
        View::Destinations => &[21],
        View::Listeners => &[21, 10],
        View::Processes => &[7, 15],
    }
}

/// IPv6 address:port is at most 47 characters; wider keys are cut with `~`.
pub const MAX_KEY_WIDTH: usize = 47;

/// A table layout: key column widths and the indexes of the number columns shown.
pub struct Layout {
    pub key_widths: Vec<usize>,
    pub columns: Vec<usize>,
}

impl Layout {
    /// Everything, as wide as the rows need (plain output).
    pub fn full(view: View, rows: &[&Row]) -> Layout {
        Layout { key_widths: key_widths(view, rows), columns: (0..COLUMNS.len()).collect() }
    }

    /// What fits in `width` characters: the key columns (shrunk if they must), then number
    /// columns by priority, shown in display order.
    pub fn fit(view: View, rows: &[&Row], width: usize) -> Layout {
        let mut key_widths = key_widths(view, rows);
        let mins = key_min_widths(view);
        // The first key column (the address) gives way down to its minimum to leave room
        // for at least the top-priority numbers.
        let wanted = key_widths.iter().sum::<usize>() + key_widths.len() - 1 + 1 + COLUMNS[0].width;
        if wanted > width {
            let over = wanted - width;
            key_widths[0] = key_widths[0].saturating_sub(over).max(mins[0].min(width));
        }
        let mut used = key_widths.iter().sum::<usize>() + key_widths.len() - 1;
        let mut by_priority: Vec<usize> = (0..COLUMNS.len()).collect();
        by_priority.sort_by_key(|&i| COLUMNS[i].priority);
        let mut columns = Vec::new();
        for i in by_priority {
            if used + 1 + COLUMNS[i].width <= width {
                used += 1 + COLUMNS[i].width;
                columns.push(i);
            }
        }
        columns.sort_unstable();
        Layout { key_widths, columns }
    }

    pub fn header(&self, view: View) -> String {
        let keys: Vec<String> = key_titles(view).iter().map(|t| (*t).to_string()).collect();
        self.line(&keys, |i| COLUMNS[i].title.to_string())
    }

    pub fn row(&self, row: &Row) -> String {
        self.line(&row.key.cells(), |i| (COLUMNS[i].cell)(&row.stats))
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

fn key_widths(view: View, rows: &[&Row]) -> Vec<usize> {
    let mins = key_min_widths(view);
    let mut w: Vec<usize> = key_titles(view).iter().zip(mins).map(|(t, m)| t.len().max(*m)).collect();
    for r in rows {
        for (i, c) in r.key.cells().iter().enumerate() {
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

/// Key cells of a row for JSON: named fields instead of columns.
pub fn key_json(key: &GroupKey) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    match key {
        GroupKey::Destination(a) => {
            m.insert("destination".into(), a.to_string().into());
        }
        GroupKey::Listener { addr, netns } => {
            m.insert("listener".into(), addr.to_string().into());
            m.insert("netns".into(), (*netns).into());
        }
        GroupKey::Process { pid, comm } => {
            m.insert("pid".into(), (*pid).into());
            m.insert("comm".into(), comm.clone().into());
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregation::table::{model_of, tests::demo_events, Sort};

    #[test]
    fn durations_fit_seven_characters() {
        for (us, s) in [
            (120, "0.12ms"),
            (1_500, "1.5ms"),
            (999_999, "1.00s"),
            (1_020_000, "1.02s"),
            (123_456_789, "123s"),
        ] {
            assert_eq!(fmt_us(us), s);
        }
        for us in [0, 999, 1_000, 99_999, 999_949, 1_000_000, 99_999_999, 3_600_000_000] {
            assert!(fmt_us(us).len() <= 7, "{us}: {}", fmt_us(us));
        }
    }

    #[test]
    fn narrow_layouts_drop_low_priority_columns_first() {
        let s = model_of(&demo_events()).snapshot();
        let rows = s.rows(View::Destinations, Sort::Attempts, "");
        let titles = |l: &Layout| l.columns.iter().map(|&i| COLUMNS[i].title).collect::<Vec<_>>();
        let wide = Layout::fit(View::Destinations, &rows, 120);
        assert_eq!(wide.columns.len(), COLUMNS.len(), "everything fits in 120");
        let narrow = Layout::fit(View::Destinations, &rows, 60);
        // ACCEPTED and P50 do not fit; COOKIE, lower in priority but narrower, does.
        assert_eq!(titles(&narrow), ["ATTEMPTS", "COOKIE", "STALLS", "LOST", "P99"]);
        for w in [20, 40, 60, 80, 100, 120] {
            let l = Layout::fit(View::Destinations, &rows, w);
            for r in &rows {
                assert!(l.row(r).chars().count() <= w, "{w}: {:?}", l.row(r));
            }
            assert!(l.header(View::Destinations).chars().count() <= w);
        }
        let full = Layout::full(View::Destinations, &rows);
        assert!(full.header(View::Destinations).starts_with("DESTINATION"));
        assert!(full.row(rows[0]).starts_with("198.18.0.2:8080"));
    }

    #[test]
    fn cut_marks_the_cut() {
        assert_eq!(cut("[fd00:7f0:1::2]:8080", 10), "[fd00:7f0~");
        assert_eq!(cut("abc", 3), "abc");
    }
}
