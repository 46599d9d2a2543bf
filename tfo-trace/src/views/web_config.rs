//! `export --web.config.file`: TLS and basic authentication for `/metrics`, configured by
//! the Prometheus exporter-toolkit's web-config file (the one node_exporter and Prometheus
//! itself read), so a fleet reuses the file, the certificates and the bcrypt hashes it
//! already has.
//!
//! Read at start: anything wrong (a missing or unreadable file, YAML that does not parse,
//! an unknown key, a certificate or key that cannot be read, a password hash that is not
//! bcrypt, a setting this exporter does not implement) is one error line naming the file
//! and the key, and the exporter does not start. Later, only the certificate and key files
//! are read again, when they change ([`ServedCert`]). What it implements:
//! `tls_server_config` (`cert_file`/`key_file` or inline `cert`/`key`, relative paths from
//! the file's folder as exporter-toolkit reads them; `client_auth_type` `NoClientCert`,
//! `VerifyClientCertIfGiven` or `RequireAndVerifyClientCert` with `client_ca_file` or
//! `client_ca`; `min_version`/`max_version` TLS12 or TLS13; `prefer_server_cipher_suites`),
//! `http_server_config` (`headers`; `http2` is accepted, and HTTP/1.1 served, as without
//! the file) and `basic_auth_users`. Refused by name: `client_allowed_sans`, `cipher_suites`,
//! `curve_preferences`, `rate_limit`, the client-auth types that accept an unverified
//! certificate, TLS 1.0 and 1.1.
//!
//! TLS is rustls with ring (views/export.rs serves it); a connection that does not start
//! with a TLS record gets Prometheus's own answer to plain HTTP on a TLS port (400) and no
//! metrics. Basic auth is checked on every request to every path, as exporter-toolkit
//! does: a bcrypt verification costs tens of milliseconds of CPU by design, so it runs off
//! the exporter's one thread, one at a time, and a verified (user, password) is
//! remembered by its SHA-256 (never in clear) so a scraper pays it once.
use std::{
    collections::{BTreeMap, HashSet},
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::Engine as _;
use hyper::header::{HeaderName, HeaderValue};
use rustls::{
    crypto::CryptoProvider,
    pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer},
    server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier},
    sign::CertifiedKey,
    RootCertStore, ServerConfig, SupportedProtocolVersion,
};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::sync::Semaphore;

/// The file as exporter-toolkit defines it (docs/web-configuration.md there). Every level
/// refuses keys it does not know, as exporter-toolkit's strict YAML does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
    rate_limit: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    client_ca_file: Option<PathBuf>,
    client_allowed_sans: Option<Vec<String>>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    curve_preferences: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    #[allow(dead_code)] // accepted: HTTP/1.1 is served either way
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// The response headers exporter-toolkit lets the file set.
const HEADERS: &[&str] = &[
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

/// What the exporter's HTTP server does with the file.
pub(crate) struct WebConfig {
    /// Serve TLS with this (None: plain HTTP).
    pub tls: Option<Arc<ServerConfig>>,
    /// None: no authentication.
    pub auth: Option<BasicAuth>,
    /// Added to every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl WebConfig {
    /// Reads and checks `path`; every error names the file (and the key) on one line.
    pub(crate) fn load(path: &Path) -> Result<WebConfig> {
        let what = || format!("--web.config.file {}", path.display());
        let text = std::fs::read_to_string(path).with_context(what)?;
        let file = File::parse(&text).with_context(what)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Self::of(file, dir).with_context(what)
    }

    fn of(file: File, dir: &Path) -> Result<WebConfig> {
        if file.rate_limit.is_some() {
            bail!("rate_limit is not supported by tfo-trace");
        }
        let tls = file.tls_server_config.map(|t| tls_config(t, dir)).transpose()?;
        let auth =
            (!file.basic_auth_users.is_empty()).then(|| BasicAuth::new(file.basic_auth_users)).transpose()?;
        let headers =
            file.http_server_config.map(|h| response_headers(h.headers)).transpose()?.unwrap_or_default();
        Ok(WebConfig { tls, auth, headers })
    }
}

impl File {
    /// The file's keys from its text, the syntax checked first: serde takes the keys as the
    /// parser reaches them, so a key it does not know before a syntax error further down
    /// would be said instead of that error ("unknown field `foo`" for an unclosed quote on
    /// line 3).
    fn parse(text: &str) -> Result<File> {
        serde_saphyr::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| anyhow!("not valid YAML: {}", one_line(&e.to_string())))?;
        serde_saphyr::from_str(text).map_err(|e| anyhow!(one_line(&e.to_string())))
    }
}

