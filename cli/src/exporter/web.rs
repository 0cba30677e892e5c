//! `--web-config FILE`: TLS and basic authentication in the file format
//! of the Prometheus exporter-toolkit (docs/web-configuration.md there), so
//! a site writes for `tally exporter` what it writes for node_exporter:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt      # relative paths: from the file's directory
//!   key_file: server.key
//! basic_auth_users:
//!   prometheus: $2y$10$…       # bcrypt (`tally exporter hash-password`)
//! ```
//!
//! The file is read once, at start (the toolkit rereads it on every
//! request). Keys the toolkit knows but Tally does not serve (client
//! certificates, cipher choices, `http_server_config`, `rate_limit`) are
//! refused by name rather than ignored: a site that asks for client
//! certificates must not get a server that silently accepts anyone.
//!
//! A verified password is remembered by the SHA-256 of user, password and
//! hash, never the password itself: bcrypt is slow on purpose (cost 10 ≈
//! 50-100 ms), and Prometheus sends the same credentials every scrape.
//! Verifications run off the serving threads, at most
//! [`AUTH_PERMITS`] at a time, so a flood of wrong passwords costs at most
//! that many cores and never holds up an answer that needs none.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_norway::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What `--web-config` asks for.
#[derive(Debug, Default)]
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// User → bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
}

/// The most bytes of a web config, a certificate chain or a key file.
const MAX_FILE_BYTES: u64 = 1 << 20;

const TOP_KEYS: &[&str] = &["tls_server_config", "basic_auth_users"];
const TOP_UNSUPPORTED: &[&str] = &["http_server_config", "rate_limit"];
const TLS_KEYS: &[&str] = &["cert_file", "key_file", "cert", "key", "client_auth_type", "min_version", "max_version"];
const TLS_UNSUPPORTED: &[&str] =
    &["client_ca_file", "client_ca", "client_allowed_sans", "cipher_suites", "curve_preferences", "prefer_server_cipher_suites"];

/// Read and check `path`; every error names the file and the key.
pub fn load(path: &Path) -> Result<WebConfig, String> {
    let at = |e: String| format!("--web-config {}: {e}", path.display());
    let text = tally_config::input::read_text(path, "a web config", MAX_FILE_BYTES).map_err(|e| at(e.to_string()))?;
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse(&text, &dir).map_err(at)
}

/// The mapping at `what`, its keys checked against the allowed ones.
fn mapping<'a>(v: &'a Value, what: &str, allowed: &[&str], unsupported: &[&str]) -> Result<Vec<(String, &'a Value)>, String> {
    let map = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Mapping(m) => m,
        _ => return Err(format!("{what} must be a mapping of keys to values")),
    };
    let mut out = Vec::new();
    for (k, v) in map {
        let Some(k) = k.as_str() else {
            return Err(format!("{what}: keys are strings, found {}", describe(k)));
        };
        if unsupported.contains(&k) {
            return Err(format!(
                "{what}: `{}` is an exporter-toolkit key tally exporter does not support; it supports {}",
                tally_allocator::text::clip(k),
                allowed.join(", ")
            ));
        }
        if !allowed.contains(&k) {
            return Err(format!("{what}: unknown key `{}`; allowed: {}", tally_allocator::text::clip(k), allowed.join(", ")));
        }
        out.push((k.to_string(), v));
    }
    Ok(out)
}

fn describe(v: &Value) -> String {
    match v {
        Value::Null => "nothing".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(_) => "a string".into(),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

fn string<'a>(v: &'a Value, what: &str) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("{what} must be a string, found {}", describe(v)))
}

/// The web config in `text`; relative file names are read from `dir`.
pub fn parse(text: &str, dir: &Path) -> Result<WebConfig, String> {
    let root: Value = serde_norway::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let mut web = WebConfig::default();
    for (key, v) in mapping(&root, "the file", TOP_KEYS, TOP_UNSUPPORTED)? {
        match key.as_str() {
            "tls_server_config" => web.tls = tls(v, dir)?,
            _ => web.users = users(v)?,
        }
    }
    Ok(web)
}

