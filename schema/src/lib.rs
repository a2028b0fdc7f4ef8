//! Everything that defines bytes on disk in a `.cutr` file.
//!
//! - [`fb`]: the flatbuffers tables of the container's metadata, string tables, clock samples, loss counters and
//!   footer index (generated from `schema/cutr.fbs` by flatc 25.12.19, checked in).
//! - [`layouts`]: the CUPTI activity record layouts (struct name, size, field offsets and roles) of each CUPTI
//!   release we support, generated from NVIDIA's headers and checked against gcc and the real libcupti.
//! - [`kinds`]: CUPTI activity kind numbers and names.

#[allow(clippy::all, clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn, mismatched_lifetime_syntaxes, unused_imports)]
#[rustfmt::skip]
mod generated {
    include!("generated/cutr_generated.rs");
}

/// The generated flatbuffers types (`cutr.fb` namespace).
pub mod fb {
    pub use crate::generated::cutr::fb::*;
}

pub mod callbacks;
pub mod kinds;
pub mod layouts;

pub use layouts::{FieldLayout, FieldRole, FieldType, LayoutTable, RecordLayout};
