//! Owned Rust forms of the flatbuffers tables a `.cutr` file carries besides records: session metadata, clock
//! samples, loss counters and string tables, with their (de)serialization.

use cutr_schema::{LayoutTable, fb};
use flatbuffers::{FlatBufferBuilder, WIPOffset};

use crate::error::ChunkError;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Device {
    pub id: u32,
    pub name: String,
    pub uuid: Vec<u8>,
    pub pci_bus_id: String,
    pub compute_major: i32,
    pub compute_minor: i32,
    pub multiprocessors: i32,
    pub total_memory_bytes: u64,
    pub properties: Vec<(String, String)>,
}

/// One executable mapping of the recorded process (a `/proc/self/maps` line with `x` permission), kept so that
/// converters can name host code addresses offline (format 1.4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the mapping's first byte.
    pub file_offset: u64,
    pub path: String,
    /// The file's GNU build id; empty when it has none or could not be read.
    pub build_id: Vec<u8>,
}

impl Mapping {
    /// The offset in the mapped file of a code address inside this mapping.
    /// `None` outside the mapping, or where a damaged `file_offset` would overflow.
    pub fn file_offset_of(&self, address: u64) -> Option<u64> {
        if !(self.start..self.end).contains(&address) {
            return None;
        }
        (address - self.start).checked_add(self.file_offset)
    }
}

/// Who wrote the file and how: what a converter needs besides the records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionMetadata {
    pub writer: String,
    pub writer_version: String,
    pub cupti_api_version: u32,
    pub cuda_driver_version: i32,
    pub cuda_runtime_version: i32,
    pub host: String,
    pub pid: u32,
    pub ppid: u32,
    pub command_line: Vec<String>,
    pub start_unix_ns: u64,
    pub thread_id_type: u32,
    pub config: Vec<(String, String)>,
    pub devices: Vec<Device>,
    /// The record layouts of the libcupti that wrote the records.
    pub layouts: Option<LayoutTable>,
    /// (domain, cbid, name): 1 = driver API, 2 = runtime API.
    pub callback_names: Vec<(u32, u32, String)>,
    pub environment: Vec<(String, String)>,
    pub synthetic: bool,
    /// The process's executable mappings when the metadata was written (empty before format 1.4).
    pub mappings: Vec<Mapping>,
}

fn kv_vec<'b>(
    b: &mut FlatBufferBuilder<'b>,
    items: &[(String, String)],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::KeyValue<'b>>>> {
    let v: Vec<_> = items
        .iter()
        .map(|(k, val)| {
            let key = b.create_string(k);
            let value = b.create_string(val);
            fb::KeyValue::create(b, &fb::KeyValueArgs { key: Some(key), value: Some(value) })
        })
        .collect();
    b.create_vector(&v)
}

fn kv_read(
    v: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<fb::KeyValue<'_>>>>,
) -> Vec<(String, String)> {
    v.map(|v| v.iter().map(|kv| (kv.key().unwrap_or("").to_string(), kv.value().unwrap_or("").to_string())).collect())
        .unwrap_or_default()
}

fn verify_opts() -> flatbuffers::VerifierOptions {
    // Metadata of a many-GPU host with long command lines stays far below these bounds.
    flatbuffers::VerifierOptions { max_tables: 10_000_000, max_apparent_size: 1 << 31, ..Default::default() }
}

