//! Which driver API calls the viewers draw. By default ([`DriverCalls::Direct`]) two kinds are left out:
//! - a driver call that lies inside a runtime call on the same thread: the runtime's own doing, not the program's
//!   (Nsight Systems and the PyTorch profiler show the runtime call alone);
//! - a driver *query* (a function named `cu...Get...`: `cuKernelGetName`, `cuDeviceGetAttribute`,
//!   `cuDevicePrimaryCtxGetState`, `cuGetProcAddress`) that launched no GPU work: bookkeeping that does no work
//!   and waits on nothing. CUDA 13's runtime calls `cuKernelGetName` before every kernel launch from its launch
//!   stub, outside any recorded runtime call, and PyTorch asks `cuDevicePrimaryCtxGetState` thousands of times: in
//!   the PyTorch loop fixture queries are 97% of the driver records (28,842 of 29,655), rows the PyTorch profiler
//!   never shows.
//!
//! Every other driver call is the program's and drawn (JAX, Triton, NCCL, an allocator's `cuMemCreate`/`cuMemMap`,
//! a program's own `cuLaunchKernel`). Every driver call stays in the model, so `stats` and the tables count them
//! all; `--driver-calls` ([`DriverCalls::All`]) draws them all, and the summary line says how many were left out.
//!
//! Arrows stay on drawn slices: GPU work launched by a hidden nested call gets its arrow from the runtime call
//! around it ([`NestedDriverCalls::adopted`]); a query that launched GPU work is drawn after all.
//!
//! (CUDA 13's CUPTI records none of the driver calls its runtime makes inside a runtime call: the fixtures'
//! driver records all lie between runtime calls. Other CUDA versions, or CUPTI clients' own driver calls made
//! inside a runtime callback, may nest.)

use cutr_model::{ApiCall, Trace};
use rustc_hash::FxHashMap as HashMap;

use super::Flows;

/// Which driver API calls the timeline draws.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DriverCalls {
    /// Those not inside a runtime call on the same thread and not queries: the calls the program made itself.
    #[default]
    Direct,
    /// Every recorded driver call.
    All,
}

/// The driver calls left out of a timeline, each with the runtime call it lies in.
#[derive(Clone, Debug, Default)]
pub struct NestedDriverCalls {
    /// Per API call (index into `Trace::apis`): the runtime call it lies in for a hidden nested driver call,
    /// [`NestedDriverCalls::QUERY`] for a hidden query, [`NestedDriverCalls::DRAWN`] otherwise. Empty when no call
    /// is hidden.
    enclosing: Vec<u32>,
    /// How many driver calls each runtime call hides (only those hiding any).
    hidden_in: HashMap<u32, u32>,
    /// Hidden calls that launched GPU work, by the runtime call that draws their arrows.
    adopted: HashMap<u32, Vec<u32>>,
    /// Driver calls hidden in all.
    pub hidden: u64,
}

impl NestedDriverCalls {
    pub const DRAWN: u32 = u32::MAX;
    /// A hidden driver query (not inside a runtime call).
    pub const QUERY: u32 = u32::MAX - 1;

    /// The driver calls of `trace` that `which` hides; `thread_track[i]` is API call `i`'s track (one per
    /// thread), below `tracks`.
    pub fn find(trace: &Trace, which: DriverCalls, thread_track: &[u32], tracks: usize) -> NestedDriverCalls {
        let apis = &trace.apis;
        if which == DriverCalls::All || !apis.iter().any(|a| a.driver) {
            return NestedDriverCalls::default();
        }
        let mut enclosing = enclosing_runtime_calls(apis, thread_track, tracks);
        let mut queries: HashMap<(cutr_model::ProcId, u32), bool> = HashMap::default();
        for (a, slot) in apis.iter().zip(enclosing.iter_mut()).filter(|(a, slot)| a.driver && **slot == Self::DRAWN) {
            let known = a.proc.index() < trace.processes.len();
            let query = *queries.entry((a.proc, a.cbid)).or_insert_with(|| known && is_query(&trace.api_name(a)));
            if query {
                *slot = Self::QUERY;
            }
        }
        let mut hidden_in: HashMap<u32, u32> = HashMap::default();
        let mut hidden = 0;
        for &r in enclosing.iter().filter(|&&r| r != Self::DRAWN) {
            hidden += 1;
            if r != Self::QUERY {
                *hidden_in.entry(r).or_default() += 1;
            }
        }
        if hidden == 0 {
            return NestedDriverCalls::default();
        }
        NestedDriverCalls { enclosing, hidden_in, adopted: HashMap::default(), hidden }
    }

    /// Whether API call `api` is left out of the timeline.
    #[inline]
    pub fn is_hidden(&self, api: usize) -> bool {
        self.enclosing.get(api).is_some_and(|&r| r != Self::DRAWN)
    }

    /// How many driver calls runtime call `api` hides (0: none).
    pub fn hidden_in(&self, api: u32) -> u32 {
        self.hidden_in.get(&api).copied().unwrap_or(0)
    }

