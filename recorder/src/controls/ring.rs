//! The flight recorder (`--ring SECONDS|SIZE`): only the most recent window of a recording is kept, as encoded
//! (compressed) chunks in memory, and written out as a complete `.cutr` on a trigger: `cupti-record ctl PID dump`
//! (`<stem>.dump<N>.cutr` beside the output), and at exit or on a crash (the output file itself). A long job then
//! costs a bounded amount of memory and no disk until something worth keeping happens.
//!
//! What a dump needs besides the window's activity chunks is kept whole: the strings the records point at (those
//! first seen in chunks that left the window are written first, then each chunk's own before it, so a pointer
//! reused for another text keeps its meaning), the cubins, the graph structure, the clock samples and the thread
//! names. PC samples and counter samples are windowed like the activity.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::time::Duration;

use cutr_format::source::{CubinBlob, PcSamples};
use cutr_format::{ClockSample, CounterSamples, EncodedActivity, FormatError, GraphEvents, Writer};

/// How much the ring keeps: the most recent `window` of time, and at most `bytes` of encoded activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLimit {
    pub window: Option<Duration>,
    pub bytes: Option<usize>,
}

impl RingLimit {
    /// `5s`, `500ms` (a time window) or `512M`, `1G` (a size).
    pub fn parse(s: &str) -> Result<RingLimit, String> {
        let t = s.trim();
        if t.ends_with('s') {
            let d = crate::units::parse_duration(t)?;
            if d.is_zero() {
                return Err(format!("ring window '{s}' is empty"));
            }
            return Ok(RingLimit { window: Some(d), bytes: None });
        }
        let b = crate::units::parse_size(t).map_err(|_| format!("'{s}': use a time (5s) or a size (512M)"))?;
        if b < 1 << 20 {
            return Err(format!("ring size '{s}' is under 1M"));
        }
        Ok(RingLimit { window: None, bytes: Some(b) })
    }

    pub fn to_arg(self) -> String {
        match (self.window, self.bytes) {
            (Some(w), _) => format!("{}ms", w.as_millis()),
            (None, Some(b)) => b.to_string(),
            (None, None) => "0".into(),
        }
    }
}

/// The most clock samples the ring keeps (the latest).
pub(crate) const MAX_RING_CLOCKS: usize = 4096;

/// One activity buffer in the ring, with the strings first seen in it.
struct Entry {
    strings: Vec<(u64, String)>,
    activity: EncodedActivity,
}

/// The window kept in memory.
pub(crate) struct Ring {
    limit: RingLimit,
    entries: VecDeque<Entry>,
    bytes: usize,
    /// The latest text of each pointer first seen in a chunk that has left the window.
    base_strings: HashMap<u64, String>,
    cubins: Vec<CubinBlob>,
    /// Graph structure, kept whole: a replay in the window needs its capture, however old.
    graphs: Vec<GraphEvents>,
    pc: VecDeque<PcSamples>,
    counters: VecDeque<CounterSamples>,
    clocks: Vec<ClockSample>,
    /// Records and buffers that left the window.
    pub evicted_records: u64,
    pub evicted_buffers: u64,
}

/// What a replay wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub buffers: u64,
    pub records: u64,
}

impl Ring {
    pub fn new(limit: RingLimit) -> Ring {
        Ring {
            limit,
            entries: VecDeque::new(),
            bytes: 0,
            base_strings: HashMap::new(),
            cubins: Vec::new(),
            graphs: Vec::new(),
            pc: VecDeque::new(),
            counters: VecDeque::new(),
            clocks: Vec::new(),
            evicted_records: 0,
            evicted_buffers: 0,
        }
    }

    /// The newest time any kept chunk reaches.
    fn newest(&self) -> u64 {
        self.entries.iter().map(|e| e.activity.stats.t_max).max().unwrap_or(0)
    }

    pub fn push_activity(&mut self, strings: Vec<(u64, String)>, activity: EncodedActivity) {
        self.bytes += activity.payload.len();
        self.entries.push_back(Entry { strings, activity });
        self.evict();
    }

    pub fn push_cubin(&mut self, c: CubinBlob) {
        self.cubins.push(c);
    }

    pub fn push_graphs(&mut self, g: GraphEvents) {
        self.graphs.push(g);
    }

    pub fn push_pc(&mut self, p: PcSamples) {
        self.pc.push_back(p);
        self.evict();
    }

    pub fn push_counters(&mut self, c: CounterSamples) {
        self.counters.push_back(c);
        self.evict();
    }

