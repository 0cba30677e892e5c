//! Which config the three plugins run on, and how job_submit and preempt
//! follow the priority plugin.
//!
//! One trigger for all three: `scontrol reconfigure`. The priority plugin
//! reads tally.toml at start-up and on every reconfigure; a config it
//! accepts becomes the *active copy*, `StateSaveLocation/tally/tally.toml.active`
//! (written atomically, 0600). job_submit/tally and preempt/tally follow
//! that copy (a `stat` a second, a read when it changes), so they run on
//! what the priority plugin runs on, a second behind at most — never on an
//! edit nobody reconfigured. Without an active copy (priority/tally not
//! configured) they follow tally.toml itself.
//!
//! A broken tally.toml never puts a plugin on built-in defaults:
//! - priority/tally keeps the config in force (reconfigure), or starts on
//!   the active copy (the last good one) with a loud error, or — with
//!   neither — does nothing (no charging, no ranking; every pending job
//!   gets priority 1, Slurm's submit order) and says so every period until
//!   a reconfigure brings a good config; nothing is lost meanwhile (a run
//!   is charged from its start when first seen);
//! - job_submit/tally without any config accepts every job (fail-open: a
//!   config error must not stop a cluster's submissions) and logs it;
//! - preempt/tally without any config preempts nothing (fail-closed).
//!
//! The plugins also refuse a config without `[cluster] gpus`: the ranking
//! needs the cluster's size, and Tally does not guess it.

use crate::engine::allocation_at;
use crate::guard::lock;
use crate::statefile::{self, Loaded};
use crate::worker::{Wake, Worker};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tally_allocator::{Allocation, Inventory, RunBook};
use tally_config::Config;

/// The active copy's name beside the ledger.
pub const ACTIVE_NAME: &str = "tally.toml.active";

/// `<dir of the ledger>/tally.toml.active`
pub fn active_path(state_path: &Path) -> PathBuf {
    state_path.with_file_name(ACTIVE_NAME)
}

/// Why the plugins refuse a config that parsed.
pub fn plugin_problem(c: &Config) -> Option<String> {
    c.cluster.gpus.is_none().then(|| {
        format!(
            "{}: [cluster] gpus is not set: the plugins rank teams against the cluster's size; set it to the number of GPUs Slurm schedules (e.g. `[cluster]` then `gpus = 512`)",
            c.source
        )
    })
}

/// Load tally.toml as the plugins take it, logging every problem; `None`
/// if unusable.
pub fn load_config(path: &Path) -> Option<Config> {
    match Config::load(path) {
        Ok(c) => match plugin_problem(&c) {
            None => {
                for w in c.warning_lines() {
                    log::warn!("{w}");
                }
                Some(c)
            }
            Some(p) => {
                log::error!("{p}");
                None
            }
        },
        Err(e) => {
            for line in e.to_string().lines() {
                log::error!("{line}");
            }
            None
        }
    }
}

/// Where a plugin's config came from at start-up.
#[derive(Debug)]
pub enum Start {
    /// tally.toml.
    File(Config),
    /// tally.toml is broken or missing: the last good copy.
    LastGood(Config),
    /// Neither.
    None,
}

/// The config the priority plugin starts with: tally.toml, else the last
/// good copy beside the ledger (`state_path`), else none.
pub fn initial_config(path: &Path, state_path: Option<&Path>) -> Start {
    if let Some(c) = load_config(path) {
        return Start::File(c);
    }
    let active = state_path.map(active_path);
    if let Some(a) = active.as_deref().filter(|a| a.exists()) {
        match Config::load(a).map(|c| (plugin_problem(&c), c)) {
            Ok((None, c)) => {
                log::error!(
                    "{}: not usable; running on the last good copy {} until it is fixed and `scontrol reconfigure` is run",
                    path.display(),
                    a.display()
                );
                return Start::LastGood(c);
            }
            Ok((Some(p), _)) => log::error!("{p}"),
            Err(e) => log::error!("{e}"),
        }
    }
    log::error!(
        "{}: not usable and no last good copy: Tally does nothing (no charging, no ranking; every pending job keeps Slurm's submit order) until it is fixed and `scontrol reconfigure` is run",
        path.display()
    );
    Start::None
}

/// Make `text` (a config the priority plugin accepted) the active copy.
pub fn write_active(state_path: &Path, text: &str) {
    let a = active_path(state_path);
    if let Err(e) = statefile::save_atomic(&a, text) {
        log::error!("cannot write the active config {}: {e}; job_submit/tally and preempt/tally may not follow this config", a.display());
    }
}

