//! PC samples as a pprof profile (`cupti-convert source --pprof OUT.pb.gz`), for `go tool pprof`, speedscope and
//! flame-graph tools: one sample per (PC, stall reason) with its count, labelled with the stall reason and the
//! kernel; each PC one location whose lines are its source position and the call sites it was inlined through
//! (innermost first, as pprof wants inline frames), the outermost named after the function holding the PC; one
//! mapping per cubin. A sample in a function the kernel calls is a stack, leaf first: its PC, then the location of
//! each CALL up to the kernel, its count split among the paths as `source`'s inclusive view splits it (one sample
//! per path).
//!
//! The messages are those of pprof's `profile.proto` (github.com/google/pprof/proto/profile.proto), declared here
//! with prost's derive. A location's address is synthetic: cubin number in bits 40.., the function's number in its
//! cubin in bits 24..40, the PC offset in the function below; pprof only needs it unique per mapping.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use cutr_format::Reader;
use prost::Message;

use super::callgraph::Calls;
use super::{ByReason, Listings, PcKey, Samples, SourceOptions, SourceReport, collect, disassemble, functions, total};

#[derive(Clone, PartialEq, Message)]
struct Profile {
    #[prost(message, repeated, tag = "1")]
    sample_type: Vec<ValueType>,
    #[prost(message, repeated, tag = "2")]
    sample: Vec<Sample>,
    #[prost(message, repeated, tag = "3")]
    mapping: Vec<Mapping>,
    #[prost(message, repeated, tag = "4")]
    location: Vec<Location>,
    #[prost(message, repeated, tag = "5")]
    function: Vec<Function>,
    #[prost(string, repeated, tag = "6")]
    string_table: Vec<String>,
    #[prost(message, optional, tag = "11")]
    period_type: Option<ValueType>,
    #[prost(int64, tag = "12")]
    period: i64,
    #[prost(int64, repeated, tag = "13")]
    comment: Vec<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct ValueType {
    #[prost(int64, tag = "1")]
    r#type: i64,
    #[prost(int64, tag = "2")]
    unit: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Sample {
    #[prost(uint64, repeated, tag = "1")]
    location_id: Vec<u64>,
    #[prost(int64, repeated, tag = "2")]
    value: Vec<i64>,
    #[prost(message, repeated, tag = "3")]
    label: Vec<Label>,
}

#[derive(Clone, PartialEq, Message)]
struct Label {
    #[prost(int64, tag = "1")]
    key: i64,
    #[prost(int64, tag = "2")]
    str: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Mapping {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    memory_start: u64,
    #[prost(uint64, tag = "3")]
    memory_limit: u64,
    #[prost(int64, tag = "5")]
    filename: i64,
    #[prost(bool, tag = "7")]
    has_functions: bool,
    #[prost(bool, tag = "8")]
    has_filenames: bool,
    #[prost(bool, tag = "9")]
    has_line_numbers: bool,
    #[prost(bool, tag = "10")]
    has_inline_frames: bool,
}

#[derive(Clone, PartialEq, Message)]
struct Location {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(uint64, tag = "2")]
    mapping_id: u64,
    #[prost(uint64, tag = "3")]
    address: u64,
    #[prost(message, repeated, tag = "4")]
    line: Vec<Line>,
}

#[derive(Clone, PartialEq, Message)]
struct Line {
    #[prost(uint64, tag = "1")]
    function_id: u64,
    #[prost(int64, tag = "2")]
    line: i64,
}

#[derive(Clone, PartialEq, Message)]
struct Function {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(int64, tag = "2")]
    name: i64,
    #[prost(int64, tag = "3")]
    system_name: i64,
    #[prost(int64, tag = "4")]
    filename: i64,
}

/// The string table: index 0 is "" as pprof requires.
#[derive(Default)]
struct Strings {
    index: HashMap<String, i64>,
    list: Vec<String>,
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if self.list.is_empty() {
            self.list.push(String::new());
            self.index.insert(String::new(), 0);
        }
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as i64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// What a profile holds, for the command's summary line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PprofSummary {
    pub samples: u64,
    pub locations: usize,
    pub functions: usize,
}

/// The PC samples of `readers` as a gzipped pprof profile, what it holds, and the warnings of reading the samples
/// (lost samples, samples left out, unreadable cubins; each input's problems are in [`SourceReport::inputs`]).
/// Call sites come from `nvdisasm` where one is installed ([`pprof_with`] chooses).
pub fn pprof(readers: &[&Reader]) -> (Vec<u8>, PprofSummary, Vec<String>) {
    pprof_with(readers, &SourceOptions::default())
}

/// [`pprof`] with `opts.sass` and `opts.nvdisasm` saying whether and which `nvdisasm` finds the call sites: a
/// sample in a called function is a stack of its location and each call site's location up to the kernel (leaf
/// first, as pprof orders them), its count split among the paths as `source`'s inclusive view splits it.
pub fn pprof_with(readers: &[&Reader], opts: &SourceOptions) -> (Vec<u8>, PprofSummary, Vec<String>) {
    profile(readers, opts, &Listings::new())
}

/// [`pprof_with`] after [`super::report`] of the same recordings: the cubins the report disassembled are not
/// disassembled again (only those of kernels its `--kernel` filter left out are).
pub fn pprof_after(
    readers: &[&Reader],
    report: &SourceReport,
    opts: &SourceOptions,
) -> (Vec<u8>, PprofSummary, Vec<String>) {
    profile(readers, opts, &report.listings)
}

fn profile(readers: &[&Reader], opts: &SourceOptions, known: &Listings) -> (Vec<u8>, PprofSummary, Vec<String>) {
    let mut r = SourceReport::default();
    let samples = collect(readers, &mut r);
    let calls = call_graphs(&samples, opts, known, &mut r.warnings);
    let profile = build(samples.by_pc, &samples.maps, &calls, &r);
    let summary = PprofSummary {
        samples: profile.sample.iter().fold(0u64, |a, s| a.saturating_add(s.value[0] as u64)),
        locations: profile.location.len(),
        functions: profile.function.len(),
    };
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    // Writing to a Vec cannot fail.
    let bytes = gz.write_all(&profile.encode_to_vec()).and_then(|()| gz.finish()).unwrap_or_default();
    let mut warnings: Vec<String> = r.inputs.iter().flat_map(|i| i.warnings()).collect();
    warnings.append(&mut r.warnings);
    (bytes, summary, warnings)
}

/// The call graph of each sampled kernel whose section holds functions besides itself (the only ones `nvdisasm`
/// runs for), warning of each whose call sites are unknown.
fn call_graphs(
    samples: &Samples<'_>,
    opts: &SourceOptions,
    known: &Listings,
    warnings: &mut Vec<String>,
) -> HashMap<(u64, String), Calls> {
    let mut at: BTreeMap<(u64, &str), HashMap<u64, u64>> = BTreeMap::new();
    for ((crc, kernel, pc), reasons) in &samples.by_pc {
        let map = samples.maps.get(crc).and_then(Option::as_ref);
        if map.is_some_and(|m| m.code_functions(kernel).len() > 1) {
            at.entry((*crc, kernel.as_str())).or_default().insert(*pc, total(reasons));
        }
    }
    let crcs: Vec<u64> = at.keys().map(|k| k.0).filter(|crc| !known.contains_key(crc)).collect();
    let mut listings = known.clone();
    if !crcs.is_empty() {
        listings.extend(disassemble(&samples.cubins, crcs, opts, warnings).1);
    }
    let mut out = HashMap::new();
    for ((crc, kernel), totals) in at {
        let Some(map) = samples.maps.get(&crc).and_then(Option::as_ref) else { continue };
        match listings.get(&crc) {
            Some(Ok(listing)) => {
                let sites = map.call_sites(kernel, listing.calls_of(kernel));
                let calls = Calls::new(map.code_functions(kernel), sites, |pc| totals.get(&pc).copied().unwrap_or(0));
                out.insert((crc, kernel.to_string()), calls);
            }
            Some(Err(why)) => warnings.push(format!(
                "{}: its call sites are unknown ({why}): samples in the functions it calls have no caller in the \
                 profile",
                cutr_model::demangle::demangle(kernel)
            )),
            None => {}
        }
    }
    out
}

/// Builds the profile: functions, locations (one per PC, call sites included) and samples.
struct Builder<'a> {
    p: Profile,
    s: Strings,
    maps: &'a HashMap<u64, Option<cutr_source::SourceMap>>,
    cubins: Vec<u64>,
    function_ids: HashMap<(String, String), u64>,
    function_numbers: HashMap<(u64, String), u64>,
    locations: HashMap<(u64, String, u64), u64>,
}