fn users(v: &Value) -> Result<BTreeMap<String, String>, String> {
    let Value::Mapping(m) = v else {
        return match v {
            Value::Null => Ok(BTreeMap::new()),
            _ => Err(format!("basic_auth_users must map user names to bcrypt hashes, found {}", describe(v))),
        };
    };
    let mut users = BTreeMap::new();
    for (k, v) in m {
        let user = string(k, "basic_auth_users: a user name")?;
        if user.is_empty() || user.contains(':') {
            return Err(format!("basic_auth_users: `{}` is not a user name (not empty, no `:`)", tally_allocator::text::clip(user)));
        }
        let hash = string(v, &format!("basic_auth_users.{}", tally_allocator::text::clip(user)))?;
        if !is_bcrypt(hash) {
            return Err(format!(
                "basic_auth_users.{}: not a bcrypt hash (`$2y$10$` and 53 characters; `tally exporter hash-password` prints one)",
                tally_allocator::text::clip(user)
            ));
        }
        users.insert(user.to_string(), hash.to_string());
    }
    Ok(users)
}

/// `$2a$`, `$2b$`, `$2x$` or `$2y$`, a cost 04 to 31, then 22 characters of
/// salt and 31 of hash in bcrypt's base64.
fn is_bcrypt(h: &str) -> bool {
    let parts: Vec<&str> = h.split('$').collect();
    let alphabet = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/');
    matches!(parts.as_slice(), ["", v, cost, rest]
        if ["2a", "2b", "2x", "2y"].contains(v)
            && cost.len() == 2 && cost.parse::<u32>().is_ok_and(|c| (4..=31).contains(&c))
            && rest.len() == 53 && alphabet(rest))
}

fn tls(v: &Value, dir: &Path) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    let what = "tls_server_config";
    let keys = mapping(v, what, TLS_KEYS, TLS_UNSUPPORTED)?;
    if keys.is_empty() {
        return Ok(None);
    }
    let mut got: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in keys {
        let s = string(v, &format!("{what}.{k}"))?;
        got.insert(k, s.to_string());
    }
    if let Some(t) = got.get("client_auth_type").filter(|t| !t.is_empty() && t.as_str() != "NoClientCert") {
        return Err(format!(
            "{what}.client_auth_type: `{}` asks for client certificates, which tally exporter does not support (allowed: NoClientCert)",
            tally_allocator::text::clip(t)
        ));
    }
    let pem = |inline: &str, file: &str| -> Result<(String, Vec<u8>), String> {
        match (got.get(inline), got.get(file)) {
            (Some(_), Some(_)) => Err(format!("{what}: give `{inline}` or `{file}`, not both")),
            (Some(text), None) => Ok((format!("{what}.{inline}"), text.clone().into_bytes())),
            (None, Some(f)) => {
                let p = resolve(dir, f);
                let bytes =
                    tally_config::input::read_text(&p, "a PEM file", MAX_FILE_BYTES).map_err(|e| format!("{what}.{file}: {}: {e}", p.display()))?;
                Ok((format!("{what}.{file} ({})", p.display()), bytes.into_bytes()))
            }
            (None, None) => Err(format!("{what}: `{file}` (or `{inline}`) is required")),
        }
    };
    let (cert_at, cert_pem) = pem("cert", "cert_file")?;
    let (key_at, key_pem) = pem("key", "key_file")?;
    let certs = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{cert_at}: not a PEM certificate chain: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{cert_at}: no `BEGIN CERTIFICATE` block"));
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| format!("{key_at}: not a PEM private key (PKCS#8, PKCS#1 or SEC1): {e}"))?;
    let version = |k: &str| -> Result<Option<u8>, String> {
        match got.get(k).map(String::as_str) {
            None | Some("") => Ok(None),
            Some("TLS12") => Ok(Some(12)),
            Some("TLS13") => Ok(Some(13)),
            Some(v) => Err(format!("{what}.{k}: `{}` is not supported (allowed: TLS12, TLS13)", tally_allocator::text::clip(v))),
        }
    };
    let (min, max) = (version("min_version")?.unwrap_or(12), version("max_version")?.unwrap_or(13));
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [(12, &rustls::version::TLS12), (13, &rustls::version::TLS13)].into_iter().filter(|(v, _)| (min..=max).contains(v)).map(|(_, p)| p).collect();
    if versions.is_empty() {
        return Err(format!("{what}: min_version is above max_version"));
    }
    // rustls 0.23.48 deprecates the ring provider (it has no post-quantum
    // key exchange); aws-lc-rs, which has, needs a cmake/nasm build. The
    // classical X25519/P-256 exchange is what Prometheus's Go client offers
    // first anyway.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| format!("{what}: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{what}: {cert_at} and {key_at} do not make a server identity: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Some(Arc::new(config)))
}

