//! The names of the timeline's slices that are not in the model's tables: API function names, Kineto's names of
//! copies, memsets, syncs and overheads, and the health slice's verdict. Resolved once, before the parallel
//! writers run.

use cutr_model::rows::UmKind;
use cutr_model::{NameId, Names, ProcId, Trace, describe};
use rustc_hash::FxHashMap as HashMap;

use super::placement::first_seen;

/// Label texts beside a trace's [`Names`]: a label equal to a name the trace has keeps that name's id (so a
/// writer interning by id stores the text once); new texts get ids after the trace's.
#[derive(Clone, Debug, Default)]
pub struct LabelNames {
    base: u32,
    map: HashMap<Box<str>, NameId>,
    list: Vec<Box<str>>,
}

impl LabelNames {
    fn new(names: &Names) -> LabelNames {
        LabelNames { base: names.len() as u32, ..Default::default() }
    }

    fn intern(&mut self, names: &Names, s: &str) -> NameId {
        if let Some(id) = names.lookup(s).or_else(|| self.map.get(s).copied()) {
            return id;
        }
        let id = NameId(self.base + self.list.len() as u32);
        self.list.push(s.into());
        self.map.insert(s.into(), id);
        id
    }

    /// The text of `id`: a trace name or a label.
    #[inline]
    pub fn get<'a>(&'a self, names: &'a Names, id: NameId) -> &'a str {
        match id.0.checked_sub(self.base) {
            Some(i) => self.list.get(i as usize).map_or("", |s| s),
            None => names.get(id),
        }
    }
}

/// Name ids of the slices named by kind rather than by a string of the recording.
#[derive(Clone, Debug, Default)]
pub struct Labels {
    pub api: HashMap<(ProcId, bool, u32), NameId>,
    pub memcpy: HashMap<(u8, u8, u8), NameId>,
    pub memset: HashMap<u16, NameId>,
    pub sync: HashMap<u32, NameId>,
    pub overhead: HashMap<u32, NameId>,
    /// Unified memory: each kind's slice name, the processors named in events (`CPU`, `GPU 1`), and the sets of
    /// processors thrashing names (`GPU 0, GPU 1`).
    pub um: HashMap<UmKind, NameId>,
    pub um_processor: HashMap<super::um::Processor, NameId>,
    pub um_processor_set: HashMap<u64, NameId>,
    pub health: NameId,
    /// `replay of: PATH` of each NVTX range (index into `Trace::ranges`) a CUDA graph node was made in.
    pub replay: HashMap<u32, NameId>,
    pub names: LabelNames,
}

impl Labels {
    pub(crate) fn new(trace: &Trace) -> Labels {
        let mut names = LabelNames::new(&trace.names);
        let mut name = |s: &str| names.intern(&trace.names, s);
        let mut l = Labels::default();
        // The distinct functions called (a few dozen among millions of calls, found in parallel), named in sorted
        // order; the other labels named in the order their first row comes.
        let (apis, copies, sets, syncs) = (&trace.apis, &trace.memcpys, &trace.memsets, &trace.syncs);
        let mut called = first_seen(apis.len(), |i| (apis[i].proc, apis[i].driver, apis[i].cbid));
        called.sort_unstable();
        let copies = first_seen(copies.len(), |i| (copies[i].copy_kind, copies[i].src_kind, copies[i].dst_kind));
        let sets = first_seen(sets.len(), |i| sets[i].memory_kind);
        let syncs = first_seen(syncs.len(), |i| syncs[i].sync_type);
        for ((proc, driver, cbid), _) in called {
            l.api.insert((proc, driver, cbid), name(&trace.api_name_of(proc, driver, cbid)));
        }
        for (c, _) in copies {
            l.memcpy.insert(c, name(&describe::memcpy_name(c.0, c.1, c.2)));
        }
        for (s, _) in sets {
            l.memset.insert(s, name(&describe::memset_name(s)));
        }
        for (s, _) in syncs {
            l.sync.insert(s, name(describe::sync_type(s)));
        }
        for o in &trace.overheads {
            l.overhead.entry(o.kind).or_insert_with(|| name(describe::overhead_kind(o.kind)));
        }
        for e in &trace.um {
            l.um.entry(e.kind).or_insert_with(|| name(super::um::um_slice_name(e.kind)));
            if e.kind.is_migration() || e.kind == UmKind::RemoteMap {
                for p in super::um::um_endpoints(e) {
                    l.um_processor.entry(p).or_insert_with(|| name(&super::um::processor_name(p)));
                }
            }
            if e.kind == UmKind::Thrashing {
                l.um_processor_set.entry(e.processors).or_insert_with(|| name(&processor_set(e.processors)));
            }
        }
        l.health = name(&health_name(trace));
        // Last, so that a recording without graphs names everything else as before.
        l.replay = super::graphs::replay_names(trace, &mut name);
        l.names = names;
        l
    }
}

