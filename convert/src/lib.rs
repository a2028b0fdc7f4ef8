//! Offline analysis of `.cutr` files: decoding records into a joined trace model, and what `cupti-convert`
//! reports and exports. No CUDA here: everything works from the files alone.

pub mod corr;
pub mod demangle;
pub mod diff;
pub mod export;
pub mod fmt;
pub mod group;
pub mod info;
pub mod layout;
pub mod memory;
pub mod model;
pub mod names;
pub mod phase;
pub mod pool;
pub mod stats;
pub mod timebase;
