//! Drawing one frame of `top`: header (backend, sysctl, totals, losses, the rates of the
//! last refresh and a graph of stalls per refresh), the handshake-time histogram, the
//! table tabs, the tables (all four stacked when the terminal is tall enough, else the
//! chosen one), the footer. Pure function of its inputs, so the snapshot tests draw it on
//! ratatui's TestBackend.
use std::time::Duration;

use ratatui::{
    layout::{Constraint, Direction, Layout as Split, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::{
    columns::{sparkline, Layout},
    header::HeaderInfo,
    rows::{rows, View},
    state::{UiState, KEYS, KEYS_HELP},
};
use crate::{
    aggregation::{
        kernel_counted::KernelCounted,
        quantiles::Decades,
        top::{rates::HOST_HISTORY, Row, RowStats, Snapshot},
    },
    events::{Outcome, Role},
    live, units,
};

/// Below this height the histogram folds into one line.
const FULL_HISTOGRAM_MIN_HEIGHT: u16 = 22;
/// From this height on, every table is shown at once, stacked; below it, one table and tabs.
pub(crate) const STACKED_MIN_HEIGHT: u16 = 40;

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

/// Whether the tables are stacked on a terminal of this height.
pub(crate) fn stacked(height: u16) -> bool {
    height >= STACKED_MIN_HEIGHT
}

pub(crate) fn draw(frame: &mut Frame, snap: &Snapshot, ui: &UiState, info: &HeaderInfo) {
    let area = frame.area();
    let st = Styles::new(info.color);
    let hist_height = if area.height >= FULL_HISTOGRAM_MIN_HEIGHT { 5 } else { 1 };
    let header = header_lines(snap, info, area.width as usize, &st);
    let parts = Split::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(header.len() as u16),
            Constraint::Length(hist_height),
            Constraint::Length(1),
            Constraint::Min(2),
            Constraint::Length(1),
        ])
        .split(area);
    frame.render_widget(Paragraph::new(header), parts[0]);
    frame.render_widget(Paragraph::new(histogram_lines(&snap.decades, parts[1], &st)), parts[1]);
    let stack = stacked(area.height);
    frame.render_widget(Paragraph::new(tabs_line(snap, ui, info.interval, stack, area.width, &st)), parts[2]);
    if stack {
        draw_stacked(frame, snap, ui, parts[3], &st);
    } else {
        draw_table(frame, snap, ui, ui.view, parts[3], &st);
    }
    frame.render_widget(Paragraph::new(footer_line(ui, area.width, &st)), parts[4]);
    if ui.help {
        draw_help(frame, area);
    }
}

/// The parts of a line that fit in `width`, in their order: while they do not, the least
/// needed part (the highest `need`) goes, whole. A narrow terminal never cuts a word.
fn fit(parts: Vec<(u8, Span<'static>)>, width: usize) -> Line<'static> {
    let mut parts = parts;
    while parts.iter().map(|(_, s)| s.width()).sum::<usize>() > width {
        let Some(least) = parts.iter().enumerate().max_by_key(|(i, (need, _))| (*need, *i)).map(|(i, _)| i)
        else {
            break;
        };
        if parts[least].0 == 0 {
            break; // what is always said; the terminal cuts the rest
        }
        parts.remove(least);
    }
    Line::from(parts.into_iter().map(|(_, s)| s).collect::<Vec<_>>())
}

/// Header lines: title, client totals, server totals, now; then, where the backend takes
/// outcomes from the namespaces' counters, one line of those.
fn header_lines(snap: &Snapshot, info: &HeaderInfo, width: usize, st: &Styles) -> Vec<Line<'static>> {
    // Each part with how much it is needed (0: always): a narrow terminal drops the least
    // needed parts whole, the sysctl's spelled-out bits first.
    let lost_style = if info.lost > 0 { st.alert } else { Style::default() };
    let mut first = vec![
        (0, Span::styled("tfo-trace top", st.bold)),
        (1, Span::raw(format!("  backend {}", info.backend))),
        (0, Span::styled(format!("  lost {}", info.lost), lost_style)),
        (2, Span::raw(format!("  evicted {}", snap.evicted()))),
    ];
    if let Some(sysctl) = info.fastopen_text() {
        first.push((3, Span::raw(format!("  tcp_fastopen {sysctl}"))));
    }
    let c = &snap.client;
    // `*`: the number comes from the namespaces' counters (see the `kernel*` line).
    let k = |role, outcome| if snap.kernel_counted.counts(role, outcome) { "*" } else { "" };
    let alert_if = |n: u64| if n > 0 { st.alert } else { Style::default() };
    let p99 = c.p99_us.map(units::duration_us).unwrap_or_else(|| "-".into());
    // What an on-call engineer needs first is always said: connections, refusals, stalls
    // and the time they cost; the rest goes whole where the line has no room.
    let client = vec![
        (0, Span::styled("client ", st.bold)),
        (0, Span::raw(format!("{} conns", c.attempts))),
        (0, Span::styled(format!("  {} not_acked", c.data_not_acked), alert_if(c.data_not_acked))),
        (
            0,
            Span::styled(
                format!("  {} stalls {} lost", c.stalls, units::duration_us(c.stall_us)),
                alert_if(c.stalls),
            ),
        ),
        (1, Span::raw(format!("  {} accepted", c.accepted))),
        (3, Span::raw(format!("  {} cookie", c.cookie_requests))),
        (3, Span::raw(format!("  saved {} net {}", units::duration_us(c.saved_us), units::net_us(c.net_us)))),
        (2, Span::raw(format!("  p99 {p99}"))),
    ];
    let s = &snap.server;
    let server = vec![
        (0, Span::styled("server ", st.bold)),
        (0, Span::raw(format!("{} conns", s.attempts))),
        (
            0,
            Span::styled(
                format!("  {} invalid{}", s.invalid_cookies, k(Role::Server, Outcome::CookieInvalid)),
                alert_if(s.invalid_cookies),
            ),
        ),
        (
            0,
            Span::styled(
                format!("  {} overflows{}", s.queue_overflows, k(Role::Server, Outcome::QueueOverflow)),
                alert_if(s.queue_overflows),
            ),
        ),
        (1, Span::raw(format!("  {} accepted", s.accepted))),
        (
            3,
            Span::raw(format!("  {} cookie{}", s.cookie_requests, k(Role::Server, Outcome::CookieRequested))),
        ),
        (
            3,
            Span::raw(format!("  {} alt_key{}", s.backup_key_hits, k(Role::Server, Outcome::AcceptedAltKey))),
        ),
    ];
    let mut lines =
        vec![fit(first, width), fit(client, width), fit(server, width), now_line(snap, info, width, st)];
    lines.extend(counted_lines(&snap.kernel_counted, info, width, st));
    for p in &info.paused {
        lines.extend(wrap(
            Span::styled("paused ", st.bold),
            std::slice::from_ref(&p.sentence),
            st.alert,
            width,
            PAUSED_LINES,
        ));
    }
    lines
}

/// Lines the `kernel*` text may take before it is cut short (at a word).
const COUNTED_LINES: usize = 2;
/// Lines each `paused` sentence may take.
const PAUSED_LINES: usize = 2;

/// `kernel* netns lab-srv: server queue_overflow 3 | ...`: what each namespace's own
/// counters counted of the outcomes no hook of the backend sees (`*` in the lines above),
/// on as many lines as it needs up to [`COUNTED_LINES`]; none where the hooks see every
/// outcome.
fn counted_lines(
    counted: &KernelCounted,
    info: &HeaderInfo,
    width: usize,
    st: &Styles,
) -> Vec<Line<'static>> {
    let text = if let Some(why) = &counted.unavailable {
        format!("outcomes no {} hook sees are {why}", info.backend)
    } else if counted.outcomes.is_empty() && counted.flood.is_empty() {
        return Vec::new();
    } else {
        let mut per_ns = live::counted::per_namespace(counted);
        per_ns.extend(live::counted::unreadable_phrase(counted));
        // The numbers first: why they come from there is in `?` and after the closing line.
        if per_ns.is_empty() {
            format!(
                "none yet in {} namespaces (their own counters; no listener or process)",
                counted.namespaces
            )
        } else {
            return wrap(Span::styled("kernel* ", st.bold), &per_ns, st.dim, width, COUNTED_LINES);
        }
    };
    wrap(Span::styled("kernel* ", st.bold), &[text], st.dim, width, COUNTED_LINES)
}

