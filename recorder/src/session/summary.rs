//! What a finished session wrote, and its one line for stderr.

use std::path::PathBuf;

use cutr_format::LossCounters;

/// What a finished session wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// The file written (with `--split`, the last part).
    pub path: PathBuf,
    /// With `--split`: the first part (`path` is the last), and how many parts were written.
    pub first_path: Option<PathBuf>,
    pub parts: u32,
    pub records: u64,
    pub buffers: u64,
    pub bytes: u64,
    pub loss: LossCounters,
    pub peak_buffer_bytes: u64,
    /// With `--pc-sampling`: cubins stored, PC samples collected and dropped.
    pub cubins: u64,
    pub pc_samples: u64,
    pub pc_samples_dropped: u64,
    /// With `--counters`: counter samples written (one per source, device and time).
    pub counter_samples: u64,
    /// With `--graph-context`: graph events written (node creations, clones, updates).
    pub graph_events: u64,
}

impl Summary {
    /// One line for stderr.
    pub fn describe(&self) -> String {
        let lost: Vec<String> =
            self.loss.entries().iter().filter(|(_, v)| *v > 0).map(|(k, v)| format!("{k} {v}")).collect();
        let pc = if self.cubins > 0 || self.pc_samples > 0 {
            format!(
                ", {} PC samples ({} dropped) over {} cubins",
                self.pc_samples, self.pc_samples_dropped, self.cubins
            )
        } else {
            String::new()
        };
        let counters = if self.counter_samples > 0 {
            format!(", {} counter samples", self.counter_samples)
        } else {
            String::new()
        };
        let graphs =
            if self.graph_events > 0 { format!(", {} graph events", self.graph_events) } else { String::new() };
        let files = match &self.first_path {
            Some(first) if self.parts > 1 => {
                format!("{} .. {} ({} parts)", first.display(), self.path.display(), self.parts)
            }
            _ => self.path.display().to_string(),
        };
        format!(
            "wrote {files}: {} records in {} buffers{pc}{counters}{graphs}, {:.1} MiB; {}",
            self.records,
            self.buffers,
            self.bytes as f64 / (1 << 20) as f64,
            if lost.is_empty() { "nothing lost".to_string() } else { format!("LOSS: {}", lost.join(", ")) }
        )
    }
}
