//! `cupti-convert source`: where kernels spend their time, by source line, from the PC samples of a recording made
//! with `cupti-record --pc-sampling` and the cubins it kept.
//!
//! Per kernel (function): its samples, split by stall reason; its functions (the kernel and those it calls, with
//! exclusive and inclusive samples, `functions`); its source lines ranked by samples, each with its stall split,
//! the call sites it was inlined through and the function holding it; its hottest SASS offsets. A sample is one
//! warp of one SM seen at one PC in one reason; `selected` is the warp issuing (not stalled). CUPTI reports each
//! sample once under its reason and, when the warp did not issue, again under `<reason>_not_issued`: only the first
//! are counted.
//! Lines come from the cubin's own line tables (`cutr-source`); a cubin without them (built without `-lineinfo`)
//! gives offsets only, and the report says so.

mod callgraph;
mod cubins;
mod functions;
mod lines;
mod pprof;
mod render;
mod sass;

use std::collections::{BTreeMap, HashMap};

use cutr_format::container::ChunkType;
use cutr_format::{Problem, Reader};
use cutr_model::pc_reasons::{ReasonCheck, name_samples};
use cutr_source::SourceMap;
use serde::Serialize;

pub use cubins::KernelLines;
pub use functions::{CallSiteRow, FunctionRow};
pub use pprof::{PprofSummary, pprof, pprof_after, pprof_with};
pub use render::{render_csv, render_text};

/// What `source` shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceOptions {
    /// Only kernels whose demangled or mangled name contains this.
    pub kernel: Option<String>,
    /// Rows of each kernel's lines and PCs (0 = all).
    pub top: usize,
    /// The SASS text of the PCs shown, where `nvdisasm` is installed.
    pub sass: bool,
    /// The `nvdisasm` to run (default: `CUTR_NVDISASM`, else `nvdisasm` on the PATH).
    pub nvdisasm: Option<std::path::PathBuf>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions { kernel: None, top: 10, sass: true, nvdisasm: None }
    }
}