/// `lead`, then `parts` (joined by `|`) on as many lines as they need, at most
/// `max_lines`, each word whole: a part that does not fit in what is left of a line starts
/// the next, the lines after the first starting under the first word. Where they need more
/// lines, the last ends with `...` (a word of its own): `top --batch` and the closing line
/// say it all. A word wider than a whole line is the one thing cut ([`units::cut`]).
fn wrap(
    lead: Span<'static>,
    parts: &[String],
    style: Style,
    width: usize,
    max_lines: usize,
) -> Vec<Line<'static>> {
    const MORE: &str = "...";
    let indent = lead.width();
    let room = width.saturating_sub(indent).max(1);
    // Each word, and for the first of a part, how wide the whole part is.
    let words: Vec<(&str, Option<usize>)> = parts
        .iter()
        .flat_map(|p| {
            let whole = units::width(&p.split_whitespace().collect::<Vec<_>>().join(" "));
            p.split_whitespace().enumerate().map(move |(i, w)| (w, (i == 0).then_some(whole)))
        })
        .collect();
    let mut lines: Vec<String> = vec![String::new()];
    let mut next = 0;
    while let Some(&(word, part)) = words.get(next) {
        let last_line = lines.len() >= max_lines.max(1);
        let line = lines.last_mut().expect("one line at least");
        let used = units::width(line);
        // Between two parts on one line, their separator.
        let lead_in = match (line.is_empty(), part.is_some() && next > 0) {
            (true, _) => "",
            (false, true) => " | ",
            (false, false) => " ",
        };
        if let (Some(whole), false, false) = (part, line.is_empty(), last_line) {
            if used + lead_in.len() + whole > room {
                lines.push(String::new());
                continue;
            }
        }
        // On the last line, room for the mark after this word if more words follow it.
        let keep = if last_line && next + 1 < words.len() { 1 + MORE.len() } else { 0 };
        if used + lead_in.len() + units::width(word) + keep <= room {
            line.push_str(lead_in);
            line.push_str(word);
            next += 1;
        } else if !last_line && !line.is_empty() {
            lines.push(String::new());
        } else if !last_line {
            // Wider than a whole line: the one thing cut.
            line.push_str(&units::cut(word, room));
            next += 1;
        } else {
            // The last line is full: the mark, where the previous word left room for it.
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(MORE);
            break;
        }
    }
    lines
        .into_iter()
        .enumerate()
        .map(|(i, text)| {
            let head = if i == 0 { lead.clone() } else { Span::raw(" ".repeat(indent)) };
            Line::from(vec![head, Span::styled(text, style)])
        })
        .collect()
}

/// The client's rates over the last refresh, then (as wide as the terminal allows) the
/// graph of host-wide stalls per refresh, newest on the right.
fn now_line(snap: &Snapshot, info: &HeaderInfo, width: usize, st: &Styles) -> Line<'static> {
    let mut spans = vec![Span::styled("now    ", st.bold)];
    if !info.live {
        spans.push(Span::styled("a recording: rates and the stall graph are for live tracing only", st.dim));
        return Line::from(spans);
    }
    let c = &snap.client;
    let stalling = c.stalls_per_s.is_some_and(|r| r > 0.0);
    spans.push(Span::raw(format!("{} conns/s  ", units::rate(c.attempts_per_s))));
    spans.push(Span::styled(
        format!("{} stalls/s  {} lost/s", units::rate(c.stalls_per_s), units::duration_per_s(c.lost_per_s)),
        if stalling { st.alert } else { Style::default() },
    ));
    if width >= 120 {
        spans.push(Span::raw(format!("  server {} conns/s", units::rate(snap.server.attempts_per_s))));
    }
    // `stalls/1s`: one character per refresh interval.
    let label = format!("  stalls/{} ", units::period(info.interval));
    let used = Line::from(spans.clone()).width() + label.len();
    // Room for the graph and its span (" (last 2m)", at most 11 characters).
    let room = width.saturating_sub(used + 11).min(HOST_HISTORY);
    let samples = snap.stall_history.last(room);
    if room >= 8 && !samples.is_empty() {
        let span = info.interval * samples.len() as u32;
        spans.push(Span::raw(label));
        let graph_style = if samples.iter().any(|&n| n > 0) { st.alert } else { st.dim };
        spans.push(Span::styled(sparkline(&samples), graph_style));
        spans.push(Span::raw(format!(" (last {})", units::period(span))));
    }
    Line::from(spans)
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

