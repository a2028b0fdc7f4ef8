//! The parts of a split recording (`cupti-record --split`) read as one process: files whose metadata names the
//! same run (`split.run`, with the same host and pid) share one [`ProcId`], are loaded in part order on the
//! first part's time base, and their file-level facts (loss, problems, thread names, statistics) are added up;
//! the cubins and graph events each part repeats from the parts before are counted once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use cutr_format::{GraphEvent, Reader, SessionMetadata};

use crate::ids::ProcId;
use crate::trace::{Process, Trace};

/// The metadata keys the recorder marks a part with (in `SessionMetadata::config`).
pub const RUN_KEY: &str = "split.run";
pub const PART_KEY: &str = "split.part";

/// Which run a file is a part of, and which part.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RunPart {
    pub run: String,
    /// 1-based.
    pub part: u32,
}

impl RunPart {
    /// The run and part a file's metadata names; `None` for a file recorded without `--split`.
    pub fn of(meta: &SessionMetadata) -> Option<RunPart> {
        let get = |key: &str| meta.config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let run = get(RUN_KEY).filter(|r| !r.is_empty())?;
        let part = get(PART_KEY)?.parse().ok().filter(|&p| p >= 1)?;
        Some(RunPart { run: run.to_string(), part })
    }
}

/// The inputs in the order they are loaded, each with its process: the files of a run one after another in part
/// order, under the process of the run's first file among the inputs; every other file a process of its own.
/// Processes are numbered in the order of the inputs' first files.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Grouping {
    /// (input index, process), in load order.
    pub order: Vec<(usize, ProcId)>,
    /// What the user should know about a run's parts (a part given twice, parts missing), by process.
    pub warnings: Vec<(ProcId, String)>,
}

/// Groups the inputs by run. A run's identity is its id with the host and pid (a copied id on another process is
/// not the same run).
pub(crate) fn group(readers: &[Reader]) -> Grouping {
    type RunKey = (String, String, u32);
    let mut runs: HashMap<RunKey, usize> = HashMap::new();
    // Per process: its inputs with their part numbers.
    let mut procs: Vec<Vec<(u32, usize)>> = Vec::new();
    for (i, r) in readers.iter().enumerate() {
        let meta = r.metadata_shared();
        let meta = meta.as_deref();
        let part = meta.and_then(RunPart::of);
        let key = part.as_ref().zip(meta).map(|(p, m)| (p.run.clone(), m.host.clone(), m.pid));
        let proc = match key {
            Some(k) => *runs.entry(k).or_insert_with(|| {
                procs.push(Vec::new());
                procs.len() - 1
            }),
            None => {
                procs.push(Vec::new());
                procs.len() - 1
            }
        };
        procs[proc].push((part.map_or(1, |p| p.part), i));
    }
    let mut out = Grouping::default();
    for (p, mut files) in procs.into_iter().enumerate() {
        let proc = ProcId(p as u16);
        files.sort_unstable();
        if files.len() > 1 {
            let numbers: Vec<u32> = files.iter().map(|f| f.0).collect();
            if numbers.windows(2).any(|w| w[0] == w[1]) {
                out.warnings.push((
                    proc,
                    "a part of this split recording was given more than once: its records are counted once per copy"
                        .into(),
                ));
            }
            if let Some(w) = missing_parts_warning(&numbers) {
                out.warnings.push((proc, w));
            }
        }
        out.order.extend(files.into_iter().map(|(_, i)| (i, proc)));
    }
    out
}

/// The inputs by run, for commands that take each recording as a run of its own (`diff`): a split recording's
/// parts together in part order, every other file alone; runs in the order of their first input.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::path::Path;
/// let r = cutr_format::Reader::open(Path::new("../../fixtures/pytorch_loop.cutr"))?;
/// let s = cutr_format::Reader::open(Path::new("../../fixtures/cuda_workload.cutr"))?;
/// assert_eq!(cutr_model::runs::run_groups(&[r, s]), [vec![0], vec![1]]);
/// # Ok(())
/// # }
/// ```
pub fn run_groups(readers: &[Reader]) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut last = None;
    for (input, proc) in group(readers).order {
        match out.last_mut() {
            Some(run) if last == Some(proc) => run.push(input),
            _ => out.push(vec![input]),
        }
        last = Some(proc);
    }
    out
}

/// The parts missing before the last one given (`numbers` sorted), as a warning naming the first 20 and how many
/// there are. Walked lazily: a part number is a file's claim, and a forged `split.part` of four billion must not
/// make a list of four billion numbers.
fn missing_parts_warning(numbers: &[u32]) -> Option<String> {
    let last = *numbers.last()?;
    let mut distinct = numbers.to_vec();
    distinct.dedup();
    let missing = u64::from(last) - distinct.len() as u64;
    if missing == 0 {
        return None;
    }
    let named: Vec<String> =
        (1..=last).filter(|n| distinct.binary_search(n).is_err()).take(20).map(|n| n.to_string()).collect();
    let more = if missing > 20 { format!(" and {} more", missing - 20) } else { String::new() };
    Some(format!("parts of this split recording are missing: {}{more}", named.join(", ")))
}

