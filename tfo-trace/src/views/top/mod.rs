//! `tfo-trace top`: live tables of TFO outcomes per destination, per listener, per
//! process and per container, refreshed every interval, with each row's rates over the last
//! interval (taken over the real time between two refreshes) next to its totals. A
//! terminal UI when stdout is a terminal; plain rows (`--batch`, or not a terminal) or JSON
//! lines (`--json`) otherwise.
//!
//! The loop takes its events from an [`EventFeed`]: the live ring buffer, or recorded
//! events ([`Recorded`]) for `top --from`.
pub(crate) mod batch;
pub(crate) mod columns;
pub(crate) mod header;
mod keys;
pub(crate) mod render;
pub(crate) mod rows;
pub(crate) mod state;
pub(crate) mod terminal;

use std::{
    io::{self, IsTerminal as _},
    os::fd::AsRawFd as _,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result};
use crossterm::event::Event as TermEvent;

use crate::{
    aggregation::{
        kernel_counted::KernelCounted,
        top::{totals, Snapshot, TopModel, Totals},
    },
    cli::TopOptions,
    events::{counts::KernelCounts, rfc3339, Event},
    live::{
        paused::{self, Paused},
        session::Session,
        stop::Stop,
    },
};
pub use header::{FastopenOf, HeaderInfo};
use rows::View;
use state::{Action, UiState};

/// Where `top` gets its events: the live ring buffer or a recording.
#[allow(async_fn_in_trait)] // used generically only, never as `dyn`
pub trait EventFeed {
    /// Waits for more events and counts them in `model`.
    async fn next_batch(&mut self, model: &mut TopModel) -> Result<()>;
    /// Counts what is already there in `model`, without waiting.
    fn drain(&mut self, model: &mut TopModel) -> Result<()>;
    /// The loop stops: the next [`EventFeed::drain`] is the last (live: it hands over
    /// what the reader held back too).
    fn stopping(&mut self) {}
    /// Events lost before they reached us.
    fn lost(&self) -> u64;
    /// What the kernel counted, where a kernel counts (live): the totals then come from
    /// it, exact even when events were lost.
    fn kernel_counts(&self) -> Option<KernelCounts> {
        None
    }
    /// What the namespaces' own counters counted of the outcomes no hook sees, read now
    /// (live only).
    fn kernel_counted(&mut self) -> KernelCounted {
        KernelCounted::default()
    }
    /// No event will ever come again (the end of a recording).
    fn exhausted(&self) -> bool {
        false
    }
    /// Events arrive as they happen, so a refresh interval's counts are a rate. A
    /// recording arrives all at once: no rates.
    fn live(&self) -> bool {
        false
    }
}

impl EventFeed for Session {
    async fn next_batch(&mut self, model: &mut TopModel) -> Result<()> {
        self.wait().await?;
        EventFeed::drain(self, model)
    }
    fn drain(&mut self, model: &mut TopModel) -> Result<()> {
        self.drain_each(|e| model.add_view(e))
    }
    fn stopping(&mut self) {
        Session::stopping(self);
    }
    fn lost(&self) -> u64 {
        Session::lost(self)
    }
    fn kernel_counts(&self) -> Option<KernelCounts> {
        Session::kernel_counts(self).ok()
    }
    fn kernel_counted(&mut self) -> KernelCounted {
        Session::kernel_counted(self)
    }
    fn live(&self) -> bool {
        true
    }
}

/// Recorded events, delivered a chunk at a time (a recording may hold millions).
pub struct Recorded<I> {
    events: I,
    done: bool,
}

/// Events counted per batch when replaying.
const REPLAY_CHUNK: usize = 4096;

impl<I: Iterator<Item = Event>> Recorded<I> {
    pub fn new(events: I) -> Self {
        Recorded { events, done: false }
    }
}

impl<I: Iterator<Item = Event>> EventFeed for Recorded<I> {
    async fn next_batch(&mut self, model: &mut TopModel) -> Result<()> {
        if self.done {
            std::future::pending::<()>().await;
        }
        self.drain(model)
    }
    fn drain(&mut self, model: &mut TopModel) -> Result<()> {
        for _ in 0..REPLAY_CHUNK {
            match self.events.next() {
                Some(e) => model.add(&e),
                None => {
                    self.done = true;
                    break;
                }
            }
        }
        Ok(())
    }
    fn lost(&self) -> u64 {
        0
    }
    fn exhausted(&self) -> bool {
        self.done
    }
}

