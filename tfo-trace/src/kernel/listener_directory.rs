//! Every namespace's listening sockets and their owners, read on a thread of their own so
//! that the reader of events (and the view whose thread it runs on) never waits on them.
//!
//! A server event names its listener by the listener's bound address, and its owner where
//! the kernel's LISTENERS table had none (a listener older than the tracer, beyond the
//! table's 16,384). Both come from one read of the namespace's listening sockets
//! ([`sock_diag`], which walks the listeners only) and, only when an owner is wanted, one
//! walk of the fds of the namespace's processes; the answer is one [`Table`] per namespace,
//! kept until an event it cannot tell about asks for a newer one. Before issue 55, each
//! listener and local address re-read /proc/PID/net/tcp and tcp6, which list every socket
//! of the namespace (TIME_WAIT included): ~75 ms a read with 10,000 TIME_WAIT sockets, on
//! the view's thread.
//!
//! A table is as old as the moment its read began (CLOCK_MONOTONIC, the clock of the
//! events' `ts_ns`): it holds every listener opened before then and still open when the
//! read ran, so a table read after an event happened is the last word on that event's
//! listener, and one read before may only lack a listener opened since.
use std::{
    collections::{HashMap, HashSet},
    net::SocketAddr,
    sync::{mpsc, Arc},
    time::{Duration, Instant},
};

use super::{
    listeners::{self, Owner},
    sock_diag::Listening,
};
use crate::events::monotonic_ns;

/// One namespace's listening sockets, as of [`Table::read_at_ns`].
#[derive(Debug, Default)]
pub(crate) struct Table {
    /// CLOCK_MONOTONIC ns when the read began.
    pub read_at_ns: u64,
    /// The listeners by port: an event looks at its own port's only.
    by_port: HashMap<u16, Vec<Listening>>,
    /// Their owners by socket inode, where they were asked for ([`Table::owners_read`]).
    pub owners: HashMap<u64, Owner>,
    pub owners_read: bool,
}

impl Table {
    fn new(read_at_ns: u64, listening: Vec<Listening>) -> Table {
        let mut by_port: HashMap<u16, Vec<Listening>> = HashMap::new();
        for l in listening {
            by_port.entry(l.addr.port()).or_default().push(l);
        }
        Table { read_at_ns, by_port, ..Table::default() }
    }

    fn inodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.by_port.values().flatten().map(|l| l.inode)
    }

    /// The listener a connection to `local` arrived at ([`listeners::listener_of`]), and
    /// its socket inode.
    fn listener_of(&self, local: SocketAddr) -> Option<(SocketAddr, u64)> {
        let on_port = self.by_port.get(&local.port())?;
        let addrs: Vec<SocketAddr> = on_port.iter().map(|l| l.addr).collect();
        let found = listeners::listener_of(local, &addrs)?;
        on_port.iter().find(|l| l.addr == found).map(|l| (l.addr, l.inode))
    }
}

/// What the directory can say of a server event now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Naming {
    /// Its listener (None: none listens there, or no longer) and, where asked for, the
    /// listener's owner.
    Named { listener: Option<SocketAddr>, owner: Option<Owner> },
    /// A read that will tell is under way: ask again when it is in.
    Wait,
}

/// A read asked of the worker.
struct Ask {
    netns: u32,
    /// A process likely in the namespace (the event's, or the listener owner's): spares a
    /// search of /proc for one.
    pid: u32,
    owners: bool,
}

/// The worker's ends: reads asked, tables read (per namespace).
type Worker = (mpsc::Sender<Ask>, mpsc::Receiver<(u32, Table)>);

/// The tables, and the worker that reads them.
#[derive(Default)]
pub(crate) struct ListenerDirectory {
    tables: HashMap<u32, Arc<Table>>,
    /// Reads under way per namespace: whether one of them reads owners too.
    asked: HashMap<u32, bool>,
    /// Made at the first read asked for.
    worker: Option<Worker>,
}

impl ListenerDirectory {
    /// Takes the tables read since the last call, without waiting.
    pub(crate) fn collect(&mut self) {
        let Some((_, answers)) = &self.worker else { return };
        while let Ok((netns, table)) = answers.try_recv() {
            self.asked.remove(&netns);
            self.tables.insert(netns, Arc::new(table));
        }
    }

    /// Waits, up to `within`, for the reads under way (the last drain of a view that
    /// stops, so that its last events are named).
    pub(crate) fn settle(&mut self, within: Duration) {
        let until = Instant::now() + within;
        while !self.asked.is_empty() {
            let Some((_, answers)) = &self.worker else { return };
            let left = until.saturating_duration_since(Instant::now());
            match answers.recv_timeout(left) {
                Ok((netns, table)) => {
                    self.asked.remove(&netns);
                    self.tables.insert(netns, Arc::new(table));
                }
                Err(_) => return,
            }
        }
    }

