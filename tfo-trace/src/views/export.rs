//! `tfo-trace export`: the kernel's TFO events as Prometheus metrics, served on
//! `/metrics` and/or written for node_exporter's textfile collector.
//!
//! HTTP is hyper's HTTP/1 server, not a parser of our own: this process holds CAP_BPF (or
//! is root) and parses requests from any local user, so the parser should be one that
//! others fuzz and maintain, and hyper has the limits this server needs (head size, header
//! read timeout). Measured against the hand-written server it replaced (loopback, a fresh
//! exporter, this project's 2-core test host): idle, the same 13 MB RSS and 29 fds; with
//! 300 idle connections open the old server reset every scrape (its 256-connection cap),
//! this one answers in under 1 ms with 1,000 idle and 1,000 slow-loris ones open; +0.4 MB
//! of code (dev profile). Figures per connection at [`MAX_CONNECTIONS`].
//!
//! What it answers: GET or HEAD of `/metrics` and `/`, and with `--flight-recorder` of
//! `/recording?since=WHEN&until=WHEN` (the recording of that window, streamed: see
//! [`recording`]); 404 for other paths, 405 for other methods; hyper itself answers a
//! malformed request 400 and a request head over [`MAX_HEAD_BYTES`] 431, then closes. One
//! request per connection (`Connection: close`): see [`serve`] for why not keep-alive. With
//! `--web.config.file` ([`WebConfig`]): TLS, and basic auth on every path (401 with
//! `WWW-Authenticate` without the right credentials, before the path is looked at).
//!
//! With `--flight-recorder DIR` every event read is also written there
//! (`events::flight::writer`), synced once a second off this thread; what cannot be
//! written is counted, and never stops the loop.
use std::{
    collections::BTreeMap,
    convert::Infallible,
    future::Future,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    time::{Duration, SystemTime},
};

use anyhow::{bail, Context as _, Result};
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::{
    body::{Frame, Incoming},
    header::{self, HeaderValue},
    server::conn::http1,
    service::service_fn,
    Method, Request, Response, StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{
    io::{AsyncRead, AsyncWrite, AsyncWriteExt as _},
    net::{TcpListener, TcpSocket, TcpStream},
    sync::{mpsc, oneshot},
    task::{AbortHandle, JoinSet},
};
use tokio_rustls::{server::TlsStream, TlsAcceptor};

use crate::{
    aggregation::metrics::{Breakdown, BuildInfo, Metrics, CONTENT_TYPE},
    cli::ExportOptions,
    events::{
        flight::writer::FlightRecorder,
        replay::{self, Window},
        Event,
    },
    live::{closing::Served, session::Session},
    views::web_config::{BasicAuth, WebConfig},
};

/// A request line plus headers larger than this is answered 431 and closed (hyper's
/// `max_buf_size`; 8 KiB is also the smallest it accepts).
const MAX_HEAD_BYTES: usize = 8192;
/// Time a client has, from connecting, to send its whole request head (hyper's
/// `header_read_timeout`): an idle or slow-loris connection is closed after this.
const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection may take in all, or (a `/recording` being sent) between two chunks
/// the client takes: bounds a client that asks and never reads the answer (hyper has no
/// write timeout).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// A `/recording` body's chunks: the reader runs this far ahead of the client.
const RECORDING_CHUNK: usize = 64 * 1024;
const RECORDING_CHUNKS_AHEAD: usize = 4;
/// Connections open at once, at most (fewer when the fd limit cannot hold them). At the
/// cap the oldest connection still waiting for its request is closed to admit the new one
/// (see [`Connections`]). Measured as above: 1,000 idle connections, 1,029 fds and 20 MB
/// RSS (~7 KiB each); 1,000 idle and 1,000 slow-loris, 2,029 fds, 31 MB; 5,000 idle (the
/// cap evicting), 4,125 fds, 55 MB; 4,096 each holding an unfinished 8 KiB head (the
/// worst), 69 MB: within the example DaemonSet's 128 MiB limit.
const MAX_CONNECTIONS: usize = 4096;
/// File descriptors left free beyond those open at start and the connections: the
/// textfile's temporary file, `/proc` reads.
const SPARE_FDS: usize = 64;
/// Connections the kernel completes and queues for `accept` (capped by
/// net.core.somaxconn, 4096 by default). std's and tokio's 128 overflowed when 1,000
/// connections came at once while this one-thread process was descheduled: the SYNs beyond
/// it are dropped, and a scrape's SYN waits for the 1 s retransmit.
const LISTEN_BACKLOG: u32 = 4096;
/// Scrapes waiting for the run loop's next refresh before more of them wait to queue.
const WAITING_SCRAPES: usize = 64;
/// How often the flight recorder's segment is synced to the disk: what a power cut can
/// lose at most.
const RECORDER_SYNC: Duration = Duration::from_secs(1);

/// Writes `text` to `path` for node_exporter: a temporary file in the same directory,
/// then rename(2), so the collector never reads a half-written file.
pub fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // node_exporter only reads `*.prom`: the temporary name must not end that way.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Checks the textfile's directory before any kernel work, so a typo fails fast.
fn check_textfile(path: &Path) -> Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if !dir.is_dir() {
        bail!("--textfile {}: directory {} does not exist", path.display(), dir.display());
    }
    if path.is_dir() {
        bail!("--textfile {}: is a directory, expected a file name like tfo_trace.prom", path.display());
    }
    if path.extension().and_then(|e| e.to_str()) != Some("prom") {
        crate::note!(
            "tfo-trace: note: node_exporter's textfile collector only reads files ending in .prom ({})",
            path.display()
        )?;
    }
    Ok(())
}

