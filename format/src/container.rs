//! The fixed-size binary parts of a `.cutr` file: the file header, chunk headers and the trailer.
//! docs/FORMAT.md documents every byte; the constants here are the reference.

use crate::error::FormatError;

/// First 8 bytes of every `.cutr` file. The high-bit first byte and the CR LF / Ctrl-Z tail catch transfers that
/// mangle binary files, as PNG's signature does.
pub const FILE_MAGIC: [u8; 8] = *b"\x89CUTR\r\n\x1a";
/// Format major version written by this crate. Readers reject files with a newer major version.
pub const FORMAT_MAJOR: u16 = 1;
/// Format minor version written by this crate. Minor versions only add things older readers may skip.
/// 1.1 added the `threads` chunk (OS thread names); 1.2 cubins in `blob` chunks and `pc_samples`; 1.5 `graphs`.
pub const FORMAT_MINOR: u16 = 5;
pub const FILE_HEADER_LEN: usize = 64;

pub const CHUNK_MAGIC: [u8; 4] = *b"CHNK";
pub const CHUNK_HEADER_LEN: usize = 56;

pub const TRAILER_MAGIC: [u8; 8] = *b"CUTR-END";
pub const TRAILER_LEN: usize = 32;

/// Every chunk starts at a multiple of this, so payloads (flatbuffers, raw records) are aligned in the mmap.
pub const CHUNK_ALIGN: u64 = 8;

/// Rounds `n` up to the chunk alignment.
#[inline]
pub fn align_up(n: u64) -> u64 {
    n.div_ceil(CHUNK_ALIGN) * CHUNK_ALIGN
}

/// What a chunk holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkType {
    /// `SessionMetadata` flatbuffer (the last complete one wins).
    Metadata,
    /// One CUPTI activity buffer (records as CUPTI wrote them).
    Activity,
    /// `StringTable` flatbuffer: text behind host pointers found in records.
    Strings,
    /// `Cubin` flatbuffer: a cubin the process loaded, once per CRC (format 1.2).
    Blob,
    /// `CounterSamples` flatbuffer: one source's counter samples on one device (format 1.3).
    Counters,
    /// `ClockSamples` flatbuffer.
    Clocks,
    /// `LossReport` flatbuffer with cumulative loss counters (the last one holds the totals).
    Loss,
    /// `ThreadNames` flatbuffer: OS thread names seen since the previous one (format 1.1).
    Threads,
    /// `PcSamples` flatbuffer: one collection of a context's PC samples (format 1.2).
    PcSamples,
    /// `GraphEvents` flatbuffer: graph structure and where each node was made (format 1.5).
    Graphs,
    /// `FooterIndex` flatbuffer, written once at close, just before the trailer.
    Footer,
    /// A chunk type this reader does not know (from a newer minor version): skipped, and reported.
    Unknown(u8),
}

impl ChunkType {
    pub fn from_u8(v: u8) -> ChunkType {
        match v {
            1 => ChunkType::Metadata,
            2 => ChunkType::Activity,
            3 => ChunkType::Strings,
            4 => ChunkType::Blob,
            5 => ChunkType::Counters,
            6 => ChunkType::Clocks,
            7 => ChunkType::Loss,
            8 => ChunkType::Threads,
            9 => ChunkType::PcSamples,
            10 => ChunkType::Graphs,
            15 => ChunkType::Footer,
            other => ChunkType::Unknown(other),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            ChunkType::Metadata => 1,
            ChunkType::Activity => 2,
            ChunkType::Strings => 3,
            ChunkType::Blob => 4,
            ChunkType::Counters => 5,
            ChunkType::Clocks => 6,
            ChunkType::Loss => 7,
            ChunkType::Threads => 8,
            ChunkType::PcSamples => 9,
            ChunkType::Graphs => 10,
            ChunkType::Footer => 15,
            ChunkType::Unknown(v) => v,
        }
    }

    pub fn name(self) -> String {
        match self {
            ChunkType::Metadata => "metadata".into(),
            ChunkType::Activity => "activity".into(),
            ChunkType::Strings => "strings".into(),
            ChunkType::Blob => "blob".into(),
            ChunkType::Counters => "counters".into(),
            ChunkType::Clocks => "clocks".into(),
            ChunkType::Loss => "loss".into(),
            ChunkType::Threads => "threads".into(),
            ChunkType::PcSamples => "pc_samples".into(),
            ChunkType::Graphs => "graphs".into(),
            ChunkType::Footer => "footer".into(),
            ChunkType::Unknown(v) => format!("unknown-{v}"),
        }
    }
}

