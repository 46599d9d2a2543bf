//! Drawing one frame of `top`: header (backend, sysctl, totals, losses), the handshake-time
//! histogram, the table tabs, the table, the footer. Pure function of its inputs, so the
//! snapshot tests draw it on ratatui's TestBackend.
use ratatui::{
    layout::{Constraint, Direction, Layout as Split, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::{
    columns::{fmt_us, Layout},
    state::{UiState, KEYS_HELP},
    HeaderInfo,
};
use crate::aggregation::{
    quantiles::Decades,
    table::{RowStats, Snapshot, View},
};

/// Below this height the histogram folds into one line.
const FULL_HISTOGRAM_MIN_HEIGHT: u16 = 22;

struct Styles {
    bold: Style,
    header: Style,
    active_tab: Style,
    alert: Style,
    dim: Style,
}

impl Styles {
    fn new(color: bool) -> Styles {
        let bold = Style::default().add_modifier(Modifier::BOLD);
        if color {
            Styles {
                bold,
                header: Style::default().fg(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD),
                active_tab: Style::default().fg(Color::Black).bg(Color::Yellow).add_modifier(Modifier::BOLD),
                alert: Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
                dim: Style::default().fg(Color::DarkGray),
            }
        } else {
            Styles {
                bold,
                header: Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD),
                active_tab: Style::default().add_modifier(Modifier::REVERSED),
                alert: bold,
                dim: Style::default(),
            }
        }
    }
}

pub fn draw(frame: &mut Frame, snap: &Snapshot, ui: &UiState, info: &HeaderInfo) {
    let area = frame.area();
    let st = Styles::new(info.color);
    let hist_height = if area.height >= FULL_HISTOGRAM_MIN_HEIGHT { 5 } else { 1 };
    let parts = Split::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(3),
            Constraint::Length(hist_height),
            Constraint::Length(1),
            Constraint::Min(2),
            Constraint::Length(1),
        ])
        .split(area);
    frame.render_widget(Paragraph::new(header_lines(snap, info, &st)), parts[0]);
    frame.render_widget(Paragraph::new(histogram_lines(&snap.decades, parts[1], &st)), parts[1]);
    frame.render_widget(Paragraph::new(tabs_line(ui, info.interval, &st)), parts[2]);
    draw_table(frame, snap, ui, parts[3], &st);
    frame.render_widget(Paragraph::new(footer_line(ui, &st)), parts[4]);
    if ui.help {
        draw_help(frame, area);
    }
}

fn header_lines(snap: &Snapshot, info: &HeaderInfo, st: &Styles) -> Vec<Line<'static>> {
    // Most important first: what is cut at 80 columns is the sysctl's spelled-out bits.
    let lost_style = if info.lost > 0 { st.alert } else { Style::default() };
    let first = vec![
        Span::styled("tfo-trace top", st.bold),
        Span::raw(format!("  backend {}", info.backend)),
        Span::styled(format!("  lost {}", info.lost), lost_style),
        Span::raw(format!("  evicted {}", snap.evicted())),
        Span::raw(format!("  tcp_fastopen {}", info.fastopen_text())),
    ];
    let c = &snap.client;
    let stalls = Span::styled(
        format!("{} stalls {} lost", c.stalls, fmt_us(c.stall_us)),
        if c.stalls > 0 { st.alert } else { Style::default() },
    );
    let p99 = c.p99_us.map(fmt_us).unwrap_or_else(|| "-".into());
    let client = Line::from(vec![
        Span::styled("client ", st.bold),
        Span::raw(format!(
            "{} conns  {} accepted  {} cookie  {} not_acked  ",
            c.attempts, c.accepted, c.cookie_requests, c.data_not_acked
        )),
        stalls,
        Span::raw(format!("  p99 {p99}")),
    ]);
    let s = &snap.server;
    let server = Line::from(vec![
        Span::styled("server ", st.bold),
        Span::raw(format!(
            "{} conns  {} accepted  {} cookie  {} overflows  {} invalid  {} alt_key",
            s.attempts,
            s.accepted,
            s.cookie_requests,
            s.queue_overflows,
            s.invalid_cookies,
            s.backup_key_hits
        )),
    ]);
    vec![Line::from(first), client, server]
}