pub async fn run(opts: ExportOptions) -> Result<()> {
    if let Some(path) = &opts.textfile {
        check_textfile(path)?;
    }
    if opts.live.load.names && !matches!(opts.breakdown, Some(Breakdown::Destinations(_))) {
        bail!("--names labels destinations: export has them only with --top-destinations");
    }
    // Read the web config and bind before loading anything: a bad file or a port in use is
    // reported without touching the kernel.
    let guard = match &opts.web_config {
        Some(path) => Guard::of(WebConfig::load(path)?)?,
        None => Guard::default(),
    };
    let listener = match opts.listen {
        Some(addr) => {
            Some(listen(addr).with_context(|| format!("listening on {addr} (--web.listen-address)"))?)
        }
        None => None,
    };
    // The flight recorder's directory too: one refused is said without touching the kernel.
    let mut recorder = match &opts.flight_recorder {
        Some((dir, limits)) => Some(FlightRecorder::open(dir, *limits)?),
        None => None,
    };
    let mut session = Session::start(&opts.live.load, None)?;
    let build = BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        backend: session.tracer.backend,
        kernel: crate::kernel::uname::uname().map_or_else(|| "unknown".into(), |u| u.release),
    };
    let metrics = Metrics::new(&build, opts.breakdown);
    let recordings = match (&mut recorder, &opts.flight_recorder) {
        (Some(r), Some((dir, limits))) => {
            r.set_backend(session.tracer.backend.name());
            metrics.set_recorder(r.stats());
            crate::note!(
                "tfo-trace: keeping a flight recording in {} (at most {} and {}; `tfo-trace report --from {}`)",
                dir.display(),
                crate::units::size(limits.max_bytes),
                crate::units::period(limits.max_age),
                dir.display()
            )?;
            Some(Arc::new(Recordings {
                dir: dir.clone(),
                backend: session.tracer.backend.name().to_string(),
                one_at_a_time: Arc::new(tokio::sync::Semaphore::new(1)),
            }))
        }
        _ => None,
    };
    if let Some(p) = &opts.textfile {
        crate::note!(
            "tfo-trace: writing metrics to {} every {}",
            p.display(),
            crate::units::period(opts.interval)
        )?;
    }

    // The HTTP server runs on its own tasks; a scrape asks this loop, which owns the
    // kernel's count maps, for the exposition (see `Scrapes`).
    let (scrapes, mut waiting) = mpsc::channel(WAITING_SCRAPES);
    let serving = listener.is_some();
    let server = match listener {
        Some(l) => {
            let scheme = if guard.tls.is_some() { "https" } else { "http" };
            crate::note!("tfo-trace: serving metrics on {scheme}://{}/metrics", l.local_addr()?)?;
            let served = Answers { scrapes: Scrapes(scrapes), recordings };
            Some(tokio::spawn(serve(l, served, connection_cap(), Arc::new(guard))))
        }
        None => None,
    };

    let mut stop = session.take_stop(opts.live.duration)?;
    let mut textfile_tick = tokio::time::interval(opts.interval);
    let mut sync_tick = tokio::time::interval(RECORDER_SYNC);
    let mut batch: Vec<Event> = Vec::new();
    let mut served = Served::default();
    loop {
        tokio::select! {
            // Events: the opt-in series and each refusal's cause (the connection counts
            // come from the kernel's count maps, exact whatever the events do), and the
            // flight recorder's lines.
            r = session.next_batch(&mut batch) => r?,
            _ = sync_tick.tick(), if recorder.is_some() => {
                if let Some(r) = &mut recorder {
                    if let Some(file) = r.tick(SystemTime::now()) {
                        // A slow disk must not hold up the scrapes: synced off this thread.
                        tokio::task::spawn_blocking(move || file.sync_data());
                    }
                }
            }
            Some(first) = waiting.recv(), if serving => {
                // Each scrape sees the kernel's counts as they are now; the scrapes that
                // asked meanwhile share this refresh and its text.
                refresh(&metrics, &mut session, recorder.as_ref())?;
                let text = Bytes::from(metrics.encode());
                let mut answered = u64::from(first.send(text.clone()).is_ok());
                while let Ok(next) = waiting.try_recv() {
                    answered += u64::from(next.send(text.clone()).is_ok());
                }
                served.scraped(answered, metrics.connections_encoded());
            }
            _ = textfile_tick.tick() => {
                if let Some(path) = &opts.textfile {
                    refresh(&metrics, &mut session, recorder.as_ref())?;
                    write_textfile(path, &metrics.encode()).with_context(|| format!("writing {}", path.display()))?;
                    served.wrote_textfile(metrics.connections_encoded());
                }
            }
            _ = stop.requested() => break,
        }
        observe(&metrics, &mut batch, recorder.as_mut());
    }
    if let Some(server) = server {
        server.abort(); // and with it every connection (its JoinSet)
    }
    session.stopping();
    session.drain(&mut batch)?;
    observe(&metrics, &mut batch, recorder.as_mut());
    if let Some(r) = &mut recorder {
        r.finish();
    }
    refresh(&metrics, &mut session, recorder.as_ref())?;
    let last = metrics.encode();
    served.outcomes_at_stop = metrics.connections_encoded();
    if let Some(path) = &opts.textfile {
        write_textfile(path, &last).with_context(|| format!("writing {}", path.display()))?;
        served.wrote_textfile(metrics.connections_encoded());
    }
    let mut closing = session.closing();
    closing.served = Some(served);
    closing.say(opts.live.json_summary, "tfo-trace", "")?;
    Ok(())
}