#[derive(Debug)]
struct State {
    config_path: PathBuf,
    state_path: Option<PathBuf>,
    /// The file followed and its mtime when last read.
    source: Option<(PathBuf, Option<SystemTime>)>,
    /// The config in force and its allocation (computed once per config
    /// and GPU inventory: a problem with it is logged once, not every period).
    config: Option<(Arc<Config>, Arc<Allocation>)>,
    runs: Arc<RunBook>,
    /// The GPUs per type the priority plugin saved with the ledger (with
    /// `[cluster.gpu_types]`): the capacity the allocation is computed on.
    inventory: Inventory,
    ledger_read: Option<Instant>,
    /// Follow the ledger's run records too (preempt/tally; job_submit/tally
    /// needs only the config).
    follow_ledger: bool,
    complained: bool,
}

/// A config, its allocation and the run records kept fresh in the background.
#[derive(Debug)]
pub struct Follower {
    state: Arc<Mutex<State>>,
    worker: Option<Worker>,
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// How often the follower looks at the active copy.
const LOOK: Duration = Duration::from_secs(1);

fn refresh(st: &Mutex<State>, force: bool) -> Duration {
    let (config_path, state_path, source, mut config, ledger_read, inventory) = {
        let s = lock(st);
        (s.config_path.clone(), s.state_path.clone(), s.source.clone(), s.config.clone(), s.ledger_read, s.inventory.clone())
    };
    // The file to follow: the active copy, else tally.toml.
    let follow = state_path.as_deref().map(active_path).filter(|a| a.exists()).unwrap_or_else(|| config_path.clone());
    let m = mtime(&follow);
    let changed = force || source.as_ref().is_none_or(|(p, t)| *p != follow || *t != m);
    let mut new_source = source.clone();
    if changed {
        let loaded = if follow == config_path { load_config(&follow) } else { Config::load(&follow).map_err(|e| log::error!("{e}")).ok() };
        match loaded {
            Some(c) => {
                log::info!("following {}", follow.display());
                crate::set_debug(c.debug);
                let alloc = Arc::new(allocation_at(&c, &inventory));
                config = Some((Arc::new(c), alloc));
            }
            None if config.is_some() => log::error!("{}: not reloaded; the last good config stays in force", follow.display()),
            None => {}
        }
        new_source = Some((follow, m)); // do not repeat the same errors every second
    }
    let period = config.as_ref().map_or(60, |(c, _)| c.calc_period_s.max(1));
    let mut s = lock(st);
    let ledger_due = s.follow_ledger && (changed || ledger_read.is_none_or(|t| t.elapsed() >= Duration::from_secs(period)));
    s.source = new_source;
    if config.is_none() && !s.complained {
        log::error!("no usable config ({}): see the errors above", config_path.display());
        s.complained = true;
    }
    s.config.clone_from(&config);
    if ledger_due {
        s.ledger_read = Some(Instant::now());
        drop(s);
        let (runs, new_inventory) = match &config {
            Some((c, _)) => {
                let snapshot = state_path.as_deref().and_then(|p| match statefile::load_readonly(p, c.bucket_s, c.window_s) {
                    Loaded::Ok { snapshot, .. } => Some(*snapshot),
                    Loaded::Missing => None,
                    Loaded::SetAside { problem, .. } | Loaded::Held { problem } => {
                        log::debug!("ledger {} not readable now ({problem}); keeping zero usage", p.display());
                        None
                    }
                });
                match snapshot {
                    Some(s) => (Arc::new(s.runs), Some(s.inventory)),
                    None => (Arc::new(RunBook::new()), None),
                }
            }
            None => (Arc::new(RunBook::new()), None),
        };
        let mut s = lock(st);
        s.runs = runs;
        // The nodes' GPUs per type changed (with [cluster.gpu_types]): the
        // allocation follows the priority plugin's capacity.
        if let Some(new_inventory) = new_inventory.filter(|n| *n != s.inventory) {
            if let Some((c, _)) = &s.config {
                let alloc = Arc::new(allocation_at(c, &new_inventory));
                s.config = Some((c.clone(), alloc));
            }
            s.inventory = new_inventory;
        }
    }
    LOOK
}

impl Follower {
    /// Load now (so the plugin is ready at once) and, when `background`,
    /// keep following in a thread (inside slurmctld only); the ledger's run
    /// records too when `follow_ledger`.
    pub fn start(config_path: PathBuf, state_path: Option<PathBuf>, follow_ledger: bool, background: bool) -> Follower {
        let state = Arc::new(Mutex::new(State {
            config_path,
            state_path,
            source: None,
            config: None,
            runs: Arc::new(RunBook::new()),
            inventory: Inventory::new(),
            ledger_read: None,
            follow_ledger,
            complained: false,
        }));
        refresh(&state, true);
        let worker = if background {
            let st = state.clone();
            Worker::start("tally-follow", "the follower thread", move |wake| refresh(&st, wake == Wake::Reload))
        } else {
            None
        };
        Follower { state, worker }
    }

