//! The only room that opens libcupti or the CUDA driver and declares C signatures (CUPTI, the driver, NVML's raw
//! field values, the few OS calls outside signal handling). Everything above it calls typed, safe methods.

pub mod cupti;
pub mod driver;
pub mod nvml;
pub mod os;
pub mod pc;
pub mod pm;
pub mod subscriber;