/// The exporter's listening socket, with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// The kernel's counts into the model, with its health totals (of every namespace: the
/// kernel keeps those only in all), and the flight recorder's figures. Both are of the
/// namespaces asked for already: the kernel filter counts only those, and the counters'
/// `Scope` reads only those.
fn refresh(metrics: &Metrics, session: &mut Session, recorder: Option<&FlightRecorder>) -> Result<()> {
    metrics.set_kernel(session.kernel_counts()?, session.health());
    metrics.set_kernel_counted(session.kernel_counted());
    if let Some(r) = recorder {
        metrics.set_recorder(r.stats());
    }
    Ok(())
}

/// The batch's events into the flight recorder and the model: those of the namespaces
/// asked for only, as the kernel filter sent them.
fn observe(metrics: &Metrics, batch: &mut Vec<Event>, recorder: Option<&mut FlightRecorder>) {
    if let Some(r) = recorder {
        if !batch.is_empty() {
            r.record(batch);
        }
    }
    for e in batch.drain(..) {
        metrics.observe(&e);
    }
}

/// A scrape's way to the run loop, which owns the kernel's count maps: the scrape sends
/// where to answer, the loop refreshes the counts, encodes them once for every scrape
/// waiting and sends each the text. So every scrape sees the counts as they are when it
/// arrives (not as of a tick up to a second ago), and no scrape, no wake-up.
#[derive(Clone)]
struct Scrapes(mpsc::Sender<oneshot::Sender<Bytes>>);