/// Adds a loaded file to the trace's processes: a process of its own, or a later part of its run's (its graph
/// events already read from the parts before dropped: each part repeats the structure recorded before it).
/// `graphs_before`: how many graph events were pending before the file was read.
pub(crate) fn add_file(trace: &mut Trace, proc: ProcId, process: Process, graphs_before: usize) {
    match trace.processes.get_mut(proc.index()) {
        None => trace.processes.push(process),
        Some(run) => {
            drop_repeated_graph_events(&mut trace.graphs.pending.events, graphs_before, proc);
            merge_part(run, process);
        }
    }
}

/// Adds a later part's file-level facts to its run's process (`into`, made from the first part loaded).
fn merge_part(into: &mut Process, part: Process) {
    into.parts.push(part.path);
    into.loss.add(&part.loss);
    into.loss.is_final &= part.loss.is_final;
    into.problems.extend(part.problems);
    if into.recovery.is_none() {
        into.recovery = part.recovery;
    }
    for w in part.warnings {
        if !into.warnings.contains(&w) {
            into.warnings.push(w);
        }
    }
    into.stats.add(&part.stats);
    into.thread_names.extend(part.thread_names);
    // The latest part knows every device and mapping the process had by its end.
    let mut meta: SessionMetadata = (*into.meta).clone();
    if !part.meta.devices.is_empty() {
        meta.devices = part.meta.devices.clone();
    }
    if !part.meta.mappings.is_empty() {
        meta.mappings = part.meta.mappings.clone();
    }
    into.meta = Arc::new(meta);
}

/// The identity of a graph event: a process never records the same event (kind, time, thread, ids) twice, so a
/// second one is a later part's copy of the structure recorded before it.
type EventKey = (cutr_format::GraphEventKind, u64, u32, u32, u32, u32, u64, u64, u8);

fn event_key(e: &GraphEvent) -> EventKey {
    (e.kind, e.timestamp, e.thread_id, e.graph, e.other_graph, e.exec, e.node, e.other_node, e.node_type)
}

/// Drops from `events[from..]` (a later part's, of `proc`) the graph events already read from its run's earlier
/// parts; returns how many were dropped.
fn drop_repeated_graph_events(events: &mut Vec<(ProcId, GraphEvent)>, from: usize, proc: ProcId) -> usize {
    let seen: std::collections::HashSet<_> =
        events[..from].iter().filter(|(p, _)| *p == proc).map(|(_, e)| event_key(e)).collect();
    if seen.is_empty() {
        return 0;
    }
    let before = events.len();
    let mut i = 0;
    events.retain(|(p, e)| {
        i += 1;
        i <= from || *p != proc || !seen.contains(&event_key(e))
    });
    before - events.len()
}

/// The paths of a process's files: the first part, then the later ones.
pub fn files_of(p: &Process) -> Vec<PathBuf> {
    std::iter::once(p.path.clone()).chain(p.parts.iter().cloned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(config: &[(&str, &str)]) -> SessionMetadata {
        let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        SessionMetadata { config, ..Default::default() }
    }

    #[test]
    fn a_part_is_named_by_its_run_and_number_and_nothing_else_is_one() {
        let part = RunPart::of(&meta(&[("split", "60s"), (RUN_KEY, "5f0c1d2e3f405162"), (PART_KEY, "3")]));
        assert_eq!(part, Some(RunPart { run: "5f0c1d2e3f405162".into(), part: 3 }));
        assert_eq!(RunPart::of(&meta(&[("split", "")])), None);
        assert_eq!(RunPart::of(&meta(&[(RUN_KEY, "ab"), (PART_KEY, "0")])), None, "parts count from 1");
        assert_eq!(RunPart::of(&meta(&[(RUN_KEY, "ab"), (PART_KEY, "x")])), None);
        assert_eq!(RunPart::of(&meta(&[(RUN_KEY, ""), (PART_KEY, "1")])), None);
    }

    #[test]
    fn missing_parts_are_named_and_counted_without_walking_a_forged_number() {
        assert_eq!(missing_parts_warning(&[1, 2, 3]), None);
        assert_eq!(missing_parts_warning(&[1, 1, 2]), None, "a doubled part is warned of apart");
        assert_eq!(missing_parts_warning(&[1, 3]).unwrap(), "parts of this split recording are missing: 2");
        assert_eq!(missing_parts_warning(&[2, 3]).unwrap(), "parts of this split recording are missing: 1");
        // A forged part number: 4,294,967,292 parts missing, the first 20 named, at once.
        let w = missing_parts_warning(&[1, u32::MAX - 1]).unwrap();
        assert_eq!(
            w,
            "parts of this split recording are missing: 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, \
             19, 20, 21 and 4294967272 more"
        );
    }

    #[test]
    fn a_later_parts_copies_of_graph_events_are_dropped_and_its_own_kept() {
        use cutr_format::GraphEventKind;
        let ev = |t: u64, node: u64| GraphEvent { node, ..GraphEvent::new(GraphEventKind::NodeCreated, t, 7) };
        let (a, b) = (ProcId(0), ProcId(1));
        let mut events = vec![(a, ev(10, 1)), (b, ev(10, 1)), (a, ev(20, 2))];
        // Part 2 of process a: a copy of both of a's events, one new; b's event is another process's.
        events.extend([(a, ev(10, 1)), (a, ev(20, 2)), (a, ev(30, 3))]);
        assert_eq!(drop_repeated_graph_events(&mut events, 3, a), 2);
        let kept: Vec<(u16, u64)> = events.iter().map(|(p, e)| (p.0, e.timestamp)).collect();
        assert_eq!(kept, [(0, 10), (1, 10), (0, 20), (0, 30)]);
    }
}
