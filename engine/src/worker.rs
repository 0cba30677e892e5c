//! A background thread that wakes every period, on a reload signal, or to
//! stop — the shape of multifactor's decay thread, shared by Tally's
//! plugins. Started in `init`, stopped and joined in `fini`. Its body runs
//! behind the panic guard; a panic costs one round, not the thread.

use crate::guard::{guard, lock};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why the body runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// First run, or the period elapsed.
    Tick,
    /// `scontrol reconfigure` (or a test) asked to re-read files.
    Reload,
    /// Last run before the thread ends (`fini`).
    Stop,
}

#[derive(Debug, Default)]
struct Signals {
    stop: bool,
    reload: bool,
    /// Tick early (coalesced: several pokes before the tick make one).
    poke: bool,
}

#[derive(Debug, Default)]
struct Shared {
    signals: Mutex<Signals>,
    wake: Condvar,
}

/// The shortest time between two runs that pokes can cause.
pub const MIN_POKE_GAP: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Worker {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// [`Worker::spawn`], or `None` with the reason in the log (`what`:
    /// the thread's job, e.g. "the recalculation thread").
    pub fn start(name: &str, what: &str, body: impl FnMut(Wake) -> Duration + Send + 'static) -> Option<Worker> {
        Worker::spawn(name, body).map_err(|e| log::error!("cannot start {what}: {e}")).ok()
    }

    /// Start `body`; it returns how long to sleep before the next tick.
    pub fn spawn(name: &str, mut body: impl FnMut(Wake) -> Duration + Send + 'static) -> std::io::Result<Worker> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let what = name.to_string();
        let handle = std::thread::Builder::new().name(name.to_string()).spawn(move || {
            let mut wake = Wake::Tick;
            loop {
                let period = guard(&what, || Duration::from_secs(60), || body(wake));
                if wake == Wake::Stop {
                    return;
                }
                let began = Instant::now();
                let deadline = began + period.max(Duration::from_millis(100));
                let mut sig = lock(&s.signals);
                loop {
                    if sig.stop || sig.reload {
                        break;
                    }
                    // A poke ticks early, but not within MIN_POKE_GAP of the last run.
                    let poked = sig.poke && began.elapsed() >= MIN_POKE_GAP;
                    let left = deadline.saturating_duration_since(Instant::now());
                    if poked || left.is_zero() {
                        break;
                    }
                    let wait = if sig.poke { left.min(MIN_POKE_GAP.saturating_sub(began.elapsed())) } else { left };
                    sig = s.wake.wait_timeout(sig, wait.max(Duration::from_millis(1))).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
                }
                sig.poke = false;
                wake = if sig.stop {
                    Wake::Stop
                } else if std::mem::take(&mut sig.reload) {
                    Wake::Reload
                } else {
                    Wake::Tick
                };
            }
        })?;
        Ok(Worker { shared, handle: Some(handle) })
    }

    /// Ask for a `Wake::Tick` run soon: at once, or [`MIN_POKE_GAP`] after
    /// the last run. Never waits; several pokes make one run.
    pub fn poke(&self) {
        lock(&self.shared.signals).poke = true;
        self.shared.wake.notify_all();
    }

    /// Ask for a `Wake::Reload` run now.
    pub fn reload(&self) {
        lock(&self.shared.signals).reload = true;
        self.shared.wake.notify_all();
    }

    /// Run the body a last time with `Wake::Stop` and join the thread.
    pub fn stop(mut self) {
        lock(&self.shared.signals).stop = true;
        self.shared.wake.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use tally_allocator::HOUR_S;

    /// A worker that reports each wake and sleeps an hour, after its first tick.
    fn reporting(name: &str) -> (Worker, mpsc::Receiver<Wake>) {
        let (tx, rx) = mpsc::channel();
        let w = Worker::spawn(name, move |wake| {
            let _ = tx.send(wake);
            Duration::from_secs(HOUR_S)
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(Wake::Tick));
        (w, rx)
    }

    #[test]
    fn ticks_reloads_and_stops() {
        let (w, rx) = reporting("test-worker");
        w.reload();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(Wake::Reload));
        w.stop();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(Wake::Stop));
    }

    #[test]
    fn pokes_tick_early_and_coalesce() {
        let (w, rx) = reporting("test-poke");
        let t = Instant::now();
        for _ in 0..10 {
            w.poke();
        }
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(Wake::Tick));
        assert!(t.elapsed() < Duration::from_secs(3), "poked, not the hour's period");
        // Ten pokes, one run.
        assert!(rx.recv_timeout(Duration::from_millis(1500)).is_err());
        w.stop();
    }

    #[test]
    fn a_panicking_body_keeps_the_thread() {
        let (tx, rx) = mpsc::channel();
        let mut n = 0;
        let w = Worker::spawn("test-panic", move |_| {
            n += 1;
            tx.send(n).unwrap();
            if n == 1 {
                panic!("first round fails");
            }
            Duration::from_secs(HOUR_S)
        })
        .unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(1));
        // The guard turned the panic into a 60 s period; a reload runs again.
        w.reload();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)), Ok(2));
        w.stop();
    }
}