/// What the HTTP server answers from: the run loop's exposition, and the flight recorder's
/// directory (with `--flight-recorder`).
#[derive(Clone)]
struct Answers {
    scrapes: Scrapes,
    recordings: Option<Arc<Recordings>>,
}

/// `/recording`: the recorder's directory, read by one request at a time (a window can be
/// the whole directory: each request reads and sends it all).
struct Recordings {
    dir: PathBuf,
    /// For a header where the directory holds no segment yet.
    backend: String,
    one_at_a_time: Arc<tokio::sync::Semaphore>,
}

impl Scrapes {
    /// The exposition, freshly refreshed; None once the run loop has stopped.
    async fn exposition(&self) -> Option<Bytes> {
        let (answer, text) = oneshot::channel();
        self.0.send(answer).await.ok()?;
        text.await.ok()
    }
}

/// How many connections the server may hold: [`MAX_CONNECTIONS`], or fewer when the fd
/// limit cannot hold them beside what is open already (the eBPF objects). Raises the soft
/// RLIMIT_NOFILE towards the hard limit first when needed: the usual soft limit (1024, a
/// shell's and systemd's default) is below the cap, and an `accept` that fails for want
/// of fds is a failed scrape.
fn connection_cap() -> usize {
    let in_use = std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(SPARE_FDS);
    let wanted = (in_use + SPARE_FDS + MAX_CONNECTIONS) as libc::rlim_t;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit with a pointer to a live rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return MAX_CONNECTIONS; // cannot know: accept errors are survived anyway
        }
        if limit.rlim_cur < wanted {
            let raised = libc::rlimit { rlim_cur: wanted.min(limit.rlim_max), ..limit };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                limit = raised;
            }
        }
    }
    let room = (limit.rlim_cur as usize).saturating_sub(in_use + SPARE_FDS).clamp(1, MAX_CONNECTIONS);
    if room < MAX_CONNECTIONS {
        // Said once at start; a closed stderr is noticed by the next note.
        let _ = crate::note!(
            "tfo-trace: note: the fd limit ({}) leaves room for {room} HTTP connections at once",
            limit.rlim_cur
        );
    }
    room
}

/// The connections being served, oldest first, with whether each has sent its request.
/// At the cap, the oldest one still waiting for its request is closed to admit the new
/// one (the oldest of all if every one is being answered): a new connection is the one
/// most likely to be a scrape, so idle or slow sockets cannot turn a scrape away, and fds
/// and memory stay bounded. `H` closes a connection (an [`AbortHandle`]).
struct Connections<H> {
    cap: usize,
    next_id: u64,
    open: BTreeMap<u64, (H, Arc<AtomicBool>)>,
}

impl<H> Connections<H> {
    fn new(cap: usize) -> Self {
        Connections { cap: cap.max(1), next_id: 0, open: BTreeMap::new() }
    }

    /// Admits a connection, started by `start` with its id; `answering` turns true once it
    /// has sent its request. Returns the connection to close to make room, if any.
    fn admit(&mut self, answering: Arc<AtomicBool>, start: impl FnOnce(u64) -> H) -> Option<H> {
        let evicted = if self.open.len() >= self.cap {
            let oldest = self.open.iter().find(|(_, (_, a))| !a.load(Ordering::Relaxed));
            let id = oldest.or_else(|| self.open.iter().next()).map(|(&id, _)| id);
            id.and_then(|id| self.open.remove(&id)).map(|(h, _)| h)
        } else {
            None
        };
        let id = self.next_id;
        self.next_id += 1;
        self.open.insert(id, (start(id), answering));
        evicted
    }

    /// The connection `id` has ended.
    fn closed(&mut self, id: u64) {
        self.open.remove(&id);
    }
}

/// What `--web.config.file` puts in front of every connection (nothing without it).
#[derive(Default)]
struct Guard {
    tls: Option<TlsAcceptor>,
    auth: Option<Arc<BasicAuth>>,
    /// Added to every response.
    headers: Vec<(header::HeaderName, HeaderValue)>,
}

