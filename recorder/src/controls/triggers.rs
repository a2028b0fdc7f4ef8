//! What else writes the flight recorder's window (`--ring-trigger`): an NVTX marker or range of a given name
//! (`nvtx:NAME`), or the application's `cudaProfilerStop` / `cuProfilerStop` (`cuda-profiler-stop`). Both are
//! found in the activity records the writer already holds, so a trigger costs the application nothing: the dump
//! follows at the flush that delivers the record (within `--flush-period`), its window ending there.

use std::collections::HashSet;

use cutr_schema::{LayoutTable, kinds};

/// One trigger.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RingTrigger {
    /// An NVTX marker or range start whose message is this name.
    Nvtx(String),
    /// `cudaProfilerStop` (runtime) or `cuProfilerStop` (driver) returned.
    CudaProfilerStop,
}

impl RingTrigger {
    /// A comma-separated list: `nvtx:NAME`, `cuda-profiler-stop`.
    pub fn parse_list(s: &str) -> Result<Vec<RingTrigger>, String> {
        let mut out = Vec::new();
        for t in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            out.push(match t {
                "cuda-profiler-stop" => RingTrigger::CudaProfilerStop,
                _ => match t.strip_prefix("nvtx:") {
                    Some(name) if !name.is_empty() => RingTrigger::Nvtx(name.to_string()),
                    _ => return Err(format!("unknown ring trigger '{t}': use nvtx:NAME or cuda-profiler-stop")),
                },
            });
        }
        if out.is_empty() {
            return Err("no ring trigger given: use nvtx:NAME or cuda-profiler-stop".into());
        }
        Ok(out)
    }

    /// The list `parse_list` reads back.
    pub fn list_arg(list: &[RingTrigger]) -> String {
        let one = |t: &RingTrigger| match t {
            RingTrigger::Nvtx(n) => format!("nvtx:{n}"),
            RingTrigger::CudaProfilerStop => "cuda-profiler-stop".into(),
        };
        list.iter().map(one).collect::<Vec<_>>().join(",")
    }
}

/// Finds trigger records in activity buffers.
pub(crate) struct TriggerScan {
    /// Record size by kind (0: a kind without a layout, where the walk stops).
    sizes: Vec<usize>,
    /// (MARKER's `name` offset, names that fire).
    marker: Option<(usize, Vec<String>)>,
    /// (`cbid` offset, firing cbid) of RUNTIME and of DRIVER records.
    api: Vec<(u32, usize, u32)>,
    /// String pointers whose text is a trigger name (from the interner's new strings).
    firing_ptrs: HashSet<u64>,
}

const DOMAIN_DRIVER: u32 = 1;
const DOMAIN_RUNTIME: u32 = 2;

impl TriggerScan {
    pub fn new(layouts: &LayoutTable, triggers: &[RingTrigger]) -> TriggerScan {
        let mut sizes = Vec::new();
        for r in layouts.records() {
            let k = r.kind as usize;
            if sizes.len() <= k {
                sizes.resize(k + 1, 0);
            }
            sizes[k] = r.size as usize;
        }
        let names: Vec<String> = triggers
            .iter()
            .filter_map(|t| match t {
                RingTrigger::Nvtx(n) => Some(n.clone()),
                RingTrigger::CudaProfilerStop => None,
            })
            .collect();
        let marker = layouts
            .get(kinds::MARKER)
            .and_then(|l| l.offset("name"))
            .filter(|_| !names.is_empty())
            .map(|off| (off, names));
        let mut api = Vec::new();
        if triggers.contains(&RingTrigger::CudaProfilerStop) {
            for (kind, domain, function) in [
                (kinds::RUNTIME, DOMAIN_RUNTIME, "cudaProfilerStop_v4000"),
                (kinds::DRIVER, DOMAIN_DRIVER, "cuProfilerStop"),
            ] {
                let cbid = (1..4096).find(|&c| cutr_schema::callbacks::raw_name(domain, c) == Some(function));
                if let (Some(cbid), Some(off)) = (cbid, layouts.get(kind).and_then(|l| l.offset("cbid"))) {
                    api.push((kind, off, cbid));
                }
            }
        }
        TriggerScan { sizes, marker, api, firing_ptrs: HashSet::new() }
    }

