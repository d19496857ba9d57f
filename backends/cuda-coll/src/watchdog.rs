//! The dead-peer watchdog of a GPU communicator.
//!
//! Every device wait of the kernels gives up once this rank's error word (in its
//! scratch) is non-zero, checked every 1024 spins. A peer that dies leaves the others'
//! waits spinning until the device wait bound; the bootstrap, though, sees its
//! connection close at once and raises its peer-failure flag. The watchdog is a thread
//! that polls that flag (and the communicator's own abort flag, [`crate::Comm::abort`])
//! and, when one rises, runs its action once — for a [`crate::Comm`],
//! writing [`crate::layout::ERR_PEER_GONE`] into the error word with a stream memory
//! write on a stream of its own (the GPU front end executes it while the spinning
//! kernels occupy every SM), so the kernels stop, the stream drains and the next sync
//! reports the dead rank.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use commhal_hal::AbortFlag;

/// How often the flag is read.
pub const PERIOD: Duration = Duration::from_millis(2);

/// A running watchdog; stopped and joined on drop.
#[derive(Debug)]
pub struct Watchdog {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Poll `flags` every `period`; once one is raised run `fire` with it, once, and end.
    pub fn spawn(
        flags: Vec<Arc<AbortFlag>>,
        period: Duration,
        fire: impl FnOnce(&AbortFlag) + Send + 'static,
    ) -> std::io::Result<Watchdog> {
        let stop = Arc::new(AtomicBool::new(false));
        let quit = stop.clone();
        let thread = std::thread::Builder::new()
            .name("commhal-watchdog".into())
            .spawn(move || {
                while !quit.load(Ordering::Relaxed) {
                    if let Some(flag) = flags.iter().find(|f| f.is_set()) {
                        fire(flag);
                        return;
                    }
                    std::thread::sleep(period);
                }
            })?;
        Ok(Watchdog {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Instant;

    #[test]
    fn fires_once_soon_after_the_flag_rises() {
        let flag = Arc::new(AbortFlag::new());
        let (tx, rx) = mpsc::channel();
        let _w = Watchdog::spawn(vec![flag.clone()], PERIOD, move |f| {
            let _ = tx.send((Instant::now(), f.reason()));
        })
        .expect("spawn");
        std::thread::sleep(Duration::from_millis(20));
        assert!(rx.try_recv().is_err(), "nothing before the flag");
        let raised = Instant::now();
        flag.peer_dead(3, "connection closed");
        let (at, why) = rx.recv_timeout(Duration::from_secs(10)).expect("fired");
        assert!(at >= raised);
        assert!(format!("{why:?}").contains("connection closed"), "{why:?}");
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err(), "once");
    }

    #[test]
    fn drop_stops_it_without_firing() {
        let flag = Arc::new(AbortFlag::new());
        let fired = Arc::new(AtomicBool::new(false));
        let f2 = fired.clone();
        let w = Watchdog::spawn(vec![flag.clone()], PERIOD, move |_| {
            f2.store(true, Ordering::SeqCst)
        })
        .expect("spawn");
        drop(w);
        flag.abort("after the communicator is gone");
        std::thread::sleep(Duration::from_millis(20));
        assert!(!fired.load(Ordering::SeqCst));
    }
}
