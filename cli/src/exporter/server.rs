//! The exporter's HTTP server: hyper's HTTP/1 connection state machine on
//! a small tokio runtime. What a client can make it hold is bounded:
//!
//! | what | bound |
//! |---|---|
//! | a request's head (line and headers) | [`MAX_HEAD_BYTES`] buffered, sent within [`HEAD_TIMEOUT`], else 431 / closed |
//! | a kept-alive connection between requests | [`HEAD_TIMEOUT`] too (hyper's header timer runs from the end of the last answer) |
//! | a request body | never read: GET and HEAD only, others 405 before any body; a request that announces one is answered and its connection closed |
//! | a TLS handshake | [`HEAD_TIMEOUT`] |
//! | a connection silent both ways (a client that does not read its answer) | [`IDLE_TIMEOUT`] |
//! | any connection | [`MAX_LIFETIME`] |
//! | connections at once | [`max_connections`]: one more closes the oldest |
//! | `/job/ID` (explain runs the simulator forward) | [`JOB_PERMITS`] at a time, off the serving threads |
//! | a name echoed in a page | [`tally_allocator::text::clip`]'s 64 characters |
//!
//! A fresh client is answered at once however many others hold
//! connections: the oldest gives way to it.

use super::web::{Auth, Verdict};
use super::{answer, Shared};
use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

/// The most bytes of a request's line and headers (hyper's read buffer).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The longest a client may take to send a request's head (counted from
/// the connection, or from the last answer on a kept-alive one), or to
/// finish a TLS handshake.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection may stay silent (no byte either way) while
/// an answer is prepared or written.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest any connection lives (Prometheus opens another).
pub const MAX_LIFETIME: Duration = Duration::from_secs(300);
/// The most `/job/ID` explanations at a time.
pub const JOB_PERMITS: usize = 2;
/// How long a `/job/ID` request waits for its turn before a 503.
const JOB_WAIT: Duration = Duration::from_secs(20);
/// The most connections at once, whatever the descriptor limit allows
/// (one that has sent a byte holds some 20-40 KiB: hyper's buffers, TLS).
const MAX_CONNECTIONS: u64 = 1024;

/// Raise the soft descriptor limit to the hard one (each connection is a
/// descriptor) and say how many connections to hold: the limit less some
/// for the files a refresh reads and squeue's pipes, at most
/// [`MAX_CONNECTIONS`].
pub fn max_connections() -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    // (An unlimited hard limit: Linux caps descriptors at nr_open anyway.)
    let want = lim.maximum.unwrap_or(1 << 20);
    if lim.current.is_some_and(|c| c < want) {
        if let Err(e) = setrlimit(Resource::Nofile, Rlimit { current: Some(want), maximum: lim.maximum }) {
            eprintln!("tally exporter: cannot raise the open-file limit to {want}: {e}");
        }
    }
    let soft = getrlimit(Resource::Nofile).current.unwrap_or(MAX_CONNECTIONS * 2);
    soft.saturating_sub(64).clamp(16, MAX_CONNECTIONS) as usize
}

/// Where the exporter listens.
#[derive(Debug)]
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, PathBuf),
}

impl Listener {
    /// `HOST:PORT` or `unix:PATH`. A Unix socket is created mode 0660 (umask
    /// 0117): the exporter's user and the socket's group (the directory's
    /// when it is setgid) connect; a socket file at PATH that nothing
    /// serves on is replaced.
    pub fn bind(listen: &str) -> Result<Listener, String> {
        if let Some(path) = listen.strip_prefix("unix:") {
            let path = PathBuf::from(path);
            let bad = |e: std::io::Error| format!("--listen unix:{}: cannot listen: {e}", path.display());
            if let Ok(meta) = std::fs::symlink_metadata(&path) {
                use std::os::unix::fs::FileTypeExt;
                if !meta.file_type().is_socket() {
                    return Err(format!("--listen unix:{}: exists and is not a socket (remove it or pick another path)", path.display()));
                }
                if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                    return Err(format!("--listen unix:{}: another process serves on it", path.display()));
                }
                std::fs::remove_file(&path).map_err(bad)?;
            }
            use rustix::fs::Mode;
            let old = rustix::process::umask(Mode::from_raw_mode(0o117));
            let l = std::os::unix::net::UnixListener::bind(&path);
            rustix::process::umask(old);
            let l = l.map_err(bad)?;
            l.set_nonblocking(true).map_err(bad)?;
            return Ok(Listener::Unix(l, path));
        }
        let l = std::net::TcpListener::bind(listen).map_err(|e| {
            format!("--listen {}: cannot listen: {e} (HOST:PORT, e.g. 127.0.0.1:9817, or unix:PATH)", tally_allocator::text::clip(listen))
        })?;
        l.set_nonblocking(true).map_err(|e| format!("--listen {listen}: {e}"))?;
        Ok(Listener::Tcp(l))
    }

    /// What to print: `127.0.0.1:9817` (the port bound) or `unix:PATH`.
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l.local_addr().map(|a| a.to_string()).unwrap_or_else(|_| "?".into()),
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }
}