/// A YAML error's first line (`line 4 column 3: unknown field ...`), without the snippet
/// of the file the parser draws under it: the exporter says one line.
fn one_line(s: &str) -> String {
    let first = s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s).trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

fn response_headers(headers: BTreeMap<String, String>) -> Result<Vec<(HeaderName, HeaderValue)>> {
    headers
        .into_iter()
        .filter(|(_, v)| !v.is_empty()) // "unset if blank"
        .map(|(name, value)| {
            if !HEADERS.contains(&name.as_str()) {
                bail!("http_server_config.headers: {name} cannot be set (only {})", HEADERS.join(", "));
            }
            let name = HeaderName::from_bytes(name.as_bytes())?;
            let value = HeaderValue::from_str(&value)
                .map_err(|_| anyhow!("http_server_config.headers.{name}: not a valid header value"))?;
            Ok((name, value))
        })
        .collect()
}

/// PEM text inline (`cert`) or from a file (`cert_file`, relative to the config's folder):
/// exactly one of them.
fn pem(key: &str, inline: Option<String>, file: Option<PathBuf>, dir: &Path) -> Result<Option<Vec<u8>>> {
    match (inline, file) {
        (Some(_), Some(_)) => bail!("tls_server_config: {key} and {key}_file are both set"),
        (Some(text), None) => Ok(Some(text.into_bytes())),
        (None, Some(f)) => {
            let f = dir.join(f);
            std::fs::read(&f)
                .map(Some)
                .with_context(|| format!("tls_server_config.{key}_file {}", f.display()))
        }
        (None, None) => Ok(None),
    }
}

fn certificates(key: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow!("tls_server_config.{key}: {e}"))?;
    if certs.is_empty() {
        bail!("tls_server_config.{key}: no PEM certificate in it");
    }
    Ok(certs)
}

fn version(
    key: &str,
    v: Option<&str>,
    default: &'static SupportedProtocolVersion,
) -> Result<&'static SupportedProtocolVersion> {
    match v {
        None => Ok(default),
        Some("TLS12") => Ok(&rustls::version::TLS12),
        Some("TLS13") => Ok(&rustls::version::TLS13),
        Some(v @ ("TLS10" | "TLS11")) => {
            bail!("tls_server_config.{key}: {v} is not supported (TLS12 and TLS13 are)")
        }
        Some(v) => bail!("tls_server_config.{key}: unknown version {v:?} (TLS12 or TLS13)"),
    }
}

