//! `tally exporter` under hostile and careless clients: the real binary on
//! an ephemeral loopback port, probed the way the issue measured it. After
//! each probe the process must be alive and a fresh client's GET /metrics
//! answered 200 within a second (the one latency measured).
//!
//! The ledger is seeded by `tally trace import --seed-ledger` against
//! examples/tally.toml (reports private, an account `pretrain`); squeue
//! is kept off the exporter's PATH, so it serves without job figures.

use base64::Engine as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// The target for a fresh scrape while others misbehave.
const FRESH_WITHIN: Duration = Duration::from_secs(1);

/// A scratch directory, removed when the test ends.
struct Dir(PathBuf);

impl std::ops::Deref for Dir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn dir(name: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("tally-exporter-probes-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

fn tally() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tally"));
    c.current_dir(ROOT).env_remove("TALLY_CONFIG");
    c
}

/// A ledger with 8 GPU-hours of `pretrain`, seeded as a new install would.
fn ledger(dir: &Path) -> PathBuf {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let (t1, t2) = (now - 7200, now - 3600);
    let history = dir.join("history.txt");
    std::fs::write(
        &history,
        format!("JobIDRaw|Submit|Start|End|State|Account|User|AllocTRES|Comment\n1|{t1}|{t1}|{t2}|COMPLETED|pretrain|ana|gres/gpu=8|contract=2h\n"),
    )
    .unwrap();
    let state = dir.join("ledger.state");
    let out = tally()
        .args(["trace", "import", "--format", "sacct", "--config", "examples/tally.toml", "--seed-ledger"])
        .arg(&state)
        .arg(&history)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    state
}

/// A running exporter, killed when dropped.
struct Exporter {
    child: Child,
    /// `127.0.0.1:PORT` or the socket's path.
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Exporter {
    /// Start `tally exporter` with `extra` arguments (the listen address
    /// among them) and wait for its first figures.
    fn start(state: &Path, extra: &[&str]) -> Exporter {
        Exporter::start_with(tally(), state, extra)
    }

    /// Under `prlimit --nofile=N:N` (same process: prlimit execs), so
    /// that 1,000 connections are more than it may hold.
    /// (Without prlimit, util-linux's: as [`Exporter::start`].)
    fn start_with_nofile(n: u32, state: &Path, extra: &[&str]) -> Exporter {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let Some(prlimit) = std::env::split_paths(&path).map(|d| d.join("prlimit")).find(|p| p.is_file()) else {
            eprintln!("no prlimit: the exporter holds every connection");
            return Exporter::start(state, extra);
        };
        let mut c = Command::new(prlimit);
        c.current_dir(ROOT).env_remove("TALLY_CONFIG").arg(format!("--nofile={n}:{n}")).arg(env!("CARGO_BIN_EXE_tally"));
        Exporter::start_with(c, state, extra)
    }

    fn start_with(mut command: Command, state: &Path, extra: &[&str]) -> Exporter {
        let mut child = command
            .args(["exporter", "--config", "examples/tally.toml", "--interval", "1s", "--state"])
            .arg(state)
            .args(extra)
            // No squeue: the exporter must serve without job figures.
            .env("PATH", "/nonexistent-tally-probes")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let (pipe, stderr) = (child.stderr.take().unwrap(), stderr.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if let Some(rest) = line.strip_prefix("tally exporter: serving ") {
                        let url = rest.split("/metrics").next().unwrap_or_default();
                        let addr = url.trim_start_matches("http://").trim_start_matches("https://").trim_start_matches("unix:");
                        let _ = tx.send(addr.to_string());
                    }
                    stderr.lock().unwrap().push_str(&(line + "\n"));
                }
            });
        }
        let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the exporter did not say where it serves:\n{}", stderr.lock().unwrap());
        };
        Exporter { child, addr, stderr }
    }

    fn alive(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("the exporter exited ({status}):\n{}", self.stderr.lock().unwrap());
        }
    }

    fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    fn nofile(&self) -> u64 {
        let limits = std::fs::read_to_string(format!("/proc/{}/limits", self.child.id())).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
        line.split_whitespace().nth(3).and_then(|n| n.parse().ok()).unwrap_or(u64::MAX)
    }

    fn threads(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap().count()
    }

    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).unwrap().count()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An answer: status, headers (lower-case names), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Send `request` whole, read until the server closes (or 10 s).