fn fmt_interval(d: std::time::Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s}s")
    }
}

/// Handshake times by decade, one bar each; the fullest bucket is marked so a one-second
/// mode (SYN-data dropped, 1 s SYN timeout) is seen at once.
fn histogram_lines(d: &Decades, area: Rect, st: &Styles) -> Vec<Line<'static>> {
    let mode = d.mode();
    let total = d.total();
    if area.height < 5 {
        let mut spans = vec![Span::styled("handshake ", st.bold)];
        for (i, label) in Decades::LABELS.iter().enumerate() {
            let style = if Some(i) == mode { st.active_tab } else { Style::default() };
            spans.push(Span::styled(format!("{label} {}", d.counts[i]), style));
            spans.push(Span::raw("  "));
        }
        return vec![Line::from(spans)];
    }
    let max = d.counts.iter().copied().max().unwrap_or(0).max(1);
    let label_w = 19; // "handshake 10-100ms "
    let count_w = total.to_string().len().max(1);
    let bar_w = (area.width as usize).saturating_sub(label_w + count_w + 14).max(1);
    Decades::LABELS
        .iter()
        .enumerate()
        .map(|(i, label)| {
            let n = d.counts[i];
            let len = if n == 0 { 0 } else { ((n as f64 / max as f64) * bar_w as f64).ceil() as usize };
            let prefix = if i == 0 { "handshake" } else { "" };
            let pct = if total > 0 { n as f64 * 100.0 / total as f64 } else { 0.0 };
            let bar_style = if i == 4 && n > 0 { st.alert } else { st.dim };
            let mut spans = vec![
                Span::styled(format!("{prefix:<9} {label:>8} "), st.bold),
                Span::styled("█".repeat(len), bar_style),
                Span::raw(format!("{} {n:>count_w$} {pct:>3.0}%", " ".repeat(bar_w - len))),
            ];
            if Some(i) == mode {
                spans.push(Span::styled(" mode", st.bold));
            }
            Line::from(spans)
        })
        .collect()
}

fn tabs_line(ui: &UiState, interval: std::time::Duration, st: &Styles) -> Line<'static> {
    let mut spans = Vec::new();
    for (i, v) in View::ALL.iter().enumerate() {
        let style = if *v == ui.view { st.active_tab } else { Style::default() };
        spans.push(Span::styled(format!(" {} {} ", i + 1, v.title()), style));
        spans.push(Span::raw(" "));
    }
    spans.push(Span::raw(format!(" sort {}  every {}", ui.sort.name(), fmt_interval(interval))));
    if ui.paused {
        spans.push(Span::styled("  PAUSED", st.alert));
    }
    if !ui.filter.is_empty() {
        spans.push(Span::styled(format!("  filter: {}", ui.filter), st.bold));
    }
    Line::from(spans)
}