impl Guard {
    fn of(web: WebConfig) -> Result<Guard> {
        if web.auth.is_some() && web.tls.is_none() {
            crate::note!(
                "tfo-trace: note: basic auth without tls_server_config sends passwords in clear text"
            )?;
        }
        Ok(Guard { tls: web.tls.map(TlsAcceptor::from), auth: web.auth.map(Arc::new), headers: web.headers })
    }
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;
/// What Go's net/http (so Prometheus, node_exporter) answers plain HTTP on a TLS port.
const PLAIN_HTTP_TO_TLS: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The TLS connection `stream` starts, or None: a client that speaks anything else gets
/// [`PLAIN_HTTP_TO_TLS`] and no metrics, a failed handshake nothing.
async fn tls_accept(tls: &TlsAcceptor, mut stream: TcpStream) -> Option<TlsStream<TcpStream>> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE_RECORD => {}
        Ok(Ok(1)) => {
            let _ = stream.write_all(PLAIN_HTTP_TO_TLS).await;
            let _ = stream.shutdown().await;
            return None;
        }
        _ => return None,
    }
    tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await.ok()?.ok()
}

/// One accepted connection, through TLS first when configured.
async fn serve_one(
    http: http1::Builder,
    stream: TcpStream,
    served: Answers,
    answering: Arc<AtomicBool>,
    progress: Arc<Progress>,
    guard: Arc<Guard>,
) -> hyper::Result<()> {
    match &guard.tls {
        None => connection(&http, stream, served, answering, progress, guard.clone()).await,
        Some(tls) => match tls_accept(tls, stream).await {
            Some(stream) => connection(&http, stream, served, answering, progress, guard.clone()).await,
            None => Ok(()),
        },
    }
}

/// When a connection is cut: [`CONNECTION_TIMEOUT`] after it began, or after the last
/// chunk of a `/recording` the client took (a long download that goes on is no stuck
/// client).
struct Progress(Mutex<tokio::time::Instant>);

impl Progress {
    fn new() -> Progress {
        Progress(Mutex::new(tokio::time::Instant::now()))
    }

    fn made(&self) {
        if let Ok(mut last) = self.0.lock() {
            *last = tokio::time::Instant::now();
        }
    }

    fn deadline(&self) -> tokio::time::Instant {
        self.0.lock().map_or_else(|_| tokio::time::Instant::now(), |last| *last + CONNECTION_TIMEOUT)
    }
}

/// Runs `conn` until it ends or its [`Progress`] deadline passes.
async fn until_stalled(conn: impl Future<Output = hyper::Result<()>>, progress: &Progress) {
    tokio::pin!(conn);
    loop {
        let deadline = progress.deadline();
        tokio::select! {
            _ = &mut conn => return,
            _ = tokio::time::sleep_until(deadline) => {
                if progress.deadline() <= tokio::time::Instant::now() {
                    return;
                }
            }
        }
    }
}