/// Samples per stall reason, most first.
pub type Stalls = Vec<(String, u64)>;

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineRow {
    pub file: String,
    pub dir: String,
    pub line: u32,
    pub samples: u64,
    /// Share of the kernel's samples.
    pub percent: f64,
    pub stalls: Stalls,
    /// `function@file:line` of each call site the line was inlined through, innermost first.
    pub inlined_at: Vec<String>,
    /// The function whose code holds the line (demangled): the kernel, or a function it calls.
    pub function: String,
    /// `file:line` of each call of that function (most charged first); empty for the kernel's own lines and where
    /// call sites are unknown.
    pub called_from: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PcRow {
    pub pc_offset: u64,
    /// `file:line`, empty without line info (and in a function without line rows of its own).
    pub location: String,
    /// The function holding the PC (demangled), empty where the cubin could not be read.
    pub function: String,
    pub samples: u64,
    pub percent: f64,
    pub stalls: Stalls,
    /// The instruction, from `nvdisasm` where one is installed; empty otherwise.
    pub sass: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelSource {
    pub name: String,
    pub mangled: String,
    pub cubin_crc: u64,
    pub samples: u64,
    /// Share of every kernel's samples.
    pub percent: f64,
    pub stalls: Stalls,
    /// Whether its cubin had line tables.
    pub has_lines: bool,
    /// What its cubin says about lines: present, absent (no -lineinfo), damaged, or the cubin unreadable or lost.
    pub line_tables: KernelLines,
    pub lines: Vec<LineRow>,
    pub pcs: Vec<PcRow>,
    /// Its functions (the kernel and those it calls), most exclusive samples first; empty where its cubin could not
    /// be read.
    pub functions: Vec<FunctionRow>,
    /// Why the call sites of its called functions are unknown (`nvdisasm` not installed, failed, timed out or not
    /// run): their samples are then charged to no call site. `None` when known or when it calls nothing.
    pub call_sites_unknown: Option<String>,
    /// Samples in called functions that no known call reaches, charged to no call site: the kernel's inclusive
    /// total is its samples less these.
    pub uncharged_samples: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SourceReport {
    pub files: Vec<String>,
    /// Samples attributed to PCs (stall reasons, not-issued duplicates left out).
    pub samples: u64,
    /// CUPTI's counts over all collections: every sample taken, those dropped, those of kernels it does not
    /// report (its own and the driver's).
    pub cupti_total_samples: u64,
    pub dropped_samples: u64,
    pub non_user_samples: u64,
    /// Collections in which the hardware buffer had filled (samples lost).
    pub hardware_buffer_full: u64,
    pub cubins: usize,
    pub cubins_with_lines: usize,
    pub kernels: Vec<KernelSource>,
    /// The `nvdisasm` that gave the SASS text, if one was found.
    pub disassembler: Option<String>,
    /// Cubins that could not be read, `nvdisasm`'s failures (each input's own warnings are in `inputs`).
    pub warnings: Vec<String>,
    /// Per input, in order: what was damaged, lost and left out.
    #[serde(skip)]
    pub inputs: Vec<SourceInput>,
    /// The `nvdisasm` listings the report read, by cubin, for [`pprof_after`] to use again.
    #[serde(skip)]
    pub(crate) listings: Listings,
}

/// What one input's PC samples lost: its damaged or cut chunks, the samples no stall-reason table names, the
/// samples the hardware dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceInput {
    /// What the reader found wrong with the file and the `pc_samples` chunks that failed to decode, sorted as the
    /// other commands print them.
    pub problems: Vec<Problem>,
    /// Collections read, and those lost with a damaged or cut `pc_samples` chunk.
    pub collections: usize,
    pub lost_collections: usize,
    /// Samples left out by the stall-reason tables.
    pub reasons: ReasonCheck,
    pub dropped_samples: u64,
    pub hardware_buffer_full: u64,
}

impl SourceInput {
    /// Every warning about the input's PC samples beyond its problems: collections lost, samples left out, samples
    /// the hardware dropped.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.lost_collections > 0 {
            out.push(format!(
                "{} of {} PC sample collections are in damaged or cut pc_samples chunks: their samples are lost, \
                 counted nowhere",
                self.lost_collections,
                self.collections + self.lost_collections
            ));
        }
        out.extend(self.reasons.warnings());
        out.extend(self.dropped());
        out
    }

    /// The samples the hardware dropped, if any.
    pub fn dropped(&self) -> Option<String> {
        (self.dropped_samples > 0 || self.hardware_buffer_full > 0).then(|| {
            let full = self.hardware_buffer_full;
            format!(
                "PC samples lost: {} dropped by the hardware, {} {} with the hardware buffer full (a longer \
                 --pc-period samples less)",
                crate::fmt::thousands(self.dropped_samples),
                crate::fmt::thousands(full),
                if full == 1 { "collection" } else { "collections" }
            )
        })
    }
}

/// One PC: (cubin CRC, mangled function, offset).
pub(crate) type PcKey = (u64, String, u64);
/// Samples per stall reason.
pub(crate) type ByReason = BTreeMap<String, u64>;

/// Every PC's samples per stall reason over the recordings, with the source map of each cubin (`None` where it
/// could not be read) and CUPTI's counts in `r`.
pub(crate) struct Samples<'r> {
    pub by_pc: HashMap<PcKey, ByReason>,
    pub maps: HashMap<u64, Option<SourceMap>>,
    /// The cubins' bytes by CRC, read again when asked for (none are held).
    pub cubins: cubins::CubinBytes<'r>,
}

