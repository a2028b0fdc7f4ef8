//! The buffers handed to CUPTI: a free list filled up front and grown on demand up to a memory cap.
//!
//! CUPTI asks for buffers from application threads, so taking one is a lock-free pop; only when the free list is
//! empty is a buffer allocated, and once the cap is reached requests are refused and counted instead (CUPTI then
//! drops records and counts them too). Nothing here blocks.

use std::alloc::{Layout, alloc, dealloc};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_queue::ArrayQueue;

pub struct BufferPool {
    free: ArrayQueue<usize>,
    layout: Layout,
    max_buffers: usize,
    allocated: AtomicUsize,
    refused: AtomicU64,
    /// Buffers handed out and not yet given back.
    outstanding: AtomicUsize,
    /// The most buffers ever allocated at once.
    peak_allocated: AtomicUsize,
}

// SAFETY: the pool only moves raw buffer addresses between threads; each buffer is owned by exactly one party
// (free list, CUPTI, or the writer) at a time.
unsafe impl Send for BufferPool {}
// SAFETY: as for Send; the free list is a lock-free queue and the counters are atomics.
unsafe impl Sync for BufferPool {}

impl BufferPool {
    /// A pool of `buffer_bytes` buffers, at most `max_buffers` of them, `initial` allocated now.
    pub fn new(buffer_bytes: usize, max_buffers: usize, initial: usize) -> BufferPool {
        // CUPTI requires 8-byte alignment; a page keeps buffers off each other's cache lines.
        let layout = Layout::from_size_align(buffer_bytes, 4096).expect("buffer size is validated");
        let pool = BufferPool {
            free: ArrayQueue::new(max_buffers.max(1)),
            layout,
            max_buffers,
            allocated: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            outstanding: AtomicUsize::new(0),
            peak_allocated: AtomicUsize::new(0),
        };
        for _ in 0..initial.min(max_buffers) {
            if let Some(p) = pool.allocate() {
                let _ = pool.free.push(p as usize);
            }
        }
        pool
    }

    fn allocate(&self) -> Option<*mut u8> {
        let mut n = self.allocated.load(Ordering::Relaxed);
        loop {
            if n >= self.max_buffers {
                return None;
            }
            match self.allocated.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(cur) => n = cur,
            }
        }
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { alloc(self.layout) };
        if p.is_null() {
            self.allocated.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        self.peak_allocated.fetch_max(n + 1, Ordering::Relaxed);
        Some(p)
    }

    /// A buffer for CUPTI, or `None` (counted as refused) when the memory cap is reached.
    pub fn take(&self) -> Option<*mut u8> {
        let p = self.free.pop().map(|p| p as *mut u8).or_else(|| self.allocate());
        match p {
            Some(p) => {
                self.outstanding.fetch_add(1, Ordering::AcqRel);
                Some(p)
            }
            None => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Returns a buffer obtained from [`BufferPool::take`].
    ///
    /// # Safety
    /// `p` must come from this pool's `take` and not be used after this call.
    pub unsafe fn give_back(&self, p: *mut u8) {
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
        if self.free.push(p as usize).is_err() {
            // Cannot happen (the queue holds every buffer the pool may allocate); free rather than leak.
            self.allocated.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: `p` was allocated with this layout.
            unsafe { dealloc(p, self.layout) };
        }
    }

    pub fn buffer_bytes(&self) -> usize {
        self.layout.size()
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn outstanding(&self) -> usize {
        self.outstanding.load(Ordering::Acquire)
    }

    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Acquire)
    }

    pub fn peak_bytes(&self) -> usize {
        self.peak_allocated.load(Ordering::Relaxed) * self.layout.size()
    }
}

impl Drop for BufferPool {
    fn drop(&mut self) {
        while let Some(p) = self.free.pop() {
            // SAFETY: every address in the free list was allocated with this layout.
            unsafe { dealloc(p as *mut u8, self.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_to_the_cap_then_refuses_and_recycles() {
        let pool = BufferPool::new(64 << 10, 3, 1);
        assert_eq!(pool.allocated(), 1);
        let a = pool.take().unwrap();
        let b = pool.take().unwrap();
        let c = pool.take().unwrap();
        assert_eq!((a as usize % 4096, pool.allocated(), pool.outstanding()), (0, 3, 3));
        assert!(pool.take().is_none());
        assert!(pool.take().is_none());
        assert_eq!(pool.refused(), 2);
        // SAFETY: buffers from this pool, given back once each.
        unsafe { pool.give_back(b) };
        assert_eq!(pool.take(), Some(b));
        for p in [a, b, c] {
            // SAFETY: as above.
            unsafe { pool.give_back(p) };
        }
        assert_eq!((pool.outstanding(), pool.allocated(), pool.peak_bytes()), (0, 3, 3 * (64 << 10)));
    }
}
