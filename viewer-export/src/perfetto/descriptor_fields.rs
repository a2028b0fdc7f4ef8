//! The `TrackDescriptor` and `CounterDescriptor` fields that say how a counter track is shown: its unit, its
//! description, its place among its siblings (`docs/reference/conventions.md` 3.5 and 3.6).

use crate::protobuf as pb;
use crate::timeline::Unit;

/// `TrackDescriptor` fields past the v20 ones (`docs/reference/conventions.md` 3.5): Perfetto v20 skips them, newer
/// versions read them.
pub(super) mod track {
    pub const CHILD_ORDERING: u32 = 11;
    pub const SIBLING_ORDER_RANK: u32 = 12;
    pub const DESCRIPTION: u32 = 14;
    /// `ChildTracksOrdering.EXPLICIT`: children by `sibling_order_rank`.
    pub const ORDER_EXPLICIT: u64 = 3;
}

/// `CounterDescriptor` fields and its `Unit` enum.
mod counter {
    pub const UNIT: u32 = 3;
    pub const UNIT_NAME: u32 = 6;
    pub const UNIT_TIME_NS: u64 = 1;
    pub const UNIT_COUNT: u64 = 2;
    pub const UNIT_SIZE_BYTES: u64 = 3;
}

/// A counter's unit: Perfetto's own where one fits (the UI then formats the values: KiB, ms), else its name.
pub(super) fn counter_unit(d: &mut Vec<u8>, unit: &Unit) {
    match unit {
        Unit::Bytes => pb::uint(d, counter::UNIT, counter::UNIT_SIZE_BYTES),
        Unit::Nanoseconds => pb::uint(d, counter::UNIT, counter::UNIT_TIME_NS),
        Unit::Count => pb::uint(d, counter::UNIT, counter::UNIT_COUNT),
        Unit::Named(name) => pb::string(d, counter::UNIT_NAME, name),
    }
}
