//! A streaming writer of Chrome trace JSON that follows PyTorch profiler (Kineto) conventions: `X` events with
//! Kineto's categories and args keys, `ac2g` flow pairs, `M` metadata, `ts`/`dur` in microseconds with exactly
//! three decimals relative to `baseTimeNanoseconds` (docs/reference/conventions.md section 1).
//!
//! Events are appended to per-shard buffers; shards are joined with commas inside `"traceEvents": [...]`.

use std::io::Write as _;

use crate::args::Value;

/// Appends `s` as a JSON string (quoted and escaped).
pub fn string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => {
                out.extend_from_slice(&bytes[start..i]);
                let _ = write!(out, "\\u{:04x}", b);
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        out.extend_from_slice(esc);
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Appends `ns` as microseconds with three decimals (`12.345`), from integers: exact to the nanosecond.
pub fn micros(out: &mut Vec<u8>, ns: u64) {
    let mut b = itoa::Buffer::new();
    out.extend_from_slice(b.format(ns / 1000).as_bytes());
    let frac = (ns % 1000) as u16;
    out.extend_from_slice(&[b'.', b'0' + (frac / 100) as u8, b'0' + (frac / 10 % 10) as u8, b'0' + (frac % 10) as u8]);
}

pub fn int(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

pub fn uint(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

pub fn value(out: &mut Vec<u8>, v: &Value<'_>) {
    match v {
        Value::Int(x) => int(out, *x),
        Value::UInt(x) => uint(out, *x),
        Value::Double(x) => {
            if x.is_finite() {
                out.extend_from_slice(ryu::Buffer::new().format_finite(*x).as_bytes());
            } else {
                out.extend_from_slice(b"null");
            }
        }
        Value::Bool(b) => int(out, *b as i64),
        Value::Str(s) => string(out, s),
        Value::Int3(a) => {
            out.push(b'[');
            int(out, a[0]);
            out.extend_from_slice(b", ");
            int(out, a[1]);
            out.extend_from_slice(b", ");
            int(out, a[2]);
            out.push(b']');
        }
    }
}

/// Appends `"args": {...}` (nothing when empty), with a leading comma.
fn args(out: &mut Vec<u8>, args: &[(&str, Value<'_>)]) {
    if args.is_empty() {
        return;
    }
    out.extend_from_slice(b", \"args\": {");
    for (i, (k, v)) in args.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        string(out, k);
        out.extend_from_slice(b": ");
        value(out, v);
    }
    out.push(b'}');
}

/// The row of an event: Kineto's `pid` (process, or device for GPU rows) and `tid` (thread, or stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    pub pid: i64,
    pub tid: i64,
}

/// A complete (`X`) event.
#[derive(Clone, Copy, Debug)]
pub struct Complete<'a> {
    pub cat: &'a str,
    pub name: &'a str,
    pub row: Row,
    pub start: u64,
    pub end: u64,
    pub args: &'a [(&'a str, Value<'a>)],
}

/// An instant (`i`) event, thread-scoped unless `global`.
#[derive(Clone, Copy, Debug)]
pub struct InstantEvent<'a> {
    pub cat: &'a str,
    pub name: &'a str,
    pub row: Row,
    pub ts: u64,
    pub global: bool,
    pub args: &'a [(&'a str, Value<'a>)],
}

/// Which half of a Kineto `ac2g` arrow: `s` on the API call, `f` on the GPU work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowEnd {
    Start,
    Finish,
}

/// Writes events into one shard's buffer, separating them with commas.
#[derive(Debug)]
pub struct EventWriter<'a> {
    pub out: &'a mut Vec<u8>,
    /// `ts` values are `ns - base_ns`.
    pub base_ns: u64,
    pub events: u64,
}

