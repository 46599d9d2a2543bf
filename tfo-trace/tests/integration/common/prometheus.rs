//! A real Prometheus server (Debian's `prometheus` package, 2.42) for the tests: on a free
//! loopback port, with its own configuration and data directory, killed (by pid, it is
//! our child) when dropped. Its HTTP API is read over plain HTTP, or with curl over TLS and
//! basic auth when it runs with a `--web.config.file` itself.
use std::{
    io::Read as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{SystemTime, UNIX_EPOCH},
};

use serde_json::Value;

use super::{free_port, http_get, TempDir};

/// Prometheus and promtool, installing Debian's package if they are missing; Err = why not.
pub fn binaries() -> Result<(PathBuf, PathBuf), String> {
    let find = || {
        let p = Path::new("/usr/bin/prometheus");
        let t = Path::new("/usr/bin/promtool");
        (p.exists() && t.exists()).then(|| (p.to_path_buf(), t.to_path_buf()))
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    eprintln!("installing Debian's prometheus package (apt-get, up to 4 minutes)");
    let mut child = Command::new("apt-get")
        .args(["-o", "DPkg::Lock::Timeout=120", "install", "-y", "--no-install-recommends", "prometheus"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("prometheus is not installed and apt-get cannot run ({e}); `apt-get install prometheus`")
        })?;
    let status = match super::wait::within(super::HANG_LIMIT, || child.try_wait().map(|s| s.ok_or(()))) {
        Ok(Ok(status)) => status,
        Ok(Err(())) => {
            let _ = child.kill(); // by pid: our own child
            let _ = child.wait();
            return Err("installing prometheus took over 4 minutes; `apt-get install prometheus`".into());
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut err = String::new();
    let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
    find().ok_or_else(|| format!("`apt-get install prometheus` failed ({status}): {}", err.trim()))
}

pub fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub fn now_unix() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// How to reach a server that runs with a web config: its CA and a user's credentials.
#[derive(Clone, Debug)]
pub struct Tls {
    pub ca: PathBuf,
    pub user: String,
    pub password: String,
}

/// `GET https://{addr}{target}` with curl, trusting `tls.ca`; `credentials`: send the
/// user's (None: none; Some(false): a wrong password). (status, body); status 0 when curl
/// got no HTTP answer at all.
pub fn curl_get(addr: SocketAddr, target: &str, tls: &Tls, credentials: Option<bool>) -> (u16, String) {
    curl_get_in(None, addr, target, tls, credentials)
}

/// [`curl_get`] run in network namespace `netns` (an nsfs file, e.g. /proc/PID/ns/net)
/// through nsenter, where Some.
pub fn curl_get_in(
    netns: Option<&Path>,
    addr: SocketAddr,
    target: &str,
    tls: &Tls,
    credentials: Option<bool>,
) -> (u16, String) {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = Command::new("nsenter");
            c.arg(format!("--net={}", ns.display())).arg("curl");
            c
        }
        None => Command::new("curl"),
    };
    cmd.args(["-s", "--max-time", "10", "--cacert"]).arg(&tls.ca).args(["-w", "\n%{http_code}"]);
    match credentials {
        Some(true) => cmd.args(["-u", &format!("{}:{}", tls.user, tls.password)]),
        Some(false) => cmd.args(["-u", &format!("{}:not-{}", tls.user, tls.password)]),
        None => &mut cmd,
    };
    let out = cmd.arg(format!("https://{addr}{target}")).output().expect("running curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// A running Prometheus; see the module's doc.
pub struct Prometheus {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
    /// Some: it serves TLS and basic auth (its own `--web.config.file`).
    tls: Option<Tls>,
}

impl Prometheus {
    /// Starts `bin` with `config` (prometheus.yml's text) in `dir`, and `web` (its web
    /// config file and how to reach it) if given; waits until it is ready.
    pub fn start(bin: &Path, dir: &Path, config: &str, web: Option<(&Path, Tls)>) -> Prometheus {
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut cmd = Command::new(bin);
        cmd.arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn");
        if let Some((file, _)) = &web {
            cmd.arg(format!("--web.config.file={}", file.display()));
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("starting prometheus");
        let mut p = Prometheus { child, addr, dir: dir.to_path_buf(), tls: web.map(|(_, tls)| tls) };
        super::eventually("prometheus ready", || match p.get("/-/ready") {
            Some((200, _)) => Ok(()),
            answer => match p.child.try_wait() {
                Ok(Some(status)) => panic!("prometheus exited ({status}): {}", p.log()),
                _ => Err(format!("{answer:?}; log: {}", p.log())),
            },
        });
        p
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// GET `target` of its web server (with the right credentials if it wants them).
    pub fn get(&self, target: &str) -> Option<(u16, String)> {
        match &self.tls {
            None => http_get(self.addr, target).ok(),
            Some(tls) => {
                Some(curl_get(self.addr, target, tls, Some(true))).filter(|(status, _)| *status != 0)
            }
        }
    }

    /// An instant query's result vector.
    pub fn query_vector(&self, promql: &str) -> Vec<Value> {
        let Some((status, body)) = self.get(&format!("/api/v1/query?query={}", url_encode(promql))) else {
            return Vec::new();
        };
        assert_eq!(status, 200, "query {promql}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {promql}: {e}: {body}"));
        v["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// An instant query that must return at most one sample: its value.
    pub fn query(&self, promql: &str) -> Option<f64> {
        let result = self.query_vector(promql);
        assert!(result.len() <= 1, "query {promql} returned {} series: {result:?}", result.len());
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    pub fn value(&self, promql: &str) -> f64 {
        self.query(promql).unwrap_or_else(|| panic!("no value for {promql}; prometheus log: {}", self.log()))
    }

    /// Waits for a scrape of `job` that started after `t` (unix seconds), so every later
    /// query sees what the exporter counted up to `t`.
    pub fn wait_for_scrape_after(&self, job: &str, t: f64) {
        super::eventually(format!("a scrape of {job} after {t}"), || {
            match self.query(&format!(r#"timestamp(up{{job="{job}"}})"#)) {
                Some(ts) if ts > t => Ok(()),
                last => Err(format!("last scrape at {last:?}; log: {}", self.log())),
            }
        });
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The user the web configs of [`web_config_files`] let in, and its password.
pub const USER: &str = "prometheus";
pub const PASSWORD: &str = "s3cret: with a colon";

/// A web config in exporter-toolkit's format: a self-signed certificate for 127.0.0.1
/// (openssl), and [`USER`] with a bcrypt hash of cost 10 in htpasswd's `$2y$` form; the
/// paths relative to the file, as exporter-toolkit reads them. Deleted with `dir`.
pub struct WebConfigFiles {
    pub dir: TempDir,
    pub file: PathBuf,
    pub tls: Tls,
}

pub fn web_config_files(name: &str) -> WebConfigFiles {
    let dir = TempDir::new(name);
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"])
        .args(["-keyout", "key.pem", "-out", "cert.pem", "-days", "2", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        .current_dir(&dir.0)
        .output();
    match made {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("openssl req: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => {
            super::skip(format!("no openssl to make a test certificate ({e}): `apt-get install openssl`"))
        }
    }
    let hash = bcrypt::hash_with_result(PASSWORD, 10).unwrap().format_for_version(bcrypt::Version::TwoY);
    let file = dir.0.join("web.yml");
    std::fs::write(
        &file,
        format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n\
             basic_auth_users:\n  {USER}: {hash}\n"
        ),
    )
    .unwrap();
    let tls = Tls { ca: dir.0.join("cert.pem"), user: USER.into(), password: PASSWORD.into() };
    WebConfigFiles { dir, file, tls }
}
