//! A live tracing session: what every live view (trace, stalls, top, report, export, demo)
//! does around its own output, said once. Check privileges, load and attach (and say which
//! backend runs), read the ring buffer, write every event to the `--record` file, stop on
//! Ctrl-C, SIGTERM or `--duration` with what the kernel already wrote still delivered, and
//! say at the end how many events came and every way one could have gone missing.
use std::{ops::ControlFlow, time::Duration};

use anyhow::Result;

use crate::{
    aggregation::{kernel_counted::KernelCounted, metrics::Health},
    events::{
        counts::KernelCounts,
        reader::EventSource,
        record::{Header, RecordTo, Recorder},
        Event, EventRef,
    },
    probes::{self, LoadOptions, Tracer},
    views::{namespace_counters::NamespaceCounters, output::OutputClosed, stop::Stop},
};

pub struct Session {
    pub tracer: Tracer,
    source: EventSource,
    recorder: Option<Recorder>,
    /// Events delivered so far.
    seen: u64,
    /// Every namespace's counters since the programs attached: the outcomes no hook sees.
    counters: NamespaceCounters,
}

impl Session {
    /// Loads and attaches the programs after the privilege check, and opens the `--record`
    /// file (before loading: a file refused is said at once; its header names the backend
    /// that runs).
    pub fn start(load: &LoadOptions, record: Option<&RecordTo>) -> Result<Session> {
        check_privileges()?;
        let mut recorder = record.map(Recorder::open).transpose()?;
        let started = probes::load(load).and_then(|mut tracer| {
            let source = EventSource::new(&mut tracer.ebpf, tracer.cgroup_hooks.is_ok())?;
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
            Ok((tracer, source, counters)) => Ok(Session { tracer, source, recorder, seen: 0, counters }),
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

    /// Waits until the kernel wakes us or 100 ms pass (then [`Session::drain_each`]).
    pub async fn wait(&mut self) -> Result<()> {
        self.source.wait().await
    }

    /// [`Session::drain`], each event handed to `each` as its [`Event::view`]: no event is
    /// made unless one is recorded (what `top` counts, at the rate of a busy host).
    pub fn drain_each(&mut self, mut each: impl FnMut(EventRef<'_>)) -> Result<()> {
        if self.recorder.is_none() {
            self.seen += self.source.drain_each(each);
            return Ok(());
        }
        let mut batch = Vec::new();
        self.source.drain_each(|e| {
            batch.push(e.to_event());
            each(e);
        });
        self.delivered(&batch)
    }

    fn delivered(&mut self, events: &[Event]) -> Result<()> {
        self.seen += events.len() as u64;
        match &mut self.recorder {
            Some(r) if !events.is_empty() => r.write_batch(events),
            _ => Ok(()),
        }
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

    /// Calls `take` each time the kernel wakes us or 100 ms pass, to drain what is there
    /// ([`Session::drain`], [`Session::drain_each`]), until a stop is requested (then once
    /// more, for what the kernel had already written) or `take` breaks.
    pub async fn on_each_wakeup(
        &mut self,
        duration: Option<Duration>,
        mut take: impl FnMut(&mut Session) -> Result<ControlFlow<()>>,
    ) -> Result<()> {
        let mut stop = Stop::new(duration)?;
        loop {
            let stopping = tokio::select! {
                r = self.wait() => { r?; false }
                _ = stop.requested() => true,
            };
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
        self.counters.deltas()
    }

    /// What the kernel's own per-namespace counters counted since the start, of the
    /// outcomes no hook of this backend sees (read now).
    pub fn kernel_counted(&mut self) -> KernelCounted {
        self.counters.counted()
    }

    /// What a live view says when it stops: events delivered, and every way one could have
    /// gone missing: lost in a full ring buffer (the kernel still counted those), skipped by
    /// the kernel (a hook hit again while running), connects the kernel would not let us
    /// follow, outcomes it could not count, not decodable; and where the recording is.
    pub fn closing_line(&self) -> String {
        let health = self.health();
        let counted = self.source.kernel_counts().ok().map(|c| c.iter().map(|(_, _, _, c)| c.events).sum());
        let mut line = format!("tfo-trace: {}", events_accounted(self.seen, &health, counted));
        let missed = health.hook_runs_missed;
        if missed > 0 {
            line.push_str(&format!(", {missed} hook runs missed by the kernel (recursion)"));
        }
        let stateless = health.connects_unfollowed;
        if stateless > 0 {
            line.push_str(&format!(
                ", {stateless} TFO connects not followed (the kernel refused their map entry: \
                 no process or timing in their events)"
            ));
        }
        let uncounted = health.outcomes_uncounted;
        if uncounted > 0 {
            line.push_str(&format!(", {uncounted} outcomes not counted (the namespace table was full)"));
        }
        let cgroups_lost = self.source.cgroup_records_lost();
        if cgroups_lost > 0 {
            line.push_str(&format!(", {cgroups_lost} cgroup records lost (ring full)"));
        }
        if self.source.unnamed > 0 {
            line.push_str(&format!(", {} from an unknown container (cgroup not named)", self.source.unnamed));
        }
        if self.source.malformed > 0 {
            line.push_str(&format!(", {} malformed", self.source.malformed));
        }
        if let Some(r) = &self.recorder {
            line.push_str(&format!(", recorded to {}", r.path().display()));
        }
        line
    }

    /// Said after the closing line: what the kernel's own counters counted that no hook
    /// of this backend sees, per namespace (None when nothing).
    pub fn kernel_counted_line(&mut self) -> Option<String> {
        let namespaces = self.kernel_counted().per_namespace();
        if namespaces.is_empty() {
            return None;
        }
        let provenance = KernelCounted::provenance(self.tracer.backend.name());
        Some(format!("tfo-trace: {provenance}: {}", namespaces.join("; ")))
    }

    /// The closing line, then [`Session::kernel_counted_line`] if any, on stderr.
    pub fn say_closing(&mut self) -> Result<(), OutputClosed> {
        crate::note!("{}", self.closing_line())?;
        if let Some(line) = self.kernel_counted_line() {
            crate::note!("{line}")?;
        }
        Ok(())
    }
}

/// `40 events, 0 lost, 1 after the last read (41 outcomes counted in the kernel)`: the
/// events delivered, those lost, and those the kernel counted after the view last read the
/// ring buffer (a connection that ended as the view stopped), which add up to the kernel's
/// count; or, where the kernel counted fewer (its namespace table full: said apart), the
/// count alone.
fn events_accounted(seen: u64, health: &Health, counted: Option<u64>) -> String {
    let mut line = format!("{seen} events, {} lost", health.events_lost);
    let Some(counted) = counted else { return line };
    let unread = counted.saturating_sub(seen + health.events_lost);
    if unread > 0 {
        line.push_str(&format!(", {unread} after the last read"));
    }
    line.push_str(&format!(" ({counted} outcomes counted in the kernel)"));
    line
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
        probes::table::hooks(tracer.backend).len(),
        tracer.backend,
        tracer.attach_time.as_millis()
    )?;
    if let Err(why) = &tracer.cgroup_hooks {
        if !load.counts_only {
            crate::note!(
                "tfo-trace: containers are named by walking the cgroup hierarchy, up to 2 s late \
                 (the cgroup hooks did not attach: {why})"
            )?;
        }
    }
    let blind = probes::table::blind_selected(tracer.backend, &load.filter);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closing_counts_add_up() {
        let lost = |events_lost| Health { events_lost, ..Health::default() };
        assert_eq!(
            events_accounted(40, &lost(0), Some(41)),
            "40 events, 0 lost, 1 after the last read (41 outcomes counted in the kernel)"
        );
        assert_eq!(
            events_accounted(40, &lost(2), Some(42)),
            "40 events, 2 lost (42 outcomes counted in the kernel)"
        );
        assert_eq!(events_accounted(7, &lost(0), None), "7 events, 0 lost");
        // Fewer counted than delivered: the namespace table was full (said apart).
        assert_eq!(
            events_accounted(9, &lost(0), Some(8)),
            "9 events, 0 lost (8 outcomes counted in the kernel)"
        );
    }
}
