//! Hostile PC samples (issue 28): collections whose stall-reason table is missing, on another context, shorter
//! than their indices or contradicted; counts that overflow a sum; and many functions' samples over many
//! collections, the input that made stall-rate tracks cost series x collections. Each forgery is a whole file with
//! its chunks' checksums and a fresh footer, so that a reader takes it as closed cleanly and only the samples lie.

use cutr_format::container::{
    CHUNK_HEADER_LEN, ChunkHeader, ChunkType, Codec, FILE_HEADER_LEN, TRAILER_LEN, Trailer, align_up, payload_crc,
};
use cutr_format::{PcRecord, PcSamples, Reader};
use cutr_schema::fb;

use super::chunks;

/// The prefix CUPTI puts on every stall-reason name.
pub const STALL_PREFIX: &str = "smsp__pcsamp_warps_issue_stalled_";

/// The file `file` with its PC sample collections (in file order) replaced by what `edit` makes of them: the
/// first collections take the places of the old `pc_samples` chunks (sequence numbers kept), the rest are
/// appended after the last chunk; an old chunk left without a collection gets an empty one. Every other chunk is
/// kept as it was, and the footer is written anew.
pub fn edit_collections(file: &[u8], edit: impl FnOnce(&mut Vec<PcSamples>)) -> Vec<u8> {
    let reader = Reader::from_bytes(file.to_vec()).expect("a readable file");
    let (mut collections, bad) = reader.pc_samples();
    assert!(bad.is_empty(), "{bad:?}");
    edit(&mut collections);
    let mut collections = collections.into_iter();
    let mut out = Rebuilt::new(file);
    for c in chunks(file).into_iter().filter(|c| c.header.chunk_type != ChunkType::Footer) {
        let kind_counts = reader.chunks().iter().find(|i| i.offset == c.offset as u64).map(|i| i.kind_counts.clone());
        if c.header.chunk_type == ChunkType::PcSamples {
            let payload = collections.next().unwrap_or_default().to_bytes();
            out.zstd(c.header, &payload);
        } else {
            out.copy(c.header, c.payload(file), kind_counts.unwrap_or_default());
        }
    }
    for rest in collections {
        let header = ChunkHeader {
            chunk_type: ChunkType::PcSamples,
            codec: Codec::Zstd,
            flags: 0,
            seq: out.next_seq,
            record_count: 0,
            stored_len: 0,
            raw_len: 0,
            t_min: 0,
            t_max: 0,
            payload_crc: 0,
        };
        out.zstd(header, &rest.to_bytes());
    }
    out.finish()
}

/// A chunk's footer entry: its offset, header and (kind, count) of its records.
type IndexEntry = (u64, ChunkHeader, Vec<(u32, u32)>);

/// A file being written again chunk by chunk, with its index for the footer.
struct Rebuilt {
    bytes: Vec<u8>,
    index: Vec<IndexEntry>,
    next_seq: u32,
}

impl Rebuilt {
    fn new(file: &[u8]) -> Rebuilt {
        Rebuilt { bytes: file[..FILE_HEADER_LEN].to_vec(), index: Vec::new(), next_seq: 0 }
    }

    /// Appends a chunk with `header`'s type, sequence number and times, holding `payload` stored as it is.
    fn copy(&mut self, header: ChunkHeader, payload: &[u8], kind_counts: Vec<(u32, u32)>) {
        let h = ChunkHeader { stored_len: payload.len() as u64, payload_crc: payload_crc(payload), ..header };
        let offset = self.bytes.len() as u64;
        self.bytes.extend_from_slice(&h.encode());
        self.bytes.extend_from_slice(payload);
        self.bytes.resize(offset as usize + h.span() as usize, 0);
        self.index.push((offset, h, kind_counts));
        self.next_seq = self.next_seq.max(h.seq + 1);
    }

    /// Appends `raw` zstd-compressed as a chunk of `header`'s type and sequence number.
    fn zstd(&mut self, header: ChunkHeader, raw: &[u8]) {
        let z = zstd::bulk::compress(raw, 3).expect("zstd in memory");
        self.copy(ChunkHeader { codec: Codec::Zstd, raw_len: raw.len() as u64, ..header }, &z, Vec::new());
    }