    /// The hidden calls whose arrows start at runtime call `api` (the GPU work they launched).
    pub fn adopted(&self, api: u32) -> &[u32] {
        self.adopted.get(&api).map_or(&[], Vec::as_slice)
    }

    /// Hands the arrows of every hidden nested call that launched GPU work to the runtime call it lies in; a
    /// query that launched GPU work is drawn after all (it did work).
    pub(crate) fn adopt_launches(&mut self, flows: &Flows) {
        for (i, r) in self.enclosing.iter_mut().enumerate() {
            if *r == Self::QUERY && flows.api[i] > 0 {
                *r = Self::DRAWN;
                self.hidden -= 1;
            } else if *r != Self::DRAWN && flows.api[i] > 0 {
                self.adopted.entry(*r).or_default().push(i as u32);
            }
        }
    }
}

/// Whether a driver function only asks something (`cuKernelGetName`, `cuGetProcAddress`, `cuCtxGetCurrent`): its
/// name is `cu` + a capital, with `Get` as a word after it.
pub fn is_query(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("cu").filter(|r| r.starts_with(|c: char| c.is_ascii_uppercase())) else {
        return false;
    };
    rest.match_indices("Get").any(|(i, _)| rest[i + 3..].chars().next().is_none_or(|c| c.is_ascii_uppercase()))
}

/// Per API call, the runtime call on its thread that encloses it, for driver calls ([`NestedDriverCalls::DRAWN`]
/// for the rest); `thread[i]` numbers call `i`'s thread (below `threads`: its track). In one pass in time order
/// (calls are sorted by start): a driver call lies inside a runtime call of its thread exactly when the latest
/// end of the runtime calls begun by its start reaches its end. Runtime calls starting at the same time as a
/// driver call count as begun.
fn enclosing_runtime_calls(apis: &[ApiCall], thread: &[u32], threads: usize) -> Vec<u32> {
    let mut out = vec![NestedDriverCalls::DRAWN; apis.len()];
    // Per thread: (end, index) of the runtime call begun so far that ends last (index DRAWN: none yet).
    let mut latest = vec![(0u64, NestedDriverCalls::DRAWN); threads];
    let mut run = 0;
    while run < apis.len() {
        let start = apis[run].start;
        let end_of_run = run + apis[run..].iter().take_while(|a| a.start == start).count();
        for i in (run..end_of_run).filter(|&i| !apis[i].driver) {
            let slot = &mut latest[thread[i] as usize];
            if slot.1 == NestedDriverCalls::DRAWN || apis[i].end > slot.0 {
                *slot = (apis[i].end, i as u32);
            }
        }
        for i in (run..end_of_run).filter(|&i| apis[i].driver) {
            let (end, r) = latest[thread[i] as usize];
            if r != NestedDriverCalls::DRAWN && end >= apis[i].end {
                out[i] = r;
            }
        }
        run = end_of_run;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutr_model::ProcId;

    fn call(start: u64, end: u64, tid: u32, driver: bool) -> ApiCall {
        ApiCall {
            proc: ProcId(0),
            start,
            end,
            pid: 1,
            tid,
            correlation: start as u32,
            cbid: 1,
            driver,
            return_value: 0,
        }
    }

    #[test]
    fn queries_are_the_get_functions() {
        for q in [
            "cuKernelGetName",
            "cuDeviceGetAttribute",
            "cuDevicePrimaryCtxGetState",
            "cuGetProcAddress",
            "cuCtxGetCurrent",
        ] {
            assert!(is_query(q), "{q}");
        }
        for w in ["cuLaunchKernel", "cuMemCreate", "cuStreamSynchronize", "cuGetter", "cudaGetDevice", "cuMemset"] {
            assert!(!is_query(w), "{w}");
        }
    }

    #[test]
    fn driver_calls_inside_a_runtime_call_of_their_thread_are_hidden() {
        let mut t = Trace::default();
        t.apis = vec![
            call(10, 100, 1, false), // 0: runtime
            call(10, 20, 1, true),   // 1: starts with it: inside
            call(30, 40, 2, true),   // 2: another thread: drawn
            call(50, 100, 1, true),  // 3: ends with it: inside
            call(90, 110, 1, true),  // 4: ends after it: drawn
            call(120, 130, 1, true), // 5: after it: drawn
        ];
        let tracks: Vec<u32> = t.apis.iter().map(|a| a.tid - 1).collect();
        let nested = NestedDriverCalls::find(&t, DriverCalls::Direct, &tracks, 2);
        let hidden: Vec<usize> = (0..6).filter(|&i| nested.is_hidden(i)).collect();
        assert_eq!(hidden, [1, 3]);
        assert_eq!((nested.hidden, nested.hidden_in(0), nested.hidden_in(2)), (2, 2, 0));
        assert_eq!(NestedDriverCalls::find(&t, DriverCalls::All, &tracks, 2).hidden, 0);
    }
}