/// A table's tab: its key in brackets, its name, and how many rows it has (of how many,
/// when a filter hides some), so that neither reads as the other.
fn tab_label(snap: &Snapshot, ui: &UiState, view: View, short: bool, counted: bool) -> String {
    let name = match (view, short) {
        (View::Destinations, false) => "Destinations",
        (View::Listeners, false) => "Listeners",
        (View::Processes, false) => "Processes",
        (View::Containers, false) => "Containers",
        (View::Destinations, true) => "Dest",
        (View::Listeners, true) => "Listen",
        (View::Processes, true) => "Proc",
        (View::Containers, true) => "Cont",
    };
    if !counted {
        return format!("[{}] {name}", view.key());
    }
    let all = view.table(snap).rows.len();
    let unit = if all == 1 { "row" } else { "rows" };
    let count = if ui.filter.trim().is_empty() {
        format!("{all} {unit}")
    } else {
        format!("{} of {all} {unit}", rows(snap, view, ui.sort, &ui.filter).len())
    };
    format!("[{}] {name} ({count})", view.key())
}

fn tabs_line(
    snap: &Snapshot,
    ui: &UiState,
    interval: Duration,
    stacked: bool,
    width: u16,
    st: &Styles,
) -> Line<'static> {
    // What changes what the tables show comes first. Where the line has no room, the
    // interval goes, then the filter's text (the tab's `N of M rows` still says one is
    // set), each whole; the pause and the sort are always said.
    let mut status = Vec::new();
    if ui.paused {
        status.push((0, Span::styled("PAUSED  ", st.alert)));
    }
    if !ui.filter.is_empty() {
        status.push((1, Span::styled(format!("filter: {}  ", ui.filter), st.bold)));
    }
    status.push((0, Span::raw(format!("sort {}", ui.sort.name()))));
    let every = Span::raw(format!("  every {}", units::period(interval)));
    let with_status = |lead: Vec<Span<'static>>, status: Vec<(u8, Span<'static>)>| {
        let mut parts: Vec<(u8, Span<'static>)> = lead.into_iter().map(|s| (0, s)).chain(status).collect();
        parts.push((2, every.clone()));
        fit(parts, width as usize)
    };
    if stacked {
        // Each table has its own title line; this one says what applies to all of them.
        return with_status(vec![Span::styled("all tables", st.bold), Span::raw("  ")], status);
    }
    // Full names; else short ones; else the row count on the chosen tab only; else only
    // the keys of the others. The interval may be cut, never the pause, the filter or the
    // sort if a form leaves room.
    let tabs = |form: TabForm| {
        let mut spans = Vec::new();
        for v in View::ALL {
            let active = v == ui.view;
            let style = if active { st.active_tab } else { Style::default() };
            let label = match form {
                TabForm::KeysOnly | TabForm::Bare if !active => format!("[{}]", v.key()),
                TabForm::Bare => tab_label(snap, ui, v, true, false),
                _ => tab_label(snap, ui, v, form != TabForm::Full, form.all_counted() || active),
            };
            if !spans.is_empty() {
                spans.push(Span::raw(" "));
            }
            spans.push(Span::styled(format!(" {label} "), style));
        }
        spans
    };
    let must_show: usize = status.iter().map(|(_, s)| s.width()).sum();
    let status_width = must_show + every.width();
    // Two spaces between the tabs and the status.
    let fits =
        |spans: &Vec<Span>, room: usize| Line::from(spans.clone()).width() + 2 + room <= width as usize;
    let forms = [TabForm::Full, TabForm::Short, TabForm::ChosenCounted, TabForm::KeysOnly];
    let mut spans = forms
        .into_iter()
        .map(|form| (form, tabs(form)))
        .find(|(form, spans)| fits(spans, if *form == TabForm::Full { status_width } else { must_show }))
        .map_or_else(|| tabs(TabForm::Bare), |(_, spans)| spans);
    spans.push(Span::raw("  "));
    with_status(spans, status)
}

/// How much the tab line says, from the most to the least.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TabForm {
    /// Full names, each with its row count.
    Full,
    /// Short names, each with its row count.
    Short,
    /// Short names, the row count on the chosen tab only.
    ChosenCounted,
    /// The chosen tab as in `ChosenCounted`, the others by their key only.
    KeysOnly,
    /// The chosen tab's key and short name, the others' keys.
    Bare,
}

impl TabForm {
    fn all_counted(self) -> bool {
        matches!(self, TabForm::Full | TabForm::Short)
    }
}

/// Every table, one under the other, each with its title line; the room is shared so
/// that a table shows all its rows when it can, and the focused one gets what is left.
fn draw_stacked(frame: &mut Frame, snap: &Snapshot, ui: &UiState, area: Rect, st: &Styles) {
    let needs: Vec<usize> =
        View::ALL.iter().map(|&v| 2 + rows(snap, v, ui.sort, &ui.filter).len().max(1)).collect();
    let focus = View::ALL.iter().position(|&v| v == ui.view).unwrap_or(0);
    let heights = share_lines(&needs, area.height as usize, focus);
    let mut y = area.y;
    for (v, h) in View::ALL.into_iter().zip(heights) {
        let h = h as u16;
        if h == 0 {
            continue;
        }
        let style = if v == ui.view { st.active_tab } else { st.bold };
        let title = Rect { x: area.x, y, width: area.width, height: 1 };
        frame.render_widget(
            Paragraph::new(Line::styled(format!(" {} ", tab_label(snap, ui, v, false, true)), style)),
            title,
        );
        if h > 1 {
            draw_table(
                frame,
                snap,
                ui,
                v,
                Rect { x: area.x, y: y + 1, width: area.width, height: h - 1 },
                st,
            );
        }
        y += h;
    }
}

/// Shares `avail` lines between sections that need `needs` lines each: every section
/// gets what it needs if it can, else an equal share (those that need less than a share
/// give the rest back); what cannot be shared equally goes to section `focus`.
pub(crate) fn share_lines(needs: &[usize], avail: usize, focus: usize) -> Vec<usize> {
    let mut give = vec![0; needs.len()];
    let mut left = avail;
    let mut open: Vec<usize> = (0..needs.len()).collect();
    while !open.is_empty() && left > 0 {
        let share = left / open.len();
        let before = open.len();
        open.retain(|&i| {
            if needs[i] <= share {
                give[i] = needs[i];
                left -= needs[i];
                false
            } else {
                true
            }
        });
        if open.len() == before {
            // Everyone left needs more than a share: a share each, the rest to the focus.
            for &i in &open {
                give[i] = share;
                left -= share;
            }
            let to = if open.contains(&focus) { focus } else { open[0] };
            give[to] += left;
            break;
        }
    }
    give
}