    pub fn push_clock(&mut self, c: ClockSample) {
        // A clock sample comes every flush period for as long as the ring runs: the latest are enough to map
        // the window's times (the offset is their median).
        if self.clocks.len() >= MAX_RING_CLOCKS {
            self.clocks.drain(..self.clocks.len() + 1 - MAX_RING_CLOCKS);
        }
        self.clocks.push(c);
    }

    /// Drops what is older than the window or beyond the size, oldest first (the newest buffer always stays).
    fn evict(&mut self) {
        let newest = self.newest();
        let too_old =
            |t: u64| self.limit.window.is_some_and(|w| t > 0 && newest.saturating_sub(t) > w.as_nanos() as u64);
        while self.entries.len() > 1 {
            let front = &self.entries[0];
            let over_size = self.limit.bytes.is_some_and(|b| self.bytes > b);
            if !over_size && !too_old(front.activity.stats.t_max) {
                break;
            }
            let e = self.entries.pop_front().expect("non-empty");
            self.bytes -= e.activity.payload.len();
            self.evicted_records += u64::from(e.activity.stats.records);
            self.evicted_buffers += 1;
            for (p, t) in e.strings {
                self.base_strings.insert(p, t);
            }
        }
        let oldest_kept = self.entries.front().map_or(0, |e| e.activity.stats.t_min);
        while self.pc.front().is_some_and(|p| p.t_end < oldest_kept) {
            self.pc.pop_front();
        }
        while self.counters.front().is_some_and(|c| c.t_end.last().is_some_and(|&t| t < oldest_kept)) {
            self.counters.pop_front();
        }
    }

    /// Writes the window into `w` (after its metadata): strings, cubins, each buffer with its own strings,
    /// PC and counter samples, clock samples.
    pub fn replay<W: Write>(&self, w: &mut Writer<W>) -> Result<Replayed, FormatError> {
        let mut base: Vec<(u64, &str)> = self.base_strings.iter().map(|(p, t)| (*p, t.as_str())).collect();
        base.sort_unstable();
        if !base.is_empty() {
            w.write_strings(&base)?;
        }
        for c in &self.cubins {
            w.write_cubin(c)?;
        }
        for g in &self.graphs {
            w.write_graph_events(g)?;
        }
        let mut done = Replayed::default();
        for e in &self.entries {
            if !e.strings.is_empty() {
                let s: Vec<(u64, &str)> = e.strings.iter().map(|(p, t)| (*p, t.as_str())).collect();
                w.write_strings(&s)?;
            }
            w.append_encoded(e.activity.clone())?;
            done.buffers += 1;
            done.records += u64::from(e.activity.stats.records);
        }
        for p in &self.pc {
            w.write_pc_samples(p)?;
        }
        for c in &self.counters {
            w.write_counters(c)?;
        }
        if !self.clocks.is_empty() {
            w.write_clocks(&self.clocks)?;
        }
        Ok(done)
    }

    /// The note a dump's loss report carries: what the window left out by design.
    pub fn note(&self) -> String {
        let what = match (self.limit.window, self.limit.bytes) {
            (Some(w), _) => format!("the last {w:?}"),
            (None, Some(b)) => format!("the last {} MiB of encoded activity", b >> 20),
            (None, None) => "everything".into(),
        };
        format!(
            "flight recorder (--ring): this file keeps {what}; {} older records in {} buffers were left out by design",
            self.evicted_records, self.evicted_buffers
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_a_time_or_a_size() {
        assert_eq!(RingLimit::parse("5s").unwrap(), RingLimit { window: Some(Duration::from_secs(5)), bytes: None });
        assert_eq!(RingLimit::parse("500ms").unwrap().window, Some(Duration::from_millis(500)));
        assert_eq!(RingLimit::parse("512M").unwrap(), RingLimit { window: None, bytes: Some(512 << 20) });
        assert!(RingLimit::parse("0s").is_err());
        assert!(RingLimit::parse("10K").is_err());
        assert!(RingLimit::parse("soon").is_err());
        let l = RingLimit::parse("2s").unwrap();
        assert_eq!(RingLimit::parse(&l.to_arg()).unwrap(), l);
    }

    /// A day of flushes keeps the latest clock samples only.
    #[test]
    fn the_ring_keeps_the_latest_clock_samples() {
        let mut r = Ring::new(RingLimit::parse("5s").unwrap());
        for t in 0..100_000u64 {
            r.push_clock(ClockSample { cupti_ns: t, realtime_ns: t, monotonic_ns: t });
        }
        assert_eq!(r.clocks.len(), MAX_RING_CLOCKS);
        assert_eq!((r.clocks[0].cupti_ns, r.clocks[MAX_RING_CLOCKS - 1].cupti_ns), (100_000 - 4096, 99_999));
    }
}
