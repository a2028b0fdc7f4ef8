//! Typed errors of the container layer. Whole-file errors stop a read; chunk errors skip one chunk and are
//! reported as [`crate::Problem`]s.

use std::path::PathBuf;

use thiserror::Error;

/// A file that cannot be read at all.
#[derive(Debug, Error)]
pub enum FormatError {
    /// Opening or mapping the file failed (the message names the cause; `path` names the file).
    #[error("{err}")]
    Io { path: PathBuf, err: std::io::Error },
    #[error("not a .cutr file (it does not start with the .cutr signature)")]
    NotCutr,
    #[error("file is too short to be a .cutr file ({len} bytes)")]
    TooShort { len: u64 },
    /// `supported` is the newest major version this reader understands.
    #[error(
        "written in .cutr format {major}.{minor}, newer than this reader understands (major version {supported}); upgrade cutr to read it"
    )]
    NewerMajor { major: u16, minor: u16, supported: u16 },
    #[error("corrupted file header: {0}")]
    BadHeader(String),
    #[error("write failed: {0}")]
    Write(#[source] std::io::Error),
    #[error("the session metadata holds an unusable record layout table: {0}")]
    BadLayouts(#[from] cutr_schema::layouts::LayoutError),
    #[error("no session metadata was written before the first activity buffer")]
    NoLayouts,
    #[error("{0}")]
    Invalid(String),
}

/// A chunk that cannot be decoded; the reader skips it and reports why.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ChunkError {
    #[error("payload checksum mismatch")]
    Checksum,
    #[error("payload runs past the end of the file")]
    Truncated,
    #[error("unknown codec {0}")]
    UnknownCodec(u8),
    #[error("zstd: {0}")]
    Decompress(String),
    #[error("decoded size {actual} differs from the {expected} bytes the header promises")]
    SizeMismatch { expected: u64, actual: u64 },
    #[error("malformed payload: {0}")]
    Malformed(String),
    #[error("no record layout table to decode activity records with (the metadata chunk is missing or damaged)")]
    NoLayouts,
    /// The header claims more than its chunk type can need (a size, a ratio or a record count).
    #[error("implausible header: {0}")]
    Implausible(String),
}