fn tls_config(t: TlsFile, dir: &Path) -> Result<Arc<ServerConfig>> {
    for (key, set) in [
        ("client_allowed_sans", t.client_allowed_sans.as_ref().is_some_and(|v| !v.is_empty())),
        ("cipher_suites", t.cipher_suites.as_ref().is_some_and(|v| !v.is_empty())),
        ("curve_preferences", t.curve_preferences.as_ref().is_some_and(|v| !v.is_empty())),
    ] {
        if set {
            bail!("tls_server_config.{key} is not supported by tfo-trace (rustls chooses them)");
        }
    }
    let auth_type = t.client_auth_type.as_deref().unwrap_or("NoClientCert");
    match auth_type {
        "NoClientCert" | "RequireAndVerifyClientCert" | "VerifyClientCertIfGiven" => {}
        kind @ ("RequestClientCert" | "RequireAnyClientCert") => bail!(
            "tls_server_config.client_auth_type {kind} is not supported: it accepts certificates nobody verified \
             (RequireAndVerifyClientCert does)"
        ),
        other => bail!("tls_server_config.client_auth_type: unknown type {other:?}"),
    }
    if t.cert.is_none() && t.cert_file.is_none() || t.key.is_none() && t.key_file.is_none() {
        bail!("tls_server_config needs cert_file (or cert) and key_file (or key)");
    }
    let files = t.cert_file.as_ref().zip(t.key_file.as_ref()).map(|(c, k)| [dir.join(c), dir.join(k)]);
    let cert = pem("cert", t.cert, t.cert_file, dir)?;
    let key = pem("key", t.key, t.key_file, dir)?;
    let (Some(cert), Some(key)) = (cert, key) else {
        bail!("tls_server_config needs cert_file (or cert) and key_file (or key)");
    };

    let min = version("min_version", t.min_version.as_deref(), &rustls::version::TLS12)?;
    let max = version("max_version", t.max_version.as_deref(), &rustls::version::TLS13)?;
    let all = [&rustls::version::TLS12, &rustls::version::TLS13];
    let rank = |v: &SupportedProtocolVersion| all.iter().position(|a| a.version == v.version);
    let versions: Vec<&'static SupportedProtocolVersion> =
        all.into_iter().filter(|v| rank(v) >= rank(min) && rank(v) <= rank(max)).collect();
    if versions.is_empty() {
        bail!("tls_server_config: min_version is above max_version");
    }
    // ring, deprecated by rustls 0.23.48 for lacking post-quantum key exchange (X25519 and
    // the NIST curves remain): it cross-builds for the static musl targets with the gcc
    // `cargo xtask dist` gives the cc crate; aws-lc-rs, the alternative, is a far larger C
    // build (cmake on some targets), not tried there.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let served = ServedCert::new(&cert, &key, files, provider.clone())?;
    let builder = ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;

    let client_ca = pem("client_ca", t.client_ca, t.client_ca_file, dir)?;
    let builder = match (auth_type, client_ca) {
        ("NoClientCert", _) => builder.with_no_client_auth(),
        (kind, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for c in certificates("client_ca_file", &ca)? {
                roots.add(c).map_err(|e| anyhow!("tls_server_config.client_ca_file: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier =
                if kind == "VerifyClientCertIfGiven" { verifier.allow_unauthenticated() } else { verifier };
            builder
                .with_client_cert_verifier(verifier.build().map_err(|e| anyhow!("tls_server_config: {e}"))?)
        }
        (_, None) => {
            bail!("tls_server_config.client_auth_type {auth_type} needs client_ca_file (or client_ca)")
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(served));
    config.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(true);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The server's certificate chain and key, from PEM text.
fn certified_key(cert: &[u8], key: &[u8], provider: &CryptoProvider) -> Result<CertifiedKey> {
    let certs = certificates("cert_file", cert)?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            anyhow!("tls_server_config.key_file: no PEM private key in it")
        }
        e => anyhow!("tls_server_config.key_file: {e}"),
    })?;
    CertifiedKey::from_der(certs, key, provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(_) => {
            anyhow!("tls_server_config: the key does not match the certificate")
        }
        e => anyhow!("tls_server_config: certificate and key: {e}"),
    })
}

/// What identifies a file's content without reading it: modification time, size, inode
/// (a Kubernetes Secret's files are symlinks whose target changes on update).
type Stamp = Option<[(std::time::SystemTime, u64, u64); 2]>;

fn stamp(files: &[PathBuf; 2]) -> Stamp {
    use std::os::unix::fs::MetadataExt as _;
    let one =
        |f: &PathBuf| std::fs::metadata(f).ok().and_then(|m| Some((m.modified().ok()?, m.len(), m.ino())));
    Some([one(&files[0])?, one(&files[1])?])
}

/// The certificate the server presents: read again at a handshake after `cert_file` or
/// `key_file` changed (cert-manager renews them in place), as exporter-toolkit reads them
/// at every connection; two `stat`s a handshake otherwise. A renewal that cannot be read
/// (half written, a key of another certificate) keeps the previous certificate, said once
/// per change on stderr. Inline `cert`/`key` never change.
#[derive(Debug)]
struct ServedCert {
    files: Option<[PathBuf; 2]>,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Stamp, Arc<CertifiedKey>)>,
}