/// `top --from FILE`: the tables of every good line of the recording (of every segment,
/// as the filter flags select them), then one error line for the bad ones.
async fn run_from(
    path: &std::path::Path,
    filter: &crate::filter::EventFilter,
    opts: &TopOptions,
) -> Result<()> {
    let (header, mut replay) =
        crate::events::replay::Replay::open(path, filter.clone().into_select(), Default::default())?;
    let info = HeaderInfo::replay(format!("{} (recorded on {})", header.backend, header.host), opts.interval);
    let mut stop = Stop::new(opts.live.duration)?;
    let seen = run_on(&mut Recorded::new(replay.events()), opts, info, &mut stop).await?;
    crate::note!("tfo-trace: {seen} events from {}", path.display())?;
    if let Some(msg) = filter.netns_name_unrecorded(&replay.netns_names) {
        return Err(crate::events::record::UsageError(msg).into());
    }
    match replay.bad.summary() {
        Some(line) => Err(anyhow::anyhow!(line)),
        None => Ok(()),
    }
}

/// `tfo-trace top`, live: load and attach, then run the loop on the ring buffer.
pub async fn run(opts: TopOptions) -> Result<()> {
    if let Some((path, filter)) = &opts.from {
        return run_from(path, filter, &opts).await;
    }
    let live = &opts.live;
    let mut session = Session::start(&live.load, live.record.as_ref())?;
    let netns = &live.load.filter.netns[..usize::from(live.load.filter.n_netns)];
    let info = HeaderInfo::new(session.tracer.backend.to_string(), opts.interval, netns);
    let mut stop = session.take_stop(live.duration)?;
    let ended = run_on(&mut session, &opts, info, &mut stop).await;
    // A closed stdout ends the tables, not the closing line (as in `trace`).
    if let Err(e) = &ended {
        if !crate::live::output::is_output_closed(e) {
            return ended.map(drop);
        }
    }
    session.say_closing(live.json_summary)?;
    ended.map(drop)
}

fn now_rfc3339() -> String {
    let ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    rfc3339(ns)
}