/// How a chunk's payload is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Codec {
    /// Stored as is.
    None,
    /// One zstd frame.
    Zstd,
    /// The record-aware transform of [`crate::codec`] followed by one zstd frame.
    Records,
    Unknown(u8),
}

impl Codec {
    pub fn from_u8(v: u8) -> Codec {
        match v {
            0 => Codec::None,
            1 => Codec::Zstd,
            2 => Codec::Records,
            other => Codec::Unknown(other),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Codec::None => 0,
            Codec::Zstd => 1,
            Codec::Records => 2,
            Codec::Unknown(v) => v,
        }
    }
}

fn crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
}

fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes(b[o..o + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// The 64-byte file header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileHeader {
    pub major: u16,
    pub minor: u16,
    pub flags: u32,
    /// Random id of this file, so that merged multi-process traces can tell files apart.
    pub file_id: [u8; 16],
    pub created_unix_ns: u64,
}

impl FileHeader {
    pub fn encode(&self) -> [u8; FILE_HEADER_LEN] {
        let mut b = [0u8; FILE_HEADER_LEN];
        b[0..8].copy_from_slice(&FILE_MAGIC);
        b[8..10].copy_from_slice(&self.major.to_le_bytes());
        b[10..12].copy_from_slice(&self.minor.to_le_bytes());
        b[12..16].copy_from_slice(&(FILE_HEADER_LEN as u32).to_le_bytes());
        b[16..20].copy_from_slice(&self.flags.to_le_bytes());
        b[24..40].copy_from_slice(&self.file_id);
        b[40..48].copy_from_slice(&self.created_unix_ns.to_le_bytes());
        let c = crc(&b[0..60]);
        b[60..64].copy_from_slice(&c.to_le_bytes());
        b
    }

    /// Parses and checks the header. The major version is checked before the checksum so that a file from a
    /// newer writer gets "upgrade" rather than "corrupted", even if that writer changed the header.
    pub fn decode(b: &[u8]) -> Result<FileHeader, FormatError> {
        if b.len() < 8 || b[0..8] != FILE_MAGIC {
            return Err(FormatError::NotCutr);
        }
        if b.len() < FILE_HEADER_LEN {
            return Err(FormatError::TooShort { len: b.len() as u64 });
        }
        let major = u16_at(b, 8);
        let minor = u16_at(b, 10);
        if major > FORMAT_MAJOR {
            return Err(FormatError::NewerMajor { major, minor, supported: FORMAT_MAJOR });
        }
        if major == 0 {
            return Err(FormatError::BadHeader("format major version 0 was never released".into()));
        }
        if crc(&b[0..60]) != u32_at(b, 60) {
            return Err(FormatError::BadHeader("file header checksum mismatch".into()));
        }
        let header_len = u32_at(b, 12);
        if header_len as usize != FILE_HEADER_LEN {
            return Err(FormatError::BadHeader(format!("unexpected file header length {header_len}")));
        }
        Ok(FileHeader {
            major,
            minor,
            flags: u32_at(b, 16),
            file_id: b[24..40].try_into().unwrap(),
            created_unix_ns: u64_at(b, 40),
        })
    }
}

/// The 56-byte header in front of every chunk's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    pub chunk_type: ChunkType,
    pub codec: Codec,
    pub flags: u16,
    /// Position of the chunk among the file's chunks (0, 1, 2...).
    pub seq: u32,
    pub record_count: u32,
    /// Payload bytes as stored after this header.
    pub stored_len: u64,
    /// Payload bytes after decoding.
    pub raw_len: u64,
    /// Earliest and latest timestamp of the chunk's records (0, 0 when it has none).
    pub t_min: u64,
    pub t_max: u64,
    /// CRC-32C of the stored payload.
    pub payload_crc: u32,
}

/// Why a chunk header could not be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkHeaderError {
    BadMagic,
    BadChecksum,
}