/// The GPUs of a thrashing record's bit mask (`GPU 0, GPU 3`), `none` for an empty one.
fn processor_set(mask: u64) -> String {
    let gpus: Vec<String> = (0..64).filter(|b| mask >> b & 1 == 1).map(|b| format!("GPU {b}")).collect();
    if gpus.is_empty() { "none".into() } else { gpus.join(", ") }
}

/// The name of the health slice: "recording complete: nothing lost", "LOSS: ..." with every non-zero loss
/// counter, or, for a file that was not closed cleanly, "RECOVERED: ..." saying what is known of the loss.
pub fn health_name(trace: &Trace) -> String {
    let loss = trace.loss();
    let mut parts: Vec<String> =
        loss.entries().iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let s = &trace.stats;
    if s.records_in_damaged_chunks > 0 {
        parts.push(format!("records in damaged chunks {}", s.records_in_damaged_chunks));
    }
    if s.damaged_chunks > 0 {
        parts.push(format!("damaged chunks {}", s.damaged_chunks));
    }
    if trace.processes.iter().any(|p| !p.problems.is_empty()) {
        parts.push("file problems (see args)".into());
    }
    let recovered: Vec<&cutr_model::Process> = trace.processes.iter().filter(|p| p.recovery.is_some()).collect();
    if !recovered.is_empty() {
        let lost: u64 = recovered.iter().filter_map(|p| p.recovery.as_ref()).map(|r| r.lost_bytes).sum();
        let mut name = format!(
            "RECOVERED: {} of {} file(s) not closed cleanly; {lost} bytes after their last complete chunk lost; \
             records CUPTI still held and losses after the last loss report unknown",
            recovered.len(),
            trace.processes.len()
        );
        if !parts.is_empty() {
            name.push_str(&format!("; LOSS: {}", parts.join(", ")));
        }
        return name;
    }
    if parts.is_empty() { "recording complete: nothing lost".into() } else { format!("LOSS: {}", parts.join(", ")) }
}

/// The args of the health slice: every loss counter, join count, recovery, file problem and note, by name.
pub fn health_args(trace: &Trace) -> Vec<(String, String)> {
    let loss = trace.loss();
    let mut v: Vec<(String, String)> =
        loss.entries().iter().map(|(k, n)| (format!("loss.{k}"), n.to_string())).collect();
    let stats = serde_json::to_value(&trace.stats).unwrap_or_default();
    if let Some(o) = stats.as_object() {
        for (k, n) in o {
            v.push((format!("joins.{k}"), n.to_string()));
        }
    }
    for p in &trace.processes {
        if let Some(r) = &p.recovery {
            v.push((
                format!("recovered.{}", p.path.display()),
                format!("not closed cleanly ({}); {} bytes lost", r.reason, r.lost_bytes),
            ));
        }
        for prob in &p.problems {
            v.push((format!("problem.{}", p.path.display()), prob.to_string()));
        }
        for w in &p.warnings {
            v.push((format!("warning.{}", p.path.display()), w.clone()));
        }
    }
    for n in &loss.notes {
        v.push(("note".into(), n.clone()));
    }
    v
}
