//! `cupti-convert info`: what a `.cutr` file holds, whether it is whole, and what was lost.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cutr_format::{ChunkType, Problem, Reader};
use cutr_schema::{kinds, layouts};
use serde::Serialize;

use crate::fmt;

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct DeviceInfo {
    pub id: u32,
    pub name: String,
    pub compute_capability: String,
    pub multiprocessors: i32,
    pub total_memory_bytes: u64,
    pub uuid: String,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KindCount {
    pub kind: u32,
    pub name: String,
    pub records: u64,
}

#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct RecoveryInfo {
    pub reason: String,
    pub lost_bytes: u64,
}

/// Everything `info` reports, as printed by `--json`.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct InfoReport {
    pub file: String,
    pub file_bytes: u64,
    pub format_version: String,
    pub writer: String,
    pub writer_version: String,
    pub synthetic: bool,
    pub closed_cleanly: bool,
    pub recovered: Option<RecoveryInfo>,
    pub cupti_api_version: u32,
    /// The CUDA release of that CUPTI API version, when we know it.
    pub cuda_release: Option<String>,
    pub cuda_driver_version: i32,
    pub cuda_runtime_version: i32,
    pub host: String,
    pub pid: u32,
    pub command_line: Vec<String>,
    /// A split recording's part (`cupti-record --split`): which run and which part; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split: Option<cutr_model::runs::RunPart>,
    pub session_start: Option<String>,
    /// Earliest and latest record timestamp (CUPTI clock, ns) and the span between them.
    pub first_timestamp_ns: u64,
    pub last_timestamp_ns: u64,
    pub span_ns: u64,
    pub devices: Vec<DeviceInfo>,
    /// The process's executable mappings kept (format 1.4; `stats --report um` names CPU faults' host functions
    /// from them), and how many have no build id (their functions cannot be named: the file could have changed).
    pub mappings: usize,
    pub mappings_without_build_id: usize,
    /// The recorder's own threads (`cutr-*`, by tid), whose records every other command leaves out
    /// ([`cutr_model::recorder_threads`]).
    pub recorder_threads: BTreeMap<u32, String>,
    pub chunks: BTreeMap<String, u64>,
    pub records_total: u64,
    pub records: Vec<KindCount>,
    /// Activity buffers as CUPTI wrote them vs as stored.
    pub activity_raw_bytes: u64,
    pub activity_stored_bytes: u64,
    pub compression_ratio: f64,
    pub stored_bytes_per_record: f64,
    pub clock_samples: usize,
    pub strings: usize,
    pub loss: BTreeMap<String, u64>,
    pub loss_report_final: bool,
    pub loss_notes: Vec<String>,
    /// Records in chunks that could not be read (damaged or cut off).
    pub records_lost_in_damaged_chunks: u64,
    pub unparsed_bytes: u64,
    pub unknown_record_kinds: Vec<u32>,
    /// Side chunks whose payloads were parsed (cubins, PC samples, counter samples, graph events, session
    /// metadata), by chunk type: beyond every chunk's checksum and every activity chunk's records.
    pub side_chunks_parsed: BTreeMap<String, u64>,
    /// PC samples in the file's PC-sample chunks (each stall reason's count at each PC, summed: the recorder's
    /// summary line counts them so), and counter samples in its counters chunks (one per source, device and time).
    pub pc_samples: u64,
    pub counter_samples: u64,
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
}

