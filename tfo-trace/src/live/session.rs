//! A live tracing session: what every live view (trace, stalls, top, report, export, demo)
//! does around its own output, said once. Check privileges, load and attach (and say which
//! backend runs), read the ring buffer, write every event to the `--record` file, stop on
//! Ctrl-C, SIGTERM, SIGHUP or `--duration` with what the kernel already wrote still
//! delivered, and say at the end how many events came and every way one could have gone
//! missing.
use std::{ops::ControlFlow, time::Duration};

use anyhow::Result;

use crate::{
    aggregation::kernel_counted::KernelCounted,
    events::{
        counts::{Health, KernelCounts},
        reader::EventSource,
        record::{Header, RecordTo, Recorder},
        Event, EventRef,
    },
    live::{closing::Closing, namespace_counters::NamespaceCounters, stop::Stop},
    probes::{self, LoadOptions, Tracer},
};

pub struct Session {
    pub tracer: Tracer,
    source: EventSource,
    recorder: Option<Recorder>,
    /// Events delivered so far.
    seen: u64,
    /// Every namespace's counters since the programs attached: the outcomes no hook sees.
    counters: NamespaceCounters,
    /// Made first thing, so that a signal from then on stops the view (which takes it,
    /// [`Session::take_stop`]) rather than killing the process: one that came in the
    /// window between "attached" and the view's loop did, with no summary said.
    stop: Option<Stop>,
    /// The kernel sends only refused SYN-data as events ([`LoadOptions`]'s
    /// `refusal_events_only`): the other outcomes are only counted.
    refusal_events_only: bool,
}

impl Session {
    /// Loads and attaches the programs after the privilege check, and opens the `--record`
    /// file (before loading: a file refused is said at once; its header names the backend
    /// that runs).
    pub fn start(load: &LoadOptions, record: Option<&RecordTo>) -> Result<Session> {
        let stop = Some(Stop::new(None)?);
        check_privileges()?;
        let mut recorder = record.map(Recorder::open).transpose()?;
        let started = probes::load(load).and_then(|mut tracer| {
            let sees_synack = crate::backends::sees_synack(tracer.backend);
            let seqs = if sees_synack { None } else { Some(synack_seqs(&mut tracer.ebpf)?) };
            let causes = crate::events::causes::Causes::new(
                tracer.cookie_key,
                sees_synack,
                !load.refusal_events_only,
                seqs,
            );
            let names = load.names.then(|| start_names(&mut tracer.ebpf)).transpose()?;
            let source = EventSource::new(&mut tracer.ebpf, tracer.cgroup_hooks.is_ok(), names, causes)?;
            if let Some(r) = &mut recorder {
                r.write_header(&Header::now(tracer.backend.name()))?;
            }
            // The counters' baseline before "attached" is said: what happens after that
            // line is counted by both the hooks and the counters.
            let counters = NamespaceCounters::start(tracer.backend, &load.filter);
            say_attached(&tracer, load)?;
            Ok((tracer, source, counters))
        });
        match started {
            Ok((tracer, source, counters)) => Ok(Session {
                tracer,
                source,
                recorder,
                seen: 0,
                counters,
                stop,
                refusal_events_only: load.refusal_events_only,
            }),
            Err(e) => {
                if let Some(r) = recorder {
                    r.discard();
                }
                Err(e)
            }
        }
    }

    /// Waits for events and appends them to `out` (and to the recording).
    pub async fn next_batch(&mut self, out: &mut Vec<Event>) -> Result<()> {
        let from = out.len();
        self.source.next_batch(out).await?;
        self.delivered(&out[from..])
    }

    /// Appends what the kernel already wrote, without waiting (and records it).
    pub fn drain(&mut self, out: &mut Vec<Event>) -> Result<()> {
        let from = out.len();
        self.source.drain(out);
        self.delivered(&out[from..])
    }

    /// `--names`: read the DNS answers of namespaces made since the start, from now on
    /// (otherwise they are found within a second).
    pub fn watch_new_namespaces(&mut self) {
        self.source.watch_new_namespaces();
    }

    /// The view stops: the next drain is the last, and hands over everything the reader
    /// holds, its server events named after a short wait for their listeners' reads
    /// ([`EventSource::drain_each`]). Call it before the last drain.
    pub fn stopping(&mut self) {
        self.source.stopping();
    }

    /// Waits until the kernel wakes us or 100 ms pass (then [`Session::drain_each`]).
    pub async fn wait(&mut self) -> Result<()> {
        self.source.wait().await
    }