impl Builder<'_> {
    /// The function of this (shown name, symbol) in `file`.
    fn function(&mut self, name: &str, symbol: &str, file: &str) -> u64 {
        let next = self.function_ids.len() as u64 + 1;
        let key = (symbol.to_string(), file.to_string());
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let f = Function { id: next, name: self.s.id(name), system_name: self.s.id(symbol), filename: self.s.id(file) };
        self.p.function.push(f);
        self.function_ids.insert(key, next);
        next
    }

    /// The location of a PC (made once): its lines innermost first, the inlined functions at the sampled line, then
    /// each call site one level out, the function holding the PC (the kernel, or a function it calls) last.
    fn location(&mut self, crc: u64, kernel: &str, pc: u64) -> u64 {
        let key = (crc, kernel.to_string(), pc);
        if let Some(&id) = self.locations.get(&key) {
            return id;
        }
        let cubin = self.cubins.binary_search(&crc).unwrap_or(0) as u64;
        let ordinal = {
            let n = self.function_numbers.len() as u64;
            *self.function_numbers.entry((crc, kernel.to_string())).or_insert(n)
        };
        let maps = self.maps;
        let map = maps.get(&crc).and_then(Option::as_ref);
        let holder = map.and_then(|m| Some((m, functions::function_of(m, kernel, pc)?)));
        let (name, symbol) = match holder {
            Some((m, f)) => {
                let c = &m.code_functions(kernel)[f];
                (cutr_model::demangle::demangle(&c.name), c.symbol.clone())
            }
            None => (cutr_model::demangle::demangle(kernel), kernel.to_string()),
        };
        let mut lines = Vec::new();
        match map.and_then(|m| m.locate_in_function(kernel, pc)) {
            Some(loc) => {
                let mut frames: Vec<(String, &str)> =
                    loc.inlined_at.iter().map(|(f, _)| (cutr_model::demangle::demangle(f), f.as_str())).collect();
                frames.push((name, &symbol));
                let mut at = (&loc.position.file, loc.position.line);
                for (i, (shown, system)) in frames.iter().enumerate() {
                    let id = self.function(shown, system, at.0);
                    lines.push(Line { function_id: id, line: i64::from(at.1) });
                    if let Some((_, site)) = loc.inlined_at.get(i) {
                        at = (&site.file, site.line);
                    }
                }
            }
            None => lines.push(Line { function_id: self.function(&name, &symbol, ""), line: 0 }),
        }
        let id = self.p.location.len() as u64 + 1;
        self.p.location.push(Location {
            id,
            mapping_id: cubin + 1,
            address: ((cubin + 1) << 40) | ((ordinal & 0xffff) << 24) | (pc & 0xff_ffff),
            line: lines,
        });
        self.locations.insert(key, id);
        id
    }
}