    /// The footer index and trailer, as `Writer::finish` writes them.
    fn finish(mut self) -> Vec<u8> {
        let mut b = flatbuffers::FlatBufferBuilder::new();
        let mut counts = Vec::new();
        let mut entries = Vec::new();
        for (offset, h, kinds) in &self.index {
            entries.push(fb::ChunkEntry::new(
                *offset,
                h.stored_len,
                h.raw_len,
                h.t_min,
                h.t_max,
                h.seq,
                h.record_count,
                h.chunk_type.to_u8(),
                h.codec.to_u8(),
                h.flags,
                counts.len() as u32,
                kinds.len() as u32,
            ));
            counts.extend(kinds.iter().map(|&(k, c)| fb::KindCount::new(k, c)));
        }
        let total_records = self.index.iter().map(|e| u64::from(e.1.record_count)).sum();
        let chunks = b.create_vector(&entries);
        let kind_counts = b.create_vector(&counts);
        let root = fb::FooterIndex::create(
            &mut b,
            &fb::FooterIndexArgs {
                chunks: Some(chunks),
                kind_counts: Some(kind_counts),
                total_records,
                clean_close: true,
            },
        );
        b.finish(root, None);
        let footer = b.finished_data().to_vec();
        let footer_offset = self.bytes.len() as u64;
        let header = ChunkHeader {
            chunk_type: ChunkType::Footer,
            codec: Codec::None,
            flags: 0,
            seq: self.next_seq,
            record_count: 0,
            stored_len: 0,
            raw_len: footer.len() as u64,
            t_min: 0,
            t_max: 0,
            payload_crc: 0,
        };
        self.copy(header, &footer, Vec::new());
        let trailer = Trailer { footer_offset, footer_span: align_up(CHUNK_HEADER_LEN as u64 + footer.len() as u64) };
        self.bytes.extend_from_slice(&trailer.encode());
        debug_assert_eq!(trailer.encode().len(), TRAILER_LEN);
        self.bytes
    }
}

/// Each collection with PCs split in two: its first half of PCs stays in place, the second is appended as a
/// collection of the same context after the file's last chunk, and CUPTI's count of samples taken is split by the
/// samples each half counts (the `*_not_issued` twins left out, by the context's table). A cut inside the last
/// chunk then loses the second half only.
pub fn split_collections(file: &[u8]) -> Vec<u8> {
    edit_collections(file, |cs| {
        // Each context's indices that count (not a `*_not_issued` twin).
        let mut counted: std::collections::HashMap<(u32, u32), Vec<u32>> = Default::default();
        for c in cs.iter() {
            let twin = |name: &String| name.ends_with("_not_issued");
            let indices = c.stall_reasons.iter().filter(|r| !twin(&r.1)).map(|r| r.0);
            counted.entry((c.context, c.device)).or_default().extend(indices);
        }
        let mut halves = Vec::new();
        for c in cs.iter_mut().filter(|c| c.pcs.len() >= 2) {
            let indices = counted.get(&(c.context, c.device)).map(Vec::as_slice).unwrap_or(&[]);
            let counted = |index: u32| indices.contains(&index);
            let second = c.pcs.split_off(c.pcs.len() / 2);
            let taken: u64 =
                second.iter().flat_map(|p| &p.stalls).filter(|s| counted(s.0)).map(|s| u64::from(s.1)).sum();
            c.total_samples -= taken.min(c.total_samples);
            halves.push(PcSamples {
                pcs: second,
                total_samples: taken,
                dropped_samples: 0,
                non_user_samples: 0,
                hardware_buffer_full: false,
                ..c.clone()
            });
        }
        cs.extend(halves);
    })
}

/// Every collection without its stall-reason table: what a `--ring` dump of a recorder that wrote the table in
/// a context's first collection only holds once that collection was evicted.
pub fn without_tables(file: &[u8]) -> Vec<u8> {
    edit_collections(file, |cs| cs.iter_mut().for_each(|c| c.stall_reasons.clear()))
}