    /// The listener of namespace `netns` a connection to `local` arrived at, seen by the
    /// kernel at `ts_ns` (CLOCK_MONOTONIC), and its owner where `owner` is asked for; or
    /// [`Naming::Wait`] while the read that tells is under way (asked for here when none
    /// is). `pid`: a process likely in the namespace.
    pub(crate) fn name(
        &mut self,
        netns: u32,
        pid: u32,
        local: SocketAddr,
        ts_ns: u64,
        owner: bool,
    ) -> Naming {
        let table = self.tables.get(&netns).cloned();
        let found = table.as_ref().map(|t| (t.listener_of(local), t.read_at_ns >= ts_ns));
        match (table, found) {
            // Read after the event: what it lacks was closed by then.
            (Some(_), Some((None, true))) => Naming::Named { listener: None, owner: None },
            (Some(t), Some((Some((addr, inode)), _))) => {
                if !owner {
                    return Naming::Named { listener: Some(addr), owner: None };
                }
                if t.owners_read {
                    return Naming::Named { listener: Some(addr), owner: t.owners.get(&inode).cloned() };
                }
                self.ask(netns, pid, true)
            }
            // None yet, or read before the event: the listener may be newer than the table.
            _ => self.ask(netns, pid, owner),
        }
    }

    /// [`ListenerDirectory::name`] from what is known now, without asking or waiting: for
    /// an event that waited long enough.
    pub(crate) fn name_now(
        &self,
        netns: u32,
        local: SocketAddr,
        owner: bool,
    ) -> (Option<SocketAddr>, Option<Owner>) {
        let Some(t) = self.tables.get(&netns) else { return (None, None) };
        match t.listener_of(local) {
            Some((addr, inode)) => (Some(addr), owner.then(|| t.owners.get(&inode).cloned()).flatten()),
            None => (None, None),
        }
    }

    /// Asks for a read of `netns` unless one that serves is under way.
    fn ask(&mut self, netns: u32, pid: u32, owners: bool) -> Naming {
        if self.asked.get(&netns).is_some_and(|&with_owners| with_owners || !owners) {
            return Naming::Wait;
        }
        let (asks, _) = self.worker.get_or_insert_with(start_worker);
        if asks.send(Ask { netns, pid, owners }).is_err() {
            // The worker is gone (it cannot be spawned): no name, rather than no event.
            return Naming::Named { listener: None, owner: None };
        }
        self.asked.insert(netns, owners);
        Naming::Wait
    }
}

/// The worker: reads each namespace asked for, the reads asked meanwhile for the same
/// namespace served by one. Ends when the directory is dropped.
fn start_worker() -> Worker {
    let (ask_tx, ask_rx) = mpsc::channel::<Ask>();
    let (answer_tx, answer_rx) = mpsc::channel();
    let spawned = std::thread::Builder::new().name("tfo-listeners".into()).spawn(move || {
        let mut owners = OwnerMemory::default();
        while let Ok(first) = ask_rx.recv() {
            // Every ask queued meanwhile, one read per namespace.
            let mut asks: HashMap<u32, Ask> = HashMap::new();
            for a in std::iter::once(first).chain(ask_rx.try_iter()) {
                let entry = asks.entry(a.netns).or_insert(Ask { owners: false, ..a });
                entry.owners |= a.owners;
            }
            for ask in asks.into_values() {
                let table = read_table(&ask, &mut owners);
                if answer_tx.send((ask.netns, table)).is_err() {
                    return;
                }
            }
        }
    });
    if let Err(e) = spawned {
        log::warn!("listeners are not named: spawning their reader: {e}");
    }
    (ask_tx, answer_rx)
}

/// Owners found so far, by (namespace, socket inode): a listener's owner is looked for
/// once, not at every read of its namespace.
#[derive(Default)]
struct OwnerMemory {
    known: HashMap<(u32, u64), Owner>,
}

