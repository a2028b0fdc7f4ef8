//! The worker pool a command runs on.
//!
//! The calling thread becomes worker 0 and the command runs on it directly; the other workers are started by a
//! helper thread while it runs. Rayon's global pool would start every worker before running anything: 16 thread
//! starts are ~1.2 ms on the GPU machine's VM, a tenth of converting a small recording. And running the whole
//! command on a worker matters too: each parallel step started from outside a pool hands its work over and sleeps
//! until it is done, and a conversion has dozens of such steps, some tiny for a small recording.

use std::sync::mpsc;

/// Runs `f` as worker 0 of a new pool of `RAYON_NUM_THREADS` (default: one per CPU) workers. Where a pool cannot
/// be built, `f` runs on rayon's global pool instead.
pub fn run_on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let (tx, rx) = mpsc::channel::<rayon::ThreadBuilder>();
    // The starter thread exists before the pool asks for workers, so each starts as soon as it is asked for.
    let starter = std::thread::Builder::new().name("cutr-pool-start".into()).spawn(move || {
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
