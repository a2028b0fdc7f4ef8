//! The link from `diff` to `source --diff`: when both sides have PC samples, a kernel row that regressed or
//! improved names the source lines whose share of the kernel's samples moved beyond the threshold and sampling
//! noise, from the same computation (`crate::source_diff`).

use serde::Serialize;

use super::{Report, Verdict, normalize_template_name};
use crate::source_diff::{Change, SourceDiff, moved_most};

/// Lines named on a row, at most: the one or two that moved most.
const LINES_PER_ROW: usize = 2;

/// A source line of a changed kernel whose share of its PC samples moved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MovedLine {
    /// `file:line`.
    pub location: String,
    /// Percent of the kernel's PC samples, base and new.
    pub base_pct: f64,
    pub new_pct: f64,
    pub change_pp: f64,
    /// The stall reason that moved the line most in its direction, and by how much (percentage points of the
    /// kernel's samples).
    pub stall: Option<String>,
    pub stall_change_pp: f64,
}

/// Names on each kernel row that regressed or improved the lines of `lines` (a `source --diff` of the same
/// recordings) that grew or dropped, largest change first. Kernels are matched by name as the rows name them.
pub fn link_source_lines(report: &mut Report, lines: &SourceDiff, normalize_templates: bool) {
    let name = |n: &str| if normalize_templates { normalize_template_name(n) } else { n.to_string() };
    for row in report.rows.iter_mut() {
        if row.section != "kernel" || !matches!(row.verdict, Verdict::Regression | Verdict::Improvement) {
            continue;
        }
        let Some(k) = lines.kernels.iter().find(|k| name(&k.name) == row.name) else { continue };
        row.moved_lines = k
            .lines
            .iter()
            .filter(|l| matches!(l.share.change, Change::Grew | Change::Dropped))
            .take(LINES_PER_ROW)
            .map(|l| {
                let stall = moved_most(&l.stalls, l.share.change);
                MovedLine {
                    location: l.location.clone(),
                    base_pct: l.share.base_pct,
                    new_pct: l.share.new_pct,
                    change_pp: l.share.change_pp,
                    stall: stall.map(|r| r.reason.clone()),
                    stall_change_pp: stall.map_or(0.0, |r| r.share.change_pp),
                }
            })
            .collect();
    }
}

/// `; lines moved: a.cu:64 +85.72 pp (long_scoreboard), ...` for a row's reason, empty when none moved.
pub(super) fn moved_text(moved: &[MovedLine]) -> String {
    if moved.is_empty() {
        return String::new();
    }
    let each: Vec<String> = moved
        .iter()
        .map(|m| match &m.stall {
            Some(s) => format!("{} {:+.2} pp ({s})", m.location, m.change_pp),
            None => format!("{} {:+.2} pp", m.location, m.change_pp),
        })
        .collect();
    format!("; lines moved (PC samples): {}", each.join(", "))
}
