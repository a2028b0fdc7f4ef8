//! The CPU->GPU arrows of a timeline: from each API call to the GPU work it launched (kernels, copies, memsets)
//! and to the synchronizations it waited in; and from each call that made a CUDA graph node to the node's first
//! replay (`graphs`).

use cutr_model::{CorrKey, Trace};
use rayon::prelude::*;
use rustc_hash::FxHashMap as HashMap;

/// The CPU->GPU arrows: for each GPU record (and sync) its number among the records its API call started, and for
/// each API call how many it started. Arrow ids follow from these and the correlation key
/// ([`cutr_model::CorrKey::flow_id`]), so no id lists are stored.
#[derive(Clone, Debug, Default)]
pub struct Flows {
    /// Per kernel / memcpy / memset / sync: its number among its API call's records (`NONE` = no call).
    pub kernel: Vec<u32>,
    pub memcpy: Vec<u32>,
    pub memset: Vec<u32>,
    pub sync: Vec<u32>,
    /// Per API call: how many GPU records it launched.
    pub api: Vec<u32>,
    /// The arrows from the calls that made CUDA graph nodes to each node's first replay.
    pub capture: super::graphs::CaptureFlows,
    /// Every arrow: launches' and captures'.
    pub total: u64,
}

impl Flows {
    pub const NONE: u32 = u32::MAX;

    /// In parallel: each row's launching call is looked up, each worker counts the records of its own range of
    /// calls (walking all rows), and a record whose call launched only it is number 0. Only the records of calls
    /// that launched several (graph launches) are numbered in a walk, in row (start) order.
    pub(crate) fn build(trace: &Trace) -> Flows {
        fn launchers<T: Sync>(trace: &Trace, rows: &[T], key: impl Fn(&T) -> CorrKey + Sync) -> Vec<u32> {
            rows.par_iter().map(|r| trace.launcher_index(key(r)).unwrap_or(Flows::NONE)).collect()
        }
        let mut kernel = launchers(trace, &trace.kernels, |k| k.corr());
        let mut memcpy = launchers(trace, &trace.memcpys, |m| m.corr());
        let mut memset = launchers(trace, &trace.memsets, |m| m.corr());
        let mut sync = launchers(trace, &trace.syncs, |s| s.corr());
        let mut api = vec![0u32; trace.apis.len()];
        let part = api.len().div_ceil(rayon::current_num_threads().max(1)).max(1);
        api.par_chunks_mut(part).enumerate().for_each(|(p, counts)| {
            let from = p * part;
            for &a in kernel.iter().chain(&memcpy).chain(&memset).chain(&sync) {
                if let Some(c) = counts.get_mut((a as usize).wrapping_sub(from)) {
                    *c += 1;
                }
            }
        });
        let capture = super::graphs::CaptureFlows::build(trace);
        let total = api.iter().map(|&c| c as u64).sum::<u64>() + capture.len() as u64;
        let mut several = Vec::new();
        for rows in [&mut kernel, &mut memcpy, &mut memset, &mut sync] {
            let api = &api;
            // Rows whose call launched several records, in order; every other row with a call is number 0.
            several.push(
                rows.par_iter_mut()
                    .enumerate()
                    .filter_map(|(i, a)| match *a {
                        Flows::NONE => None,
                        _ if api[*a as usize] == 1 => {
                            *a = 0;
                            None
                        }
                        _ => Some(i),
                    })
                    .collect::<Vec<usize>>(),
            );
        }
        let mut seen: HashMap<u32, u32> = HashMap::default();
        for (rows, several) in [&mut kernel, &mut memcpy, &mut memset, &mut sync].into_iter().zip(several) {
            for i in several {
                let n = seen.entry(rows[i]).or_default();
                rows[i] = *n;
                *n += 1;
            }
        }
        Flows { kernel, memcpy, memset, sync, api, capture, total }
    }
}