/// The tables moved to an empty collection of another context (`context + 1000`): the samples' own context has
/// none.
pub fn table_on_other_context(file: &[u8]) -> Vec<u8> {
    edit_collections(file, |cs| {
        let mut moved = Vec::new();
        for c in cs.iter_mut().filter(|c| !c.stall_reasons.is_empty()) {
            moved.push(PcSamples {
                context: c.context + 1000,
                device: c.device,
                stall_reasons: std::mem::take(&mut c.stall_reasons),
                ..Default::default()
            });
        }
        cs.extend(moved);
    })
}

/// Every table cut to its first `keep` entries: samples of the reasons cut name indices it does not list.
pub fn tables_cut_to(file: &[u8], keep: usize) -> Vec<u8> {
    edit_collections(file, |cs| cs.iter_mut().for_each(|c| c.stall_reasons.truncate(keep)))
}

/// A second table for each context whose names are shifted by one index, in a collection of its own appended
/// after the others with no samples, and the original tables left where they were: the context's tables disagree
/// on every index.
pub fn contradicting_tables(file: &[u8]) -> Vec<u8> {
    edit_collections(file, |cs| {
        let mut other = Vec::new();
        for c in cs.iter().filter(|c| !c.stall_reasons.is_empty()) {
            let mut names: Vec<String> = c.stall_reasons.iter().map(|r| r.1.clone()).collect();
            names.rotate_left(1);
            let shifted = c.stall_reasons.iter().map(|r| r.0).zip(names).collect();
            other.push(PcSamples {
                context: c.context,
                device: c.device,
                stall_reasons: shifted,
                ..Default::default()
            });
        }
        cs.extend(other);
    })
}

/// CUPTI's counts of every collection set to `n` (2^63 twice wraps a sum to 0).
pub fn counts_of(file: &[u8], n: u64) -> Vec<u8> {
    edit_collections(file, |cs| {
        for c in cs.iter_mut() {
            (c.total_samples, c.dropped_samples, c.non_user_samples) = (n, n, n);
        }
    })
}

/// A stall-reason table of `reasons` entries (`reason_00000`...).
pub fn reason_table(reasons: u32) -> Vec<(u32, String)> {
    (0..reasons).map(|i| (i, format!("{STALL_PREFIX}reason_{i:05}"))).collect()
}

/// Many functions' samples over many collections, few PCs each (the class that made stall-rate tracks cost
/// series x collections): `collections` collections of context 1 on device 0 with `pcs_per_collection` PCs
/// each, PC `p` of collection `c` in function `functions[(c * pcs + p) % len]` with `reasons_per_pc` reasons
/// (indices below `reasons`), its own run of the table; the first collection carries [`reason_table`], the others
/// none (set `stall_reasons` for more). CUPTI's count of each collection matches its samples.
pub fn many_functions(
    functions: &[&str],
    collections: usize,
    pcs_per_collection: usize,
    reasons: u32,
    reasons_per_pc: u32,
) -> Vec<PcSamples> {
    (0..collections)
        .map(|c| {
            let pcs: Vec<PcRecord> = (0..pcs_per_collection)
                .map(|p| {
                    let at = c * pcs_per_collection + p;
                    let first = (at as u32).wrapping_mul(reasons_per_pc) % reasons.max(1);
                    PcRecord {
                        cubin_crc: 0x5eed,
                        pc_offset: (at as u64 % 4096) * 16,
                        function_index: (at % functions.len()) as u32,
                        function_name: functions[at % functions.len()].to_string(),
                        stalls: (0..reasons_per_pc).map(|r| ((first + r) % reasons.max(1), 1 + r)).collect(),
                    }
                })
                .collect();
            let total = pcs.iter().flat_map(|p| &p.stalls).map(|s| u64::from(s.1)).sum();
            PcSamples {
                context: 1,
                device: 0,
                t_start: c as u64 * 1000,
                t_end: c as u64 * 1000 + 999,
                total_samples: total,
                period_log2: 10,
                stall_reasons: if c == 0 { reason_table(reasons) } else { Vec::new() },
                pcs,
                ..Default::default()
            }
        })
        .collect()
}