/// One read of namespace `ask.netns`: its listeners, and their owners when asked.
fn read_table(ask: &Ask, memory: &mut OwnerMemory) -> Table {
    let read_at_ns = monotonic_ns();
    let Some(pid) = listeners::process_in(ask.netns, ask.pid) else {
        return Table::new(read_at_ns, Vec::new());
    };
    let listening = match listeners::listening_in(ask.netns, pid) {
        Ok(l) => l,
        Err(e) => {
            log::debug!("netns {}: listeners not read: {e:#}", ask.netns);
            Vec::new()
        }
    };
    let mut table = Table::new(read_at_ns, listening);
    if ask.owners {
        let inodes: HashSet<u64> = table.inodes().collect();
        memory.known.retain(|(ns, inode), _| *ns != ask.netns || inodes.contains(inode));
        let unknown: HashSet<u64> =
            inodes.iter().filter(|i| !memory.known.contains_key(&(ask.netns, **i))).copied().collect();
        if !unknown.is_empty() {
            for (inode, owner) in listeners::owners_in(ask.netns, &unknown) {
                memory.known.insert((ask.netns, inode), owner);
            }
        }
        table.owners = inodes
            .iter()
            .filter_map(|i| memory.known.get(&(ask.netns, *i)).map(|o| (*i, o.clone())))
            .collect();
        table.owners_read = true;
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listening(addr: &str, inode: u64) -> Listening {
        Listening { addr: addr.parse().unwrap(), inode, accept_queue: 0, backlog: 128 }
    }

    fn with_table(netns: u32, table: Table) -> ListenerDirectory {
        let mut d = ListenerDirectory::default();
        d.tables.insert(netns, Arc::new(table));
        d
    }

    /// A worker that only takes asks: they are returned, none is answered.
    fn asks_only(d: &mut ListenerDirectory) -> mpsc::Receiver<Ask> {
        let (asks, asked) = mpsc::channel();
        let (_, answers) = mpsc::channel();
        d.worker = Some((asks, answers));
        asked
    }

    #[test]
    fn a_table_read_after_the_event_is_the_last_word() {
        let local = "10.0.0.1:8080".parse().unwrap();
        let mut d = with_table(7, Table::new(2_000, vec![listening("0.0.0.0:8080", 11)]));
        assert_eq!(
            d.name(7, 42, local, 1_000, false),
            Naming::Named { listener: Some("0.0.0.0:8080".parse().unwrap()), owner: None }
        );
        // No listener on 9090 when the table was read, after the event: none, no read.
        let other = "10.0.0.1:9090".parse().unwrap();
        assert_eq!(d.name(7, 42, other, 1_000, false), Naming::Named { listener: None, owner: None });
        assert!(d.asked.is_empty());
    }

    #[test]
    fn a_listener_newer_than_the_table_waits_for_a_read() {
        let mut d = with_table(7, Table::new(1_000, vec![listening("0.0.0.0:8080", 11)]));
        let asked = asks_only(&mut d);
        let newer = "10.0.0.1:9090".parse().unwrap();
        assert_eq!(d.name(7, 42, newer, 2_000, false), Naming::Wait);
        assert_eq!(d.name(7, 42, newer, 2_000, false), Naming::Wait, "asked once");
        let sent: Vec<Ask> = asked.try_iter().collect();
        assert_eq!(sent.iter().map(|a| (a.netns, a.pid, a.owners)).collect::<Vec<_>>(), [(7, 42, false)]);
        // An owner wanted: a read of owners too, though one without is under way.
        assert_eq!(d.name(7, 0, newer, 2_000, true), Naming::Wait);
        assert_eq!(asked.try_iter().map(|a| a.owners).collect::<Vec<_>>(), [true]);
        // Without an answer in time, named as far as known.
        assert_eq!(d.name_now(7, newer, false), (None, None));
    }

    #[test]
    fn an_owner_is_told_once_owners_were_read() {
        let local = "10.0.0.1:8080".parse().unwrap();
        let mut d = with_table(7, Table::new(2_000, vec![listening("0.0.0.0:8080", 11)]));
        let asked = asks_only(&mut d);
        assert_eq!(d.name(7, 0, local, 1_000, true), Naming::Wait, "owners not read yet");
        assert!(asked.try_recv().is_ok_and(|a| a.owners));
        let mut table = Table::new(2_000, vec![listening("0.0.0.0:8080", 11)]);
        let owner = Owner { pid: 99, comm: "nginx".into(), cgroup_id: None };
        table.owners.insert(11, owner.clone());
        table.owners_read = true;
        let mut d = with_table(7, table);
        assert_eq!(
            d.name(7, 0, local, 1_000, true),
            Naming::Named { listener: Some("0.0.0.0:8080".parse().unwrap()), owner: Some(owner) }
        );
    }

    /// The worker reads this namespace: a listener of ours and its owner, us.
    #[test]
    fn the_worker_names_a_listener_of_ours_and_its_owner() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let netns = super::super::netns::current_netns_inode().unwrap() as u32;
        let mut d = ListenerDirectory::default();
        let now = monotonic_ns();
        assert_eq!(d.name(netns, std::process::id(), addr, now, true), Naming::Wait);
        d.settle(Duration::from_secs(10));
        match d.name(netns, std::process::id(), addr, now, true) {
            Naming::Named { listener, owner } => {
                assert_eq!(listener, Some(addr));
                assert_eq!(owner.map(|o| o.pid), Some(std::process::id()));
            }
            Naming::Wait => panic!("no answer in 10 s"),
        }
    }
}