/// Accepts connections and serves each on its own task until aborted.
///
/// Keep-alive is off (hyper then answers `Connection: close`): the header timeout also
/// bounds the wait for a kept-alive connection's next request, and Prometheus scrapes
/// every 15 s by default, so a kept-alive connection would be closed before the next
/// scrape anyway, and one closed just as the client reuses it is a failed scrape.
async fn serve(listener: TcpListener, served: Answers, cap: usize, guard: Arc<Guard>) {
    let http = http1_server();
    let mut tasks = JoinSet::new();
    let mut open: Connections<AbortHandle> = Connections::new(cap);
    loop {
        tokio::select! {
            Some(done) = tasks.join_next() => {
                // Err: aborted (already out of `open`) or panicked (evicted in its turn).
                if let Ok(id) = done {
                    open.closed(id);
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let answering = Arc::new(AtomicBool::new(false));
                    let progress = Arc::new(Progress::new());
                    let conn = serve_one(
                        http.clone(),
                        stream,
                        served.clone(),
                        answering.clone(),
                        progress.clone(),
                        guard.clone(),
                    );
                    let evicted = open.admit(answering, |id| {
                        tasks.spawn(async move {
                            until_stalled(conn, &progress).await;
                            id
                        })
                    });
                    if let Some(oldest) = evicted {
                        // Aborting only schedules the task: let the runtime drop it (and
                        // close its socket) before the next accept, or a burst of
                        // connections outruns the drops and `accept` runs out of fds.
                        oldest.abort();
                        tokio::task::yield_now().await;
                    }
                }
                Err(e) => {
                    // Out of fds or the like: the pending connection stays queued and the
                    // next accept would fail at once; pause rather than spin.
                    log::warn!("accepting a metrics connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
}

/// hyper's HTTP/1 server with the exporter's limits.
fn http1_server() -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(false);
    http
}

/// One connection: hyper reads the request head (bounded in size and time) and calls
/// [`answer`]; it ends after one response or a parse error.
fn connection(
    http: &http1::Builder,
    io: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    served: Answers,
    answering: Arc<AtomicBool>,
    progress: Arc<Progress>,
    guard: Arc<Guard>,
) -> impl Future<Output = hyper::Result<()>> + Send + 'static {
    let service = service_fn(move |req: Request<Incoming>| {
        answering.store(true, Ordering::Relaxed);
        let page = Page::of(req.method(), req.uri().path());
        let query = req.uri().query().map(str::to_string);
        let authorization = req.headers().get(header::AUTHORIZATION).cloned();
        answer(page, query, authorization, served.clone(), progress.clone(), guard.clone())
    });
    http.serve_connection(TokioIo::new(io), service)
}

/// A response's body: one piece (`/metrics`, errors), or a `/recording` streamed.
type Body = Either<Full<Bytes>, Streamed>;

async fn answer(
    page: Page,
    query: Option<String>,
    authorization: Option<HeaderValue>,
    served: Answers,
    progress: Arc<Progress>,
    guard: Arc<Guard>,
) -> Result<Response<Body>, Infallible> {
    let page = match &guard.auth {
        Some(auth) if !auth.allows(authorization.as_ref()).await => Page::Unauthorized,
        _ => page,
    };
    let mut response = match (page, &served.recordings) {
        (Page::Recording, Some(r)) => recording(query.as_deref(), r, progress),
        (Page::Recording, None) => plain(
            StatusCode::NOT_FOUND,
            "no flight recorder here: `tfo-trace export --flight-recorder DIR` keeps one\n".into(),
        ),
        (Page::Metrics, _) => respond(page, served.scrapes.exposition().await).map(Either::Left),
        _ => respond(page, None).map(Either::Left),
    };
    response.headers_mut().extend(guard.headers.iter().map(|(n, v)| (n.clone(), v.clone())));
    Ok(response)
}

/// What a request asks for: only GET or HEAD of `/metrics`, `/` and `/recording` are served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Metrics,
    Index,
    /// The flight recorder's recording of a window (`?since=1h&until=...`).
    Recording,
    NotFound,
    MethodNotAllowed,
    /// Basic auth is configured and the request did not carry a user's password.
    Unauthorized,
}

impl Page {
    /// `path` without the query (hyper's `Uri::path`).
    pub fn of(method: &Method, path: &str) -> Page {
        if method != Method::GET && method != Method::HEAD {
            return Page::MethodNotAllowed;
        }
        match path {
            "/metrics" => Page::Metrics,
            "/" => Page::Index,
            "/recording" => Page::Recording,
            _ => Page::NotFound,
        }
    }
}

/// `Content-Type` of `/recording`: JSON lines.
const RECORDING_TYPE: &str = "application/x-ndjson";

/// `/recording?since=WHEN&until=WHEN` (each optional; WHEN as `--since` takes it: `1h`,
/// `2026-12-03T03:12:00Z`): the flight recorder's recording of that window, as `report
/// --from` reads it, read from the directory by the one replay every view uses
/// ([`replay::write_window`]) on a blocking thread and streamed in chunks as the client
/// takes them. 400 for a bad query, 503 while another is being sent.
fn recording(query: Option<&str>, r: &Recordings, progress: Arc<Progress>) -> Response<Body> {
    let window = match window_of(query.unwrap_or(""), crate::units::now_unix_ns()) {
        Ok(w) => w,
        Err(why) => return plain(StatusCode::BAD_REQUEST, format!("{why}\n")),
    };
    let Ok(permit) = r.one_at_a_time.clone().try_acquire_owned() else {
        let mut busy = plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "another /recording is being sent; try again when it is done\n".into(),
        );
        busy.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return busy;
    };
    let (chunks, body) = mpsc::channel(RECORDING_CHUNKS_AHEAD);
    let (dir, backend) = (r.dir.clone(), r.backend.clone());
    tokio::task::spawn_blocking(move || {
        let _one = permit;
        let sent = replay::write_window(&dir, window, &backend, RECORDING_CHUNK, |chunk| {
            chunks.blocking_send(Bytes::from(chunk)).is_ok()
        });
        if let Err(e) = sent {
            log::warn!("/recording of {}: {e:#}", dir.display());
        }
    });
    let mut response = Response::new(Either::Right(Streamed { chunks: body, progress }));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(RECORDING_TYPE));
    headers.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_static("attachment; filename=\"tfo-trace-recording.jsonl\""),
    );
    response
}

