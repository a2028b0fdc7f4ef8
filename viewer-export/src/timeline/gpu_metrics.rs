//! A GPU's metric counter tracks (`cutr_model::counters`: PM sampling, NVML, PC-sample stall rates, the
//! recording mark) in one block: a "GPU metrics" track under the GPU, and under it a track per series, named and
//! ordered by `counter_names` (utilization first, then SM, memory, interconnect, power and clocks, stall rates,
//! the rest). The order comes from the series' names alone, not from which sample came first, so two conversions,
//! and two recordings of the same metrics, show the same tracks in the same order.

use cutr_model::{NameId, ProcId, Trace};
use rustc_hash::FxHashMap as HashMap;

use super::counter_names::{CounterName, counter_name, unique_names};
use super::placement::first_seen;
use super::tracks::{Track, TrackMaker, TrackRole};

/// The name of the track that holds a GPU's metric tracks.
pub const GPU_METRICS: &str = "GPU metrics";

/// The counter track of each (file, device, series) of `Trace::counters`.
pub(crate) type CounterTracks = HashMap<(ProcId, u32, NameId), u32>;

impl TrackMaker<'_> {
    /// The track a GPU's metric tracks go under, under the GPU.
    fn gpu_metrics(&mut self, proc: ProcId, device: u32) -> u32 {
        let (gpu, json_pid) = self.gpu_and_json_pid(proc, device);
        let role = TrackRole::GpuMetrics { proc, device };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(gpu),
            name: GPU_METRICS.into(),
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }

    /// The counter track of one series of a GPU, under its GPU metrics track.
    fn counter(&mut self, proc: ProcId, device: u32, series: NameId, name: String) -> u32 {
        let parent = self.gpu_metrics(proc, device);
        let json_pid = self.set.tracks[parent as usize].json_pid;
        let role = TrackRole::Counter { proc, device, series };
        self.set.get(role.clone(), |_| Track {
            role,
            parent: Some(parent),
            name,
            json_pid,
            json_tid: 0,
            pid: 0,
            flat: true,
        })
    }
}

/// Makes every GPU's metric tracks, GPU by GPU (file, then device), each GPU's in display order with names
/// unique among them.
pub(crate) fn counter_tracks(maker: &mut TrackMaker<'_>, trace: &Trace) -> CounterTracks {
    let counters = &trace.counters;
    let keys = first_seen(counters.len(), |i| (counters[i].proc, counters[i].device, counters[i].series));
    let mut series: Vec<((ProcId, u32, NameId), CounterName)> =
        keys.into_iter().map(|(key, _)| (key, counter_name(trace.names.get(key.2)))).collect();
    // Ties (two metrics of one short name) go by the model's name, which is unique.
    series.sort_by(|(a, an), (b, bn)| {
        (a.0, a.1, an.order_key(), trace.names.get(a.2)).cmp(&(b.0, b.1, bn.order_key(), trace.names.get(b.2)))
    });
    let mut tracks = CounterTracks::default();
    for gpu in series.chunk_by(|a, b| (a.0.0, a.0.1) == (b.0.0, b.0.1)) {
        let mut names: Vec<_> = gpu.iter().map(|(_, c)| (c.name.clone(), &c.unit)).collect();
        unique_names(&mut names);
        for (&((proc, device, id), _), (name, _)) in gpu.iter().zip(names) {
            tracks.insert((proc, device, id), maker.counter(proc, device, id, name));
        }
    }
    tracks
}
