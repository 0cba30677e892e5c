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
//! was started with `--show-accounts` (docs/reports.md, "The exporter").

mod metrics;
mod page;
mod reading;

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
pub struct ExporterArgs {
    /// Address to serve on, HOST:PORT (default: loopback only).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9817")]
    pub listen: String,
    /// Config file (default: the config in force, StateSaveLocation/tally/
    /// tally.toml.active, else $TALLY_CONFIG or /etc/slurm/tally.toml).
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
    /// true` (for an address only admins can reach).
    #[arg(long)]
    pub show_accounts: bool,
    /// Print the metrics once and exit (no server).
    #[arg(long)]
    pub once: bool,
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
        if let Some(c) = &self.config {
            return c.clone();
        }
        let active = self.state.with_file_name(tally_engine::follower::ACTIVE_NAME);
        if active.exists() {
            active
        } else {
            tally_config::default_path()
        }
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
}

pub fn run_cmd(args: ExporterArgs) -> Result<(), String> {
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
    let server = tiny_http::Server::http(&args.listen).map_err(|e| format!("--listen {}: cannot listen: {e}", args.listen))?;
    let server = Arc::new(server);
    eprintln!(
        "tally exporter: serving http://{}/metrics and the page http://{}/ (ledger {}, config {}, every {})",
        args.listen,
        args.listen,
        src.state.display(),
        src.config_path().display(),
        tally_allocator::format_duration(args.interval)
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
    // A few threads answer, so a slow `/job/ID` (explain runs the
    // simulator forward) never holds up a scrape.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (server, shared) = (server.clone(), shared.clone());
            std::thread::spawn(move || {
                for req in server.incoming_requests() {
                    let (status, ctype, body) = answer(req.url(), &shared);
                    let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("a valid header");
                    let _ = req.respond(tiny_http::Response::from_string(body).with_status_code(status).with_header(header));
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    Ok(())
}

const HTML: &str = "text/html; charset=utf-8";

/// The answer to a GET of `url`: status, content type, body.
fn answer(url: &str, shared: &Mutex<Shared>) -> (u16, &'static str, String) {
    let path = url.split('?').next().unwrap_or("/");
    let (reading, inputs, stale) = {
        let s = shared.lock().unwrap_or_else(|p| p.into_inner());
        if path == "/metrics" {
            return match &s.reading {
                Some(r) => {
                    let e = metrics::Exposition { reading: r, counters: &s.counters, stale: s.stale.is_some(), now: live::now() };
                    (200, metrics::CONTENT_TYPE, metrics::encode(&e))
                }
                None => (503, "text/plain; charset=utf-8", format!("no figures yet: {}\n", s.stale.as_deref().unwrap_or("the first refresh runs"))),
            };
        }
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
            None => (404, HTML, page::message("Tally: no such account", &format!("No account `{name}` in the config in force."))),
        };
    }
    if let Some(id) = path.strip_prefix("/job/") {
        if r.private {
            return (403, HTML, private());
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
