//! What the job_submit and preempt plugins know: the config and the ledger
//! as files, re-read by a [`Worker`] every `calc_period` (and on
//! reconfigure), never on Slurm's call paths.
//!
//! The priority plugin owns the ledger and saves it each period; the others
//! follow it from disk, so the ranking they use is at most one period plus
//! one save behind. Without priority/tally (no ledger file) every team has
//! zero usage and only contracts and allocation matter.

use crate::engine::{Engine, Ranking};
use crate::guard::lock;
use crate::statefile::{self, Loaded};
use crate::worker::{Wake, Worker};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tally_config::Config;

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Load tally.toml, logging every problem; `None` if unusable.
pub fn load_config(path: &std::path::Path) -> Option<Config> {
    match Config::load(path) {
        Ok(c) => Some(c),
        Err(e) => {
            for line in e.to_string().lines() {
                log::error!("{line}");
            }
            None
        }
    }
}

/// The config a plugin starts with: the file, or built-in defaults (every
/// job unallocated) when the file is missing or broken.
pub fn initial_config(path: &std::path::Path) -> Config {
    load_config(path).unwrap_or_else(|| {
        log::error!(
            "{}: not usable; running with built-in defaults (every job unallocated) until it is fixed and `scontrol reconfigure` is run",
            path.display()
        );
        Config::parse("", "<built-in defaults>").expect("the empty config is valid")
    })
}

#[derive(Debug)]
struct State {
    config_path: PathBuf,
    state_path: Option<PathBuf>,
    config_mtime: Option<SystemTime>,
    config: Arc<Config>,
    ranking: Arc<Ranking>,
}

/// A config and a ranking kept fresh in the background.
#[derive(Debug)]
pub struct Follower {
    state: Arc<Mutex<State>>,
    worker: Option<Worker>,
}

fn mtime(p: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn refresh(st: &Mutex<State>, force_config: bool) -> Duration {
    let (config_path, state_path, old_mtime, mut config) = {
        let s = lock(st);
        (s.config_path.clone(), s.state_path.clone(), s.config_mtime, s.config.clone())
    };
    let m = mtime(&config_path);
    let mut new_mtime = old_mtime;
    if force_config || m != old_mtime {
        match load_config(&config_path) {
            Some(c) => {
                log::info!("(re)loaded {}", config_path.display());
                crate::slurm_log::set_debug(c.debug);
                config = Arc::new(c);
                new_mtime = m;
            }
            None => {
                log::error!("{}: not reloaded; the last good config stays in force", config_path.display());
                new_mtime = m; // do not repeat the same errors every period
            }
        }
    }
    let t = now();
    let snapshot = state_path.as_deref().and_then(|p| match statefile::load_readonly(p, config.bucket_s, config.window_s) {
        Loaded::Ok(s) => Some(s),
        Loaded::Missing => None,
        Loaded::SetAside { problem, .. } => {
            log::debug!("ledger {} not readable now ({problem}); keeping zero usage", p.display());
            None
        }
    });
    let ranking = Engine::new((*config).clone(), snapshot, t).ranking();
    let period = Duration::from_secs(config.calc_period_s.max(1));
    let mut s = lock(st);
    s.config = config;
    s.config_mtime = new_mtime;
    s.ranking = ranking;
    period
}

impl Follower {
    /// Load now (so the plugin is ready at once) and, when `background`,
    /// keep following in a thread (inside slurmctld only).
    pub fn start(config_path: PathBuf, state_path: Option<PathBuf>, background: bool) -> Follower {
        let config = Arc::new(initial_config(&config_path));
        let ranking = Engine::new((*config).clone(), None, now()).ranking();
        let state = Arc::new(Mutex::new(State {
            config_mtime: mtime(&config_path),
            config_path,
            state_path,
            config,
            ranking,
        }));
        refresh(&state, false);
        let worker = if background {
            let st = state.clone();
            Worker::spawn("tally-follow", move |wake| refresh(&st, wake == Wake::Reload))
                .map_err(|e| log::error!("cannot start the follower thread: {e}"))
                .ok()
        } else {
            None
        };
        Follower { state, worker }
    }

    pub fn config(&self) -> Arc<Config> {
        lock(&self.state).config.clone()
    }

    pub fn ranking(&self) -> Arc<Ranking> {
        lock(&self.state).ranking.clone()
    }

    /// Re-read the config now (in the thread).
    pub fn reload(&self) {
        if let Some(w) = &self.worker {
            w.reload();
        }
    }

    pub fn stop(mut self) {
        if let Some(w) = self.worker.take() {
            w.stop();
        }
    }
}

/// `init` of a plugin that only follows tally.toml (and the ledger): set
/// up logging and start a [`Follower`] in `slot` (a thread only inside
/// slurmctld).
pub fn install(slot: &Mutex<Option<Follower>>, logger: &'static crate::slurm_log::SlurmLogger, state_path: Option<PathBuf>) {
    crate::guard::install_panic_hook();
    crate::slurm_log::init(logger, false);
    let f = Follower::start(tally_config::default_path(), state_path, crate::host::Host::lookup().is_some());
    crate::slurm_log::set_debug(f.config().debug);
    *lock(slot) = Some(f);
}

/// `fini` of such a plugin: stop and join the follower.
pub fn uninstall(slot: &Mutex<Option<Follower>>) {
    // Release the slot before joining the thread: the plugin's call paths
    // never wait on a join.
    let taken = lock(slot).take();
    if let Some(f) = taken {
        f.stop();
    }
}