fn resolve(dir: &Path, file: &str) -> PathBuf {
    let p = Path::new(file);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// The most verifications at a time (each a core for 50-100 ms).
pub const AUTH_PERMITS: usize = 2;
/// How long a request waits for a verification slot before a 503.
const AUTH_WAIT: Duration = Duration::from_secs(5);
/// The most remembered verifications (then forgotten all at once).
const MAX_REMEMBERED: usize = 1024;

/// Basic authentication against [`WebConfig::users`].
#[derive(Debug)]
pub struct Auth {
    users: BTreeMap<String, String>,
    verified: Mutex<HashSet<[u8; 32]>>,
    permits: tokio::sync::Semaphore,
    /// A hash of nothing, checked for unknown users so that a wrong name
    /// costs what a wrong password does.
    decoy: String,
}

/// Whether a request may be answered.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// Too many verifications under way: try again.
    Busy,
}

impl Auth {
    /// `None` when there are no users (no authentication).
    pub fn new(users: BTreeMap<String, String>) -> Result<Option<Auth>, String> {
        if users.is_empty() {
            return Ok(None);
        }
        // At the cost of the users' hashes (the first one's), so that a
        // wrong name takes as long as a wrong password.
        let cost = users.values().next().and_then(|h| h.get(4..6)).and_then(|c| c.parse().ok()).unwrap_or(10);
        let decoy = bcrypt::hash("tally decoy", cost).map_err(|e| format!("bcrypt: {e}"))?;
        Ok(Some(Auth { users, verified: Mutex::new(HashSet::new()), permits: tokio::sync::Semaphore::new(AUTH_PERMITS), decoy }))
    }

    /// The verdict on an `Authorization` header's value.
    pub async fn check(self: &Arc<Self>, header: Option<&[u8]>) -> Verdict {
        let Some((user, password)) = header.and_then(basic_credentials) else {
            return Verdict::Denied;
        };
        let hash = self.users.get(&user).cloned();
        let key = {
            let mut d = ring::digest::Context::new(&ring::digest::SHA256);
            for part in [user.as_bytes(), password.as_bytes(), hash.as_deref().unwrap_or("").as_bytes()] {
                d.update(&(part.len() as u64).to_le_bytes());
                d.update(part);
            }
            let mut key = [0u8; 32];
            key.copy_from_slice(d.finish().as_ref());
            key
        };
        if hash.is_some() && self.verified.lock().unwrap_or_else(|p| p.into_inner()).contains(&key) {
            return Verdict::Allowed;
        }
        let Ok(Ok(_permit)) = tokio::time::timeout(AUTH_WAIT, self.permits.acquire()).await else {
            return Verdict::Busy;
        };
        let me = self.clone();
        let known = hash.is_some();
        let ok = tokio::task::spawn_blocking(move || {
            let against = hash.as_deref().unwrap_or(me.decoy.as_str());
            bcrypt::verify(password.as_bytes(), against).unwrap_or(false) && known
        })
        .await
        .unwrap_or(false);
        if !ok {
            return Verdict::Denied;
        }
        let mut v = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if v.len() >= MAX_REMEMBERED {
            v.clear();
        }
        v.insert(key);
        Verdict::Allowed
    }
}