impl ChunkHeader {
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        b[0..4].copy_from_slice(&CHUNK_MAGIC);
        b[4] = self.chunk_type.to_u8();
        b[5] = self.codec.to_u8();
        b[6..8].copy_from_slice(&self.flags.to_le_bytes());
        b[8..12].copy_from_slice(&self.seq.to_le_bytes());
        b[12..16].copy_from_slice(&self.record_count.to_le_bytes());
        b[16..24].copy_from_slice(&self.stored_len.to_le_bytes());
        b[24..32].copy_from_slice(&self.raw_len.to_le_bytes());
        b[32..40].copy_from_slice(&self.t_min.to_le_bytes());
        b[40..48].copy_from_slice(&self.t_max.to_le_bytes());
        b[48..52].copy_from_slice(&self.payload_crc.to_le_bytes());
        let c = crc(&b[0..52]);
        b[52..56].copy_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<ChunkHeader, ChunkHeaderError> {
        if b.len() < CHUNK_HEADER_LEN || b[0..4] != CHUNK_MAGIC {
            return Err(ChunkHeaderError::BadMagic);
        }
        if crc(&b[0..52]) != u32_at(b, 52) {
            return Err(ChunkHeaderError::BadChecksum);
        }
        Ok(ChunkHeader {
            chunk_type: ChunkType::from_u8(b[4]),
            codec: Codec::from_u8(b[5]),
            flags: u16_at(b, 6),
            seq: u32_at(b, 8),
            record_count: u32_at(b, 12),
            stored_len: u64_at(b, 16),
            raw_len: u64_at(b, 24),
            t_min: u64_at(b, 32),
            t_max: u64_at(b, 40),
            payload_crc: u32_at(b, 48),
        })
    }

    /// Bytes from this chunk's start to the next chunk's start.
    pub fn span(&self) -> u64 {
        align_up(CHUNK_HEADER_LEN as u64 + self.stored_len)
    }
}

/// Checks a payload against its header's checksum.
pub fn payload_ok(header: &ChunkHeader, payload: &[u8]) -> bool {
    crc(payload) == header.payload_crc
}

pub fn payload_crc(payload: &[u8]) -> u32 {
    crc(payload)
}

/// The 32 bytes at the very end of a cleanly closed file: where the footer chunk is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailer {
    pub footer_offset: u64,
    pub footer_span: u64,
}

impl Trailer {
    pub fn encode(&self) -> [u8; TRAILER_LEN] {
        let mut b = [0u8; TRAILER_LEN];
        b[0..8].copy_from_slice(&self.footer_offset.to_le_bytes());
        b[8..16].copy_from_slice(&self.footer_span.to_le_bytes());
        let c = crc(&b[0..16]);
        b[16..20].copy_from_slice(&c.to_le_bytes());
        b[24..32].copy_from_slice(&TRAILER_MAGIC);
        b
    }

    /// Reads the trailer at the end of `file`, if there is a valid one.
    pub fn find(file: &[u8]) -> Option<Trailer> {
        if file.len() < FILE_HEADER_LEN + TRAILER_LEN {
            return None;
        }
        let b = &file[file.len() - TRAILER_LEN..];
        if b[24..32] != TRAILER_MAGIC || crc(&b[0..16]) != u32_at(b, 16) {
            return None;
        }
        let t = Trailer { footer_offset: u64_at(b, 0), footer_span: u64_at(b, 8) };
        let end = t.footer_offset.checked_add(t.footer_span)?;
        (end == (file.len() - TRAILER_LEN) as u64 && t.footer_offset >= FILE_HEADER_LEN as u64).then_some(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip_and_detect_damage() {
        let h = ChunkHeader {
            chunk_type: ChunkType::Activity,
            codec: Codec::Records,
            flags: 0,
            seq: 7,
            record_count: 1234,
            stored_len: 999,
            raw_len: 4096,
            t_min: 1,
            t_max: 2,
            payload_crc: 0xdead_beef,
        };
        let mut b = h.encode();
        assert_eq!(ChunkHeader::decode(&b), Ok(h));
        assert_eq!(h.span(), 1056);
        b[20] ^= 1;
        assert_eq!(ChunkHeader::decode(&b), Err(ChunkHeaderError::BadChecksum));
        b[0] = b'X';
        assert_eq!(ChunkHeader::decode(&b), Err(ChunkHeaderError::BadMagic));

        let fh = FileHeader { major: 1, minor: 0, flags: 0, file_id: [3; 16], created_unix_ns: 42 };
        let mut fb = fh.encode();
        assert_eq!(FileHeader::decode(&fb).unwrap(), fh);
        fb[8] = 2;
        assert!(matches!(FileHeader::decode(&fb), Err(FormatError::NewerMajor { major: 2, minor: 0, supported: 1 })));
        fb[8] = 1;
        fb[45] ^= 0x10;
        assert!(matches!(FileHeader::decode(&fb), Err(FormatError::BadHeader(_))));
        assert!(matches!(FileHeader::decode(b"PK\x03\x04"), Err(FormatError::NotCutr)));
    }
}
