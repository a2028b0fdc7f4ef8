//! The `.cutr` container: a header, independently decodable checksummed chunks appended as recording goes, and
//! a footer index written at close. See docs/FORMAT.md for every byte.
//!
//! - [`Writer`] appends metadata, activity buffers (through the record-aware [`codec`]), string tables, clock
//!   samples and loss counters, then writes the footer.
//! - [`Reader`] maps a file, reads the footer in place (or recovers a file that was cut short by scanning its
//!   chunks), and decodes activity chunks in parallel into records grouped by kind.
//!
//! No CUDA here: everything reads and writes bytes described by `cutr-schema`'s layout tables.

pub mod codec;
pub mod container;
pub mod counters;
pub mod error;
pub mod graphs;
pub mod limits;
pub mod meta;
pub mod reader;
pub mod records;
pub mod source;
pub mod writer;

pub use codec::{BufferStats, CodecPlan, DecodedBuffer, RecordGroup};
pub use container::{ChunkHeader, ChunkType, Codec, FORMAT_MAJOR, FORMAT_MINOR, FileHeader};
pub use counters::{CounterMetric, CounterSamples};
pub use error::{ChunkError, FormatError};
pub use graphs::{GraphEvent, GraphEventKind, GraphEvents};
pub use meta::{ClockSample, Device, LossCounters, Mapping, SessionMetadata};
pub use reader::{ChunkInfo, Problem, Reader, Recovery, StringTable, Verification};
pub use source::{CubinBlob, PcRecord, PcSamples};
pub use writer::{ActivityEncoder, EncodedActivity, Writer, WriterOptions};