/// What every connection shares.
struct Ctx {
    shared: Arc<Mutex<Shared>>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    auth: Option<Arc<Auth>>,
    jobs: Arc<Semaphore>,
    conns: Conns,
}

/// The open connections, oldest first, each with the bell that closes it.
struct Conns {
    max: usize,
    open: Mutex<BTreeMap<u64, Arc<Notify>>>,
}

impl Conns {
    /// Register connection `id`, closing the oldest when full.
    fn admit(&self, id: u64) -> Arc<Notify> {
        let bell = Arc::new(Notify::new());
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        while open.len() >= self.max {
            match open.pop_first() {
                Some((_, oldest)) => oldest.notify_one(),
                None => break,
            }
        }
        open.insert(id, bell.clone());
        bell
    }

    fn leave(&self, id: u64) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }
}

/// Serve until the process ends.
pub fn serve(
    listener: Listener,
    shared: Arc<Mutex<Shared>>,
    tls: Option<Arc<rustls::ServerConfig>>,
    auth: Option<Auth>,
    max: usize,
) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(8)
        .thread_name("exporter")
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the server's runtime: {e}"))?;
    let ctx = Arc::new(Ctx {
        shared,
        tls: tls.map(tokio_rustls::TlsAcceptor::from),
        auth: auth.map(Arc::new),
        jobs: Arc::new(Semaphore::new(JOB_PERMITS)),
        conns: Conns { max, open: Mutex::new(BTreeMap::new()) },
    });
    rt.block_on(async move {
        let mut next = 0u64;
        match listener {
            Listener::Tcp(l) => {
                let l = tokio::net::TcpListener::from_std(l).map_err(|e| format!("cannot serve: {e}"))?;
                loop {
                    match l.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            next += 1;
                            tokio::spawn(connection(s, next, ctx.clone()));
                        }
                        Err(e) => accept_failed(e).await,
                    }
                }
            }
            Listener::Unix(l, _) => {
                let l = tokio::net::UnixListener::from_std(l).map_err(|e| format!("cannot serve: {e}"))?;
                loop {
                    match l.accept().await {
                        Ok((s, _)) => {
                            next += 1;
                            tokio::spawn(connection(s, next, ctx.clone()));
                        }
                        Err(e) => accept_failed(e).await,
                    }
                }
            }
        }
    })
}

/// An accept that failed (out of descriptors, a connection reset before
/// it was taken): wait a little rather than spin.
async fn accept_failed(e: std::io::Error) {
    static SAID: AtomicU64 = AtomicU64::new(0);
    if SAID.fetch_add(1, Ordering::Relaxed) % 1000 == 0 {
        eprintln!("tally exporter: accepting a connection: {e}");
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// A stream that says when its first byte has arrived.
trait FirstByte {
    fn first_byte(&self) -> impl std::future::Future<Output = std::io::Result<()>> + Send;
}

impl FirstByte for tokio::net::TcpStream {
    /// A byte to read, or the end (readiness alone is only a hint: a
    /// fresh socket reports it at once).
    async fn first_byte(&self) -> std::io::Result<()> {
        self.peek(&mut [0u8; 1]).await.map(drop)
    }
}

impl FirstByte for tokio::net::UnixStream {
    /// (Readiness, a hint: whoever connects was let in by the socket's
    /// mode.)
    async fn first_byte(&self) -> std::io::Result<()> {
        self.readable().await
    }
}

/// One connection: nothing is allocated for it (hyper's buffers, TLS)
/// until its first byte arrives, within [`HEAD_TIMEOUT`]; then TLS first
/// when configured. A silent TCP connection costs its descriptor and
/// some 1.5 KiB.
async fn connection<S: FirstByte + AsyncRead + AsyncWrite + Unpin + Send + 'static>(stream: S, id: u64, ctx: Arc<Ctx>) {
    let bell = ctx.conns.admit(id);
    let started = Instant::now();
    let first = tokio::select! {
        r = tokio::time::timeout(HEAD_TIMEOUT, stream.first_byte()) => matches!(r, Ok(Ok(()))),
        _ = bell.notified() => false,
    };
    if first {
        // (Boxed: a silent connection's task stays small.)
        Box::pin(answer_connection(stream, &ctx, &bell, started)).await;
    }
    ctx.conns.leave(id);
}

/// A connection that has sent its first byte.
async fn answer_connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(stream: S, ctx: &Arc<Ctx>, bell: &Notify, started: Instant) {
    let activity = Arc::new(AtomicU64::new(0));
    let stream = Tracked { inner: stream, started, activity: activity.clone() };
    match ctx.tls.clone() {
        Some(acceptor) => {
            let hs = tokio::select! {
                hs = tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream)) => hs,
                _ = bell.notified() => Ok(Err(std::io::ErrorKind::ConnectionAborted.into())),
            };
            if let Ok(Ok(tls)) = hs {
                http(tls, ctx, bell, started, &activity).await;
            }
        }
        None => http(stream, ctx, bell, started, &activity).await,
    }
}