fn exchange<S: Read + Write>(mut s: S, request: &[u8]) -> Answer {
    s.write_all(request).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A reset after the answer (the server closed with our unread
            // bytes in its buffer) still leaves the answer read.
            Err(e) if !raw.is_empty() && e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("reading the answer to {:?}: {e}", String::from_utf8_lossy(&request[..request.len().min(80)])),
        }
    }
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string())).collect();
    Answer { status, headers, body: raw[end + 4..].to_vec() }
}

fn connect(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn get(addr: &str, path: &str, extra: &str) -> Answer {
    exchange(connect(addr), format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n{extra}\r\n").as_bytes())
}

/// A fresh client's GET /metrics: 200 within [`FRESH_WITHIN`].
fn fresh(e: &mut Exporter, after: &str) {
    e.alive();
    let t = Instant::now();
    let a = get(&e.addr, "/metrics", "");
    let took = t.elapsed();
    assert_eq!(a.status, 200, "after {after}: {}", a.text());
    assert!(a.text().ends_with("# EOF\n"), "after {after}: {}", a.text());
    assert!(took < FRESH_WITHIN, "after {after}: a fresh /metrics took {took:?}");
    e.alive();
}

/// Wait for the first refresh (503 until then).
fn first_figures(addr: &str) {
    let t = Instant::now();
    while get(addr, "/metrics", "").status != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "no figures after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// This process holds a thousand sockets: raise its soft descriptor limit.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| c < 4096) {
        let _ = setrlimit(Resource::Nofile, Rlimit { current: lim.maximum.map(|m| m.min(65536)).or(Some(65536)), maximum: lim.maximum });
    }
}

#[test]
fn hostile_clients_never_stop_a_scrape() {
    raise_nofile();
    let d = dir("hostile");
    let state = ledger(&d);
    // 512 descriptors: the exporter holds 448 connections, then closes
    // the oldest for each new one.
    let mut e = Exporter::start_with_nofile(512, &state, &["--listen", "127.0.0.1:0"]);
    first_figures(&e.addr);
    fresh(&mut e, "the start");
    // Without squeue: figures, no job figures, said once.
    assert!(e.stderr.lock().unwrap().contains("squeue"), "{}", e.stderr.lock().unwrap());
    let rss_start = e.rss_kib();

    // A client that sends half a head and stops: closed by the header
    // timeout (checked at the end).
    let mut stalled = connect(&e.addr);
    stalled.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n").unwrap();
    let stalled_at = Instant::now();

    // A body announced too big to allocate, on POST and on GET.
    let a = exchange(connect(&e.addr), b"POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n");
    assert_eq!((a.status, a.header("allow")), (405, Some("GET, HEAD")), "{a:?}");
    let a = exchange(connect(&e.addr), b"GET /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\n");
    assert_eq!((a.status, a.header("connection")), (200, Some("close")), "{a:?}");
    fresh(&mut e, "a Content-Length of 99999999999");

    // Bodies announced and never sent, more than there ever were workers.
    let held: Vec<TcpStream> = (0..16)
        .map(|i| {
            let mut s = connect(&e.addr);
            let method = if i % 2 == 0 { "POST" } else { "GET" };
            s.write_all(format!("{method} /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n").as_bytes()).unwrap();
            s
        })
        .collect();
    fresh(&mut e, "16 bodies of 1 MB announced and never sent");
    drop(held);

    // A head that never ends: closed after the 16 KiB buffer, long
    // before 100 MB.
    let mut endless = connect(&e.addr);
    endless.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\nX-Endless: ").unwrap();
    let chunk = vec![b'a'; 64 * 1024];
    let mut sent = 0usize;
    let closed = loop {
        if sent >= 100 << 20 {
            break false;
        }
        match endless.write(&chunk) {
            Ok(n) => sent += n,
            Err(_) => break true,
        }
    };
    assert!(closed, "the server took 100 MB of one header");
    assert!(sent < 16 << 20, "the server closed an endless header only after {sent} bytes");
    drop(endless);
    fresh(&mut e, "an endless header");

    // Every method but GET and HEAD: 405 naming them, the body unread.
    for (method, target) in
        [("POST", "/metrics"), ("PUT", "/metrics"), ("DELETE", "/"), ("TRACE", "/"), ("CONNECT", "example.com:443"), ("PATCH", "/"), ("OPTIONS", "*")]
    {
        let a = exchange(connect(&e.addr), format!("{method} {target} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello").as_bytes());
        assert_eq!((a.status, a.header("allow")), (405, Some("GET, HEAD")), "{method}: {a:?}");
    }
    let a = exchange(connect(&e.addr), b"HEAD /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    assert!(a.status == 200 && a.body.is_empty(), "{a:?}");
    fresh(&mut e, "every method");

    // Long URLs: one past the head's buffer is refused, one within it is
    // a 404 that quotes 64 characters of it at most.
    let url = format!("/{}", "x".repeat(1 << 20));
    let mut s = connect(&e.addr);
    let _ = s.write_all(format!("GET {url} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    if !raw.is_empty() {
        let a = parse(&raw);
        assert!((400..500).contains(&a.status) && a.body.len() < 4096, "{} {}", a.status, a.body.len());
    }
    for path in [format!("/{}", "x".repeat(8000)), format!("/account/{}", "x".repeat(8000)), format!("/job/{}", "1".repeat(8000))] {
        let a = get(&e.addr, &path, "");
        assert!((403..=404).contains(&a.status), "{}: {a:?}", &path[..20]);
        assert!(a.body.len() < 4096 && !a.text().contains(&"x".repeat(100)) && !a.text().contains(&"1".repeat(100)), "{}", a.text());
    }
    fresh(&mut e, "long URLs");

    // The stalled head was closed by the header timeout (5 s).
    stalled.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let mut raw = Vec::new();
    let r = stalled.read_to_end(&mut raw);
    assert!(r.is_ok() || !raw.is_empty(), "the stalled head was not closed: {r:?}");
    assert!(stalled_at.elapsed() < Duration::from_secs(10), "the stalled head was closed after {:?}", stalled_at.elapsed());
    let _ = stalled.shutdown(Shutdown::Both);

    // A thousand idle connections (some with half a head), more than the
    // exporter may hold, while a fresh client is answered.
    let idle: Vec<TcpStream> = (0..1000)
        .map(|i| {
            let mut s = connect(&e.addr);
            if i % 10 == 0 {
                let _ = s.write_all(b"GET / HTTP/1.1\r\n");
            }
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    fresh(&mut e, "1,000 idle connections");
    assert!(e.open_fds() <= 512 || e.nofile() > 512, "{} descriptors open", e.open_fds());
    let threads = e.threads();
    assert!(threads < 32, "{threads} threads for 1,000 idle connections");
    let rss = e.rss_kib();
    drop(idle);

    fresh(&mut e, "all of it");
    assert!(
        rss < 50 * 1024 && e.rss_kib() < 50 * 1024,
        "RSS {rss} KiB with 1,000 connections, {} KiB after (started at {rss_start} KiB)",
        e.rss_kib()
    );
    // The closed connections are gone.
    let t = Instant::now();
    while e.open_fds() > 100 {
        assert!(t.elapsed() < Duration::from_secs(10), "{} descriptors still open", e.open_fds());
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("exporter RSS: {rss_start} KiB at start, {rss} KiB with 1,000 idle connections, {} KiB after; {threads} threads", e.rss_kib());
}

/// A self-signed certificate for `localhost`, its key, and a hash of
/// `password` by `tally exporter hash-password`.
fn credentials(d: &Path, password: &str) -> (rcgen::CertifiedKey, String) {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(d.join("server.crt"), ck.cert.pem()).unwrap();
    std::fs::write(d.join("server.key"), ck.key_pair.serialize_pem()).unwrap();
    let mut child = tally().args(["exporter", "hash-password", "--cost", "6"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(format!("{password}\n").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let hash = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(hash.starts_with("$2") && hash.len() == 60, "{hash}");
    (ck, hash)
}

fn tls_client(cert: &rcgen::CertifiedKey) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let c = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(c)
}

fn tls_get(addr: &str, client: &Arc<rustls::ClientConfig>, path: &str, auth: Option<&str>) -> Answer {
    let conn = rustls::ClientConnection::new(client.clone(), "localhost".try_into().unwrap()).unwrap();
    let auth = auth.map(|a| format!("Authorization: Basic {}\r\n", base64::engine::general_purpose::STANDARD.encode(a))).unwrap_or_default();
    let s = rustls::StreamOwned::new(conn, connect(addr));
    exchange(s, format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{auth}\r\n").as_bytes())
}

#[test]
fn show_accounts_needs_a_private_listener() {
    let d = dir("refuse");
    let state = ledger(&d);
    let run = |args: &[&str]| {
        let out = tally()
            .args(["exporter", "--config", "examples/tally.toml", "--state"])
            .arg(&state)
            .args(args)
            .env("PATH", "/nonexistent-tally-probes")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&["--listen", "127.0.0.1:0", "--show-accounts"]);
    assert!(err.contains("--show-accounts") && err.contains("basic_auth_users") && err.contains("unix:PATH"), "{err}");
    std::fs::write(d.join("web.yml"), "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\nbasic_auth_user: {}\n").unwrap();
    let web = d.join("web.yml");
    let err = run(&["--listen", "127.0.0.1:0", "--web.config.file", web.to_str().unwrap()]);
    assert!(err.contains("unknown key `basic_auth_user`") && err.contains("allowed: tls_server_config, basic_auth_users"), "{err}");
    std::fs::write(&web, "basic_auth_users: {}\n").unwrap();
    let err = run(&["--listen", "127.0.0.1:0", "--web-config", web.to_str().unwrap(), "--show-accounts"]);
    assert!(err.contains("none in the file given"), "{err}");
}

#[test]
fn basic_auth_over_tls_and_a_unix_socket() {
    let d = dir("auth");
    let state = ledger(&d);
    let (cert, hash) = credentials(&d, "s3cret");
    // Relative file names: from the web config's directory.
    std::fs::write(
        d.join("web.yml"),
        format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prom: {hash}\n"),
    )
    .unwrap();
    let web = d.join("web.yml");
    let mut e = Exporter::start(&state, &["--listen", "127.0.0.1:0", "--web-config", web.to_str().unwrap(), "--show-accounts"]);
    let client = tls_client(&cert);
    let t = Instant::now();
    while tls_get(&e.addr, &client, "/metrics", Some("prom:s3cret")).status != 200 {
        assert!(t.elapsed() < Duration::from_secs(30), "no figures after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let a = tls_get(&e.addr, &client, "/metrics", Some("prom:s3cret"));
    assert!(a.text().contains("account=\"pretrain\""), "{}", a.text());
    for creds in [None, Some("prom:wrong"), Some("root:s3cret"), Some("prom")] {
        let a = tls_get(&e.addr, &client, "/metrics", creds);
        assert_eq!((a.status, a.header("www-authenticate")), (401, Some("Basic realm=\"tally\"")), "{creds:?}");
        assert!(!a.text().contains("pretrain"), "{}", a.text());
    }
    let a = tls_get(&e.addr, &client, "/account/pretrain", Some("prom:s3cret"));
    assert_eq!(a.status, 200, "{}", a.text());
    // Plain HTTP on the TLS port: no answer.
    let mut s = connect(&e.addr);
    let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    assert!(!String::from_utf8_lossy(&raw).contains("pretrain"));

    // A flood of wrong passwords while the scrape's (remembered) ones are
    // answered at once.
    let flood: Vec<_> = (0..24)
        .map(|i| {
            let (addr, client) = (e.addr.clone(), client.clone());
            std::thread::spawn(move || tls_get(&addr, &client, "/metrics", Some(&format!("prom:wrong{i}"))).status)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let a = tls_get(&e.addr, &client, "/metrics", Some("prom:s3cret"));
    let took = t.elapsed();
    assert_eq!(a.status, 200);
    assert!(took < FRESH_WITHIN, "a scrape during a flood of wrong passwords took {took:?}");
    for f in flood {
        assert!([401, 503].contains(&f.join().unwrap()));
    }
    e.alive();
    drop(e);

    // A Unix socket: owner and group only, accounts shown without a
    // password.
    let sock = d.join("exporter.sock");
    let mut u = Exporter::start(&state, &["--listen", &format!("unix:{}", sock.display()), "--show-accounts"]);
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o660);
    }
    let t = Instant::now();
    let body = loop {
        let s = std::os::unix::net::UnixStream::connect(&u.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let a = exchange(s, b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        if a.status == 200 {
            break a.text();
        }
        assert!(t.elapsed() < Duration::from_secs(30), "no figures after 30 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(body.contains("account=\"pretrain\""), "{body}");
    // A second exporter on the same socket is refused, the first unharmed.
    let out = tally()
        .args(["exporter", "--config", "examples/tally.toml", "--show-accounts", "--listen", &format!("unix:{}", sock.display()), "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("another process serves on it"), "{out:?}");
    u.alive();
}
