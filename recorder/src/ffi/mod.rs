//! The only room that opens libcupti or the CUDA driver and declares their C signatures. Everything above it calls
//! typed, safe methods.

pub mod cupti;
pub mod driver;
pub mod os;
pub mod pc;
pub mod pm;
pub mod subscriber;
