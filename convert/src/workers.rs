//! The worker threads a command runs on (rayon's thread pool, not the recorder's buffer pool).
//!
//! The calling thread becomes worker 0 and the command runs on it directly; the other workers are started by a
//! helper thread while it runs. Rayon's global pool would start every worker before running anything: 16 thread
//! starts are ~1.2 ms on the GPU machine's VM, a tenth of converting a small recording. And running the whole
//! command on a worker matters too: each parallel step started from outside a pool hands its work over and sleeps
//! until it is done, and a conversion has dozens of such steps, some tiny for a small recording.
//!
//! A small input gets fewer workers than the machine has CPUs ([`workers_for`]). The 20-step loop recording
//! (167 KB) on two of the GPU machine's 16-CPU VMs (bench/gpu/threads_sweep.sh, medians of 11-15 runs): a slow
//! host took 21.5 ms with 8 workers, 21.7-22.6 with 3-12 and 24.6 with 16; a fast one 9.6 ms with 8, 9.7 with
//! 16, 9.9 with 6 and 11.2 with 4. More workers than the work can use only add thread starts and wake-ups.

use std::path::Path;
use std::sync::mpsc;

/// Stored input bytes per worker: ~0.4 MB of decompressed records, a few thousand records (8 workers for the
/// loop recording).
const INPUT_BYTES_PER_WORKER: u64 = 20 << 10;
/// The fewest workers a pool sized by input gets.
const MIN_WORKERS: usize = 4;

/// Workers for a command reading `inputs`: one per [`INPUT_BYTES_PER_WORKER`] of the files, at least
/// [`MIN_WORKERS`], at most one per CPU. `None` (rayon's choice: `RAYON_NUM_THREADS`, else one per CPU) when
/// `RAYON_NUM_THREADS` is set, when there are no inputs, or when their sizes cannot be read.
pub fn workers_for(inputs: &[&Path]) -> Option<usize> {
    if std::env::var_os("RAYON_NUM_THREADS").is_some() || inputs.is_empty() {
        return None;
    }
    let bytes: u64 = inputs.iter().map(|p| std::fs::metadata(p).map(|m| m.len())).sum::<Result<u64, _>>().ok()?;
    Some(workers_for_bytes(bytes, std::thread::available_parallelism().map_or(1, |n| n.get())))
}

fn workers_for_bytes(bytes: u64, cpus: usize) -> usize {
    let wanted = usize::try_from(bytes / INPUT_BYTES_PER_WORKER).unwrap_or(usize::MAX);
    wanted.clamp(MIN_WORKERS.min(cpus), cpus.max(1))
}

/// Runs `f` as worker 0 of a new pool of `workers` workers (`None`: rayon's default count). Where a pool cannot
/// be built, `f` runs on rayon's global pool instead.
pub fn run_on_workers<R: Send>(workers: Option<usize>, f: impl FnOnce() -> R + Send) -> R {
    let (tx, rx) = mpsc::channel::<rayon::ThreadBuilder>();
    // The starter thread exists before the pool asks for workers, so each starts as soon as it is asked for.
    let starter = std::thread::Builder::new().name("cutr-workers-start".into()).spawn(move || {
        for worker in rx {
            let mut b = std::thread::Builder::new();
            if let Some(name) = worker.name() {
                b = b.name(name.to_string());
            }
            if let Some(size) = worker.stack_size() {
                b = b.stack_size(size);
            }
            // A worker that cannot start leaves the others to do its share: rayon never waits for a worker
            // that has no work, and nothing here broadcasts to every worker.
            let _ = b.spawn(move || worker.run());
        }
    });
    if starter.is_err() {
        return rayon::scope(|_| f());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(workers.unwrap_or(0))
        .use_current_thread()
        .spawn_handler(move |worker| tx.send(worker).map_err(|_| std::io::Error::other("the worker starter stopped")))
        .build();
    match pool {
        // This thread is a worker of `pool`, so `install` runs `f` here, at once.
        Ok(pool) => {
            let out = pool.install(f);
            // The pool's threads are never joined: the process ends with the command.
            std::mem::forget(pool);
            out
        }
        Err(_) => rayon::scope(|_| f()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_follow_the_input_size_within_bounds() {
        // 16 CPUs: the loop recording (167 KB) gets 8, two of them 16, anything from 320 KB all 16.
        assert_eq!(workers_for_bytes(1000, 16), 4);
        assert_eq!(workers_for_bytes(170_944, 16), 8);
        assert_eq!(workers_for_bytes(250_000, 16), 12);
        assert_eq!(workers_for_bytes(16 * (20 << 10), 16), 16);
        assert_eq!(workers_for_bytes(1 << 40, 16), 16);
        // Fewer CPUs than the minimum: one worker per CPU.
        assert_eq!(workers_for_bytes(1000, 2), 2);
        assert_eq!(workers_for_bytes(1 << 30, 2), 2);
        assert_eq!(workers_for_bytes(1000, 1), 1);
    }

    #[test]
    fn inputs_that_cannot_be_read_leave_the_count_to_rayon() {
        assert_eq!(workers_for(&[]), None);
        assert_eq!(workers_for(&[Path::new("/nonexistent/x.cutr")]), None);
    }
}
