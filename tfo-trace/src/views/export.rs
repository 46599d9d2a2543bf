//! `tfo-trace export`: the kernel's TFO events as Prometheus metrics, served on
//! `/metrics` and/or written for node_exporter's textfile collector.
//!
//! The HTTP side is deliberately tiny: HTTP/1.1 (and 1.0) GET or HEAD of `/metrics` and `/`,
//! one request per connection (`Connection: close`), requests bounded in size and time,
//! a bounded number of connections at once. Anything else gets 4xx. Prometheus, curl and
//! wget need no more.
use std::{
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use anyhow::{bail, Context as _, Result};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};

use crate::{
    aggregation::metrics::{BuildInfo, Metrics, CONTENT_TYPE},
    events::{reader::EventSource, Event},
    probes::LoadOptions,
    views::{stop::Stop, trace},
};

/// A request line plus headers larger than this is refused (431).
const MAX_REQUEST_BYTES: usize = 8192;
/// Time a client has to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection may take in all (request and response).
const IO_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once (a few KiB each); more are closed straight away, so idle
/// connections cannot grow memory without bound.
const MAX_CONNECTIONS: usize = 256;

pub struct ExportOptions {
    pub load: LoadOptions,
    /// None: no HTTP server (textfile only).
    pub listen: Option<SocketAddr>,
    pub textfile: Option<PathBuf>,
    /// How often the textfile is rewritten.
    pub interval: Duration,
    pub top_destinations: Option<usize>,
    /// Count only events from these network namespaces (inodes); empty: all.
    pub netns: Vec<u32>,
    pub duration: Option<Duration>,
}

fn kernel_release() -> String {
    // SAFETY: uname fills a zeroed struct; its fields are NUL-terminated C strings.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return "unknown".into();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr()).to_string_lossy().into_owned()
    }
}

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
        eprintln!(
            "tfo-trace: note: node_exporter's textfile collector only reads files ending in .prom ({})",
            path.display()
        );
    }
    Ok(())
}

pub async fn run(opts: ExportOptions) -> Result<()> {
    if let Some(path) = &opts.textfile {
        check_textfile(path)?;
    }
    // Bind before loading anything: a port in use is reported without touching the kernel.
    let listener = match opts.listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("listening on {addr} (--web.listen-address)"))?,
        ),
        None => None,
    };
    // Without per-destination series nothing needs the event stream: the kernel counts.
    let load = LoadOptions { counts_only: opts.top_destinations.is_none(), ..opts.load };
    let mut tracer = trace::start(&load)?;
    let mut source = EventSource::new(&mut tracer.ebpf)?;
    let build = BuildInfo {
        version: env!("CARGO_PKG_VERSION").into(),
        backend: tracer.backend,
        kernel: kernel_release(),
    };
    let metrics = Arc::new(Metrics::new(&build, opts.top_destinations));
    if let Some(l) = &listener {
        eprintln!("tfo-trace: serving metrics on http://{}/metrics", l.local_addr()?);
    }
    if let Some(p) = &opts.textfile {
        eprintln!("tfo-trace: writing metrics to {} every {:?}", p.display(), opts.interval);
    }

    let mut stop = Stop::new(opts.duration)?;
    let mut textfile_tick = tokio::time::interval(opts.interval);
    let active = Arc::new(AtomicUsize::new(0));
    let mut batch: Vec<Event> = Vec::new();
    let listener = listener.as_ref();
    let accept = move || async move {
        match listener {
            Some(l) => l.accept().await,
            None => std::future::pending().await,
        }
    };
    let needs_events = metrics.needs_events();
    let mut seen = 0u64;
    loop {
        tokio::select! {
            r = source.next_batch(&mut batch), if needs_events => r?,
            conn = accept() => match conn {
                Ok((stream, _)) => {
                    // Each scrape sees the kernel's counts as they are now.
                    refresh(&metrics, &source, &opts.netns)?;
                    serve(stream, &metrics, &active)
                }
                // Out of fds and the like: keep tracing, the next accept may work.
                Err(e) => log::warn!("accepting a metrics connection: {e}"),
            },
            _ = textfile_tick.tick() => {
                if let Some(path) = &opts.textfile {
                    refresh(&metrics, &source, &opts.netns)?;
                    write_textfile(path, &metrics.encode()).with_context(|| format!("writing {}", path.display()))?;
                }
            }
            _ = stop.requested() => break,
        }
        seen += batch.len() as u64;
        observe(&metrics, &mut batch, &opts.netns);
    }
    if needs_events {
        source.drain(&mut batch);
        seen += batch.len() as u64;
        observe(&metrics, &mut batch, &opts.netns);
    }
    refresh(&metrics, &source, &opts.netns)?;
    if let Some(path) = &opts.textfile {
        write_textfile(path, &metrics.encode()).with_context(|| format!("writing {}", path.display()))?;
    }
    eprintln!("{}", trace::closing_line(seen, &source, &tracer));
    Ok(())
}

/// The kernel's counts of the namespaces asked for (all without --netns), into the model.
fn refresh(metrics: &Metrics, source: &EventSource, netns: &[u32]) -> Result<()> {
    metrics.set_kernel(source.kernel_counts()?.only_netns(netns), source.lost());
    Ok(())
}