impl ServedCert {
    fn new(
        cert: &[u8],
        key: &[u8],
        files: Option<[PathBuf; 2]>,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self> {
        let first = Arc::new(certified_key(cert, key, &provider)?);
        let stamp = files.as_ref().and_then(stamp);
        Ok(ServedCert { files, provider, current: Mutex::new((stamp, first)) })
    }

    fn reload(&self, files: &[PathBuf; 2]) -> Result<CertifiedKey> {
        let read = |f: &PathBuf| std::fs::read(f).with_context(|| f.display().to_string());
        certified_key(&read(&files[0])?, &read(&files[1])?, &self.provider)
    }
}

impl ResolvesServerCert for ServedCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().ok()?;
        if let Some(files) = &self.files {
            let now = stamp(files);
            if now.is_some() && now != current.0 {
                current.0 = now;
                match self.reload(files) {
                    Ok(key) => {
                        log::info!("tls_server_config: read the renewed {}", files[0].display());
                        current.1 = Arc::new(key);
                    }
                    Err(e) => log::warn!("{e:#}: still serving the previous certificate"),
                }
            }
        }
        Some(current.1.clone())
    }
}

/// A bcrypt hash of cost 10 (htpasswd's default) that no password is checked against for
/// real: an unknown user costs what a known one does, so timing tells no user names.
const NO_USER_HASH: &str = "$2b$10$r/riZel8JSv10wz/JH44qOtjcMfoZPFcDEc2iIAmcEW/qH4mdrAn6";

/// Most verified credentials remembered; past it the memory starts again.
const REMEMBERED: usize = 256;

/// `basic_auth_users`: user names and their bcrypt hashes.
pub(crate) struct BasicAuth {
    users: BTreeMap<String, String>,
    /// SHA-256 of each (user, password, hash) verified.
    verified: Mutex<HashSet<[u8; 32]>>,
    /// One bcrypt verification at a time: wrong passwords cost CPU, not all of it.
    bcrypt: Semaphore,
}

impl BasicAuth {
    fn new(users: BTreeMap<String, String>) -> Result<BasicAuth> {
        for (user, hash) in &users {
            if user.contains(':') {
                bail!("basic_auth_users: the user name {user:?} has a ':', which basic auth cannot carry");
            }
            hash.parse::<bcrypt::HashParts>()
                .map_err(|e| anyhow!("basic_auth_users.{user}: not a bcrypt hash ({e})"))?;
        }
        Ok(BasicAuth { users, verified: Mutex::new(HashSet::new()), bcrypt: Semaphore::new(1) })
    }

    /// Whether `authorization` (the request's header) carries a user's password.
    pub(crate) async fn allows(self: &Arc<Self>, authorization: Option<&HeaderValue>) -> bool {
        let Some((user, password)) = authorization.and_then(credentials) else { return false };
        let (hash, known) = match self.users.get(&user) {
            Some(h) => (h.clone(), true),
            None => (NO_USER_HASH.to_string(), false),
        };
        let key: [u8; 32] = Sha256::new()
            .chain_update(&user)
            .chain_update([0])
            .chain_update(&password)
            .chain_update([0])
            .chain_update(&hash)
            .finalize()
            .into();
        if known && self.verified.lock().is_ok_and(|v| v.contains(&key)) {
            return true;
        }
        let Ok(_turn) = self.bcrypt.acquire().await else { return false };
        let matches = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash).unwrap_or(false))
            .await
            .unwrap_or(false);
        if matches && known {
            if let Ok(mut v) = self.verified.lock() {
                if v.len() >= REMEMBERED {
                    v.clear();
                }
                v.insert(key);
            }
        }
        matches && known
    }
}

