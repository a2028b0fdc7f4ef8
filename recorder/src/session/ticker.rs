//! The flush thread: every flush period it collects CUPTI's completed buffers and the PC samples, and carries out
//! `--start-delay` and `--duration` (as control actions: marked, and the counters kept inside).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;
use std::time::Instant;

use super::{Msg, Session};

pub(super) fn ticker_loop(s: &'static Session, stop: mpsc::Receiver<()>) {
    let started = Instant::now();
    let mut recording = s.config.start_delay.is_zero();
    let mut stopped = false;
    loop {
        match stop.recv_timeout(s.config.flush_period) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let since = started.elapsed();
            if !recording && since >= s.config.start_delay {
                recording = true;
                if let Err(e) = s.switch_recording(true, false) {
                    s.note(format!("could not start recording after the delay: {e}"));
                }
            }
            if recording
                && !stopped
                && let Some(d) = s.config.duration
                && since >= s.config.start_delay + d
            {
                stopped = true;
                let _ = s.switch_recording(false, true);
            }
            // Collect buffers whose records are all complete, so they reach the file even if the process dies.
            let _ = s.cupti.flush_all(false);
            if let Some(pc) = s.pc.get() {
                pc.collect_all();
            }
            s.send_graph_events();
            let _ = s.tx.send(Msg::Tick);
        }));
    }
}