fn build(
    by_pc: HashMap<PcKey, ByReason>,
    maps: &HashMap<u64, Option<cutr_source::SourceMap>>,
    calls: &HashMap<(u64, String), Calls>,
    r: &SourceReport,
) -> Profile {
    let mut s = Strings::default();
    let mut p = Profile {
        sample_type: vec![ValueType { r#type: s.id("samples"), unit: s.id("count") }],
        period_type: Some(ValueType { r#type: s.id("pc sampling"), unit: s.id("samples") }),
        ..Default::default()
    };
    p.comment.push(s.id(&format!(
        "cutr PC samples: CUPTI total {}, dropped {}, outside user kernels {}",
        r.cupti_total_samples, r.dropped_samples, r.non_user_samples
    )));
    // Deterministic order: PCs sorted; cubins numbered in CRC order, functions by name within a cubin.
    let pcs: BTreeMap<PcKey, ByReason> = by_pc.into_iter().collect();
    let cubins: Vec<u64> = {
        let mut v: Vec<u64> = pcs.keys().map(|k| k.0).collect();
        v.dedup();
        v
    };
    for (i, crc) in cubins.iter().enumerate() {
        let has_lines = maps.get(crc).and_then(Option::as_ref).is_some_and(|m| m.has_lines());
        p.mapping.push(Mapping {
            id: i as u64 + 1,
            memory_start: (i as u64 + 1) << 40,
            memory_limit: (i as u64 + 2) << 40,
            filename: s.id(&format!("cubin {crc:#x}")),
            has_functions: true,
            has_filenames: has_lines,
            has_line_numbers: has_lines,
            has_inline_frames: has_lines,
        });
    }
    let (reason_key, kernel_key) = (s.id("stall_reason"), s.id("kernel"));
    let mut b = Builder {
        p,
        s,
        maps,
        cubins,
        function_ids: HashMap::new(),
        function_numbers: HashMap::new(),
        locations: HashMap::new(),
    };
    for ((crc, kernel, pc), reasons) in &pcs {
        let id = b.location(*crc, kernel, *pc);
        let kernel_label = b.s.id(&cutr_model::demangle::demangle(kernel));
        let graph = calls.get(&(*crc, kernel.clone()));
        let map = maps.get(crc).and_then(Option::as_ref);
        let function = map.and_then(|m| functions::function_of(m, kernel, *pc));
        for (reason, &n) in reasons {
            if n == 0 {
                continue;
            }
            let reason = b.s.id(reason);
            let label = vec![Label { key: reason_key, str: reason }, Label { key: kernel_key, str: kernel_label }];
            let Some((g, f)) = graph.zip(function).filter(|(g, f)| !g.paths[*f].is_empty()) else {
                b.p.sample.push(Sample {
                    location_id: vec![id],
                    value: vec![i64::try_from(n).unwrap_or(i64::MAX)],
                    label,
                });
                continue;
            };
            for (path, m) in g.split(f, n) {
                let mut stack = vec![id];
                for &site in &g.paths[f][path].sites {
                    stack.push(b.location(*crc, kernel, g.sites[site].offset));
                }
                let value = vec![i64::try_from(m).unwrap_or(i64::MAX)];
                b.p.sample.push(Sample { location_id: stack, value, label: label.clone() });
            }
        }
    }
    let mut p = b.p;
    p.string_table = b.s.list;
    p
}