fn draw_table(frame: &mut Frame, snap: &Snapshot, ui: &UiState, area: Rect, st: &Styles) {
    let rows = snap.rows(ui.view, ui.sort, &ui.filter);
    let layout = Layout::fit(ui.view, &rows, area.width as usize);
    let mut lines =
        vec![Line::styled(format!("{:<w$}", layout.header(ui.view), w = area.width as usize), st.header)];
    let room = (area.height as usize).saturating_sub(1);
    let shown = if rows.len() > room { room.saturating_sub(1) } else { rows.len() };
    for r in &rows[..shown] {
        let style = if stalled(&r.stats) { st.alert } else { Style::default() };
        lines.push(Line::styled(layout.row(r), style));
    }
    if shown < rows.len() {
        lines.push(Line::styled(format!("... {} more rows (/ to filter)", rows.len() - shown), st.dim));
    }
    if rows.is_empty() {
        let why = if ui.filter.is_empty() {
            match ui.view {
                View::Destinations => "no client TFO connections yet",
                View::Listeners => "no server TFO events yet",
                View::Processes => "no TFO events yet",
            }
        } else {
            "no row matches the filter"
        };
        lines.push(Line::styled(why.to_string(), st.dim));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn stalled(s: &RowStats) -> bool {
    s.stalls > 0 || s.queue_overflows > 0 || s.invalid_cookies > 0
}

fn footer_line(ui: &UiState, st: &Styles) -> Line<'static> {
    if ui.editing {
        return Line::from(vec![
            Span::styled("filter: ", st.bold),
            Span::raw(format!("{}_", ui.filter)),
            Span::styled("  (address, port, netns, pid, process; Enter keeps, Esc clears)", st.dim),
        ]);
    }
    let mut spans = Vec::new();
    for (k, what) in &KEYS_HELP[..KEYS_HELP.len() - 1] {
        spans.push(Span::styled(k.to_string(), st.bold));
        spans.push(Span::raw(format!(" {what}  ")));
    }
    Line::from(spans)
}

fn draw_help(frame: &mut Frame, area: Rect) {
    let text = [
        "Keys",
        "  q Esc Ctrl-C  quit",
        "  1 2 3 Tab     destinations, listeners, processes",
        "  Space         pause the display (counting goes on)",
        "  s             sort: attempts stalls lost p99 accepted",
        "                name",
        "  /             filter: address, port, netns, pid, name",
        "  ?             this help (any key closes it)",
        "Columns (counts since start)",
        "  STALLS    SYN timed out, plain SYN resent (~1 s)",
        "  LOST      time lost to SYN timeouts",
        "  COOKIE    cookie requests",
        "  NOT_ACKED SYN-data not acknowledged",
        "  OVERFLOW  TFO queue full   INVALID  bad cookie",
        "  ALT_KEY   backup key used  P50/P99  handshake",
        "  evicted: groups dropped beyond the table cap",
    ];
    let w = (text.iter().map(|l| l.len()).max().unwrap_or(0) as u16 + 4).min(area.width);
    let h = (text.len() as u16 + 2).min(area.height);
    let popup =
        Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    frame.render_widget(Clear, popup);
    let lines: Vec<Line> = text.iter().map(|l| Line::raw(*l)).collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" help ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregation::table::{model_of, tests::demo_events, Sort};
    use ratatui::{backend::TestBackend, Terminal};
    use std::time::Duration;

    fn info() -> HeaderInfo {
        HeaderInfo {
            backend: "tracepoint".into(),
            tcp_fastopen: Some(crate::kernel::sysctl::TcpFastopen(0x3)),
            interval: Duration::from_secs(1),
            lost: 0,
            color: false,
        }
    }

    fn screen(w: u16, h: u16, ui: &UiState) -> Vec<String> {
        let snap = model_of(&demo_events()).snapshot();
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, &snap, ui, &info())).unwrap();
        let buf = term.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w).map(|x| buf[(x, y)].symbol().to_string()).collect::<String>().trim_end().to_string()
            })
            .collect()
    }

    fn ui() -> UiState {
        UiState::new(View::Destinations, Sort::Attempts, String::new())
    }

    fn line<'a>(s: &'a [String], needle: &str) -> &'a str {
        s.iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?}:\n{}", s.join("\n")))
    }

    fn tokens(l: &str) -> Vec<&str> {
        l.split_whitespace().collect()
    }

    #[test]
    fn wide_120x30_shows_every_column() {
        let s = screen(120, 30, &ui());
        let head = line(&s, "tfo-trace top");
        assert!(
            head.contains("backend tracepoint")
                && head.contains("tcp_fastopen 0x3")
                && head.contains("lost 0")
        );
        assert!(head.contains("evicted 0"), "{head}");
        let hdr = tokens(line(&s, "DESTINATION"));
        assert_eq!(
            hdr,
            [
                "DESTINATION",
                "ATTEMPTS",
                "COOKIE",
                "ACCEPTED",
                "NOT_ACKED",
                "STALLS",
                "LOST",
                "OVERFLOW",
                "INVALID",
                "ALT_KEY",
                "P50",
                "P99"
            ]
        );
        // The middlebox destination: 3 attempts, 1 cookie request, 0 accepted, 2 stalls, 2.03 s.
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad[..7], ["198.18.0.3:8080", "3", "1", "0", "0", "2", "2.03s"]);
        assert_eq!(bad[10..], ["1.02s", "1.02s"], "p50 and p99: the stalls");
        let clean = tokens(line(&s, "198.18.0.2:8080"));
        assert_eq!(clean[..6], ["198.18.0.2:8080", "8", "1", "7", "0", "0"]);
        // The one-second bucket holds the two stalls; the histogram is five lines here.
        let ge1 = line(&s, ">=1s");
        assert!(ge1.contains("2 "), "{ge1}");
        assert!(line(&s, "<1ms").contains("mode"));
        assert!(line(&s, "client ").contains("2 stalls 2.03s lost"));
        assert!(line(&s, "server ").contains("1 overflows"));
        let footer = s.last().unwrap();
        for k in ["q quit", "Space pause", "s sort", "/ filter", "? help"] {
            assert!(footer.contains(k), "{footer}");
        }
    }

    #[test]
    fn standard_80x24_keeps_the_important_columns() {
        let s = screen(80, 24, &ui());
        assert!(s.iter().all(|l| l.chars().count() <= 80));
        let hdr = tokens(line(&s, "DESTINATION"));
        assert_eq!(hdr, ["DESTINATION", "ATTEMPTS", "COOKIE", "ACCEPTED", "STALLS", "LOST", "P50", "P99"]);
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad[..6], ["198.18.0.3:8080", "3", "1", "0", "2", "2.03s"]);
        assert!(line(&s, "handshake").contains("<1ms"), "full histogram at 24 rows");
        assert!(s.last().unwrap().contains("? help"), "footer fits in 80");
    }

    #[test]
    fn narrow_60x20_degrades_cleanly() {
        let s = screen(60, 20, &ui());
        assert!(s.iter().all(|l| l.chars().count() <= 60));
        let hdr = tokens(line(&s, "DESTINATION"));
        assert_eq!(hdr, ["DESTINATION", "ATTEMPTS", "COOKIE", "STALLS", "LOST", "P99"]);
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad, ["198.18.0.3:8080", "3", "1", "2", "2.03s", "1.02s"]);
        // The histogram folds into one line.
        let h = line(&s, "handshake");
        assert!(h.contains("<1ms 19"), "{h}");
        assert!(!s.iter().any(|l| l.contains("OVERFLOW")));
    }

    #[test]
    fn listeners_processes_filter_help() {
        let mut u = ui();
        u.view = View::Listeners;
        let s = screen(120, 30, &u);
        let l81 = tokens(line(&s, "198.18.0.2:8081"));
        assert_eq!(l81[1], "4026532246", "netns column");
        assert_eq!(tokens(line(&s, "LISTENER"))[1], "NETNS");
        u.view = View::Processes;
        u.filter = "nginx".into();
        let s = screen(120, 30, &u);
        assert!(line(&s, "filter: nginx").contains("3 processes"));
        let nginx = tokens(line(&s, "200 "));
        assert_eq!(nginx[..3], ["200", "nginx", "10"]);
        assert!(!s.iter().any(|l| l.contains(" curl")), "filtered out");
        u.help = true;
        let s = screen(80, 24, &u);
        line(&s, "sort: attempts stalls");
        u.filter = "nothing".into();
        u.help = false;
        line(&screen(80, 24, &u), "no row matches the filter");
    }

    #[test]
    fn tiny_terminals_do_not_panic() {
        let mut u = ui();
        for (w, h) in [(1, 1), (10, 3), (20, 8), (40, 10)] {
            screen(w, h, &u);
            u.help = !u.help;
        }
    }
}