fn observe(metrics: &Metrics, batch: &mut Vec<Event>, netns: &[u32]) {
    for e in batch.drain(..) {
        if netns.is_empty() || netns.contains(&e.netns) {
            metrics.observe(&e);
        }
    }
}

/// Answers one connection on its own task; at most [`MAX_CONNECTIONS`] at once.
fn serve(stream: TcpStream, metrics: &Arc<Metrics>, active: &Arc<AtomicUsize>) {
    if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::SeqCst);
        return; // dropped: closed without an answer
    }
    let (metrics, active) = (metrics.clone(), active.clone());
    tokio::spawn(async move {
        let _ = tokio::time::timeout(IO_TIMEOUT, answer(stream, &metrics)).await;
        active.fetch_sub(1, Ordering::SeqCst);
    });
}

/// Reads the request head (bounded) and writes the response.
async fn answer(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + REQUEST_TIMEOUT;
    let complete = loop {
        let Ok(n) = tokio::time::timeout_at(deadline, stream.read(&mut buf)).await else {
            return Ok(()); // too slow: closed without an answer
        };
        let n = n?;
        if n == 0 {
            break false;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > MAX_REQUEST_BYTES {
            break false;
        }
    };
    let response = if head.len() > MAX_REQUEST_BYTES {
        Response::error(431, "Request Header Fields Too Large")
    } else if !complete {
        return Ok(()); // the client went away mid-request
    } else {
        route(&head, || metrics.encode())
    };
    stream.write_all(&response.to_bytes()).await?;
    stream.shutdown().await
}

/// One HTTP response, always with Content-Length and `Connection: close`.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub reason: &'static str,
    pub content_type: &'static str,
    pub body: String,
    /// HEAD: headers as for GET, no body.
    pub head_only: bool,
}

impl Response {
    fn error(status: u16, reason: &'static str) -> Response {
        Response {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: format!("{status} {reason}\n"),
            head_only: false,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            self.reason,
            self.content_type,
            self.body.len()
        );
        if self.status == 405 {
            out.push_str("Allow: GET, HEAD\r\n");
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !self.head_only {
            bytes.extend_from_slice(self.body.as_bytes());
        }
        bytes
    }
}

const INDEX: &str = "<html><head><title>tfo-trace exporter</title></head><body>\
<h1>tfo-trace exporter</h1><p><a href=\"/metrics\">Metrics</a></p></body></html>\n";

/// The answer to a request head: only `GET`/`HEAD` of `/metrics` and `/`.
pub fn route(head: &[u8], exposition: impl FnOnce() -> String) -> Response {
    let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(first);
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Response::error(400, "Bad Request");
    };
    if !version.starts_with("HTTP/1.") {
        return Response::error(505, "HTTP Version Not Supported");
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Response::error(405, "Method Not Allowed"),
    };
    let path = target.split('?').next().unwrap_or_default();
    let mut response = match path {
        "/metrics" => Response {
            status: 200,
            reason: "OK",
            content_type: CONTENT_TYPE,
            body: exposition(),
            head_only: false,
        },
        "/" => Response {
            status: 200,
            reason: "OK",
            content_type: "text/html; charset=utf-8",
            body: INDEX.into(),
            head_only: false,
        },
        _ => Response::error(404, "Not Found"),
    };
    response.head_only = head_only;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(head: &str) -> Response {
        route(head.as_bytes(), || "tfo_trace_events_lost_total 0\n".into())
    }

    #[test]
    fn routes() {
        let r = get("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
        assert_eq!(r.status, 200);
        assert!(r.content_type.starts_with("text/plain; version=0.0.4"));
        let bytes = String::from_utf8(r.to_bytes()).unwrap();
        assert!(bytes.starts_with("HTTP/1.1 200 OK\r\n"), "{bytes}");
        assert!(bytes.contains("Content-Length: 30\r\n"), "{bytes}");
        assert!(bytes.ends_with("\r\n\r\ntfo_trace_events_lost_total 0\n"), "{bytes}");

        assert_eq!(get("GET /metrics?x=1 HTTP/1.0\r\n\r\n").status, 200);
        assert_eq!(get("GET / HTTP/1.1\r\n\r\n").status, 200);
        assert_eq!(get("GET /metricsx HTTP/1.1\r\n\r\n").status, 404);
        assert_eq!(get("GET /../etc/passwd HTTP/1.1\r\n\r\n").status, 404);
        assert_eq!(get("POST /metrics HTTP/1.1\r\n\r\n").status, 405);
        assert!(String::from_utf8(get("PUT / HTTP/1.1\r\n\r\n").to_bytes())
            .unwrap()
            .contains("Allow: GET, HEAD"));
        assert_eq!(get("GET /metrics\r\n\r\n").status, 400);
        assert_eq!(get("GET /metrics HTTP/2\r\n\r\n").status, 505);
        assert_eq!(get("\u{0}\u{ff}garbage\r\n\r\n").status, 400);

        let head = get("HEAD /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(head.status, 200);
        let bytes = String::from_utf8(head.to_bytes()).unwrap();
        assert!(
            bytes.ends_with("Connection: close\r\n\r\n") && bytes.contains("Content-Length: 30"),
            "{bytes}"
        );
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