/// The user and password of a `Basic` authorization header.
fn credentials(header: &HeaderValue) -> Option<(String, String)> {
    let value = header.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let (user, password) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<WebConfig> {
        WebConfig::of(File::parse(yaml)?, Path::new("/nonexistent"))
    }

    fn error(yaml: &str) -> String {
        match parse(yaml) {
            Ok(_) => panic!("{yaml:?} was accepted"),
            Err(e) => format!("{e:#}"),
        }
    }

    #[test]
    fn empty_file_means_plain_http_without_auth() {
        for yaml in ["", "{}\n", "basic_auth_users: {}\n"] {
            let c = parse(yaml).unwrap();
            assert!(c.tls.is_none() && c.auth.is_none() && c.headers.is_empty(), "{yaml:?}");
        }
    }

    #[test]
    fn refuses_what_it_does_not_know_or_implement_by_name() {
        for (yaml, says) in [
            ("tls_server_config:\n  cert_file: a\n  nope: 1\n", "nope"),
            ("basic_auth_user:\n  a: b\n", "basic_auth_user"),
            ("rate_limit:\n  interval: 1s\n  burst: 2\n", "rate_limit is not supported"),
            ("basic_auth_users:\n  alice: secret\n", "basic_auth_users.alice: not a bcrypt hash"),
            ("tls_server_config:\n  cert_file: a\n", "needs cert_file (or cert) and key_file"),
            ("tls_server_config:\n  cert_file: a\n  cert: b\n  key: c\n", "cert and cert_file are both set"),
            ("tls_server_config:\n  cert_file: missing.crt\n  key_file: k\n", "/nonexistent/missing.crt"),
            (
                "tls_server_config:\n  cert: x\n  key: y\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n",
                "cipher_suites is not supported",
            ),
            (
                "tls_server_config:\n  cert: x\n  key: y\n  client_allowed_sans: [a]\n",
                "client_allowed_sans is not supported",
            ),
            ("http_server_config:\n  headers:\n    X-Evil: 1\n", "X-Evil cannot be set"),
        ] {
            let e = error(yaml);
            assert!(e.contains(says), "{yaml:?}: {e}");
            assert!(!e.contains("not valid YAML"), "valid YAML: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }

    /// A syntax error is said as one, with its line, even where a key serde does not know
    /// comes before it (issue 55, item 9: "unknown field `foo`" for an unclosed quote).
    #[test]
    fn a_syntax_error_is_not_valid_yaml_with_its_line() {
        for (yaml, line) in [
            ("tls_server_config: [\n", "line 1"),
            ("foo: 1\nbasic_auth_users:\n  alice: \"x\n", "line 3"),
            ("tls_server_config:\n  cert_file: a\n  key_file: b\n foo: [1\n", "line 4"),
            ("basic_auth_users:\n  alice: x\n\tfoo: 1\n", "line 2"),
        ] {
            let e = error(yaml);
            assert!(e.starts_with("not valid YAML: ") && e.contains(line), "{yaml:?}: {e}");
            assert!(!e.contains("unknown field") && !e.contains('\n'), "{yaml:?}: {e}");
        }
    }

    #[test]
    fn headers_the_file_sets() {
        let c = parse("http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n    X-XSS-Protection: ''\n").unwrap();
        assert_eq!(
            c.headers,
            vec![(HeaderName::from_static("x-frame-options"), HeaderValue::from_static("deny"))]
        );
    }

    #[test]
    fn credentials_of_a_basic_header() {
        let h = |s: &str| HeaderValue::from_str(s).unwrap();
        assert_eq!(credentials(&h("Basic YWxpY2U6cDpzcw==")), Some(("alice".into(), "p:ss".into())));
        assert_eq!(credentials(&h("basic YWxpY2U6")), Some(("alice".into(), "".into())));
        assert_eq!(credentials(&h("Bearer YWxpY2U6cDpzcw==")), None);
        assert_eq!(credentials(&h("Basic !!!")), None);
        assert_eq!(credentials(&h("Basic YWxpY2U=")), None, "no colon");
    }

    #[tokio::test]
    async fn bcrypt_checks_the_password_and_remembers_only_a_verified_one() {
        // The Python/htpasswd kind of hash ($2y$), cost 4 to keep the test fast.
        let hash = bcrypt::hash("s3cret", 4).unwrap().replacen("$2b$", "$2y$", 1);
        let auth = Arc::new(BasicAuth::new([("alice".to_string(), hash)].into()).unwrap());
        let basic = |up: &str| {
            HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(up)))
                .unwrap()
        };
        assert!(!auth.allows(None).await);
        assert!(!auth.allows(Some(&basic("alice:wrong"))).await);
        assert!(!auth.allows(Some(&basic("bob:s3cret"))).await);
        assert!(auth.verified.lock().unwrap().is_empty());
        assert!(auth.allows(Some(&basic("alice:s3cret"))).await);
        assert!(auth.allows(Some(&basic("alice:s3cret"))).await);
        assert_eq!(auth.verified.lock().unwrap().len(), 1);
        assert!(bcrypt::verify("", NO_USER_HASH).is_ok(), "the unknown user's hash is a bcrypt hash");
    }
}
