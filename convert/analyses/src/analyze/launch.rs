//! Launch health: launch latency (API call start to GPU start) and the launch call's CPU cost, per kernel name
//! and overall; queue depth per stream and time blocked on a full queue; kernels shorter than their launch.

use cutr_model::Trace;
use serde::Serialize;

/// The launch-health section.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LaunchHealth {}

/// The section over every launch in `trace`.
pub fn launch_health(_trace: &Trace) -> LaunchHealth {
    LaunchHealth::default()
}

/// The section as text (appended to `o`).
pub fn render_text(_o: &mut String, _h: &LaunchHealth) {}

/// The section as Markdown (appended to `o`).
pub fn render_markdown(_o: &mut String, _h: &LaunchHealth) {}
