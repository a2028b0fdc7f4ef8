//! NVTX ranges drawn over the GPU work they launched, as Kineto draws `record_function` annotations
//! (`gpu_user_annotation`): per range and stream a span from the first start to the last end of the work the
//! range launched itself (`cutr_model::nvtx_spans`, the join `stats` sums its NVTX figures from), on a track
//! beside the stream's, written on the stream's own Chrome row (where HTA looks for the kernels under an
//! annotation). A recording without NVTX ranges, or whose ranges launched nothing, gets no span and no track.

use cutr_model::Trace;
use cutr_model::nvtx_spans::{GpuSpan, gpu_spans};

use super::item::MAX_RANGES;

/// The GPU spans of a trace's NVTX ranges, at most `room` of them (`Src::Annotation` indexes them), and how many
/// more there were: those are not drawn.
pub(crate) fn spans(trace: &Trace, room: usize) -> (Vec<GpuSpan>, u64) {
    capped(gpu_spans(trace), room)
}

/// The first `room` of `spans`, and how many were left out.
fn capped(mut spans: Vec<GpuSpan>, room: usize) -> (Vec<GpuSpan>, u64) {
    let dropped = spans.len().saturating_sub(room) as u64;
    spans.truncate(room);
    (spans, dropped)
}

/// How many GPU spans a timeline of `slice_rows` other slices can address: half of the ranges' kind's indices,
/// and what the item indices leave.
pub(crate) fn room(slice_rows: usize) -> usize {
    (MAX_RANGES - 1).min((u32::MAX as usize - 1).saturating_sub(slice_rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_what_both_the_kind_and_the_item_indices_leave() {
        assert_eq!(room(0), (1 << 28) - 1);
        assert_eq!(room(u32::MAX as usize - 10), 9);
        assert_eq!(room(u32::MAX as usize + 10), 0);
    }

    #[test]
    fn spans_past_the_room_are_counted_not_drawn() {
        let span = |range| GpuSpan {
            range,
            proc: cutr_model::ProcId(0),
            device: 0,
            context: 1,
            stream: 7,
            start: 100 * range as u64,
            end: 100 * range as u64 + 50,
            ops: 1,
            busy_ns: 50,
        };
        let all: Vec<GpuSpan> = (0..5).map(span).collect();
        assert_eq!(capped(all.clone(), 3), (all[..3].to_vec(), 2));
        assert_eq!(capped(all.clone(), 5), (all.clone(), 0));
        assert_eq!(spans(&Trace::default(), 0), (Vec::new(), 0));
    }
}