/// HTTP/1 on `io` until the client goes, falls silent, overstays, or a
/// newer connection needs the place.
async fn http<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: S, ctx: &Arc<Ctx>, bell: &Notify, started: Instant, activity: &AtomicU64) {
    let svc_ctx = ctx.clone();
    let svc = hyper::service::service_fn(move |req| {
        let ctx = svc_ctx.clone();
        async move { Ok::<_, Infallible>(respond(req, &ctx).await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_buf_size(MAX_HEAD_BYTES).keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let end = tokio::time::sleep_until(started + MAX_LIFETIME);
    tokio::pin!(end);
    loop {
        let last = started + Duration::from_millis(activity.load(Ordering::Relaxed));
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = &mut end => return,
            _ = bell.notified() => return,
            _ = tokio::time::sleep_until(last + IDLE_TIMEOUT) => {
                if Duration::from_millis(activity.load(Ordering::Relaxed)) <= last.duration_since(started) {
                    return;
                }
            }
        }
    }
}

/// A stream that notes when a byte last went either way.
struct Tracked<S> {
    inner: S,
    started: Instant,
    activity: Arc<AtomicU64>,
}

impl<S> Tracked<S> {
    fn touch(&self) {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.store(ms, Ordering::Relaxed);
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

fn reply(status: u16, ctype: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

/// Whether a request announces a body (which is never read).
fn has_body<B>(req: &Request<B>) -> bool {
    let h = req.headers();
    h.contains_key(TRANSFER_ENCODING) || h.get(CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0")
}

async fn respond(req: Request<hyper::body::Incoming>, ctx: &Arc<Ctx>) -> Response<Full<Bytes>> {
    let body = has_body(&req);
    let mut r = route(&req, ctx).await;
    if body || r.status() == StatusCode::METHOD_NOT_ALLOWED {
        // The body stays unread: the connection cannot carry another
        // request after it.
        r.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

async fn route(req: &Request<hyper::body::Incoming>, ctx: &Arc<Ctx>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = reply(405, TEXT, "tally exporter answers GET and HEAD only\n");
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if let Some(auth) = &ctx.auth {
        match auth.check(req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes)).await {
            Verdict::Allowed => {}
            Verdict::Denied => {
                let mut r = reply(401, TEXT, "unauthorized: this exporter asks for a user name and password (basic authentication)\n");
                r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"tally\""));
                return r;
            }
            Verdict::Busy => {
                let mut r = reply(503, TEXT, "busy checking passwords: try again\n");
                r.headers_mut().insert("retry-after", HeaderValue::from_static("5"));
                return r;
            }
        }
    }
    let path = req.uri().path().to_string();
    if !path.starts_with("/job/") {
        let (status, ctype, body) = answer(&path, &ctx.shared);
        return reply(status, ctype, body);
    }
    // Explain runs the simulator forward: off the serving threads, a few
    // at a time, so that it never holds up a scrape.
    let Ok(Ok(permit)) = tokio::time::timeout(JOB_WAIT, ctx.jobs.clone().acquire_owned()).await else {
        return reply(503, TEXT, "busy explaining other jobs: try again\n");
    };
    let shared = ctx.shared.clone();
    let done = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        answer(&path, &shared)
    })
    .await;
    match done {
        Ok((status, ctype, body)) => reply(status, ctype, body),
        Err(e) => reply(500, TEXT, format!("explaining the job failed: {e}\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_house_closes_its_oldest() {
        let conns = Conns { max: 2, open: Mutex::new(BTreeMap::new()) };
        let (a, b) = (conns.admit(1), conns.admit(2));
        let c = conns.admit(3);
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let rang = |bell: &Arc<Notify>| rt.block_on(async { tokio::time::timeout(Duration::from_millis(10), bell.notified()).await.is_ok() });
        assert!(rang(&a) && !rang(&b) && !rang(&c));
        conns.leave(2);
        let _d = conns.admit(4);
        assert!(!rang(&b) && !rang(&c));
        assert_eq!(conns.open.lock().unwrap().keys().copied().collect::<Vec<_>>(), vec![3, 4]);
    }
}