/// Builds the report, checking every chunk of the file.
pub fn report(reader: &Reader) -> InfoReport {
    let meta = reader.metadata().cloned().unwrap_or_default();
    let verification = reader.verify();
    let mut problems: Vec<Problem> = reader.problems().to_vec();
    problems.extend(verification.damaged.iter().cloned());
    let side = cutr_model::timing::timed("info side chunks", || crate::info_verify::side_chunks(reader, &problems));
    problems.extend(side.problems);
    problems.sort_by_key(|p| p.to_string());
    let mut warnings = Vec::new();

    let mut chunks = BTreeMap::new();
    let (mut raw, mut stored) = (0u64, 0u64);
    let (mut t_min, mut t_max) = (u64::MAX, 0u64);
    for c in reader.chunks() {
        *chunks.entry(c.chunk_type().name()).or_insert(0u64) += 1;
        if c.chunk_type() == ChunkType::Activity {
            raw += c.header.raw_len;
            stored += c.header.stored_len;
            if c.header.t_min != 0 {
                t_min = t_min.min(c.header.t_min);
            }
            t_max = t_max.max(c.header.t_max);
        }
    }
    if t_min == u64::MAX {
        t_min = 0;
    }
    let records: Vec<KindCount> = verification
        .records_per_kind
        .iter()
        .map(|&(kind, n)| KindCount { kind, name: kinds::display(kind), records: n })
        .collect();
    let records_total = records.iter().map(|k| k.records).sum::<u64>();
    let lost_records: u64 = problems
        .iter()
        .map(|p| match p {
            Problem::DamagedChunk { chunk_type: ChunkType::Activity, records, .. } => *records as u64,
            Problem::TruncatedChunk { chunk_type: ChunkType::Activity, records, .. } => *records as u64,
            _ => 0,
        })
        .sum();

    let cuda_release = layouts::SUPPORTED.iter().find(|s| s.0 == meta.cupti_api_version).map(|s| s.1.to_string());
    if reader.metadata().is_none() {
        warnings.push("no readable session metadata: versions, devices and the record layout table are unknown".into());
    } else if cuda_release.is_none() {
        warnings.push(format!(
            "records were written by CUPTI API version {}, which this build has no built-in table for; \
             the file's own layout table is used",
            meta.cupti_api_version
        ));
    }
    warnings.extend(side.warnings);
    if let Some(r) = reader.recovery() {
        warnings.push(format!(
            "not closed cleanly ({}); read up to its last complete chunk, {} bytes lost",
            r.reason, r.lost_bytes
        ));
    }
    if !verification.unknown_kinds.is_empty() {
        let names: Vec<String> = verification.unknown_kinds.iter().map(|&k| kinds::display(k)).collect();
        warnings.push(format!(
            "{} bytes of records of kinds without a layout ({}) are kept but not parsed",
            verification.unparsed_bytes,
            names.join(", ")
        ));
    }
    let loss = reader.loss().cloned().unwrap_or_default();
    if reader.loss().is_none() {
        warnings.push("no loss report in the file: the recorder's loss counters are unknown".into());
    } else if !loss.is_final {
        warnings.push("the last loss report is not the final one: the recorder did not close the file".into());
    }

    InfoReport {
        file: reader.path().map(|p| p.display().to_string()).unwrap_or_default(),
        file_bytes: reader.file_len(),
        format_version: format!("{}.{}", reader.header().major, reader.header().minor),
        writer: meta.writer.clone(),
        writer_version: meta.writer_version.clone(),
        synthetic: meta.synthetic,
        closed_cleanly: reader.clean_close(),
        recovered: reader.recovery().map(|r| RecoveryInfo { reason: r.reason.clone(), lost_bytes: r.lost_bytes }),
        cupti_api_version: meta.cupti_api_version,
        cuda_release,
        cuda_driver_version: meta.cuda_driver_version,
        cuda_runtime_version: meta.cuda_runtime_version,
        host: meta.host.clone(),
        pid: meta.pid,
        command_line: meta.command_line.clone(),
        split: cutr_model::runs::RunPart::of(&meta),
        session_start: (meta.start_unix_ns != 0).then(|| fmt::rfc3339_ns(meta.start_unix_ns)),
        first_timestamp_ns: t_min,
        last_timestamp_ns: t_max,
        span_ns: t_max.saturating_sub(t_min),
        devices: meta
            .devices
            .iter()
            .map(|d| DeviceInfo {
                id: d.id,
                name: d.name.clone(),
                compute_capability: format!("{}.{}", d.compute_major, d.compute_minor),
                multiprocessors: d.multiprocessors,
                total_memory_bytes: d.total_memory_bytes,
                uuid: d.uuid.iter().map(|b| format!("{b:02x}")).collect(),
            })
            .collect(),
        mappings: meta.mappings.len(),
        mappings_without_build_id: meta.mappings.iter().filter(|m| m.build_id.is_empty()).count(),
        recorder_threads: reader
            .thread_names()
            .iter()
            .filter(|(_, name)| cutr_model::recorder_threads::is_recorder_thread(name))
            .map(|(&tid, name)| (tid, name.clone()))
            .collect(),
        chunks,
        records_total,
        records,
        activity_raw_bytes: raw,
        activity_stored_bytes: stored,
        compression_ratio: if stored > 0 { raw as f64 / stored as f64 } else { 0.0 },
        stored_bytes_per_record: if records_total > 0 { stored as f64 / records_total as f64 } else { 0.0 },
        clock_samples: reader.clocks().len(),
        strings: reader.strings().len(),
        loss: loss.entries().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        loss_report_final: loss.is_final,
        loss_notes: loss.notes.clone(),
        records_lost_in_damaged_chunks: lost_records,
        unparsed_bytes: verification.unparsed_bytes,
        unknown_record_kinds: verification.unknown_kinds.clone(),
        side_chunks_parsed: side.verified,
        pc_samples: side.pc_samples,
        counter_samples: side.counter_samples,
        problems: problems.iter().map(|p| p.to_string()).collect(),
        warnings,
    }
}