/// The window a `/recording` query asks for: `since` and `until`, each optional, read as
/// `--since` reads them ([`crate::units::parse_moment`]); anything else is refused.
fn window_of(query: &str, now_ns: u128) -> Result<Window, String> {
    let mut w = Window::default();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        let at = crate::units::parse_moment(&value, now_ns).map_err(|e| format!("{key}: {e}"));
        match &*key {
            "since" => w.since_ns = Some(at?),
            "until" => w.until_ns = Some(at?),
            other => return Err(format!("unknown parameter `{other}`: /recording takes since and until")),
        }
    }
    if let (Some(s), Some(u)) = (w.since_ns, w.until_ns) {
        if s >= u {
            return Err("since is not before until: the window holds nothing".into());
        }
    }
    Ok(w)
}

/// A `/recording` body: the chunks the reader sends, each taken by hyper as the client
/// takes the last, which pushes the connection's deadline back ([`Progress`]).
struct Streamed {
    chunks: mpsc::Receiver<Bytes>,
    progress: Arc<Progress>,
}

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let chunk = self.chunks.poll_recv(cx);
        if let Poll::Ready(Some(_)) = &chunk {
            self.progress.made();
        }
        chunk.map(|c| c.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// A plain-text answer.
fn plain(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(text))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

const INDEX: &str = "<html><head><title>tfo-trace exporter</title></head><body>\
<h1>tfo-trace exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

/// The response to `page`; `exposition` is `/metrics`' text (None: the exporter is
/// stopping, 503). For HEAD hyper sends the same headers, Content-Length included, and no
/// body.
pub fn respond(page: Page, exposition: Option<Bytes>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (page, exposition) {
        (Page::Metrics, Some(text)) => (StatusCode::OK, CONTENT_TYPE, text),
        (Page::Index, _) => {
            (StatusCode::OK, "text/html; charset=utf-8", Bytes::from_static(INDEX.as_bytes()))
        }
        (Page::Metrics, None) => error(StatusCode::SERVICE_UNAVAILABLE),
        (Page::NotFound | Page::Recording, _) => error(StatusCode::NOT_FOUND),
        (Page::MethodNotAllowed, _) => error(StatusCode::METHOD_NOT_ALLOWED),
        (Page::Unauthorized, _) => error(StatusCode::UNAUTHORIZED),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    if status == StatusCode::UNAUTHORIZED {
        headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"tfo-trace\""));
    }
    response
}