/// `Basic base64(user:password)` → (user, password).
fn basic_credentials(header: &[u8]) -> Option<(String, String)> {
    use base64::Engine as _;
    // Far above any real credentials; the header buffer bounds it anyway.
    if header.len() > 4096 {
        return None;
    }
    let text = std::str::from_utf8(header).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(rest.trim()).ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (u, p) = raw.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// `tally exporter hash-password`: a bcrypt hash of one line read from
/// stdin (cost 10, the toolkit's example), for `basic_auth_users`.
pub fn hash_password(cost: u32) -> Result<String, String> {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).map_err(|e| format!("reading the password from stdin: {e}"))?;
    let password = line.strip_suffix('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).unwrap_or(&line);
    if password.is_empty() {
        return Err("no password on stdin (give it as one line)".into());
    }
    if password.len() > 72 {
        return Err("bcrypt uses at most 72 bytes of a password: give a shorter one".into());
    }
    bcrypt::hash(password, cost).map_err(|e| format!("bcrypt: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, Path::new("/nonexistent")).err().unwrap_or_default()
    }

    #[test]
    fn unknown_and_unsupported_keys_are_named() {
        let e = err("tls_server_config: {}\nbasic_auth_user: {}\n");
        assert!(e.contains("unknown key `basic_auth_user`") && e.contains("tls_server_config, basic_auth_users"), "{e}");
        let e = err("rate_limit: {interval: 1s}\n");
        assert!(e.contains("`rate_limit` is an exporter-toolkit key tally exporter does not support"), "{e}");
        let e = err("tls_server_config: {cert_file: a, key_file: b, client_auth_type: RequireAndVerifyClientCert}\n");
        assert!(e.contains("client_auth_type") && e.contains("NoClientCert"), "{e}");
        let e = err("tls_server_config: {cert_file: a, key_file: b, client_ca_file: c}\n");
        assert!(e.contains("`client_ca_file`"), "{e}");
        let e = err("basic_auth_users: {alice: plain}\n");
        assert!(e.contains("basic_auth_users.alice: not a bcrypt hash"), "{e}");
        let e = err("- a\n");
        assert!(e.contains("must be a mapping"), "{e}");
        let e = err("tls_server_config: {cert: x}\n");
        assert!(e.contains("`key_file` (or `key`) is required"), "{e}");
        let e = err("tls_server_config: {cert_file: missing.crt, key_file: b}\n");
        assert!(e.contains("/nonexistent/missing.crt"), "{e}");
    }

    #[test]
    fn an_empty_file_asks_for_nothing() {
        let w = parse("", Path::new(".")).unwrap();
        assert!(w.tls.is_none() && w.users.is_empty());
        let w = parse("basic_auth_users:\n  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze\n", Path::new(".")).unwrap();
        assert_eq!(w.users.len(), 1);
    }

    #[test]
    fn credentials_are_read_from_the_header() {
        assert_eq!(basic_credentials(b"Basic YWxpY2U6czNjcjN0OnM="), Some(("alice".into(), "s3cr3t:s".into())));
        assert_eq!(basic_credentials(b"basic  YWxpY2U6czNjcjN0OnM= "), Some(("alice".into(), "s3cr3t:s".into())));
        assert_eq!(basic_credentials(b"Bearer YWxpY2U6czNjcjN0OnM="), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
        assert_eq!(basic_credentials(b"Basic YWxpY2U="), None);
    }

    #[test]
    fn a_right_password_is_verified_once() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let auth = Arc::new(Auth::new(BTreeMap::from([("alice".to_string(), hash)])).unwrap().unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        use base64::Engine as _;
        let h = |s: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s));
        rt.block_on(async {
            assert_eq!(auth.check(Some(h("alice:wrong").as_bytes())).await, Verdict::Denied);
            assert_eq!(auth.check(Some(h("bob:right").as_bytes())).await, Verdict::Denied);
            assert_eq!(auth.check(None).await, Verdict::Denied);
            assert_eq!(auth.check(Some(h("alice:right").as_bytes())).await, Verdict::Allowed);
            assert_eq!(auth.verified.lock().unwrap().len(), 1);
            assert_eq!(auth.check(Some(h("alice:right").as_bytes())).await, Verdict::Allowed);
        });
    }
}
