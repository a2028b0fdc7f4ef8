//! The cubins of the recordings, read one at a time into source maps, and what each kernel's report says about its
//! lines: present, none (built without `-lineinfo`), damaged, or the cubin unreadable or lost. A flipped bit that
//! loses a cubin must never read as advice to rebuild.
//!
//! Two copies of one CRC with different bytes (a forged or damaged file; CUPTI's CRC names one cubin) are warned
//! of, and the copy that parses is used. Bytes are not kept: [`CubinBytes`] reads the chosen copy again when the
//! disassembler needs it.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};

use cutr_format::{ChunkInfo, Reader};
use cutr_source::SourceMap;
use serde::Serialize;

/// What a kernel's report can say about its lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelLines {
    /// Its cubin's line tables were read.
    Present,
    /// Its cubin has none: built without `-lineinfo`.
    Absent,
    /// Its cubin has line tables that could not be read.
    Damaged,
    /// Its cubin was recorded but is not a readable cubin.
    CubinUnreadable,
    /// No copy of its cubin could be read from the recording (its chunk damaged, refused or missing).
    CubinLost,
}

impl KernelLines {
    /// What the report says of the cubin of this CRC, from the maps read (`None`: no copy was read; `Some(None)`:
    /// one was, but did not parse).
    pub fn of(map: Option<&Option<SourceMap>>) -> KernelLines {
        match map {
            None => KernelLines::CubinLost,
            Some(None) => KernelLines::CubinUnreadable,
            Some(Some(m)) => match m.line_tables() {
                cutr_source::LineTables::Present => KernelLines::Present,
                cutr_source::LineTables::Absent => KernelLines::Absent,
                cutr_source::LineTables::Damaged => KernelLines::Damaged,
            },
        }
    }

    /// Why a kernel has no lines, for people; `None` when it has them.
    pub fn why_no_lines(self) -> Option<&'static str> {
        match self {
            KernelLines::Present => None,
            KernelLines::Absent => Some("its cubin has no line tables: build with -lineinfo for lines; offsets below"),
            KernelLines::Damaged => Some("its cubin's line tables are damaged (see the warnings); offsets below"),
            KernelLines::CubinUnreadable => Some("its cubin could not be read (see the warnings); offsets below"),
            KernelLines::CubinLost => {
                Some("its cubin was lost: the recording holds no readable copy (see the warnings); offsets below")
            }
        }
    }
}

/// Where a copy of a cubin is and what it holds.
struct Recorded {
    reader: usize,
    chunk: ChunkInfo,
    len: usize,
    /// Length and hash of the bytes: copies with the same are one cubin recorded twice (several processes).
    fingerprint: (usize, u64),
    /// The parse error, if it did not parse.
    error: Option<String>,
}

/// Reads the chosen copy of a cubin again, for the disassembler.
pub(crate) struct CubinBytes<'r> {
    readers: &'r [&'r Reader],
    chosen: HashMap<u64, (usize, ChunkInfo)>,
}

impl<'r> CubinBytes<'r> {
    /// The cubin of this CRC, inflated again; `None` if none was read (or it can no longer be).
    pub fn get(&self, crc: u64) -> Option<cutr_format::reader::Cubin<'r>> {
        let (reader, chunk) = self.chosen.get(&crc)?;
        self.readers[*reader].read_cubin(chunk).ok()
    }
}