impl EventWriter<'_> {
    fn sep(&mut self) {
        if self.events > 0 {
            self.out.extend_from_slice(b",\n");
        }
        self.events += 1;
    }

    fn rel(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.base_ns)
    }

    /// Appends `"pid": P, "tid": T` (with a leading comma).
    fn row(&mut self, row: Row) {
        let o = &mut *self.out;
        o.extend_from_slice(b", \"pid\": ");
        int(o, row.pid);
        o.extend_from_slice(b", \"tid\": ");
        int(o, row.tid);
    }

    /// A complete (`X`) event.
    pub fn complete(&mut self, e: &Complete<'_>) {
        self.sep();
        let o = &mut *self.out;
        o.extend_from_slice(b"{\"ph\": \"X\", \"cat\": ");
        string(o, e.cat);
        o.extend_from_slice(b", \"name\": ");
        string(o, e.name);
        self.row(e.row);
        let o = &mut *self.out;
        o.extend_from_slice(b", \"ts\": ");
        micros(o, e.start.saturating_sub(self.base_ns));
        o.extend_from_slice(b", \"dur\": ");
        micros(o, e.end.saturating_sub(e.start));
        args(o, e.args);
        o.push(b'}');
    }

    /// One half of a Kineto `ac2g` arrow with id `id`, at `ts` on `row`.
    pub fn flow(&mut self, end: FlowEnd, id: u64, row: Row, ts: u64) {
        self.flow_named(end, id, row, ts, "ac2g");
    }

    /// One half of an arrow whose category and name are `kind`.
    pub fn flow_named(&mut self, end: FlowEnd, id: u64, row: Row, ts: u64, kind: &str) {
        self.sep();
        let rel = self.rel(ts);
        let o = &mut *self.out;
        o.extend_from_slice(match end {
            FlowEnd::Start => b"{\"ph\": \"s\", \"id\": ",
            FlowEnd::Finish => b"{\"ph\": \"f\", \"id\": ",
        });
        uint(o, id);
        self.row(row);
        let o = &mut *self.out;
        o.extend_from_slice(b", \"ts\": ");
        micros(o, rel);
        o.extend_from_slice(b", \"cat\": ");
        string(o, kind);
        o.extend_from_slice(b", \"name\": ");
        string(o, kind);
        if end == FlowEnd::Finish {
            o.extend_from_slice(b", \"bp\": \"e\"");
        }
        o.push(b'}');
    }

    /// An instant (`i`) event.
    pub fn instant(&mut self, e: &InstantEvent<'_>) {
        self.sep();
        let rel = self.rel(e.ts);
        let o = &mut *self.out;
        o.extend_from_slice(b"{\"ph\": \"i\", \"s\": ");
        o.extend_from_slice(if e.global { b"\"g\"" } else { b"\"t\"" });
        o.extend_from_slice(b", \"cat\": ");
        string(o, e.cat);
        o.extend_from_slice(b", \"name\": ");
        string(o, e.name);
        self.row(e.row);
        let o = &mut *self.out;
        o.extend_from_slice(b", \"ts\": ");
        micros(o, rel);
        args(o, e.args);
        o.push(b'}');
    }

    /// A counter (`C`) sample.
    pub fn counter(&mut self, name: &str, pid: i64, ts: u64, series: &str, v: f64) {
        self.sep();
        let rel = self.rel(ts);
        let o = &mut *self.out;
        o.extend_from_slice(b"{\"ph\": \"C\", \"name\": ");
        string(o, name);
        o.extend_from_slice(b", \"pid\": ");
        int(o, pid);
        o.extend_from_slice(b", \"tid\": 0, \"ts\": ");
        micros(o, rel);
        args(o, &[(series, Value::Double(v))]);
        o.push(b'}');
    }

    /// A metadata (`M`) event: `process_name`, `thread_name`, `process_sort_index`...
    pub fn metadata(&mut self, name: &str, row: Row, ts: u64, key: &str, v: Value<'_>) {
        self.sep();
        let rel = self.rel(ts);
        let o = &mut *self.out;
        o.extend_from_slice(b"{\"name\": ");
        string(o, name);
        o.extend_from_slice(b", \"ph\": \"M\", \"ts\": ");
        micros(o, rel);
        self.row(row);
        args(self.out, &[(key, v)]);
        self.out.push(b'}');
    }
}

/// `baseTimeNanoseconds`: the first timestamp floored to the hour. Kineto floors to a three-month window so that
/// ranks share a base; but then `ts` is up to ~8e12 us, where a double (which HTA and pandas parse `ts` into) has
/// only ~1 ns of precision and per-kernel sums drift. Within an hour a double keeps `ts` exact to well below a
/// nanosecond; ranks recorded within the same hour still share the base, and ranks merged by one conversion
/// always do.
pub fn base_time_ns(first_ns: u64) -> u64 {
    const WINDOW_NS: u64 = 3_600 * 1_000_000_000;
    first_ns / WINDOW_NS * WINDOW_NS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_kineto() {
        let mut o = Vec::new();
        micros(&mut o, 123_456_789_012);
        assert_eq!(o, b"123456789.012");
        let mut o = Vec::new();
        micros(&mut o, 5);
        assert_eq!(o, b"0.005");
        let mut o = Vec::new();
        string(&mut o, "a\"b\\c\nd\x01");
        assert_eq!(String::from_utf8(o).unwrap(), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(base_time_ns(1_795_316_045_000_000_001), 1_795_312_800_000_000_000);
        let mut buf = Vec::new();
        let mut w = EventWriter { out: &mut buf, base_ns: 1_000, events: 0 };
        let row = Row { pid: 0, tid: 7 };
        let args = [("grid", Value::Int3([1, 2, 3])), ("bw", Value::Double(0.5))];
        w.complete(&Complete { cat: "kernel", name: "k", row, start: 2_500, end: 4_000, args: &args });
        w.flow(FlowEnd::Finish, 42, row, 2_500);
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 1.500, \"dur\": 1.500, \
             \"args\": {\"grid\": [1, 2, 3], \"bw\": 0.5}},\n{\"ph\": \"f\", \"id\": 42, \"pid\": 0, \"tid\": 7, \"ts\": 1.500, \
             \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}"
        );
    }
}