/// Reads the cubins and PC samples of `readers` (each its own process: contexts and stall tables are per file),
/// counting into `r` and warning there about what could not be read.
pub(crate) fn collect<'r>(readers: &'r [&'r Reader], r: &mut SourceReport) -> Samples<'r> {
    let mut by_pc: HashMap<PcKey, ByReason> = HashMap::new();
    for reader in readers {
        let input = add_file(reader, r, &mut by_pc);
        r.inputs.push(input);
    }
    let (maps, bytes) = cubins::read(readers, &by_pc, &mut r.warnings);
    r.cubins = maps.len();
    r.cubins_with_lines = maps.values().filter(|m| m.as_ref().is_some_and(SourceMap::has_lines)).count();
    Samples { by_pc, maps, cubins: bytes }
}

/// Builds the report from recordings (each its own process: contexts and stall tables are per file).
pub fn report(readers: &[&Reader], opts: &SourceOptions) -> SourceReport {
    let mut r = SourceReport {
        files: readers.iter().filter_map(|x| x.path()).map(|p| p.display().to_string()).collect(),
        ..Default::default()
    };
    let Samples { by_pc, maps, cubins } = collect(readers, &mut r);
    let mut kernels = kernels(by_pc, &maps, opts);
    r.samples = kernels.iter().fold(0u64, |a, k| a.saturating_add(k.0.samples));
    let all: u64 = r.samples.max(1);
    for (k, _) in &mut kernels {
        k.percent = 100.0 * k.samples as f64 / all as f64;
    }
    if let Some(f) = &opts.kernel {
        kernels.retain(|(k, _)| k.name.contains(f.as_str()) || k.mangled.contains(f.as_str()));
    }
    let crcs: Vec<u64> = kernels.iter().map(|(k, _)| k.cubin_crc).collect();
    let (disassembler, listings) = disassemble(&cubins, crcs, opts, &mut r.warnings);
    r.disassembler = disassembler;
    for (k, pcs) in &mut kernels {
        let listing = listings.get(&k.cubin_crc).cloned().unwrap_or_else(|| Err(NOT_DISASSEMBLED.to_string()));
        if let Some(map) = maps.get(&k.cubin_crc).and_then(Option::as_ref) {
            let sites = listing.as_ref().map(|l| map.call_sites(&k.mangled, l.calls_of(&k.mangled)));
            r.warnings.extend(functions::attach(k, pcs, map, sites.map_err(String::clone)));
        }
        if let Ok(listing) = listing {
            for p in &mut k.pcs {
                if let Some(t) = listing.text.get(&(k.mangled.clone(), p.pc_offset)) {
                    p.sass = t.clone();
                }
            }
        }
    }
    r.kernels = kernels.into_iter().map(|(k, _)| k).collect();
    r.listings = listings;
    r
}

/// Why a cubin has no listing when nothing said otherwise.
const NOT_DISASSEMBLED: &str = "its cubin could not be read again for nvdisasm";

/// Listings by cubin CRC (shared: each kernel of a cubin reads the same one).
pub(crate) type Listings = HashMap<u64, Result<std::sync::Arc<sass::Listing>, String>>;

/// One `nvdisasm` run per cubin of `crcs` (in parallel), where one is installed and `opts.sass` asks for it: the
/// SASS text of the PCs shown and the call sites, from the same run. Returns the disassembler used and per cubin
/// its listing or why there is none (a failed run is also warned of).
pub(crate) fn disassemble(
    cubins: &cubins::CubinBytes<'_>,
    mut crcs: Vec<u64>,
    opts: &SourceOptions,
    warnings: &mut Vec<String>,
) -> (Option<String>, Listings) {
    use rayon::prelude::*;
    crcs.sort_unstable();
    crcs.dedup();
    let none = |why: &str| crcs.iter().map(|c| (*c, Err(why.to_string()))).collect();
    if !opts.sass {
        return (None, none("nvdisasm was not run (--no-sass)"));
    }
    let found = opts.nvdisasm.as_deref().map(sass::Disassembler::at).or_else(sass::Disassembler::find);
    let Some(d) = found else {
        return (None, none("nvdisasm is not installed (CUTR_NVDISASM, or nvdisasm on the PATH)"));
    };
    // A cubin lost or unreadable is warned of where it was read; only nvdisasm's own failures are warned of here.
    let listings: Vec<(u64, Option<Result<sass::Listing, String>>)> =
        crcs.par_iter().map(|crc| (*crc, cubins.get(*crc).map(|c| d.disassemble(c.data())))).collect();
    let mut out = Listings::new();
    for (crc, l) in listings {
        let l = match l {
            None => Err(NOT_DISASSEMBLED.to_string()),
            Some(Ok(l)) => Ok(std::sync::Arc::new(l)),
            Some(Err(e)) => {
                warnings.push(format!("nvdisasm could not read cubin {crc:#x}: {e}"));
                Err(format!("nvdisasm could not read its cubin: {e}"))
            }
        };
        out.insert(crc, l);
    }
    (Some(d.path().display().to_string()), out)
}

/// Attaches to `trace` what the PC samples of its recordings (`readers`, in the trace's file order) say about each
/// kernel: samples, top 3 lines and top 3 stall reasons, for the viewers' kernel slices. Returns the warnings the
/// trace's load has not given already (samples the hardware dropped, unreadable cubins): the load reports the
/// damaged chunks and the samples no stall-reason table names. Kernels are matched by their recorded (mangled)
/// name.
pub fn annotate(trace: &mut cutr_model::Trace, readers: &[&Reader]) -> Vec<String> {
    const TOP: usize = 3;
    let has_samples = |r: &&Reader| r.chunks().iter().any(|c| c.chunk_type() == cutr_format::ChunkType::PcSamples);
    if !readers.iter().any(has_samples) {
        return Vec::new();
    }
    let r = report(readers, &SourceOptions { kernel: None, top: TOP, sass: false, nvdisasm: None });
    for k in &r.kernels {
        let Some(id) = trace.names.lookup(&k.mangled) else { continue };
        let share = |n: u64| if k.samples > 0 { 100.0 * n as f64 / k.samples as f64 } else { 0.0 };
        let top_lines = if k.has_lines {
            let at = |l: &LineRow| match (l.file.is_empty(), !l.function.is_empty() && l.function != k.name) {
                // A called function without lines of its own: named, not a line 0.
                (true, _) => l.function.split('(').next().unwrap_or_default().to_string(),
                (false, true) => {
                    format!("{}:{} in {}", l.file, l.line, l.function.split('(').next().unwrap_or_default())
                }
                (false, false) => format!("{}:{}", l.file, l.line),
            };
            k.lines.iter().map(|l| format!("{} {:.1}%", at(l), l.percent)).collect::<Vec<_>>().join(", ")
        } else {
            k.pcs.iter().map(|p| format!("+{:#x} {:.1}%", p.pc_offset, p.percent)).collect::<Vec<_>>().join(", ")
        };
        let top_stalls =
            k.stalls.iter().take(TOP).map(|(s, n)| format!("{s} {:.1}%", share(*n))).collect::<Vec<_>>().join(", ");
        // A kernel in several cubins: the lines and stalls of the one with the most samples (the first).
        let note = trace.kernel_source.entry(id).or_default();
        note.samples += k.samples;
        if note.top_lines.is_empty() {
            note.top_lines = top_lines;
            note.top_stalls = top_stalls;
        }
    }
    r.inputs.iter().filter_map(SourceInput::dropped).chain(r.warnings).collect()
}

/// Adds one file's PC samples, named by their stall-reason tables (`cutr_model::pc_reasons`), to `by_pc` and
/// CUPTI's counts to `r`; returns what the file lost. Sums saturate: a forged count cannot wrap a total (and hide
/// the dropped samples).
fn add_file(reader: &Reader, r: &mut SourceReport, by_pc: &mut HashMap<PcKey, ByReason>) -> SourceInput {
    let (collections, damaged) = reader.pc_samples();
    let mut input = SourceInput { problems: reader.problems().to_vec(), ..Default::default() };
    // A chunk that failed its checksum at open is already among the reader's problems.
    for p in damaged {
        if !input.problems.contains(&p) {
            input.problems.push(p);
        }
    }
    input.problems.sort_by_key(|p| format!("{p}"));
    input.lost_collections = input.problems.iter().filter(|p| is_lost_pc_chunk(p)).count();
    input.collections = collections.len();
    for c in &collections {
        r.cupti_total_samples = r.cupti_total_samples.saturating_add(c.total_samples);
        input.dropped_samples = input.dropped_samples.saturating_add(c.dropped_samples);
        r.non_user_samples = r.non_user_samples.saturating_add(c.non_user_samples);
        input.hardware_buffer_full += u64::from(c.hardware_buffer_full);
    }
    r.dropped_samples = r.dropped_samples.saturating_add(input.dropped_samples);
    r.hardware_buffer_full += input.hardware_buffer_full;
    // PC records of one PC come one after another within a collection: its entry is looked up once per run.
    let mut last: Option<(&cutr_format::PcRecord, PcKey)> = None;
    input.reasons = name_samples(&collections, |_, pc, reason, n| {
        if !last.as_ref().is_some_and(|(at, _)| std::ptr::eq(*at, pc)) {
            last = Some((pc, (pc.cubin_crc, pc.function_name.clone(), pc.pc_offset)));
        }
        let key = last.as_ref().map(|l| l.1.clone()).unwrap_or_default();
        let sum = by_pc.entry(key).or_default().entry(reason.to_string()).or_default();
        *sum = sum.saturating_add(n);
    });
    input
}

/// A `pc_samples` chunk the reader could not read (damaged, or cut by the end of the file).
fn is_lost_pc_chunk(p: &Problem) -> bool {
    matches!(
        p,
        Problem::DamagedChunk { chunk_type: ChunkType::PcSamples, .. }
            | Problem::TruncatedChunk { chunk_type: ChunkType::PcSamples, .. }
    )
}

fn sorted(m: &BTreeMap<String, u64>) -> Stalls {
    let mut v: Stalls = m.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (k.clone(), *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn add(into: &mut BTreeMap<String, u64>, from: &BTreeMap<String, u64>) {
    for (k, n) in from {
        let sum = into.entry(k.clone()).or_default();
        *sum = sum.saturating_add(*n);
    }
}

/// The samples of every reason, saturating.
fn total(by_reason: &BTreeMap<String, u64>) -> u64 {
    by_reason.values().fold(0u64, |a, n| a.saturating_add(*n))
}

/// Per kernel: lines and PCs ranked by samples, with its PCs' samples (for its functions, once call sites are
/// known).
fn kernels(
    by_pc: HashMap<PcKey, BTreeMap<String, u64>>,
    maps: &HashMap<u64, Option<SourceMap>>,
    opts: &SourceOptions,
) -> Vec<(KernelSource, Vec<(u64, ByReason)>)> {
    let mut per_kernel: BTreeMap<(u64, String), Vec<(u64, ByReason)>> = BTreeMap::new();
    for ((crc, function, pc), stalls) in by_pc {
        per_kernel.entry((crc, function)).or_default().push((pc, stalls));
    }
    let limit = if opts.top > 0 { opts.top } else { usize::MAX };
    let mut out: Vec<(KernelSource, Vec<(u64, ByReason)>)> = per_kernel
        .into_iter()
        .map(|((crc, mangled), pcs)| {
            let map = maps.get(&crc).and_then(Option::as_ref);
            let names = map.map(|m| functions::names(m, &mangled)).unwrap_or_default();
            let mut total = BTreeMap::new();
            let mut pc_rows = Vec::new();
            for (pc, stalls) in &pcs {
                add(&mut total, stalls);
                let function = map.and_then(|m| functions::function_of(m, &mangled, *pc));
                pc_rows.push(lines::PcSamples {
                    pc: *pc,
                    location: String::new(),
                    function: function.and_then(|f| names.get(f)).cloned().unwrap_or_default(),
                    stalls: stalls.clone(),
                });
            }
            let samples = self::total(&total);
            let pct = |n: u64| if samples > 0 { 100.0 * n as f64 / samples as f64 } else { 0.0 };
            let line_rows = map.map(|m| lines::top_lines(m, &mangled, &mut pc_rows, limit, pct)).unwrap_or_default();
            let mut pc_rows: Vec<PcRow> = pc_rows
                .into_iter()
                .map(|p| {
                    let n = self::total(&p.stalls);
                    let (pc_offset, location, function) = (p.pc, p.location, p.function);
                    PcRow {
                        pc_offset,
                        location,
                        function,
                        samples: n,
                        percent: pct(n),
                        stalls: sorted(&p.stalls),
                        sass: String::new(),
                    }
                })
                .collect();
            pc_rows.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.pc_offset.cmp(&b.pc_offset)));
            pc_rows.truncate(limit);
            let k = KernelSource {
                name: cutr_model::demangle::demangle(&mangled),
                mangled,
                cubin_crc: crc,
                samples,
                percent: 0.0,
                stalls: sorted(&total),
                has_lines: map.is_some_and(|m| m.has_lines()),
                line_tables: KernelLines::of(maps.get(&crc)),
                lines: line_rows,
                pcs: pc_rows,
                functions: Vec::new(),
                call_sites_unknown: None,
                uncharged_samples: 0,
            };
            (k, pcs)
        })
        .collect();
    out.sort_by(|a, b| b.0.samples.cmp(&a.0.samples).then_with(|| a.0.name.cmp(&b.0.name)));
    out
}
