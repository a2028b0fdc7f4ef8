//! PC samples as a pprof profile (`cupti-convert source --pprof OUT.pb.gz`), for `go tool pprof`, speedscope and
//! flame-graph tools: one sample per (PC, stall reason) with its count, labelled with the stall reason and the
//! kernel; each PC one location whose lines are its source position and the call sites it was inlined through
//! (innermost first, as pprof wants inline frames); one mapping per cubin.
//!
//! The messages are those of pprof's `profile.proto` (github.com/google/pprof/proto/profile.proto), declared here
//! with prost's derive. A location's address is synthetic: cubin number in bits 40.., the function's number in its
//! cubin in bits 24..40, the PC offset in the function below; pprof only needs it unique per mapping.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use cutr_format::Reader;
use prost::Message;

use super::{ByReason, PcKey, SourceReport, collect};

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
pub fn pprof(readers: &[&Reader]) -> (Vec<u8>, PprofSummary, Vec<String>) {
    let mut r = SourceReport::default();
    let samples = collect(readers, &mut r);
    let profile = build(samples.by_pc, &samples.maps, &r);
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

fn build(
    by_pc: HashMap<PcKey, ByReason>,
    maps: &HashMap<u64, Option<cutr_source::SourceMap>>,
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
    let mut function_ids: HashMap<(String, String), u64> = HashMap::new();
    let mut function = |p: &mut Profile, s: &mut Strings, mangled: &str, file: &str| -> u64 {
        let next = function_ids.len() as u64 + 1;
        *function_ids.entry((mangled.to_string(), file.to_string())).or_insert_with(|| {
            p.function.push(Function {
                id: next,
                name: s.id(&cutr_model::demangle::demangle(mangled)),
                system_name: s.id(mangled),
                filename: s.id(file),
            });
            next
        })
    };
    let (reason_key, kernel_key) = (s.id("stall_reason"), s.id("kernel"));
    let mut function_numbers: HashMap<(u64, String), u64> = HashMap::new();
    for ((crc, kernel, pc), reasons) in &pcs {
        let cubin = cubins.binary_search(crc).unwrap_or(0) as u64;
        let ordinal = {
            let n = function_numbers.len() as u64;
            *function_numbers.entry((*crc, kernel.clone())).or_insert(n)
        };
        let map = maps.get(crc).and_then(Option::as_ref);
        let mut lines = Vec::new();
        match map.and_then(|m| m.locate(kernel, *pc)) {
            Some(loc) => {
                // Innermost first: the inlined function at the sampled line, then each call site in the function
                // one level out, the kernel last.
                let mut names: Vec<&str> = loc.inlined_at.iter().map(|(f, _)| f.as_str()).collect();
                names.push(kernel);
                let mut at = (&loc.position.file, loc.position.line);
                for (i, name) in names.iter().enumerate() {
                    let id = function(&mut p, &mut s, name, at.0);
                    lines.push(Line { function_id: id, line: i64::from(at.1) });
                    if let Some((_, site)) = loc.inlined_at.get(i) {
                        at = (&site.file, site.line);
                    }
                }
            }
            None => lines.push(Line { function_id: function(&mut p, &mut s, kernel, ""), line: 0 }),
        }
        let id = p.location.len() as u64 + 1;
        p.location.push(Location {
            id,
            mapping_id: cubin + 1,
            address: ((cubin + 1) << 40) | ((ordinal & 0xffff) << 24) | (pc & 0xff_ffff),
            line: lines,
        });
        let kernel_label = s.id(&cutr_model::demangle::demangle(kernel));
        for (reason, &n) in reasons {
            if n == 0 {
                continue;
            }
            let reason = s.id(reason);
            p.sample.push(Sample {
                location_id: vec![id],
                value: vec![i64::try_from(n).unwrap_or(i64::MAX)],
                label: vec![Label { key: reason_key, str: reason }, Label { key: kernel_key, str: kernel_label }],
            });
        }
    }
    p.string_table = s.list;
    p
}
