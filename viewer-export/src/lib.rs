//! Output writers for traces: a hand-encoded streaming Perfetto protobuf writer ([`perfetto`]), a Chrome trace
//! JSON writer following PyTorch profiler (Kineto) conventions ([`chrome`]), and the ordered, parallel, optionally
//! gzipped file output both use ([`output`]). They receive events from `cutr-convert`'s model, never raw CUPTI
//! bytes.

pub mod chrome;
pub mod output;
pub mod perfetto;
pub mod protobuf;