    /// Whether `buffer` holds a trigger record. `new_strings` are the strings first seen in this buffer (the
    /// interner's: a pointer whose text changed comes again), so a marker's name is known by its pointer.
    pub fn fires(&mut self, buffer: &[u8], new_strings: &[(u64, String)]) -> bool {
        if let Some((_, names)) = &self.marker {
            for (ptr, text) in new_strings {
                if names.iter().any(|n| n == text) {
                    self.firing_ptrs.insert(*ptr);
                } else {
                    self.firing_ptrs.remove(ptr);
                }
            }
        }
        let mut off = 0;
        while off + 4 <= buffer.len() {
            let kind = u32::from_le_bytes(buffer[off..off + 4].try_into().unwrap());
            let Some(&size) = self.sizes.get(kind as usize).filter(|&&s| s > 0) else { return false };
            let Some(rec) = buffer.get(off..off + size) else { return false };
            if kind == kinds::MARKER
                && let Some((name_off, _)) = &self.marker
                && let Some(b) = rec.get(*name_off..name_off + 8)
                && self.firing_ptrs.contains(&u64::from_le_bytes(b.try_into().unwrap()))
            {
                return true;
            }
            for &(k, cbid_off, cbid) in &self.api {
                if kind == k
                    && let Some(b) = rec.get(cbid_off..cbid_off + 4)
                    && u32::from_le_bytes(b.try_into().unwrap()) == cbid
                {
                    return true;
                }
            }
            off += size;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn triggers_parse_and_read_back() {
        let l = RingTrigger::parse_list("nvtx:anomaly, cuda-profiler-stop").unwrap();
        assert_eq!(l, [RingTrigger::Nvtx("anomaly".into()), RingTrigger::CudaProfilerStop]);
        assert_eq!(RingTrigger::list_arg(&l), "nvtx:anomaly,cuda-profiler-stop");
        assert!(RingTrigger::parse_list("nvtx:").is_err());
        assert_eq!(
            RingTrigger::parse_list("crash").unwrap_err(),
            "unknown ring trigger 'crash': use nvtx:NAME or cuda-profiler-stop"
        );
    }

    /// A MARKER record fires when its name pointer's text is a trigger name; a RUNTIME record when its cbid is
    /// cudaProfilerStop's (CUDA 13.0: 172), not for another function.
    #[test]
    fn marker_names_and_profiler_stop_fire() {
        let layouts = cutr_schema::layouts::builtin(130001).unwrap();
        let triggers = [RingTrigger::Nvtx("anomaly".into()), RingTrigger::CudaProfilerStop];
        let mut scan = TriggerScan::new(&layouts, &triggers);
        assert_eq!(scan.api.iter().find(|a| a.0 == kinds::RUNTIME).map(|a| a.2), Some(172));
        let m = layouts.get(kinds::MARKER).unwrap();
        let record = |kind: u32, size: u32, field: usize, value: u64, width: usize| {
            let mut r = vec![0u8; size as usize];
            r[0..4].copy_from_slice(&kind.to_le_bytes());
            r[field..field + width].copy_from_slice(&value.to_le_bytes()[..width]);
            r
        };
        let marker = record(kinds::MARKER, m.size, m.offset("name").unwrap(), 0x5000, 8);
        assert!(!scan.fires(&marker, &[(0x5000, "step 3".into())]));
        assert!(scan.fires(&marker, &[(0x5000, "anomaly".into())]));
        assert!(scan.fires(&marker, &[]), "a pointer known to name a trigger");
        assert!(!scan.fires(&marker, &[(0x5000, "step 4".into())]), "the pointer now names another text");
        let rt = layouts.get(kinds::RUNTIME).unwrap();
        let cbid = rt.offset("cbid").unwrap();
        assert!(scan.fires(&record(kinds::RUNTIME, rt.size, cbid, 172, 4), &[]));
        assert!(!scan.fires(&record(kinds::RUNTIME, rt.size, cbid, 171, 4), &[]), "cudaProfilerStart");
    }
}
