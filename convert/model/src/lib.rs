//! The trace model of `.cutr` recordings: CUPTI activity records decoded into typed tables (kernels, copies,
//! memsets, API calls, syncs, NVTX ranges...) on one time base for every file, and joined: each GPU record to the
//! API call that launched it (by [`CorrKey`]), API calls to their NVTX ranges and PyTorch op ids, every failed
//! join counted in [`JoinStats`]. Every consumer reads these tables: the timeline writers (`cutr-viewer-export`),
//! the analyses (`cutr-analyses`: `info`, `stats`, `diff`), and your own.
//!
//! No CUDA here: a recording carries the layout of its records, so this works on any machine.
//!
//! ```
//! use cutr_model::{LoadOptions, load};
//!
//! # fn main() -> Result<(), cutr_model::LoadError> {
//! // A real recording: an H100 running 20 steps of a PyTorch training loop.
//! let trace = load(&["../../fixtures/pytorch_loop.cutr".into()], &LoadOptions::default())?;
//! assert_eq!(trace.kernels.len(), 5_653);
//!
//! // GPU time per kernel name (demangled), through the join to the launching call.
//! let gemm = trace.kernels.iter().filter(|k| trace.kernel_name(k).contains("gemm"));
//! let launched_by_api = gemm.clone().filter(|k| trace.launcher(k.corr()).is_some()).count();
//! assert_eq!(launched_by_api, gemm.count());
//! assert_eq!(trace.stats.gpu_without_api, 0);
//! # Ok(())
//! # }
//! ```
//!
//! [`load`] opens the inputs; [`Trace`] holds the tables ([`rows`]) and the lookups across them; [`Names`]
//! holds every string once; [`graphs`] ties each kernel a CUDA graph replays to where its node was made;
//! [`nvtx_spans`] lays each NVTX range over the GPU work it launched.
//! [`timing`] times the steps of a command (`CUTR_TIMING`), and [`par`] is the parallel grouping the timeline and
//! the analyses share.

mod corr;
pub mod counters;
mod decode;
pub mod demangle;
pub mod describe;
mod fields;
pub mod graphs;
mod ids;
mod joins;
mod load;
pub mod memory;
mod names;
pub mod numbered;
mod nvtx;
pub mod nvtx_spans;
pub mod occupancy;
pub mod par;
pub mod pc_reasons;
pub mod recorder_threads;
pub mod rows;
pub mod runs;
pub mod stall_rates;
pub mod stall_stream;
pub mod stream;
pub mod timebase;
pub mod timing;
mod trace;
pub mod um;
pub mod um_host;

pub use corr::CorrMap;
pub use counters::CounterSample;
pub use graphs::{Graph, GraphContext, GraphEdge, GraphExec, GraphNode};
pub use ids::{CorrKey, NameId, ProcId};
pub use load::{Filter, LoadError, LoadOptions, Prefetched, load, load_prefetched, load_readers, open_inputs};
pub use names::Names;
pub use rows::{
    ApiCall, CudaEvent, Kernel, KernelSourceNote, Memcpy, MemoryOp, Memset, NvtxMark, NvtxRange, Overhead, Sync,
    UmEvent, UmKind,
};
pub use timebase::TimeBase;
pub use trace::{JoinStats, Process, Rank, RankSource, Trace};