fn draw_table(frame: &mut Frame, snap: &Snapshot, ui: &UiState, view: View, area: Rect, st: &Styles) {
    let rows = rows(snap, view, ui.sort, &ui.filter);
    let layout = Layout::fit(view, &rows, area.width as usize, &snap.netns_names);
    let mut lines =
        vec![Line::styled(format!("{:<w$}", layout.header(view), w = area.width as usize), st.header)];
    let room = (area.height as usize).saturating_sub(1);
    let shown = if rows.len() > room { room.saturating_sub(1) } else { rows.len() };
    for r in &rows[..shown] {
        let style = if stalled(r) { st.alert } else { Style::default() };
        lines.push(Line::styled(layout.row(r), style));
    }
    if shown < rows.len() {
        lines.push(Line::styled(format!("... {} more rows (/ to filter)", rows.len() - shown), st.dim));
    }
    if rows.is_empty() {
        let why = if ui.filter.is_empty() {
            match view {
                View::Destinations => "no client TFO connections yet",
                View::Listeners => "no server TFO events yet",
                View::Processes | View::Containers => "no TFO events yet",
            }
        } else {
            "no row matches the filter"
        };
        lines.push(Line::styled(why.to_string(), st.dim));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// Rows that need a look: they stalled (since start), or their SYN-data was refused
/// (the client's not acknowledged, the server's queue full or cookie invalid).
fn stalled(r: &Row) -> bool {
    let s: &RowStats = &r.stats;
    s.stalls > 0 || s.data_not_acked > 0 || s.queue_overflows > 0 || s.invalid_cookies > 0
}

fn footer_line(ui: &UiState, width: u16, st: &Styles) -> Line<'static> {
    if ui.editing {
        // What the keys do before what the filter matches (`?` says that too); each whole.
        return fit(
            vec![
                (0, Span::styled("filter: ", st.bold)),
                (0, Span::raw(format!("{}_", ui.filter))),
                (1, Span::styled("  Enter keeps, Esc clears", st.dim)),
                (
                    2,
                    Span::styled(
                        "  (matches address, port, netns or its name, pid, process, container)",
                        st.dim,
                    ),
                ),
            ],
            width as usize,
        );
    }
    // Quitting and help always; then what changes the view; each key whole.
    let need = |k: &str| match k {
        "q" | "?" => 0,
        "s" | "/" => 1,
        "1-4" | "Space" => 2,
        _ => 3,
    };
    let keys = KEYS_HELP[..KEYS_HELP.len() - 1]
        .iter()
        .map(|(k, what)| (need(k), Span::styled(format!("{k} {what}  "), st.bold)))
        .collect();
    fit(keys, width as usize)
}

fn draw_help(frame: &mut Frame, area: Rect) {
    let text = help_lines();
    let w = (text.iter().map(|l| units::width(l)).max().unwrap_or(0) as u16 + 4).min(area.width);
    let h = (text.len() as u16 + 2).min(area.height);
    let popup =
        Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h };
    frame.render_widget(Clear, popup);
    let lines: Vec<Line> = text.into_iter().map(Line::raw).collect();
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" help ")),
        popup,
    );
}

