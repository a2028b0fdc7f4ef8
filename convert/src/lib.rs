//! Offline analysis of `.cutr` files: what a file holds (`info`), and the command `cupti-convert`.
//! No CUDA here: everything works from the file alone.

pub mod fmt;
pub mod info;