/// The report as aligned text for people.
pub fn render_text(r: &InfoReport) -> String {
    let mut o = String::new();
    let line = |o: &mut String, k: &str, v: String| {
        let _ = writeln!(o, "{k:<14}{v}");
    };
    line(&mut o, "file", format!("{} ({})", r.file, fmt::bytes(r.file_bytes)));
    let state = match &r.recovered {
        Some(rec) => format!("RECOVERED: not closed cleanly, {} bytes lost", rec.lost_bytes),
        None if r.closed_cleanly => "closed cleanly".to_string(),
        None => "footer present but not marked clean".to_string(),
    };
    line(
        &mut o,
        "format",
        format!(
            "cutr {}, written by {} {}{}; {state}",
            r.format_version,
            r.writer,
            r.writer_version,
            if r.synthetic { " (synthetic data)" } else { "" }
        ),
    );
    if !r.host.is_empty() || r.pid != 0 {
        line(&mut o, "session", format!("pid {} on {}: {}", r.pid, r.host, r.command_line.join(" ")));
    }
    if let Some(p) = &r.split {
        line(
            &mut o,
            "split",
            format!("part {} of run {} (read the run's parts together as one recording)", p.part, p.run),
        );
    }
    if let Some(s) = &r.session_start {
        line(&mut o, "started", s.clone());
    }
    line(
        &mut o,
        "span",
        format!(
            "{} of records ({} .. {} ns, CUPTI clock)",
            fmt::duration_ns(r.span_ns),
            r.first_timestamp_ns,
            r.last_timestamp_ns
        ),
    );
    let version = |v: i32| if v > 0 { format!("{}.{}", v / 1000, (v % 1000) / 10) } else { "unknown".into() };
    line(
        &mut o,
        "CUPTI",
        format!(
            "API {} ({}), driver {}, runtime {}",
            r.cupti_api_version,
            r.cuda_release.as_deref().map(|c| format!("CUDA {c}")).unwrap_or_else(|| "unknown release".into()),
            version(r.cuda_driver_version),
            version(r.cuda_runtime_version)
        ),
    );
    for d in &r.devices {
        line(
            &mut o,
            if d.id == r.devices[0].id { "devices" } else { "" },
            format!(
                "{}: {} (sm_{}, {} SMs, {})",
                d.id,
                d.name,
                d.compute_capability.replace('.', ""),
                d.multiprocessors,
                fmt::bytes(d.total_memory_bytes)
            ),
        );
    }
    if r.mappings > 0 {
        let without = r.mappings_without_build_id;
        let ids = if without > 0 { format!(", {without} without a build id") } else { String::new() };
        line(&mut o, "mappings", format!("{} executable (host code of CPU page faults){ids}", r.mappings));
    }
    if !r.recorder_threads.is_empty() {
        let threads: Vec<String> = r.recorder_threads.iter().map(|(tid, name)| format!("{name} {tid}")).collect();
        line(&mut o, "recorder", format!("threads {}: what they call is left out of every output", threads.join(", ")));
    }
    let chunk_list: Vec<String> = r.chunks.iter().map(|(k, v)| format!("{k} {v}")).collect();
    line(&mut o, "chunks", format!("{} ({})", r.chunks.values().sum::<u64>(), chunk_list.join(", ")));
    line(&mut o, "records", fmt::thousands(r.records_total));
    for k in &r.records {
        let _ = writeln!(o, "  {:<26}{:>14}", k.name, fmt::thousands(k.records));
    }
    line(
        &mut o,
        "bytes",
        format!(
            "activity buffers {} raw -> {} stored ({:.1}x, {:.2} B/record)",
            fmt::bytes(r.activity_raw_bytes),
            fmt::bytes(r.activity_stored_bytes),
            r.compression_ratio,
            r.stored_bytes_per_record
        ),
    );
    line(&mut o, "strings", format!("{} interned, {} clock samples", r.strings, r.clock_samples));
    let nonzero: Vec<String> = r.loss.iter().filter(|(_, v)| **v > 0).map(|(k, v)| format!("{k} {v}")).collect();
    let mut loss = if nonzero.is_empty() { "none reported".to_string() } else { nonzero.join(", ") };
    if r.records_lost_in_damaged_chunks > 0 {
        loss.push_str(&format!("; {} records in unreadable chunks", r.records_lost_in_damaged_chunks));
    }
    let parsed: Vec<String> = r.side_chunks_parsed.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let parsed = if parsed.is_empty() { String::new() } else { format!("; side chunks parsed: {}", parsed.join(", ")) };
    line(&mut o, "checked", format!("every chunk's checksum, every activity chunk's records{parsed}"));
    if r.pc_samples > 0 || r.counter_samples > 0 {
        let samples = format!(
            "{} PC samples, {} counter samples",
            crate::fmt::thousands(r.pc_samples),
            crate::fmt::thousands(r.counter_samples)
        );
        line(&mut o, "samples", samples);
    }
    line(&mut o, "loss", loss);
    for n in &r.loss_notes {
        line(&mut o, "", format!("note: {n}"));
    }
    for p in &r.problems {
        line(&mut o, "problem", p.clone());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `config` key/values, closed cleanly with a final loss report.
    fn file_with(config: &[(&str, &str)], name: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("cutr-info-{}-{name}.cutr", std::process::id()));
        let mut w = cutr_format::Writer::create(&path, Default::default()).unwrap();
        let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        w.write_metadata(&cutr_format::SessionMetadata { config, pid: 7, ..Default::default() }).unwrap();
        w.write_loss(&cutr_format::LossCounters { is_final: true, ..Default::default() }).unwrap();
        w.finish().unwrap();
        path
    }

    #[test]
    fn a_part_of_a_split_recording_says_which_part_of_which_run() {
        let part = file_with(&[("split", "60s"), ("split.run", "5f0c1d2e3f405162"), ("split.part", "3")], "part");
        let r = report(&Reader::open(&part).unwrap());
        assert_eq!(r.split, Some(cutr_model::runs::RunPart { run: "5f0c1d2e3f405162".into(), part: 3 }));
        let text = render_text(&r);
        let line = "split         part 3 of run 5f0c1d2e3f405162 (read the run's parts together as one recording)";
        assert!(text.lines().any(|l| l == line), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["split"], serde_json::json!({"run": "5f0c1d2e3f405162", "part": 3}));
        // A file recorded whole has neither the line nor the key.
        let whole = file_with(&[("split", "")], "whole");
        let r = report(&Reader::open(&whole).unwrap());
        assert!(!render_text(&r).lines().any(|l| l.starts_with("split ")));
        assert!(serde_json::to_value(&r).unwrap().get("split").is_none());
        let _ = (std::fs::remove_file(part), std::fs::remove_file(whole));
    }
}