/// The `?` overlay's text: every key, then every column.
fn help_lines() -> Vec<String> {
    let mut text = vec!["Keys".to_string()];
    for (key, lines) in KEYS {
        for (i, line) in lines.iter().enumerate() {
            text.push(format!("  {:<14}{line}", if i == 0 { key } else { "" }));
        }
    }
    text.extend(
        [
            "Columns: counts since start; /S over the last refresh",
            "  STALLS    SYN timed out, plain SYN resent (~1s)",
            "  STALL/S   stalls per second now (0: none lately)",
            "  LOST      time lost to SYN timeouts",
            "  LOST/S    time lost per second now",
            "  ATTEMPTS  connections (client: made; server: taken)",
            "  ATT/S     connections per second now",
            "  ACCEPTED  SYN-data accepted",
            "  SAVED     round trips accepted SYN-data saved",
            "  NET       SAVED less LOST and data_not_acked resends",
            "  NAME      destination's DNS name (--names)",
            "  STALL_HISTORY  stalls per refresh, newest right",
            "  COOKIE    cookie requests",
            "  NOT_ACKED SYN-data not acknowledged",
            "  CAUSE     what most NOT_ACKED SYN-ACKs said:",
            "            new_cookie, no_tfo_option, same_cookie,",
            "            no_cookie_sent",
            "  OVERFLOW  TFO queue full   INVALID  bad cookie",
            "  ALT_KEY   backup key used  P50/P99  handshake",
            "  evicted: groups dropped beyond the table cap",
            "  *         counted by the kernel's own counters per",
            "            namespace (no hook of this backend sees it):",
            "            no listener or process; `kernel*` line",
        ]
        .map(String::from),
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        aggregation::top::{
            model_of,
            tests::{demo_events, demo_events_in_a_container, demo_refreshes, named_demo_events},
        },
        cli::Sort,
        events::Event,
    };
    use ratatui::{backend::TestBackend, Terminal};
    use std::time::Duration;

    fn info() -> HeaderInfo {
        HeaderInfo {
            backend: "tracepoint".into(),
            tcp_fastopen: vec![super::super::FastopenOf {
                netns: None,
                netns_name: None,
                value: Some(crate::kernel::sysctl::TcpFastopen(0x3)),
            }],
            interval: Duration::from_secs(1),
            lost: 0,
            color: false,
            live: true,
            paused: Vec::new(),
        }
    }

    fn screen(w: u16, h: u16, ui: &UiState) -> Vec<String> {
        screen_of(&model_of(&demo_events()).snapshot(), w, h, ui)
    }

    fn screen_of(snap: &Snapshot, w: u16, h: u16, ui: &UiState) -> Vec<String> {
        let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
        term.draw(|f| draw(f, snap, ui, &info())).unwrap();
        let buf = term.backend().buffer().clone();
        // As a terminal shows it: a wide character's second cell is part of it.
        (0..h)
            .map(|y| {
                let mut line = String::new();
                let mut x = 0;
                while x < w {
                    let symbol = buf[(x, y)].symbol();
                    line.push_str(symbol);
                    x += units::width(symbol).max(1) as u16;
                }
                line.trim_end().to_string()
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

    /// The tab line (one table shown) or the stacked tables' title lines.
    fn titles(s: &[String]) -> Vec<String> {
        s.iter().filter(|l| ["[1] ", "[2] ", "[3] ", "[4] "].iter().any(|t| l.contains(t))).cloned().collect()
    }

    #[test]
    fn wide_120x30_rates_next_to_totals_and_a_graph_per_row() {
        let s = screen_of(&demo_refreshes(0).snapshot(), 120, 30, &ui());
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
                "NOT_ACKED",
                "CAUSE",
                "STALLS",
                "STALL/S",
                "LOST",
                "LOST/S",
                "P99",
                "STALL_HISTORY"
            ]
        );
        // The middlebox destination: 3 attempts, none refused, 2 stalls (2.03 s) in all; in
        // the last refresh one connection, stalled, 1.02 s lost; stalls in the last two
        // refreshes.
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad, ["198.18.0.3:8080", "3", "0", "-", "2", "1.00", "2.03s", "1.02s", "1.02s", "██"]);
        let clean = tokens(line(&s, "198.18.0.2:8080"));
        assert_eq!(clean[..7], ["198.18.0.2:8080", "8", "0", "-", "0", "0", "0"]);
        assert_eq!(clean[9], "·······", "seven quiet refreshes");
        // The header: the totals, and what happens now with the host's graph.
        assert!(line(&s, "client ").contains("2 stalls 2.03s lost"));
        assert!(line(&s, "server ").contains("1 overflows"));
        let now = line(&s, "now ");
        assert!(now.contains("1.00 conns/s  1.00 stalls/s  1.02s lost/s  server 3.00 conns/s"), "{now}");
        assert!(now.ends_with("stalls/1s ·····██ (last 7s)"), "{now}");
        // The one-second bucket holds the two stalls; the histogram is five lines here.
        assert!(line(&s, ">=1s").contains("2 "));
        assert!(line(&s, "<1ms").contains("mode"));
        // One table at 30 lines: tabs with the key, the name and the row count (the short
        // names at 120: the full ones would leave no room for the sort and the interval).
        let tabs = titles(&s);
        assert_eq!(tabs.len(), 1, "{tabs:?}");
        let tabs = &tabs[0];
        for t in ["[1] Dest (2 rows)", "[2] Listen (2 rows)", "[3] Proc (2 rows)", "[4] Cont (2 rows)"] {
            assert!(tabs.contains(t), "{tabs}");
        }
        assert!(tabs.ends_with("sort attempts  every 1s"), "{tabs}");
        // Wide enough, the full names.
        let tabs = titles(&screen_of(&demo_refreshes(0).snapshot(), 130, 30, &ui())).remove(0);
        for t in ["[1] Destinations (2 rows)", "[2] Listeners (2 rows)", "[4] Containers (2 rows)"] {
            assert!(tabs.contains(t), "{tabs}");
        }
        let footer = s.last().unwrap();
        for k in ["q quit", "Space pause", "s sort", "/ filter", "? help"] {
            assert!(footer.contains(k), "{footer}");
        }
    }

    #[test]
    fn standard_80x24_keeps_refusals_stalls_and_the_host_graph() {
        let s = screen_of(&demo_refreshes(0).snapshot(), 80, 24, &ui());
        assert!(s.iter().all(|l| units::width(l) <= 80));
        let hdr = tokens(line(&s, "DESTINATION"));
        assert_eq!(hdr, ["DESTINATION", "ATTEMPTS", "NOT_ACKED", "CAUSE", "STALLS", "STALL/S", "LOST"]);
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad, ["198.18.0.3:8080", "3", "0", "-", "2", "1.00", "2.03s"]);
        assert!(line(&s, "now ").ends_with("stalls/1s ·····██ (last 7s)"), "the graph fits in 80");
        assert!(line(&s, "handshake").contains("<1ms"), "full histogram at 24 rows");
        // Short tab names, the row count on the chosen one: the sort is said.
        let tabs = titles(&s);
        assert!(
            tabs[0].starts_with(" [1] Dest (2 rows)   [2] Listen   [3] Proc   [4] Cont   sort attempts"),
            "{tabs:?}"
        );
        assert!(s.last().unwrap().contains("? help"), "footer fits in 80");
    }

    #[test]
    fn tall_150x45_and_200x60_stack_the_four_tables() {
        for (w, h) in [(150, 45), (200, 60)] {
            let s = screen_of(&demo_refreshes(0).snapshot(), w, h, &ui());
            assert!(s.iter().all(|l| l.chars().count() <= w as usize));
            let titles = titles(&s);
            assert_eq!(
                titles.iter().map(|t| t.trim()).collect::<Vec<_>>(),
                [
                    "[1] Destinations (2 rows)",
                    "[2] Listeners (2 rows)",
                    "[3] Processes (2 rows)",
                    "[4] Containers (2 rows)"
                ],
                "{w}x{h}: one title line per table"
            );
            line(&s, "all tables  sort attempts");
            let bad = tokens(line(&s, "198.18.0.3:8080"));
            assert_eq!(bad[..3], ["198.18.0.3:8080", "3", "1.00"]);
            assert_eq!(bad.last(), Some(&"██"));
            let curl = tokens(line(&s, "100 "));
            assert_eq!(curl[..4], ["100", "curl", "11", "1.00"]);
            assert_eq!(curl.last(), Some(&"·····██"), "the process's stalls, refresh by refresh");
            let l81 = tokens(line(&s, "198.18.0.2:8081"));
            assert_eq!(l81[..4], ["198.18.0.2:8081", "4026532246", "3", "3.00"]);
            // No event from a container: the host's rows have them all, one per role (the
            // last refresh: the client's stall, the three server events).
            let at = s.iter().position(|l| l.starts_with("CONTAINER ")).unwrap();
            assert_eq!(tokens(&s[at + 1])[..4], ["-", "client", "11", "1.00"], "{w}x{h}");
            assert_eq!(tokens(&s[at + 2])[..4], ["-", "server", "10", "3.00"], "{w}x{h}");
            let alt_key = line(&s, "DESTINATION").contains("ALT_KEY");
            assert_eq!(alt_key, w >= 200, "{w}x{h}: every column at 200 only");
        }
    }

    #[test]
    fn stall_rate_falls_back_to_zero_on_screen() {
        let s = screen_of(&demo_refreshes(3).snapshot(), 120, 30, &ui());
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad[4..8], ["2", "0", "2.03s", "0"], "totals stay, rates 0");
        assert_eq!(bad.last(), Some(&"██···"));
        let now = line(&s, "now ");
        assert!(now.contains("0 conns/s  0 stalls/s  0 lost/s"), "{now}");
        assert!(now.ends_with("stalls/1s ·····██··· (last 10s)"), "{now}");
    }

    #[test]
    fn before_the_first_refresh_and_in_a_replay_no_rates() {
        let s = screen(120, 30, &ui());
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad[..8], ["198.18.0.3:8080", "3", "0", "-", "2", "-", "2.03s", "-"]);
        assert!(line(&s, "now ").contains("- conns/s  - stalls/s  - lost/s"));
        let snap = model_of(&demo_events()).snapshot();
        let mut term = Terminal::new(TestBackend::new(120, 30)).unwrap();
        let replay = HeaderInfo { live: false, ..info() };
        term.draw(|f| draw(f, &snap, &ui(), &replay)).unwrap();
        let buf = term.backend().buffer().clone();
        let now: String = (0..120).map(|x| buf[(x, 3)].symbol().to_string()).collect();
        assert!(now.contains("a recording: rates and the stall graph are for live tracing only"), "{now}");
    }

    #[test]
    fn narrow_60x20_degrades_cleanly() {
        let s = screen_of(&demo_refreshes(0).snapshot(), 60, 20, &ui());
        assert!(s.iter().all(|l| units::width(l) <= 60));
        // Whole words, never cut mid-word (issue 31, item 12): the header loses its least
        // needed parts, and says what it keeps in full.
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        let head = line(&s, "tfo-trace top");
        assert_eq!(words(head), ["tfo-trace", "top", "backend", "tracepoint", "lost", "0", "evicted", "0"]);
        let client = line(&s, "client ");
        assert!(client.contains("0 not_acked  2 stalls 2.03s lost"), "{client}");
        let server = line(&s, "server ");
        assert!(!server.trim_end().ends_with("invali"), "{server}");
        assert!(server.contains("1 overflows") && server.contains("1 invalid"), "{server}");
        // The active sort is always said.
        assert!(line(&s, "[1]").contains("sort attempts"), "{}", line(&s, "[1]"));
        // Keys: whole ones, help among them.
        let footer = s.iter().rev().find(|l| !l.trim().is_empty()).unwrap();
        assert!(footer.contains("? help") && footer.contains("q quit"), "{footer}");
        for w in words(footer) {
            assert!(
                [
                    "q", "quit", "?", "help", "s", "sort", "/", "filter", "1-4", "table", "Space", "pause",
                    "Tab", "next"
                ]
                .contains(&w.as_str()),
                "{footer}"
            );
        }
        // Columns by priority only: no less needed one (COOKIE) while a more needed one
        // (STALL/S) is left out.
        let hdr = tokens(line(&s, "DESTINATION"));
        assert_eq!(hdr, ["DESTINATION", "ATTEMPTS", "NOT_ACKED", "STALLS", "LOST"]);
        let bad = tokens(line(&s, "198.18.0.3:8080"));
        assert_eq!(bad, ["198.18.0.3:8080", "3", "0", "2", "2.03s"]);
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
        let tabs = line(&s, "filter: nginx");
        // The filter's line needs the short names at 120; the count is of the filtered rows,
        // and the sort is said.
        assert!(tabs.contains("[3] Proc (1 of 2 rows)"), "{tabs}");
        assert!(tabs.contains("filter: nginx  sort attempts"), "{tabs}");
        // Paused and filtered at 80 wide: both still said, before the sort and interval.
        u.paused = true;
        let tabs80 = line(&screen(80, 24, &u), "[3] Proc").to_string();
        assert!(tabs80.contains("PAUSED  filter: nginx"), "{tabs80}");
        // For that, the other tabs give up their names and keep their keys.
        assert!(tabs80.starts_with(" [1]   [2]   [3] Proc (1 of 2 rows)   [4]   PAUSED"), "{tabs80}");
        u.paused = false;
        let nginx = tokens(line(&s, "200 "));
        assert_eq!(nginx[..3], ["200", "nginx", "10"]);
        assert!(!s.iter().any(|l| l.contains(" curl")), "filtered out");
        u.help = true;
        let s = screen(80, 24, &u);
        line(&s, "sort: attempts stalls stalls/s");
        line(&s, "STALL/S");
        u.filter = "nothing".into();
        u.help = false;
        line(&screen(80, 24, &u), "no row matches the filter");
    }

    #[test]
    fn containers_table_names_each_container_and_the_host() {
        let snap = model_of(&demo_events_in_a_container()).snapshot();
        let mut u = ui();
        u.view = View::Containers;
        for (w, h) in [(80, 24), (120, 30)] {
            let s = screen_of(&snap, w, h, &u);
            assert!(s.iter().all(|l| l.chars().count() <= w as usize));
            assert_eq!(tokens(line(&s, "CONTAINER"))[..3], ["CONTAINER", "ROLE", "ATTEMPTS"]);
            let c = tokens(line(&s, "4f1e6d9a0c2b"));
            assert_eq!(c[..3], ["4f1e6d9a0c2b", "client", "3"], "{w}x{h}");
            let host = s.iter().position(|l| l.starts_with("CONTAINER ")).unwrap() + 1;
            assert_eq!(tokens(&s[host])[..3], ["-", "client", "8"], "sorted by attempts: the host first");
            line(&s, "[4] Cont (4 rows)");
        }
        u.filter = "4F1E".into();
        let s = screen_of(&snap, 120, 30, &u);
        line(&s, "[4] Cont (2 of 4 rows)");
        assert_eq!(tokens(line(&s, "4f1e6d9a0c2b"))[2], "3");
        assert!(!s.iter().any(|l| l.starts_with("- ")), "the host filtered out");
        u.filter.clear();
        let empty = screen_of(&Snapshot::default(), 80, 24, &u);
        line(&empty, "no TFO events yet");
    }

    #[test]
    fn lines_are_shared_between_stacked_tables() {
        // Room for all: each gets what it needs.
        assert_eq!(share_lines(&[3, 4, 5], 20, 0), [3, 4, 5]);
        // Not enough: the small ones get theirs, the big ones share; the rest to the focus.
        assert_eq!(share_lines(&[3, 50, 50], 20, 2), [3, 8, 9]);
        assert_eq!(share_lines(&[50, 50, 50], 20, 1), [6, 8, 6]);
        assert_eq!(share_lines(&[3, 3, 3], 0, 0), [0, 0, 0]);
        for (needs, avail) in [(vec![1, 100, 7], 33), (vec![40, 2, 2], 17), (vec![9, 9, 9], 26)] {
            assert!(share_lines(&needs, avail, 0).iter().sum::<usize>() <= avail);
        }
    }

    /// `--names` on screen: the NAME column after DESTINATION, and `/` finds a row by it.
    #[test]
    fn named_destinations_on_screen_and_filtered_by_name() {
        let snap = model_of(&named_demo_events()).snapshot();
        let s = screen_of(&snap, 120, 30, &ui());
        assert!(s.iter().all(|l| l.chars().count() <= 120));
        assert_eq!(tokens(line(&s, "DESTINATION"))[..3], ["DESTINATION", "NAME", "ATTEMPTS"]);
        assert_eq!(tokens(line(&s, "198.18.0.2:8080"))[..3], ["198.18.0.2:8080", "api.example", "8"]);
        assert_eq!(tokens(line(&s, "198.18.0.3:8080"))[..3], ["198.18.0.3:8080", "-", "3"]);
        let mut u = ui();
        u.filter = "api".into();
        let s = screen_of(&snap, 120, 30, &u);
        line(&s, "[1] Dest (1 of 3 rows)");
        assert!(!s.iter().any(|l| l.contains("198.18.0.3:8080")), "filtered out");
    }

    /// Never a word cut (issue 37, item 10): at 80x24 the filter prompt read "Enter ke" and
    /// the tab line's "every 1s" lost its "s". Each part of those lines is whole or absent,
    /// at every width from 60 to 120, with a dozen rows ("(12 rows)" is longer).
    #[test]
    fn no_word_is_cut_in_the_prompt_or_the_tab_line() {
        use crate::aggregation::top::tests::client;
        let events: Vec<Event> = (10..22).map(|host| client(Outcome::Accepted, host, 8080, 100, 0)).collect();
        let snap = model_of(&events).snapshot();
        let words = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        for w in [60, 70, 80, 90, 100, 120] {
            let mut u = ui();
            u.editing = true;
            u.filter = "198.18".into();
            let s = screen_of(&snap, w, 24, &u);
            let footer = s.last().unwrap();
            let prompt = "filter: 198.18_ Enter keeps, Esc clears \
                          (matches address, port, netns or its name, pid, process, container)";
            for word in words(footer) {
                assert!(words(prompt).contains(&word), "{w}: {word:?} cut in {footer:?}");
            }
            assert!(footer.contains("Enter keeps, Esc clears"), "{w}: what the keys do, first: {footer:?}");
            for paused in [false, true] {
                u.editing = false;
                u.paused = paused;
                let s = screen_of(&snap, w, 24, &u);
                let tabs = titles(&s).remove(0);
                let status: Vec<String> = words(&tabs)
                    .into_iter()
                    .skip_while(|t| !["PAUSED", "filter:", "sort"].contains(&t.as_str()))
                    .collect();
                let whole = ["PAUSED", "filter:", "198.18", "sort", "attempts", "every", "1s"];
                assert!(status.iter().all(|t| whole.contains(&t.as_str())), "{w}: {tabs:?}");
                assert!(tabs.contains("sort attempts") && tabs.contains("PAUSED") == paused, "{w}: {tabs:?}");
                assert!(!tabs.contains("every") || tabs.ends_with("every 1s"), "{w}: {tabs:?}");
            }
        }
    }

    /// `?` explains every column a table can show (SAVED and NET were missing).
    #[test]
    fn help_explains_every_column() {
        let help = help_lines().join("\n");
        let words: Vec<&str> = help.split_whitespace().collect();
        for c in &crate::views::top::columns::COLUMNS {
            let said = words.iter().any(|w| *w == c.title || w.split('/').any(|part| part == c.title));
            assert!(said, "{} is not in the help:\n{help}", c.title);
        }
    }

    /// Issue 55, item 4's case: the demo's traffic, then in one more refresh a destination
    /// behind NAT66 whose source alternates (its cookie request, then four SYN-data each
    /// refused with a new cookie: TcpExtTCPFastOpenActiveFail +4), the server's four
    /// invalid cookies, which the tracepoint backend takes from its namespace's counter
    /// (live, the header's total is that count), and a pause the client's namespace
    /// counted: two namespaces with long names on the `kernel*` line.
    fn refusals_snapshot() -> Snapshot {
        use crate::aggregation::{
            kernel_counted::{CountedRow, KernelCounted},
            top::tests::client,
        };
        let mut m = demo_refreshes(0);
        let nat: std::net::IpAddr = "fd00:7f0:1::4".parse().unwrap();
        m.add(&Event { daddr: nat, ..client(Outcome::CookieRequested, 0, 8080, 130, 0) });
        for _ in 0..4 {
            let refused = client(Outcome::DataNotAcked, 0, 8080, 140, 0);
            m.add(&Event { daddr: nat, cause: Some(crate::events::Cause::NewCookie), ..refused });
        }
        let totals = m.event_totals();
        m.tick(Duration::from_secs(1), &totals);
        let mut snap = m.snapshot();
        let row = |netns, role, outcome, count, counter| CountedRow {
            netns,
            role,
            outcome,
            count,
            counter,
            within: None,
        };
        snap.kernel_counted = KernelCounted {
            outcomes: vec![(Role::Server, Outcome::CookieInvalid), (Role::Client, Outcome::ActiveDisabled)],
            namespaces: 3,
            rows: vec![
                row(4026532246, Role::Server, Outcome::CookieInvalid, 4, "TcpExtTCPFastOpenPassiveFail"),
                row(4026532177, Role::Client, Outcome::ActiveDisabled, 1, "TcpExtTCPFastOpenBlackhole"),
            ],
            netns_names: [
                (4026532246, "tfolab-431337-12-srv".to_string()),
                (4026532177, "tfolab-431337-12-cli".to_string()),
            ]
            .into(),
            ..KernelCounted::default()
        };
        snap.server.invalid_cookies = 4;
        snap
    }

    /// Issue 55, item 4: at 80x24 the NAT66 destination read ATTEMPTS 5, STALLS 0, LOST 0,
    /// the header dropped "4 not_acked" and the `kernel*` line was cut mid-word. The whole
    /// screen, as an on-call engineer reads it: every refusal, stall and second lost said,
    /// each word whole.
    #[test]
    fn snapshot_80x24_says_refusals_stalls_and_time_lost() {
        let s = screen_of(&refusals_snapshot(), 80, 24, &ui());
        let want = [
            "tfo-trace top  backend tracepoint  lost 0  evicted 0",
            "client 16 conns  4 not_acked  2 stalls 2.03s lost  7 accepted  p99 1.02s",
            "server 10 conns  4 invalid*  1 overflows  8 accepted  0 cookie  1 alt_key",
            "now    5.00 conns/s  0 stalls/s  0 lost/s  stalls/1s ·····██· (last 8s)",
            "kernel* netns tfolab-431337-12-cli: client active_disabled 1",
            "        netns tfolab-431337-12-srv: server cookie_invalid 4",
            "handshake     <1ms █████████████████████████████████████████████ 24  92% mode",
            "            1-10ms                                                0   0%",
            "          10-100ms                                                0   0%",
            "            0.1-1s                                                0   0%",
            "              >=1s ████                                           2   8%",
            " [1] Dest (3 rows)   [2] Listen   [3] Proc   [4] Cont   sort attempts  every 1s",
            "DESTINATION           ATTEMPTS NOT_ACKED         CAUSE STALLS STALL/S    LOST",
            "198.18.0.2:8080              8         0             -      0       0       0",
            "[fd00:7f0:1::4]:8080         5         4    new_cookie      0       0       0",
            "198.18.0.3:8080              3         0             -      2       0   2.03s",
        ];
        assert_eq!(s[..want.len()], want, "\n{}", s.join("\n"));
        assert!(s[want.len()..23].iter().all(|l| l.is_empty()), "\n{}", s.join("\n"));
        assert_eq!(s[23], "q quit  1-4 table  Tab next table  Space pause  s sort  / filter  ? help");
    }

    /// Issue 55, item 5: at 200x50 every table is drawn with every column; a glyph (the
    /// bars, the graphs, a process named in wide characters) is whole or absent, every
    /// line within the width, every number under its title.
    #[test]
    fn snapshot_200x50_cuts_no_glyph_and_keeps_columns_aligned() {
        use crate::aggregation::top::tests::client;
        let mut snap = refusals_snapshot();
        let mut m = model_of(&[]);
        for (pid, comm) in [(300, "aデータベ"), (301, "数据库客户")] {
            m.add(&Event {
                pid,
                comm: comm.into(),
                ..client(Outcome::SynRetransmitted, 3, 8080, 1_020_000, 1_019_000)
            });
        }
        snap.processes.rows.extend(m.snapshot().processes.rows);
        for (w, h) in [(200, 50), (120, 30), (80, 24)] {
            let mut u = ui();
            u.view = View::Processes;
            let s = screen_of(&snap, w, h, &u);
            for l in &s {
                assert!(units::width(l) <= w as usize, "{w}x{h}: {l:?}");
                assert!(!l.contains('\u{fffd}'), "{w}x{h}: {l:?}");
            }
            // The handshake bars: whole blocks, then spaces, then the count.
            let bar = line(&s, ">=1s");
            assert!(bar.contains("█") && bar.ends_with("2   8%"), "{bar}");
            // Each number's last character under its title's last one.
            let header = line(&s, "PID ");
            let end_of = |title: &str| {
                header.find(&format!("{title} ")).or_else(|| header.rfind(title)).map(|at| at + title.len())
            };
            for comm in ["aデータベ", "数据库客户", "curl"] {
                let row = line(&s, comm);
                let upto = |end: usize| {
                    let mut columns = 0;
                    row.chars()
                        .take_while(|c| {
                            columns += unicode_width::UnicodeWidthChar::width(*c).unwrap_or(0);
                            columns <= end
                        })
                        .collect::<String>()
                };
                let stalls = if comm == "curl" { "2" } else { "1" };
                let end = end_of("STALLS").unwrap_or_else(|| panic!("{w}x{h}: no STALLS in {header:?}"));
                assert!(upto(end).ends_with(stalls), "{w}x{h}: {row:?} under {header:?}");
            }
        }
        let s = screen_of(&snap, 200, 50, &ui());
        let nat = tokens(line(&s, "[fd00:7f0:1::4]:8080"));
        assert_eq!((nat[1], nat[5], nat[6]), ("5", "4", "new_cookie"), "{nat:?}");
        assert_eq!(nat.last(), Some(&"·"), "the row's graph, a whole glyph");
    }

    /// The `kernel*` and `paused` lines wrap at words, a namespace's phrase whole where it
    /// fits, at most their lines, then `...`; never a word cut where it fits on a line.
    #[test]
    fn long_lines_wrap_at_words() {
        let parts = [
            "netns tfolab-431337-12-cli: client active_disabled 1".to_string(),
            "netns tfolab-431337-12-srv: server cookie_invalid 4, server queue_overflow 2".to_string(),
        ];
        let words: Vec<&str> = parts.iter().flat_map(|p| p.split_whitespace()).collect();
        for width in [30, 40, 60, 80, 100, 200] {
            let lines = wrap(Span::raw("kernel* "), &parts, Style::default(), width, 2);
            let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
            assert!(lines.len() <= 2 && text.iter().all(|l| units::width(l) <= width), "{width}: {text:?}");
            let said: Vec<&str> = text.iter().flat_map(|l| l.split_whitespace()).collect();
            assert_eq!(said[0], "kernel*");
            for w in &said[1..] {
                assert!(words.contains(w) || ["|", "..."].contains(w), "{width}: {w:?} cut in {text:?}");
            }
            let all_said = said.iter().filter(|w| words.contains(w)).count() == words.len();
            assert_eq!(all_said, !said.contains(&"..."), "{width}: {text:?}");
        }
        let at = |width| wrap(Span::raw("kernel* "), &parts, Style::default(), width, 2);
        assert_eq!(at(200).len(), 1, "one line where it fits");
        assert_eq!(
            at(100)[1].to_string(),
            "        netns tfolab-431337-12-srv: server cookie_invalid 4, server queue_overflow 2"
        );
        assert!(at(40)[1].to_string().ends_with(" ..."), "{:?}", at(40));
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