    /// The config in force; `None` when there never was a usable one.
    pub fn config(&self) -> Option<Arc<Config>> {
        lock(&self.state).config.as_ref().map(|(c, _)| c.clone())
    }

    /// The config in force with its allocation ([`allocation_at`], on the
    /// nodes' GPUs per type the priority plugin saved with the ledger).
    pub fn allocated(&self) -> Option<(Arc<Config>, Arc<Allocation>)> {
        lock(&self.state).config.clone()
    }

    /// The run records of the last ledger read (frozen contracts,
    /// protection used by earlier runs).
    pub fn runs(&self) -> Arc<RunBook> {
        lock(&self.state).runs.clone()
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

/// `init` of a plugin that only follows the config in force (the active
/// copy beside the ledger at `state_path`, else tally.toml) and, when
/// `follow_ledger`, the ledger's run records, its logger installed: start
/// a [`Follower`] in `slot` (following in a thread when `background`:
/// inside slurmctld only).
pub fn install(slot: &Mutex<Option<Follower>>, state_path: Option<PathBuf>, follow_ledger: bool, background: bool) {
    *lock(slot) = Some(Follower::start(tally_config::default_path(), state_path, follow_ledger, background));
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

#[cfg(test)]
mod tests {
    use super::*;
    use tally_allocator::HOUR_S;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tally-follower-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("tally")).unwrap();
        d
    }

    const GOOD: &str = "[cluster]\ngpus = 8\n[accounts.a]\nshare = 100\n";

    /// A fresh directory's tally.toml (written [`GOOD`]) and ledger path.
    fn files(name: &str) -> (PathBuf, PathBuf) {
        let d = dir(name);
        std::fs::write(d.join("tally.toml"), GOOD).unwrap();
        (d.join("tally.toml"), statefile::path_in(&d))
    }

    #[test]
    fn a_broken_file_falls_back_to_the_last_good_copy_then_to_nothing() {
        let (toml, state) = files("start");
        assert!(matches!(initial_config(&toml, Some(&state)), Start::File(_)));
        write_active(&state, GOOD);
        std::fs::write(&toml, "[accounts.a]\nshare = 500\n").unwrap();
        match initial_config(&toml, Some(&state)) {
            Start::LastGood(c) => assert!(c.tree.contains("a")),
            other => panic!("{other:?}"),
        }
        std::fs::remove_file(active_path(&state)).unwrap();
        assert!(matches!(initial_config(&toml, Some(&state)), Start::None));
        // Without [cluster] gpus: refused, with what to set.
        std::fs::write(&toml, "[accounts.a]\nshare = 100\n").unwrap();
        assert!(matches!(initial_config(&toml, Some(&state)), Start::None));
        assert!(plugin_problem(&Config::parse("", "t.toml").unwrap()).unwrap().contains("set it to the number of GPUs"));
    }

    #[test]
    fn followers_run_on_the_active_copy_not_on_an_unreconfigured_edit() {
        let (toml, state) = files("follow");
        // No active copy: tally.toml itself.
        let f = Follower::start(toml.clone(), Some(state.clone()), true, false);
        assert_eq!(f.config().unwrap().contracts.max_s, 8 * HOUR_S);
        // The priority plugin accepted a config with a 4h maximum.
        write_active(&state, &format!("{GOOD}[contracts]\nmax = \"4h\"\n"));
        // tally.toml edited, nobody reconfigured: not followed.
        std::fs::write(&toml, format!("{GOOD}[contracts]\nmax = \"2h\"\n")).unwrap();
        refresh(&f.state, false);
        assert_eq!(f.config().unwrap().contracts.max_s, 4 * HOUR_S);
        // No config at all: None (job_submit fails open, preempt closed).
        let g = Follower::start(toml.with_file_name("missing.toml"), None, true, false);
        assert!(g.config().is_none() && g.allocated().is_none());
    }

    #[test]
    fn followers_rank_on_the_gpus_per_type_the_priority_plugin_saved() {
        let (toml, state) = files("types");
        std::fs::write(&toml, format!("{GOOD}[cluster.gpu_types]\nb200 = 2.5\n")).unwrap();
        let f = Follower::start(toml.clone(), Some(state.clone()), true, false);
        assert_eq!(f.allocated().unwrap().1.capacity.units, 8.0);
        // The priority plugin counted 4 B200s on the nodes and saved them.
        statefile::save_atomic(&state, "tally-state 2\ngeometry 3600 604800\ngpus b200 4\n").unwrap();
        refresh(&f.state, true);
        assert_eq!(f.allocated().unwrap().1.capacity.units, 4.0 + 4.0 * 2.5);
    }
}
