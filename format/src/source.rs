//! The source-level payloads: cubins (`blob` chunks) and PC samples (`pc_samples` chunks), format 1.2. See
//! `Cubin` and `PcSamples` in `schema/cutr.fbs`.

use cutr_schema::fb;
use flatbuffers::FlatBufferBuilder;

use crate::error::ChunkError;

/// A cubin the recorded process loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CubinBlob {
    /// CUPTI's CRC of the cubin, as PC samples name it.
    pub crc: u64,
    pub module_id: u32,
    pub data: Vec<u8>,
}

impl CubinBlob {
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(self.data.len() + 64);
        let data = b.create_vector(&self.data);
        let root =
            fb::Cubin::create(&mut b, &fb::CubinArgs { crc: self.crc, module_id: self.module_id, data: Some(data) });
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<CubinBlob, ChunkError> {
        let c = flatbuffers::root_with_opts::<fb::Cubin>(&verify_opts(), bytes)
            .map_err(|e| ChunkError::Malformed(format!("cubin: {e}")))?;
        Ok(CubinBlob {
            crc: c.crc(),
            module_id: c.module_id(),
            data: c.data().map(|d| d.bytes().to_vec()).unwrap_or_default(),
        })
    }
}

/// The samples of one PC since the previous collection.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcRecord {
    pub cubin_crc: u64,
    pub pc_offset: u64,
    pub function_index: u32,
    pub function_name: String,
    /// `(stall reason index, samples)`.
    pub stalls: Vec<(u32, u32)>,
}

/// One collection of one context's PC samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PcSamples {
    pub context: u32,
    pub device: u32,
    pub t_start: u64,
    pub t_end: u64,
    pub total_samples: u64,
    pub dropped_samples: u64,
    pub non_user_samples: u64,
    pub hardware_buffer_full: bool,
    pub period_log2: u32,
    /// `(index, name)`: the context's stall-reason table, in every collection (in the context's first only before
    /// issue 28: a reader names a collection without one by its context's).
    pub stall_reasons: Vec<(u32, String)>,
    pub pcs: Vec<PcRecord>,
}

impl PcSamples {
    /// Samples per stall reason index in the collection, every PC's summed (reasons by index, in order).
    pub fn samples_by_reason(&self) -> std::collections::BTreeMap<u32, u64> {
        let mut by = std::collections::BTreeMap::new();
        for &(reason, n) in self.pcs.iter().flat_map(|r| &r.stalls) {
            *by.entry(reason).or_default() += u64::from(n);
        }
        by
    }

    /// Samples in the collection, given its context's stall-reason table (`table`: the collection's own, or its
    /// context's first where an older file has it only there): the reasons the table names `*_not_issued` are
    /// left out (with `--stall-reasons all`, CUPTI counts a sample that did not issue twice: under its reason and
    /// under the reason's `_not_issued` twin).
    pub fn samples(&self, table: &[(u32, String)]) -> u64 {
        let twin = |reason: u32| table.iter().any(|(i, name)| *i == reason && name.ends_with("_not_issued"));
        self.samples_by_reason().into_iter().filter(|(reason, _)| !twin(*reason)).map(|(_, n)| n).sum()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(256 + self.pcs.len() * 96);
        let reasons: Vec<_> = self
            .stall_reasons
            .iter()
            .map(|(index, name)| {
                let name = b.create_string(name);
                fb::PcStallReason::create(&mut b, &fb::PcStallReasonArgs { index: *index, name: Some(name) })
            })
            .collect();
        let reasons = b.create_vector(&reasons);
        let pcs: Vec<_> = self
            .pcs
            .iter()
            .map(|p| {
                let name = b.create_string(&p.function_name);
                let stalls: Vec<fb::PcStall> = p.stalls.iter().map(|&(r, n)| fb::PcStall::new(r, n)).collect();
                let stalls = b.create_vector(&stalls);
                fb::PcRecord::create(
                    &mut b,
                    &fb::PcRecordArgs {
                        cubin_crc: p.cubin_crc,
                        pc_offset: p.pc_offset,
                        function_index: p.function_index,
                        function_name: Some(name),
                        stalls: Some(stalls),
                    },
                )
            })
            .collect();
        let pcs = b.create_vector(&pcs);
        let root = fb::PcSamples::create(
            &mut b,
            &fb::PcSamplesArgs {
                context: self.context,
                device: self.device,
                t_start: self.t_start,
                t_end: self.t_end,
                total_samples: self.total_samples,
                dropped_samples: self.dropped_samples,
                non_user_samples: self.non_user_samples,
                hardware_buffer_full: self.hardware_buffer_full,
                period_log2: self.period_log2,
                stall_reasons: Some(reasons),
                pcs: Some(pcs),
            },
        );
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<PcSamples, ChunkError> {
        let s = flatbuffers::root_with_opts::<fb::PcSamples>(&verify_opts(), bytes)
            .map_err(|e| ChunkError::Malformed(format!("pc samples: {e}")))?;
        Ok(PcSamples {
            context: s.context(),
            device: s.device(),
            t_start: s.t_start(),
            t_end: s.t_end(),
            total_samples: s.total_samples(),
            dropped_samples: s.dropped_samples(),
            non_user_samples: s.non_user_samples(),
            hardware_buffer_full: s.hardware_buffer_full(),
            period_log2: s.period_log2(),
            stall_reasons: s
                .stall_reasons()
                .map(|v| v.iter().map(|r| (r.index(), r.name().unwrap_or("").to_string())).collect())
                .unwrap_or_default(),
            pcs: s
                .pcs()
                .map(|v| {
                    v.iter()
                        .map(|p| PcRecord {
                            cubin_crc: p.cubin_crc(),
                            pc_offset: p.pc_offset(),
                            function_index: p.function_index(),
                            function_name: p.function_name().unwrap_or("").to_string(),
                            stalls: p
                                .stalls()
                                .map(|s| s.iter().map(|s| (s.reason(), s.samples())).collect())
                                .unwrap_or_default(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
    }
}

/// Cubins run to tens of MB and a PC collection to hundreds of thousands of tables.
fn verify_opts() -> flatbuffers::VerifierOptions {
    flatbuffers::VerifierOptions { max_tables: 50_000_000, max_apparent_size: 1 << 31, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_payloads_round_trip() {
        let c = CubinBlob { crc: 0x75b6_2bf0, module_id: 3, data: vec![0x7f, b'E', b'L', b'F', 1, 2, 3] };
        assert_eq!(CubinBlob::from_bytes(&c.to_bytes()).unwrap(), c);
        let s = PcSamples {
            context: 1,
            device: 0,
            t_start: 10,
            t_end: 20,
            total_samples: 100,
            dropped_samples: 2,
            non_user_samples: 3,
            hardware_buffer_full: true,
            period_log2: 10,
            stall_reasons: vec![(0, "smsp__pcsamp_warps_issue_stalled_long_scoreboard".into())],
            pcs: vec![PcRecord {
                cubin_crc: 7,
                pc_offset: 0x330,
                function_index: 13,
                function_name: "_Z5chasePKjjiPj".into(),
                stalls: vec![(0, 95)],
            }],
        };
        assert_eq!(PcSamples::from_bytes(&s.to_bytes()).unwrap(), s);
        assert!(PcSamples::from_bytes(b"junk").is_err());
    }
}