/// Which collections of [`write_many_functions`] carry the stall-reason table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tables {
    /// Every collection, as the recorder writes them since issue 28.
    Every,
    /// The first only, as an older recorder wrote them.
    First,
    /// None: a `--ring` dump of an older recorder that evicted the first collection.
    None,
}

/// The shape of a file of many functions' PC samples ([`write_many_functions`]).
#[derive(Clone, Copy, Debug)]
pub struct ManyFunctions {
    /// Activity records of the synthetic loop (its ~30 kernels run over and over).
    pub records: u64,
    /// Functions the PCs are in: the loop's kernels first (they have runs), then functions no kernel record names.
    pub functions: usize,
    pub collections: usize,
    pub pcs_per_collection: usize,
    /// Entries of the stall-reason table, and reasons per PC.
    pub reasons: u32,
    pub reasons_per_pc: u32,
    pub tables: Tables,
}

/// The synthetic loop's recording (`records` records, seed 1) with the PC samples of [`many_functions`] after its
/// activity: the input whose stall-rate tracks cost series x collections before issue 28 (each collection's PCs
/// in other functions, each function a series of its own per reason index).
pub fn write_many_functions(
    path: &std::path::Path,
    shape: ManyFunctions,
) -> Result<crate::SynthTruth, cutr_format::FormatError> {
    let mut names: Vec<String> = crate::KERNELS.iter().map(|k| k.name.to_string()).collect();
    names.truncate(shape.functions);
    names.extend((names.len()..shape.functions).map(|i| format!("_Z8functionILi{i}EEvv")));
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let collections =
        many_functions(&names, shape.collections, shape.pcs_per_collection, shape.reasons, shape.reasons_per_pc);
    let table = reason_table(shape.reasons);
    let opts = crate::SynthOptions { records: shape.records, seed: 1, ..Default::default() };
    let w = cutr_format::Writer::create(path, Default::default())?;
    // The table is given to each collection as it is written, never held by all of them at once.
    let write = |w: &mut cutr_format::Writer<std::fs::File>, _: &crate::SynthTruth| {
        collections.into_iter().enumerate().try_for_each(|(i, mut c)| {
            c.stall_reasons = match shape.tables {
                Tables::Every => table.clone(),
                Tables::First if i == 0 => table.clone(),
                _ => Vec::new(),
            };
            w.write_pc_samples(&c).map(drop)
        })
    };
    crate::write_to_with(w, opts, write).map(|(_, truth)| truth)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Vec<u8> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/source_workload_pcs.cutr");
        std::fs::read(root).unwrap()
    }

    #[test]
    fn an_unedited_rebuild_reads_as_the_original_closed_cleanly() {
        let file = fixture();
        let same = edit_collections(&file, |_| {});
        let (a, b) = (Reader::from_bytes(file).unwrap(), Reader::from_bytes(same).unwrap());
        assert!(b.recovery().is_none() && b.problems().is_empty(), "{:?}", b.problems());
        assert_eq!(a.pc_samples().0, b.pc_samples().0);
        assert_eq!(a.chunks().len(), b.chunks().len());
        let kinds = |r: &Reader| r.chunks().iter().map(|c| c.kind_counts.clone()).collect::<Vec<_>>();
        assert_eq!(kinds(&a), kinds(&b));
    }

    #[test]
    fn appended_collections_follow_the_last_chunk() {
        let extra = many_functions(&["_Z1fv", "_Z1gv"], 3, 2, 4, 2);
        assert_eq!((extra[0].stall_reasons.len(), extra[1].stall_reasons.len()), (4, 0));
        let forged = edit_collections(&fixture(), |cs| cs.extend(extra.clone()));
        let r = Reader::from_bytes(forged).unwrap();
        assert!(r.problems().is_empty(), "{:?}", r.problems());
        let (cs, _) = r.pc_samples();
        assert_eq!(cs.len(), 2 + 3);
        assert_eq!(cs[2..], extra[..]);
        assert_eq!(extra[0].total_samples, 2 * (1 + 2));
    }
}