fn error(status: StatusCode) -> (StatusCode, &'static str, Bytes) {
    let reason = status.canonical_reason().unwrap_or_default();
    (status, "text/plain; charset=utf-8", Bytes::from(format!("{} {reason}\n", status.as_u16())))
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    const EXPOSITION: &str = "tfo_trace_events_lost_total 0\n";

    #[test]
    fn pages() {
        assert_eq!(Page::of(&Method::GET, "/metrics"), Page::Metrics);
        assert_eq!(Page::of(&Method::HEAD, "/metrics"), Page::Metrics);
        assert_eq!(Page::of(&Method::GET, "/"), Page::Index);
        assert_eq!(Page::of(&Method::GET, "/metricsx"), Page::NotFound);
        assert_eq!(Page::of(&Method::GET, "/../etc/passwd"), Page::NotFound);
        assert_eq!(Page::of(&Method::POST, "/metrics"), Page::MethodNotAllowed);
        assert_eq!(Page::of(&Method::PUT, "/nope"), Page::MethodNotAllowed);

        let r = respond(Page::MethodNotAllowed, None);
        assert_eq!(r.status(), 405);
        assert_eq!(r.headers()[header::ALLOW], "GET, HEAD");
        assert_eq!(respond(Page::Metrics, None).status(), 503, "no exposition: stopping");
        assert_eq!(
            respond(Page::NotFound, None).headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }

    /// `request` written to one connection of the real server (hyper with the exporter's
    /// settings, over an in-memory pipe) and the raw bytes it answers until it closes.
    async fn exchange(request: &[u8]) -> String {
        let (scrapes, mut waiting) = mpsc::channel::<oneshot::Sender<Bytes>>(4);
        let run_loop = tokio::spawn(async move {
            while let Some(w) = waiting.recv().await {
                let _ = w.send(Bytes::from_static(EXPOSITION.as_bytes()));
            }
        });
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let conn = connection(
            &http1_server(),
            server,
            Answers { scrapes: Scrapes(scrapes), recordings: None },
            Arc::new(AtomicBool::new(false)),
            Arc::new(Progress::new()),
            Arc::new(Guard::default()),
        );
        let conn = tokio::spawn(conn);
        client.write_all(request).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut raw))
            .await
            .expect("the server closes the connection after answering")
            .unwrap();
        let _ = conn.await.unwrap();
        run_loop.abort();
        String::from_utf8_lossy(&raw).into_owned()
    }

    #[tokio::test]
    async fn answers() {
        let r = exchange(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains(&format!("content-type: {CONTENT_TYPE}\r\n")), "{r}");
        assert!(r.contains("content-length: 30\r\n") && r.contains("connection: close\r\n"), "{r}");
        assert!(r.ends_with(&format!("\r\n\r\n{EXPOSITION}")), "{r}");

        let r = exchange(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n") && r.contains("content-length: 30\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\n"), "HEAD: no body: {r}");

        assert!(exchange(b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await.starts_with("HTTP/1.0 200 OK\r\n"));
        assert!(exchange(b"GET / HTTP/1.1\r\n\r\n").await.contains("<h1>tfo-trace exporter</h1>"));
        assert!(exchange(b"GET /metricsx HTTP/1.1\r\n\r\n").await.starts_with("HTTP/1.1 404 Not Found\r\n"));
        let r = exchange(b"PUT / HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert!(
            r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n") && r.contains("allow: GET, HEAD\r\n"),
            "{r}"
        );

        // Malformed: hyper answers 400 and closes.
        for bad in ["GET /metrics\r\n\r\n", "GET /metrics HTTP/2\r\n\r\n", "\u{0}\u{ff}garbage\r\n\r\n"] {
            let r = exchange(bad.as_bytes()).await;
            assert!(r.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad:?}: {r}");
        }
        // A head over 8 KiB: 431, closed.
        let big = format!("GET /metrics HTTP/1.1\r\nX-Filler: {}\r\n\r\n", "a".repeat(MAX_HEAD_BYTES));
        let r = exchange(big.as_bytes()).await;
        assert!(r.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"), "{r}");
    }

    #[test]
    fn full_connections_make_room_from_the_oldest_waiting() {
        let mut c = Connections::new(3);
        let flags: Vec<Arc<AtomicBool>> = (0..6).map(|_| Arc::new(AtomicBool::new(false))).collect();
        for f in &flags[..3] {
            assert_eq!(c.admit(f.clone(), |id| id), None);
        }
        // Connection 0 has sent its request: 1, the oldest still waiting, makes room.
        flags[0].store(true, Ordering::Relaxed);
        assert_eq!(c.admit(flags[3].clone(), |id| id), Some(1));
        // One ended: room without closing any.
        c.closed(2);
        assert_eq!(c.admit(flags[4].clone(), |id| id), None);
        // Every one answering: the oldest of all.
        for f in &flags[..5] {
            f.store(true, Ordering::Relaxed);
        }
        assert_eq!(c.admit(flags[5].clone(), |id| id), Some(0));
        assert_eq!(c.open.keys().copied().collect::<Vec<_>>(), vec![3, 4, 5]);
    }

    #[test]
    fn textfile_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("tfo-trace-textfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tfo_trace.prom");
        write_textfile(&path, "a 1\n").unwrap();
        write_textfile(&path, "a 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a 2\n");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("tfo_trace.prom")], "no temporary file left");
        assert!(write_textfile(&dir.join("missing/x.prom"), "a 1\n").is_err());
        assert!(check_textfile(&dir.join("missing/x.prom")).is_err());
        assert!(check_textfile(&dir).is_err());
        assert!(check_textfile(&path).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