/// The loop, whatever the feed, until `stop` (a signal, or its deadline); returns how
/// many events it saw. The caller makes `stop`, so a signal that came before the loop
/// (the demo's lab being built) is not lost.
pub async fn run_on<F: EventFeed>(
    feed: &mut F,
    opts: &TopOptions,
    mut info: HeaderInfo,
    stop: &mut Stop,
) -> Result<u64> {
    let tui = !opts.batch && !opts.json && io::stdout().is_terminal();
    let mut model = TopModel::new(opts.max_groups);
    let start = tokio::time::Instant::now();
    let mut ticker = tokio::time::interval_at(start + opts.interval, opts.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut refreshes = 0u64;
    let mut clock =
        RefreshClock { last: start.into_std(), counted: KernelCounted::default(), paused: Vec::new() };
    info.live = feed.live();

    if !tui {
        let mut out = io::stdout().lock();
        let mut printed_events = None;
        let mut printed_counted = KernelCounted::default();
        loop {
            let mut done = false;
            tokio::select! {
                r = feed.next_batch(&mut model) => r?,
                _ = ticker.tick() => {
                    feed.drain(&mut model)?;
                    refreshes += 1;
                    done = opts.count.is_some_and(|n| refreshes >= n);
                    info.lost = feed.lost();
                    printed_events = Some(model.events);
                    let snap = refresh(&mut model, feed, &mut clock);
                    printed_counted = snap.kernel_counted.clone();
                    info.paused.clone_from(&clock.paused);
                    print(&mut out, &snap, &info, opts)?;
                }
                _ = stop.requested() => done = true,
            }
            if feed.exhausted() && printed_events.is_none() {
                // A recording: everything is in; one snapshot says it all.
                info.lost = feed.lost();
                print(&mut out, &snapshot(&model, feed, &clock), &info, opts)?;
                return Ok(model.events);
            }
            if done {
                break;
            }
        }
        // Stopped between two refreshes: what came since the last one (events, or counts
        // of the namespaces' counters) is not lost.
        feed.stopping();
        feed.drain(&mut model)?;
        if opts.count.is_none_or(|n| refreshes < n) {
            let events_changed = printed_events != Some(model.events);
            // Its rates are those of the part interval since the last refresh.
            let snap = refresh(&mut model, feed, &mut clock);
            let counted_changed = snap.kernel_counted.rows != printed_counted.rows
                || snap.kernel_counted.flood != printed_counted.flood;
            if events_changed || counted_changed {
                info.lost = feed.lost();
                info.paused.clone_from(&clock.paused);
                print(&mut out, &snap, &info, opts)?;
            }
        }
        return Ok(model.events);
    }

    let mut ui = UiState::new(View::Destinations, opts.sort, opts.filter.clone());
    let mut guard = terminal::TerminalGuard::enter()?;
    let mut snap = Snapshot::default();
    let mut keys = keys::Keys::start()?;
    // No SIGHUP where the view is outside its terminal's session: it looks for itself,
    // more often than anyone notices and at the cost of one poll(2).
    let mut hangup_check = tokio::time::interval(Duration::from_millis(200));
    let mut redraw = true;
    // The snapshot a refresh took (its totals are the ones its rates were taken of).
    let mut fresh: Option<Snapshot> = None;
    loop {
        if redraw {
            info.lost = feed.lost();
            info.paused.clone_from(&clock.paused);
            if !ui.paused {
                snap = fresh.take().unwrap_or_else(|| snapshot(&model, feed, &clock));
            }
            guard.terminal.draw(|f| render::draw(f, &snap, &ui, &info)).context("drawing the screen")?;
            redraw = false;
        }
        tokio::select! {
            r = feed.next_batch(&mut model) => {
                r?;
                // A recording shows as soon as it is read; live events wait for the tick.
                redraw = feed.exhausted();
            }
            _ = ticker.tick() => {
                feed.drain(&mut model)?;
                refreshes += 1;
                if opts.count.is_some_and(|n| refreshes >= n) {
                    break;
                }
                // Paused, the rates go on being taken; the screen keeps what it shows.
                fresh = Some(refresh(&mut model, feed, &mut clock));
                redraw = true;
            }
            key = keys.next() => match key {
                Some(TermEvent::Key(k)) => match ui.on_key(k) {
                    Action::Quit => return finish(guard, model.events),
                    Action::Redraw => redraw = true,
                    Action::None => {}
                },
                Some(TermEvent::Resize(..)) => redraw = true,
                Some(_) => {}
                // The reader stopped on an error: the terminal is gone.
                None => break,
            },
            _ = hangup_check.tick() => {
                if keys::hung_up(io::stdout().as_raw_fd()) {
                    break;
                }
            }
            _ = stop.requested() => break,
        }
    }
    finish(guard, model.events)
}

fn finish(guard: terminal::TerminalGuard, events: u64) -> Result<u64> {
    drop(guard);
    Ok(events)
}

/// When the last refresh was: rates divide by the real time since, not by the interval
/// asked for (a refresh can come late on a busy machine); and what the namespaces'
/// counters said then (read once per refresh, not per redraw).
struct RefreshClock {
    last: std::time::Instant,
    counted: KernelCounted,
    paused: Vec<Paused>,
}

impl RefreshClock {
    fn lap(&mut self) -> Duration {
        let now = std::time::Instant::now();
        let elapsed = now.saturating_duration_since(self.last);
        self.last = now;
        elapsed
    }
}

/// The totals from the events, or from the kernel's counts where it counts (and its
/// namespaces' counters for what no hook sees).
fn totals_of<F: EventFeed>(model: &TopModel, feed: &F, counted: &KernelCounted) -> Totals {
    let mut t = model.event_totals();
    if let Some(counts) = feed.kernel_counts() {
        t.total = totals::row(&counts, counted, None, &t.total);
        t.client = totals::row(&counts, counted, Some(crate::events::Role::Client), &t.client);
        t.server = totals::row(&counts, counted, Some(crate::events::Role::Server), &t.server);
    }
    t
}

/// The tables from the events, the totals as [`totals_of`] takes them; rates and the
/// namespaces' counters as of the last refresh.
fn snapshot<F: EventFeed>(model: &TopModel, feed: &F, clock: &RefreshClock) -> Snapshot {
    let mut snap = model.snapshot_with(totals_of(model, feed, &clock.counted));
    snap.kernel_counted = clock.counted.clone();
    snap
}

/// A refresh: closes the interval (rates over the real time since the last refresh, for
/// live events) and takes the snapshot to show.
fn refresh<F: EventFeed>(model: &mut TopModel, feed: &mut F, clock: &mut RefreshClock) -> Snapshot {
    clock.counted = feed.kernel_counted();
    let totals = totals_of(model, feed, &clock.counted);
    if feed.live() {
        model.tick(clock.lap(), &totals);
        clock.paused = paused::said(&model.pauses, &clock.counted);
    }
    let mut snap = model.snapshot_with(totals);
    snap.kernel_counted = clock.counted.clone();
    snap
}

/// Prints one snapshot; a closed stdout is [`crate::live::output::OutputClosed`], which
/// ends `top` quietly.
fn print(out: &mut impl io::Write, snap: &Snapshot, info: &HeaderInfo, opts: &TopOptions) -> Result<()> {
    let ts = now_rfc3339();
    crate::live::output::stdout_written(if opts.json {
        batch::write_json(out, &ts, snap, info, opts.sort, &opts.filter)
    } else {
        batch::write_text(out, &ts, snap, info, opts.sort, &opts.filter)
    })
}