impl SessionMetadata {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(16 * 1024);
        let writer = b.create_string(&self.writer);
        let writer_version = b.create_string(&self.writer_version);
        let host = b.create_string(&self.host);
        let cmd: Vec<_> = self.command_line.iter().map(|s| b.create_string(s)).collect();
        let command_line = b.create_vector(&cmd);
        let config = kv_vec(&mut b, &self.config);
        let environment = kv_vec(&mut b, &self.environment);
        let devs: Vec<_> = self
            .devices
            .iter()
            .map(|d| {
                let name = b.create_string(&d.name);
                let uuid = b.create_vector(&d.uuid);
                let pci = b.create_string(&d.pci_bus_id);
                let props = kv_vec(&mut b, &d.properties);
                fb::Device::create(
                    &mut b,
                    &fb::DeviceArgs {
                        id: d.id,
                        name: Some(name),
                        uuid: Some(uuid),
                        pci_bus_id: Some(pci),
                        compute_major: d.compute_major,
                        compute_minor: d.compute_minor,
                        multiprocessors: d.multiprocessors,
                        total_memory_bytes: d.total_memory_bytes,
                        properties: Some(props),
                    },
                )
            })
            .collect();
        let devices = b.create_vector(&devs);
        let layouts = self.layouts.as_ref().map(|l| l.to_fb(&mut b));
        let cbs: Vec<_> = self
            .callback_names
            .iter()
            .map(|(domain, cbid, name)| {
                let name = b.create_string(name);
                fb::CallbackName::create(
                    &mut b,
                    &fb::CallbackNameArgs { domain: *domain, cbid: *cbid, name: Some(name) },
                )
            })
            .collect();
        let callback_names = b.create_vector(&cbs);
        let maps: Vec<_> = self
            .mappings
            .iter()
            .map(|m| {
                let path = b.create_string(&m.path);
                let build_id = b.create_vector(&m.build_id);
                fb::Mapping::create(
                    &mut b,
                    &fb::MappingArgs {
                        start: m.start,
                        end: m.end,
                        file_offset: m.file_offset,
                        path: Some(path),
                        build_id: Some(build_id),
                    },
                )
            })
            .collect();
        let mappings = b.create_vector(&maps);
        let root = fb::SessionMetadata::create(
            &mut b,
            &fb::SessionMetadataArgs {
                writer: Some(writer),
                writer_version: Some(writer_version),
                cupti_api_version: self.cupti_api_version,
                cuda_driver_version: self.cuda_driver_version,
                cuda_runtime_version: self.cuda_runtime_version,
                host: Some(host),
                pid: self.pid,
                ppid: self.ppid,
                command_line: Some(command_line),
                start_unix_ns: self.start_unix_ns,
                thread_id_type: self.thread_id_type,
                config: Some(config),
                devices: Some(devices),
                layouts,
                callback_names: Some(callback_names),
                environment: Some(environment),
                synthetic: self.synthetic,
                mappings: Some(mappings),
            },
        );
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<SessionMetadata, ChunkError> {
        let m = flatbuffers::root_with_opts::<fb::SessionMetadata>(&verify_opts(), bytes)
            .map_err(|e| ChunkError::Malformed(format!("session metadata: {e}")))?;
        let layouts = match m.layouts() {
            Some(v) => Some(
                LayoutTable::from_fb(m.cupti_api_version(), v)
                    .map_err(|e| ChunkError::Malformed(format!("layout table: {e}")))?,
            ),
            None => None,
        };
        Ok(SessionMetadata {
            writer: m.writer().unwrap_or("").to_string(),
            writer_version: m.writer_version().unwrap_or("").to_string(),
            cupti_api_version: m.cupti_api_version(),
            cuda_driver_version: m.cuda_driver_version(),
            cuda_runtime_version: m.cuda_runtime_version(),
            host: m.host().unwrap_or("").to_string(),
            pid: m.pid(),
            ppid: m.ppid(),
            command_line: m.command_line().map(|v| v.iter().map(str::to_string).collect()).unwrap_or_default(),
            start_unix_ns: m.start_unix_ns(),
            thread_id_type: m.thread_id_type(),
            config: kv_read(m.config()),
            devices: m
                .devices()
                .map(|v| {
                    v.iter()
                        .map(|d| Device {
                            id: d.id(),
                            name: d.name().unwrap_or("").to_string(),
                            uuid: d.uuid().map(|u| u.bytes().to_vec()).unwrap_or_default(),
                            pci_bus_id: d.pci_bus_id().unwrap_or("").to_string(),
                            compute_major: d.compute_major(),
                            compute_minor: d.compute_minor(),
                            multiprocessors: d.multiprocessors(),
                            total_memory_bytes: d.total_memory_bytes(),
                            properties: kv_read(d.properties()),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            layouts,
            callback_names: m
                .callback_names()
                .map(|v| v.iter().map(|c| (c.domain(), c.cbid(), c.name().unwrap_or("").to_string())).collect())
                .unwrap_or_default(),
            environment: kv_read(m.environment()),
            synthetic: m.synthetic(),
            mappings: m
                .mappings()
                .map(|v| {
                    v.iter()
                        .map(|x| Mapping {
                            start: x.start(),
                            end: x.end(),
                            file_offset: x.file_offset(),
                            path: x.path().unwrap_or("").to_string(),
                            build_id: x.build_id().map(|b| b.bytes().to_vec()).unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The value of a recorder configuration key.
    pub fn config_value(&self, key: &str) -> Option<&str> {
        self.config.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// One simultaneous reading of CUPTI's clock and the host clocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockSample {
    pub cupti_ns: u64,
    pub realtime_ns: u64,
    pub monotonic_ns: u64,
}

pub fn clocks_to_bytes(samples: &[ClockSample]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(64 + samples.len() * 24);
    let v: Vec<fb::ClockSample> =
        samples.iter().map(|s| fb::ClockSample::new(s.cupti_ns, s.realtime_ns, s.monotonic_ns)).collect();
    let samples = b.create_vector(&v);
    let root = fb::ClockSamples::create(&mut b, &fb::ClockSamplesArgs { samples: Some(samples) });
    b.finish(root, None);
    b.finished_data().to_vec()
}

pub fn clocks_from_bytes(bytes: &[u8]) -> Result<Vec<ClockSample>, ChunkError> {
    let c = flatbuffers::root_with_opts::<fb::ClockSamples>(&verify_opts(), bytes)
        .map_err(|e| ChunkError::Malformed(format!("clock samples: {e}")))?;
    Ok(c.samples()
        .map(|v| {
            v.iter()
                .map(|s| ClockSample {
                    cupti_ns: s.cupti_ns(),
                    realtime_ns: s.realtime_ns(),
                    monotonic_ns: s.monotonic_ns(),
                })
                .collect()
        })
        .unwrap_or_default())
}

/// OS thread names, `(tid, name)`, as a `ThreadNames` chunk holds them.
pub fn thread_names_to_bytes(names: &[(u32, String)]) -> Vec<u8> {
    let mut b = FlatBufferBuilder::with_capacity(64 + names.len() * 32);
    let v: Vec<_> = names
        .iter()
        .map(|(tid, name)| {
            let name = b.create_string(name);
            fb::ThreadName::create(&mut b, &fb::ThreadNameArgs { tid: *tid, name: Some(name) })
        })
        .collect();
    let threads = b.create_vector(&v);
    let root = fb::ThreadNames::create(&mut b, &fb::ThreadNamesArgs { threads: Some(threads) });
    b.finish(root, None);
    b.finished_data().to_vec()
}

pub fn thread_names_from_bytes(bytes: &[u8]) -> Result<Vec<(u32, String)>, ChunkError> {
    let t = flatbuffers::root_with_opts::<fb::ThreadNames>(&verify_opts(), bytes)
        .map_err(|e| ChunkError::Malformed(format!("thread names: {e}")))?;
    Ok(t.threads()
        .map(|v| v.iter().map(|t| (t.tid(), t.name().unwrap_or("").to_string())).collect())
        .unwrap_or_default())
}

/// Cumulative loss counters, as the recorder reports them. See `LossReport` in `schema/cutr.fbs`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossCounters {
    pub cupti_dropped_records: u64,
    pub refused_buffers: u64,
    pub zero_timestamp_records: u64,
    pub inverted_timestamp_records: u64,
    pub write_failures: u64,
    pub records_lost_in_write_failures: u64,
    pub unparsed_bytes: u64,
    pub unresolved_strings: u64,
    pub pc_samples_dropped: u64,
    pub pc_collections_buffer_full: u64,
    pub counter_samples_lost: u64,
    pub is_final: bool,
    pub notes: Vec<String>,
}

impl LossCounters {
    /// True when nothing was lost or damaged.
    pub fn is_clean(&self) -> bool {
        self.cupti_dropped_records == 0
            && self.refused_buffers == 0
            && self.zero_timestamp_records == 0
            && self.inverted_timestamp_records == 0
            && self.write_failures == 0
            && self.records_lost_in_write_failures == 0
            && self.unparsed_bytes == 0
            && self.unresolved_strings == 0
            && self.pc_samples_dropped == 0
            && self.pc_collections_buffer_full == 0
            && self.counter_samples_lost == 0
    }

    /// Adds another report's counts and its notes not already here: the loss of a recording split into parts
    /// (`cupti-record --split`, each part reporting its own) is the sum of its parts'. `is_final` stays this
    /// report's own.
    pub fn add(&mut self, other: &LossCounters) {
        // Named one by one (no `..`): a counter added to the struct must be added here too.
        let LossCounters {
            cupti_dropped_records,
            refused_buffers,
            zero_timestamp_records,
            inverted_timestamp_records,
            write_failures,
            records_lost_in_write_failures,
            unparsed_bytes,
            unresolved_strings,
            pc_samples_dropped,
            pc_collections_buffer_full,
            counter_samples_lost,
            is_final: _,
            notes,
        } = other;
        self.cupti_dropped_records += cupti_dropped_records;
        self.refused_buffers += refused_buffers;
        self.zero_timestamp_records += zero_timestamp_records;
        self.inverted_timestamp_records += inverted_timestamp_records;
        self.write_failures += write_failures;
        self.records_lost_in_write_failures += records_lost_in_write_failures;
        self.unparsed_bytes += unparsed_bytes;
        self.unresolved_strings += unresolved_strings;
        self.pc_samples_dropped += pc_samples_dropped;
        self.pc_collections_buffer_full += pc_collections_buffer_full;
        self.counter_samples_lost += counter_samples_lost;
        for n in notes {
            if !self.notes.contains(n) {
                self.notes.push(n.clone());
            }
        }
    }

    /// (name, value) of every counter, for reports.
    pub fn entries(&self) -> [(&'static str, u64); 11] {
        [
            ("cupti_dropped_records", self.cupti_dropped_records),
            ("refused_buffers", self.refused_buffers),
            ("zero_timestamp_records", self.zero_timestamp_records),
            ("inverted_timestamp_records", self.inverted_timestamp_records),
            ("write_failures", self.write_failures),
            ("records_lost_in_write_failures", self.records_lost_in_write_failures),
            ("unparsed_bytes", self.unparsed_bytes),
            ("unresolved_strings", self.unresolved_strings),
            ("pc_samples_dropped", self.pc_samples_dropped),
            ("pc_collections_buffer_full", self.pc_collections_buffer_full),
            ("counter_samples_lost", self.counter_samples_lost),
        ]
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(256);
        let notes: Vec<_> = self.notes.iter().map(|n| b.create_string(n)).collect();
        let notes = b.create_vector(&notes);
        let root = fb::LossReport::create(
            &mut b,
            &fb::LossReportArgs {
                cupti_dropped_records: self.cupti_dropped_records,
                refused_buffers: self.refused_buffers,
                zero_timestamp_records: self.zero_timestamp_records,
                inverted_timestamp_records: self.inverted_timestamp_records,
                write_failures: self.write_failures,
                records_lost_in_write_failures: self.records_lost_in_write_failures,
                unparsed_bytes: self.unparsed_bytes,
                unresolved_strings: self.unresolved_strings,
                is_final: self.is_final,
                notes: Some(notes),
                pc_samples_dropped: self.pc_samples_dropped,
                pc_collections_buffer_full: self.pc_collections_buffer_full,
                counter_samples_lost: self.counter_samples_lost,
            },
        );
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<LossCounters, ChunkError> {
        let l = flatbuffers::root_with_opts::<fb::LossReport>(&verify_opts(), bytes)
            .map_err(|e| ChunkError::Malformed(format!("loss report: {e}")))?;
        Ok(LossCounters {
            cupti_dropped_records: l.cupti_dropped_records(),
            refused_buffers: l.refused_buffers(),
            zero_timestamp_records: l.zero_timestamp_records(),
            inverted_timestamp_records: l.inverted_timestamp_records(),
            write_failures: l.write_failures(),
            records_lost_in_write_failures: l.records_lost_in_write_failures(),
            unparsed_bytes: l.unparsed_bytes(),
            unresolved_strings: l.unresolved_strings(),
            pc_samples_dropped: l.pc_samples_dropped(),
            pc_collections_buffer_full: l.pc_collections_buffer_full(),
            counter_samples_lost: l.counter_samples_lost(),
            is_final: l.is_final(),
            notes: l.notes().map(|v| v.iter().map(str::to_string).collect()).unwrap_or_default(),
        })
    }
}

/// Serializes string-table entries (pointer, text); `valid_from_seq` is the sequence number of the chunk.
pub fn strings_to_bytes(valid_from_seq: u32, entries: &[(u64, &str)]) -> Vec<u8> {
    let bytes: usize = entries.iter().map(|(_, s)| s.len() + 24).sum();
    let mut b = FlatBufferBuilder::with_capacity(64 + bytes);
    let v: Vec<_> = entries
        .iter()
        .map(|(ptr, text)| {
            let text = b.create_string(text);
            fb::StringEntry::create(&mut b, &fb::StringEntryArgs { ptr: *ptr, valid_from_seq, text: Some(text) })
        })
        .collect();
    let entries = b.create_vector(&v);
    let root = fb::StringTable::create(&mut b, &fb::StringTableArgs { entries: Some(entries) });
    b.finish(root, None);
    b.finished_data().to_vec()
}

/// Reads string-table entries as (pointer, valid_from_seq, text).
pub fn strings_from_bytes(bytes: &[u8]) -> Result<Vec<(u64, u32, String)>, ChunkError> {
    let t = flatbuffers::root_with_opts::<fb::StringTable>(&verify_opts(), bytes)
        .map_err(|e| ChunkError::Malformed(format!("string table: {e}")))?;
    Ok(t.entries()
        .map(|v| v.iter().map(|e| (e.ptr(), e.valid_from_seq(), e.text().unwrap_or("").to_string())).collect())
        .unwrap_or_default())
}