    /// [`Session::drain`], each event handed to `each` as its [`Event::view`]: no event is
    /// made unless one is recorded (what `top` counts, at the rate of a busy host).
    pub fn drain_each(&mut self, mut each: impl FnMut(EventRef<'_>)) -> Result<()> {
        let counters = &mut self.counters;
        if self.recorder.is_none() {
            self.seen += self.source.drain_each(|e| {
                counters.saw(e.netns, e.pid);
                each(e)
            });
            return Ok(());
        }
        let mut batch = Vec::new();
        self.source.drain_each(|e| {
            counters.saw(e.netns, e.pid);
            batch.push(e.to_event());
            each(e);
        });
        self.seen += batch.len() as u64;
        self.record(&batch)
    }

    fn delivered(&mut self, events: &[Event]) -> Result<()> {
        for e in events {
            self.counters.saw(e.netns, e.pid);
        }
        self.seen += events.len() as u64;
        self.record(events)
    }

    /// Writes `events` to the recording, if any. Where writing it fails (a full disk),
    /// recording stops with one warning and tracing goes on: the closing summary says
    /// how many events the recording lacks, and the command then fails
    /// ([`Closing::recording_kept`]).
    fn record(&mut self, events: &[Event]) -> Result<()> {
        let Some(r) = self.recorder.as_mut().filter(|_| !events.is_empty()) else { return Ok(()) };
        if let Err(stopped) = r.write_batch(events) {
            crate::note!(
                "tfo-trace: warning: {stopped}: recording stopped, tracing goes on (the closing summary \
                 says how many events the recording lacks)"
            )?;
        }
        Ok(())
    }

    /// Hands each batch to `each` until a stop is requested (then the last batch holds what
    /// the kernel had already written) or `each` breaks. The batch is cleared after each
    /// call; `each` may take its events.
    pub async fn run(
        &mut self,
        duration: Option<Duration>,
        mut each: impl FnMut(&mut Vec<Event>) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let mut batch = Vec::new();
        self.on_each_wakeup(duration, |session| {
            session.drain(&mut batch)?;
            let flow = each(&mut batch);
            batch.clear();
            flow
        })
        .await
    }

    /// What stops the view: the signals caught since the session started, and `duration`
    /// from now. Taken once; taken again, it watches for signals from then on only.
    pub fn take_stop(&mut self, duration: Option<Duration>) -> Result<Stop> {
        let mut stop = match self.stop.take() {
            Some(stop) => stop,
            None => Stop::new(None)?,
        };
        if let Some(d) = duration {
            stop.stop_after(d);
        }
        Ok(stop)
    }

    /// Calls `take` each time the kernel wakes us or 100 ms pass, to drain what is there
    /// ([`Session::drain`], [`Session::drain_each`]), until a stop is requested (then once
    /// more, for what the kernel had already written) or `take` breaks.
    pub async fn on_each_wakeup(
        &mut self,
        duration: Option<Duration>,
        mut take: impl FnMut(&mut Session) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let mut stop = self.take_stop(duration)?;
        loop {
            let stopping = tokio::select! {
                r = self.wait() => { r?; false }
                _ = stop.requested() => true,
            };
            if stopping {
                self.stopping();
            }
            let flow = take(self)?;
            if stopping || flow.is_break() {
                return Ok(());
            }
        }
    }

    /// Events lost in a full ring buffer (the kernel still counted them).
    pub fn lost(&self) -> u64 {
        self.source.lost()
    }

    /// The kernel's running totals of every way its counts or events can fall short.
    pub fn health(&self) -> Health {
        Health {
            events_lost: self.source.lost(),
            hook_runs_missed: self.tracer.run_stats().missed,
            connects_unfollowed: self.source.state_failures(),
            outcomes_uncounted: self.source.uncounted(),
        }
    }

    /// What the kernel counted: exact even when events were lost.
    pub fn kernel_counts(&self) -> Result<KernelCounts> {
        self.source.kernel_counts()
    }

    /// Every namespace's TFO counter deltas since the start (read now).
    pub fn counter_deltas(&mut self) -> std::collections::BTreeMap<u32, crate::kernel::netstat::Netstat> {
        self.learn_listener_owners();
        self.counters.deltas()
    }

    /// What the kernel's own per-namespace counters counted since the start, of the
    /// outcomes no hook of this backend sees (read now).
    pub fn kernel_counted(&mut self) -> KernelCounted {
        self.learn_listener_owners();
        self.counters.counted()
    }

    /// Where a namespace has no name for this user, the listeners' owners the kernel knows
    /// may name it (one map walk, only then).
    fn learn_listener_owners(&mut self) {
        if self.counters.has_unnamed() {
            for (netns, pid) in probes::listener_owners(&self.tracer.ebpf) {
                self.counters.saw(netns, pid);
            }
        }
    }

    /// What this view says when it stops ([`Closing`]), read now: read it before the
    /// namespaces it traced go away (their counters are the last word on them).
    pub fn closing(&mut self) -> Closing {
        let health = self.health();
        let counts = self.source.kernel_counts().ok();
        let counted: Option<u64> = counts.as_ref().map(|c| c.iter().map(|(_, _, _, c)| c.events).sum());
        // What the kernel sent as events, of what it counted (record.rs in the programs).
        let sent: Option<u64> = if self.refusal_events_only {
            counts.map(|c| c.total(crate::events::Role::Client, crate::events::Outcome::DataNotAcked).events)
        } else {
            counted
        };
        Closing {
            tfo_trace_closing: 1,
            backend: self.tracer.backend.name().to_string(),
            events: self.seen,
            refusal_events_only: self.refusal_events_only,
            health,
            counted,
            unread: sent.map_or(0, |c| c.saturating_sub(self.seen + health.events_lost)),
            cgroup_records_lost: self.source.cgroup_records_lost(),
            unnamed: self.source.unnamed,
            malformed: self.source.malformed,
            recorded_to: self.recorder.as_ref().map(|r| r.path().display().to_string()),
            unrecorded: self.recorder.as_ref().map_or(0, |r| r.lacks()),
            recording_failed: self.recorder.as_ref().and_then(|r| r.failed().map(str::to_string)),
            stalled: None,
            served: None,
            names: self.source.names_stats(),
            kernel_counted: self.kernel_counted(),
        }
    }

    /// [`Session::closing`], said on stderr: as one JSON object with `json`; then the
    /// command fails if its recording lacks events ([`Closing::recording_kept`]).
    pub fn say_closing(&mut self, json: bool) -> Result<()> {
        let closing = self.closing();
        closing.say(json, "tfo-trace", "")?;
        closing.recording_kept()
    }
}

/// Says on stderr which backend runs and why any richer one was passed over, how
/// containers are learnt if not from the cgroup hooks, and what `--outcome` asks for that
/// the backend cannot see.
fn say_attached(tracer: &Tracer, load: &LoadOptions) -> Result<()> {
    if !tracer.skipped.is_empty() {
        let why: Vec<String> =
            tracer.skipped.iter().map(|s| format!("{}: {}", s.backend, s.reason)).collect();
        crate::note!("tfo-trace: using the {} backend ({})", tracer.backend, why.join("; "))?;
    }
    crate::note!(
        "tfo-trace: {} programs attached with the {} backend in {} ms; Ctrl-C to stop",
        tracer.programs_attached,
        tracer.backend,
        tracer.attach_time.as_millis()
    )?;
    log::info!("a plain connection runs: {}", crate::backends::plain_connection_summary(tracer.backend));
    if let Err(why) = &tracer.cgroup_hooks {
        if !load.refusal_events_only {
            crate::note!(
                "tfo-trace: containers are named by walking the cgroup hierarchy, up to 2 s late \
                 (the cgroup hooks did not attach: {why})"
            )?;
        }
    }
    let blind = crate::backends::blind_selected(tracer.backend, &load.filter);
    if !blind.is_empty() {
        let what: Vec<String> =
            blind.iter().map(|b| format!("{} {} ({})", b.role.name(), b.outcome.name(), b.why)).collect();
        crate::note!(
            "tfo-trace: warning: the {} backend cannot see {}: --outcome shows none of it \
             (`tfo-trace doctor` lists what each backend sees)",
            tracer.backend,
            what.join("; ")
        )?;
    }
    Ok(())
}

/// The privileges tracing needs, as one line main prints alone.
pub fn check_privileges() -> Result<()> {
    crate::kernel::privileges::check_tracing_privileges().map_err(|line| PrivilegeError(line).into())
}

/// Missing privileges: main prints the line alone, before any kernel error text.
#[derive(Debug)]
pub struct PrivilegeError(pub String);

impl std::fmt::Display for PrivilegeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PrivilegeError {}

/// Starts reading every namespace's DNS answers through the socket filter probes/ loads.
fn start_names(ebpf: &mut aya::Ebpf) -> Result<crate::names::Names> {
    crate::names::Names::start(probes::load_dns_filter(ebpf)?)
}

/// The programs' per-destination count of SYN-ACKs, which the reader reads the cookie
/// cache by (`events::causes`).
fn synack_seqs(
    ebpf: &mut aya::Ebpf,
) -> Result<aya::maps::Array<aya::maps::MapData, tfo_trace_common::SynackSeq>> {
    use anyhow::Context as _;
    let map = ebpf.take_map("SYNACK_SEQ").context("SYNACK_SEQ map missing")?;
    aya::maps::Array::try_from(map).context("opening the SYNACK_SEQ map")
}
