//! `tally exporter`: Tally's figures where sites look. A small daemon,
//! never inside slurmctld: every `--interval` it reads what `tally share`
//! reads (the config in force, the ledger priority/tally saves, the notes
//! preempt/tally keeps beside it) and `squeue --json`, and serves
//!
//! - `/metrics`: OpenMetrics for Prometheus ([`metrics`]);
//! - `/`, `/account/NAME`, `/job/ID`: a read-only page for researchers
//!   ([`page`]).
//!
//! A refresh that cannot read the config or the ledger (missing, locked,
//! damaged) keeps the last good figures and says so (`tally_ledger_stale`
//! 1, a note on the page). What it exposes follows `[reports] private`:
//! with it, no series and no page names an account unless the exporter
//! was started with `--show-accounts`, which needs a listener that is
//! private: basic authentication (`--web-config`) or a Unix socket
//! (docs/reports.md, "The exporter"). Loopback is not private: every
//! user of a shared login node reaches 127.0.0.1.
//!
//! The server ([`server`]) bounds what any client can make it hold; the
//! web config ([`web`]) is the Prometheus exporter-toolkit's.

mod metrics;
mod page;
mod reading;
mod server;
mod web;

use crate::live;
use crate::slurm_json::{self, QueueJob};
use reading::{Counters, Reading};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tally_allocator::{parse_duration, Snapshot};
use tally_config::Config;
use tally_engine::view::Names;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ExporterArgs {
    #[command(subcommand)]
    pub action: Option<ExporterAction>,
    /// Address to serve on: HOST:PORT (default: loopback only, which every
    /// local user reaches), or unix:PATH, a Unix socket created mode 0660
    /// (its owner and group, or its directory's permissions, decide who reads).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9817")]
    pub listen: String,
    /// TLS and basic authentication, in the Prometheus exporter-toolkit's
    /// web config format (YAML: tls_server_config, basic_auth_users).
    #[arg(long, value_name = "FILE", alias = "web.config.file")]
    pub web_config: Option<PathBuf>,
    /// Config file (default: $TALLY_CONFIG, else the config in force,
    /// StateSaveLocation/tally/tally.toml.active, else /etc/slurm/tally.toml).
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Ledger file, a regular file of at most 256 MiB (default:
    /// StateSaveLocation/tally/ledger.state from slurm.conf).
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// How often to read the ledger and squeue, 1s to 1h.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = interval)]
    pub interval: u64,
    /// Serve per-account series and pages even with `[reports] private =
    /// true`. Needs basic authentication (--web-config) or a unix:PATH
    /// listener: loopback is not private on a shared node.
    #[arg(long)]
    pub show_accounts: bool,
    /// Print the metrics once and exit (no server).
    #[arg(long)]
    pub once: bool,
}

#[derive(clap::Subcommand, Debug)]
pub enum ExporterAction {
    /// Print a bcrypt hash of the password read from stdin (one line), for
    /// basic_auth_users in the web config.
    HashPassword {
        /// bcrypt's cost (4 to 31; each step doubles the work).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(4..=31))]
        cost: u32,
    },
}

fn interval(s: &str) -> Result<u64, String> {
    let v = parse_duration(s).map_err(|e| format!("{e} (1s to 1h, e.g. 30s)"))?;
    if !(1..=3600).contains(&v) {
        return Err(format!("{s}: the interval is 1s to 1h"));
    }
    Ok(v)
}

/// Where the files are.
#[derive(Debug, Clone)]
struct Sources {
    config: Option<PathBuf>,
    state: PathBuf,
    show_accounts: bool,
}

impl Sources {
    /// The config: the one given, else the config in force (the active
    /// copy priority/tally keeps beside the ledger), else the default.
    fn config_path(&self) -> PathBuf {
        live::config_in_force(self.config.clone(), &self.state)
    }

    fn notes_path(&self) -> PathBuf {
        self.state.with_file_name(tally_engine::preempted::FILE_NAME)
    }
}

/// What the server shows: the last good reading and what it came from.
#[derive(Debug, Default)]
struct Shared {
    reading: Option<Arc<Reading>>,
    /// For `/job/ID`: the inputs of the last good reading (a lock of its
    /// own: the ledger's sums cache is not shared between threads, and an
    /// explanation never holds up a scrape).
    inputs: Option<Arc<Mutex<Inputs>>>,
    counters: Counters,
    /// Why the last refresh failed (`None`: it did not).
    stale: Option<String>,
    /// What squeue said when it last failed (said once, until it answers).
    squeue_said: Option<String>,
    /// `/metrics` as last encoded, and the second it was: every scrape
    /// within that second shares one buffer (however many clients are
    /// slow to read it), and a refresh forgets it.
    encoded: Option<(u64, bytes::Bytes)>,
}

/// Say `problem` on stderr unless it was the last one said; `None`: the
/// problem is gone (said once too).
fn say(last: &mut Option<String>, problem: Option<String>, what: &str) {
    if *last == problem {
        return;
    }
    match &problem {
        Some(p) => eprintln!("tally exporter: {p}"),
        None => eprintln!("tally exporter: {what} again"),
    }
    *last = problem;
}

/// What `/job/ID` explains from.
#[derive(Debug)]
struct Inputs {
    config: Arc<Config>,
    snap: Snapshot,
    queue: Vec<QueueJob>,
}

/// The ledger, read as the plugin wrote it; a missing file is an error
/// here (the exporter keeps its last figures), unlike in `tally share`.
fn read_ledger(path: &std::path::Path, config: &Config) -> Result<Snapshot, String> {
    let text = tally_config::input::read_text(path, "a ledger", live::MAX_LEDGER_BYTES).map_err(|e| format!("{}: {e}", path.display()))?;
    let parsed = Snapshot::parse(&text, config.bucket_s, config.window_s).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(parsed.snapshot)
}

/// One refresh: read, compute, count.
fn refresh(src: &Sources, shared: &Mutex<Shared>, started_at: u64) {
    let now = live::now();
    let read = (|| -> Result<_, String> {
        let config = Config::load(&src.config_path()).map_err(|e| e.to_string())?;
        let snap = read_ledger(&src.state, &config)?;
        Ok((config, snap))
    })();
    let (config, snap) = match read {
        Ok(x) => x,
        Err(e) => return failed(shared, e),
    };
    let queue = crate::explain::read_queue(None, &mut Names::new());
    let squeue_problem = queue.as_ref().err().map(|e| format!("{e}: no job figures until squeue answers"));
    let queue = queue.ok();
    let private = config.reports.private && !src.show_accounts;
    let reading = match Reading::compute(&config, &snap, queue.as_deref(), now, private) {
        Ok(r) => r,
        Err(e) => return failed(shared, e),
    };
    let notes = tally_engine::preempted::load(&src.notes_path());
    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
    let s = &mut *s;
    say(&mut s.squeue_said, squeue_problem, "squeue answers");
    if s.stale.is_some() {
        eprintln!("tally exporter: the config and the ledger read again: serving fresh figures");
    }
    match notes {
        Ok(n) => s.counters.observe_notes(&n),
        Err(e) => eprintln!("tally exporter: {e}"),
    }
    if let Some(jobs) = &reading.jobs {
        s.counters.observe_starts(jobs, started_at);
    }
    s.reading = Some(Arc::new(reading));
    s.inputs = queue.map(|queue| Arc::new(Mutex::new(Inputs { config: Arc::new(config), snap, queue })));
    s.stale = None;
    s.encoded = None;
}

/// A refresh that could not read: count it, keep the last figures, say why
/// (once, until it changes).
fn failed(shared: &Mutex<Shared>, problem: String) {
    let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
    s.counters.read_errors += 1;
    if s.stale.as_deref() != Some(problem.as_str()) {
        eprintln!("tally exporter: {problem}: serving the last good figures");
    }
    s.stale = Some(problem);
    s.encoded = None;
}

pub fn run_cmd(args: ExporterArgs) -> Result<(), String> {
    if let Some(ExporterAction::HashPassword { cost }) = args.action {
        println!("{}", web::hash_password(cost)?);
        return Ok(());
    }
    let state = live::ledger_path(args.state.clone())?;
    let src = Sources { config: args.config.clone(), state, show_accounts: args.show_accounts };
    let shared = Arc::new(Mutex::new(Shared::default()));
    let started_at = live::now();
    if args.once {
        refresh(&src, &shared, 0);
        let s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let Some(r) = &s.reading else {
            return Err(s.stale.clone().unwrap_or_else(|| "nothing read".into()));
        };
        print!("{}", metrics::encode(&metrics::Exposition { reading: r, counters: &s.counters, stale: false, now: live::now() }));
        return Ok(());
    }
    let web = match &args.web_config {
        Some(path) => web::load(path)?,
        None => web::WebConfig::default(),
    };
    let unix = args.listen.starts_with("unix:");
    if args.show_accounts && web.users.is_empty() && !unix {
        return Err(format!(
            "--show-accounts serves every account's figures: it needs basic authentication (--web-config with basic_auth_users{}) \
             or a Unix socket (--listen unix:PATH, mode 0660); --listen {} reaches every local user",
            if args.web_config.is_some() { ", none in the file given" } else { "" },
            tally_allocator::text::clip(&args.listen)
        ));
    }
    let max = server::max_connections();
    let listener = server::Listener::bind(&args.listen)?;
    let addr = listener.describe();
    let scheme = if web.tls.is_some() { "https" } else { "http" };
    if !web.users.is_empty() && web.tls.is_none() && !unix && !is_loopback(&addr) {
        eprintln!("tally exporter: basic authentication without tls_server_config: passwords cross the network in clear");
    }
    let auth = web::Auth::new(web.users)?;
    let base = match listener {
        server::Listener::Unix(..) => addr.clone(),
        server::Listener::Tcp(_) => format!("{scheme}://{addr}"),
    };
    eprintln!(
        "tally exporter: serving {base}/metrics and the page {base}/ (ledger {}, config {}, every {}{})",
        src.state.display(),
        src.config_path().display(),
        tally_allocator::format_duration(args.interval),
        if auth.is_some() { ", basic authentication" } else { "" }
    );
    {
        let (src, shared) = (src.clone(), shared.clone());
        let period = Duration::from_secs(args.interval);
        std::thread::Builder::new()
            .name("refresh".into())
            .spawn(move || loop {
                refresh(&src, &shared, started_at);
                std::thread::sleep(period);
            })
            .map_err(|e| format!("cannot start the refresh thread: {e}"))?;
    }
    server::serve(listener, shared, web.tls, auth, max)
}

/// Whether a bound `HOST:PORT` is on loopback.
fn is_loopback(addr: &str) -> bool {
    addr.parse::<std::net::SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
}

const HTML: &str = "text/html; charset=utf-8";

/// The answer to a GET of `path` (no query): status, content type, body.
/// No page quotes more than [`tally_allocator::text::clip`] of the path.
fn answer(path: &str, shared: &Mutex<Shared>) -> (u16, &'static str, bytes::Bytes) {
    if path == "/metrics" {
        let mut s = shared.lock().unwrap_or_else(|p| p.into_inner());
        let now = live::now();
        if let Some((at, body)) = &s.encoded {
            if *at == now {
                return (200, metrics::CONTENT_TYPE, body.clone());
            }
        }
        return match &s.reading {
            Some(r) => {
                let e = metrics::Exposition { reading: r, counters: &s.counters, stale: s.stale.is_some(), now };
                let body = bytes::Bytes::from(metrics::encode(&e));
                s.encoded = Some((now, body.clone()));
                (200, metrics::CONTENT_TYPE, body)
            }
            None => {
                (503, "text/plain; charset=utf-8", format!("no figures yet: {}\n", s.stale.as_deref().unwrap_or("the first refresh runs")).into())
            }
        };
    }
    let (status, ctype, body) = page_answer(path, shared);
    (status, ctype, body.into())
}

/// The answer to a GET of a page (not `/metrics`).
fn page_answer(path: &str, shared: &Mutex<Shared>) -> (u16, &'static str, String) {
    let (reading, inputs, stale) = {
        let s = shared.lock().unwrap_or_else(|p| p.into_inner());
        (s.reading.clone(), s.inputs.clone(), s.stale.clone())
    };
    let Some(r) = reading else {
        return (503, HTML, page::message("Tally: no figures yet", stale.as_deref().unwrap_or("the first refresh runs")));
    };
    let stale = stale.as_deref();
    if path == "/" {
        return (200, HTML, page::index(&r, stale));
    }
    let private = || {
        page::message(
            "Tally: private",
            "[reports] private = true: this exporter shows no account or job. Use `tally share` and `tally explain JOBID` for your own.",
        )
    };
    if let Some(name) = path.strip_prefix("/account/") {
        if r.private {
            return (403, HTML, private());
        }
        let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy().into_owned();
        return match page::account(&r, &name, stale) {
            Some(p) => (200, HTML, p),
            None => (
                404,
                HTML,
                page::message("Tally: no such account", &format!("No account `{}` in the config in force.", tally_allocator::text::clip(&name))),
            ),
        };
    }
    if let Some(id) = path.strip_prefix("/job/") {
        if r.private {
            return (403, HTML, private());
        }
        if !is_job_id(id) {
            let what = format!("`{}` is not a job id: a number (`17`) or an array task (`24_2`).", tally_allocator::text::clip(id));
            return (404, HTML, page::message("Tally: not a job", &what));
        }
        let Some(inputs) = inputs else {
            return (503, HTML, page::message("Tally: no queue", "squeue did not answer at the last refresh."));
        };
        let text = crate::explain::nodes_output(None).and_then(|n| slurm_json::parse_sinfo(&n)).and_then(|nodes| {
            let i = inputs.lock().unwrap_or_else(|p| p.into_inner());
            crate::explain::explain(&i.config, &i.snap, &i.queue, &nodes, id, live::now()).map(|rep| rep.text())
        });
        return match text {
            Ok(t) => (200, HTML, page::job(id, &t)),
            Err(e) => (404, HTML, page::message(&format!("Tally: job {id}"), &e)),
        };
    }
    (404, HTML, page::message("Tally: not found", "This exporter serves /, /account/NAME, /job/ID and /metrics."))
}

/// `17` or `24_2`: digits, at most one `_` between them, 24 bytes at most
/// (checked before explain runs sinfo).
fn is_job_id(id: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    id.len() <= 24 && id.split_once('_').map_or(digits(id), |(a, t)| digits(a) && digits(t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_checked_before_explain() {
        assert!(is_job_id("17") && is_job_id("24_2"));
        for bad in ["", "_", "1_", "_2", "1_2_3", "a", "17%20", &"9".repeat(25)] {
            assert!(!is_job_id(bad), "{bad}");
        }
    }

    #[test]
    fn no_page_echoes_a_long_path() {
        let shared = Mutex::new(Shared::default());
        let long = format!("/{}", "x".repeat(1 << 20));
        let (code, _, body) = answer(&long, &shared);
        assert_eq!(code, 503);
        assert!(body.len() < 4096, "{}", body.len());
    }
}