/// Every cubin of `readers` as a source map by CRC (`None`: it did not parse), one inflated at a time, with a
/// warning for each chunk that could not be read, each cubin that did not parse, each damage in line tables, and
/// each CRC recorded with different bytes.
/// Each map keeps only the functions the samples (`by_pc`) name.
pub(crate) fn read<'r>(
    readers: &'r [&'r Reader],
    by_pc: &HashMap<super::PcKey, super::ByReason>,
    warnings: &mut Vec<String>,
) -> (HashMap<u64, Option<SourceMap>>, CubinBytes<'r>) {
    let mut sampled: HashMap<u64, HashSet<&str>> = HashMap::new();
    for (crc, function, _) in by_pc.keys() {
        sampled.entry(*crc).or_default().insert(function.as_str());
    }
    let none = HashSet::new();
    let mut maps: HashMap<u64, Option<SourceMap>> = HashMap::new();
    let mut copies: HashMap<u64, Vec<Recorded>> = HashMap::new();
    let mut chosen: HashMap<u64, (usize, ChunkInfo)> = HashMap::new();
    for (i, reader) in readers.iter().enumerate() {
        for chunk in reader.cubin_chunks() {
            let c = match reader.read_cubin(chunk) {
                Ok(c) => c,
                Err(p) => {
                    warnings.push(format!("a cubin could not be read: {p}"));
                    continue;
                }
            };
            let fingerprint = fingerprint(c.data());
            let seen = copies.entry(c.crc).or_default();
            if seen.iter().any(|s| s.fingerprint == fingerprint) {
                continue;
            }
            let wanted = sampled.get(&c.crc).unwrap_or(&none);
            let parsed = SourceMap::from_cubin_for(c.data(), &|name| wanted.contains(name));
            let error = parsed.as_ref().err().map(ToString::to_string);
            // The first copy that parses wins; until one does, the first copy stands.
            let better = match maps.get(&c.crc) {
                None => true,
                Some(current) => current.is_none() && parsed.is_ok(),
            };
            if better {
                maps.insert(c.crc, parsed.ok());
                chosen.insert(c.crc, (i, chunk.clone()));
            }
            seen.push(Recorded { reader: i, chunk: chunk.clone(), len: c.data().len(), fingerprint, error });
        }
    }
    let mut crcs: Vec<&u64> = copies.keys().collect();
    crcs.sort_unstable();
    for crc in crcs {
        let list = &copies[crc];
        let used = &chosen[crc];
        if list.len() > 1 {
            warnings.push(conflict(*crc, list, used, readers));
        }
        match &maps[crc] {
            None => {
                let copy = list.iter().find(|c| c.reader == used.0 && c.chunk == used.1);
                let why = copy.and_then(|c| c.error.clone()).unwrap_or_default();
                warnings.push(format!("cubin {crc:#x}: {why}"));
            }
            Some(m) => {
                for p in m.problems() {
                    warnings.push(format!("cubin {crc:#x}: its line tables are damaged: {p}"));
                }
            }
        }
    }
    (maps, CubinBytes { readers, chosen })
}

fn fingerprint(bytes: &[u8]) -> (usize, u64) {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    (bytes.len(), h.finish())
}

/// `cubin 0x… is recorded 2 times with different bytes: chunk #5 (12448 bytes, does not parse: …), chunk #9
/// (12448 bytes, parses); chunk #9's is used, the only one that parses`.
fn conflict(crc: u64, list: &[Recorded], used: &(usize, ChunkInfo), readers: &[&Reader]) -> String {
    let place = |c: &Recorded| {
        let mut s = format!("chunk #{}", c.chunk.header.seq);
        if readers.len() > 1 {
            let file = readers[c.reader].path().map(|p| p.display().to_string()).unwrap_or_default();
            s.push_str(&format!(" of {file}"));
        }
        s
    };
    let described: Vec<String> = list
        .iter()
        .map(|c| match &c.error {
            None => format!("{} ({} bytes, parses)", place(c), c.len),
            Some(e) => format!("{} ({} bytes, does not parse: {e})", place(c), c.len),
        })
        .collect();
    let parsing = list.iter().filter(|c| c.error.is_none()).count();
    let winner = list.iter().find(|c| c.reader == used.0 && c.chunk == used.1).map(place).unwrap_or_default();
    let why = match parsing {
        0 => "the first (none parses)",
        1 => "the only one that parses",
        _ => "the first that parses",
    };
    format!(
        "cubin {crc:#x} is recorded {} times with different bytes: {}; {winner}'s is used, {why}",
        list.len(),
        described.join(", ")
    )
}
