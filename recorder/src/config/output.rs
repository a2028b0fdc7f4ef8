//! The output path and how a long recording is cut into parts: `%p`, `%h`, `%n` and `%%` in the path, and
//! `--split`'s size or time.

use std::time::Duration;

/// The smallest part `--split` takes by size: below it the metadata every part repeats would be most of the file.
pub const MIN_SPLIT_BYTES: u64 = 1 << 20;
/// The shortest part `--split` takes by time.
pub const MIN_SPLIT_TIME: Duration = Duration::from_secs(1);

/// When `--split` ends a part and starts the next: after this many bytes, or this much time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitLimit {
    Bytes(u64),
    Every(Duration),
}

impl SplitLimit {
    /// `30s`, `1m` (minutes), `1h` (a time) or `500M`, `2G`, `2GiB` (a size). A lone `m` is minutes and `M`
    /// megabytes, as people write them.
    pub fn parse(s: &str) -> Result<SplitLimit, String> {
        let t = s.trim();
        let split = t.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let scale = match unit.trim() {
            "s" => Some(1.0),
            "m" | "min" => Some(60.0),
            "h" => Some(3600.0),
            _ => None,
        };
        if let Some(scale) = scale {
            let v: f64 = num.parse().map_err(|_| format!("'{s}': not a time"))?;
            let d = Duration::try_from_secs_f64(v * scale).map_err(|_| format!("'{s}': out of range"))?;
            if d < MIN_SPLIT_TIME {
                return Err(format!("'{s}': parts shorter than 1s"));
            }
            return Ok(SplitLimit::Every(d));
        }
        if unit.is_empty() {
            return Err(format!("'{s}': give a unit: a time (30s, 1m, 1h) or a size (500M, 2G)"));
        }
        let bytes = crate::units::parse_size(t)
            .map_err(|_| format!("'{s}': use a time (30s, 1m, 1h) or a size (500M, 2G)"))? as u64;
        if bytes < MIN_SPLIT_BYTES {
            return Err(format!("'{s}': parts smaller than 1M"));
        }
        Ok(SplitLimit::Bytes(bytes))
    }

    /// The text [`SplitLimit::parse`] reads back.
    pub fn to_arg(self) -> String {
        match self {
            SplitLimit::Bytes(b) => format!("{b}B"),
            SplitLimit::Every(d) => format!("{}s", d.as_secs_f64()),
        }
    }
}

/// Expands `%p` (pid), `%h` (host name), `%n` (part 1, as `001`) and `%%` in an output path.
pub fn expand_output(template: &str, pid: u32, host: &str) -> String {
    expand_output_part(template, pid, host, 1)
}

/// [`expand_output`] for part `part` of a split recording: `%n` is the part number, zero-padded to 3 digits
/// (wider past 999), so that the parts sort in order by name.
pub fn expand_output_part(template: &str, pid: u32, host: &str, part: u32) -> String {
    let mut out = String::with_capacity(template.len() + 16);
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('p') => out.push_str(&pid.to_string()),
            Some('h') => out.push_str(host),
            Some('n') => out.push_str(&format!("{part:03}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Whether the template has a `%n` (a `%%n` is a percent sign and an `n`).
pub fn has_part_number(template: &str) -> bool {
    let mut chars = template.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next() == Some('n') {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_limits_read_times_and_sizes_apart() {
        assert_eq!(SplitLimit::parse("1m"), Ok(SplitLimit::Every(Duration::from_secs(60))));
        assert_eq!(SplitLimit::parse("1h"), Ok(SplitLimit::Every(Duration::from_secs(3600))));
        assert_eq!(SplitLimit::parse("1.5s"), Ok(SplitLimit::Every(Duration::from_millis(1500))));
        assert_eq!(SplitLimit::parse("500M"), Ok(SplitLimit::Bytes(500 << 20)));
        assert_eq!(SplitLimit::parse("2G"), Ok(SplitLimit::Bytes(2 << 30)));
        assert_eq!(SplitLimit::parse("2GiB"), Ok(SplitLimit::Bytes(2 << 30)));
        for l in [SplitLimit::Bytes(3 << 20), SplitLimit::Every(Duration::from_millis(2500))] {
            assert_eq!(SplitLimit::parse(&l.to_arg()), Ok(l));
        }
        assert_eq!(
            SplitLimit::parse("100").unwrap_err(),
            "'100': give a unit: a time (30s, 1m, 1h) or a size (500M, 2G)"
        );
        assert_eq!(SplitLimit::parse("0.5s").unwrap_err(), "'0.5s': parts shorter than 1s");
        assert_eq!(SplitLimit::parse("512K").unwrap_err(), "'512K': parts smaller than 1M");
        assert_eq!(SplitLimit::parse("3x").unwrap_err(), "'3x': use a time (30s, 1m, 1h) or a size (500M, 2G)");
    }

    #[test]
    fn the_part_number_is_padded_and_a_double_percent_is_not_one() {
        assert_eq!(expand_output_part("run-%p-%n.cutr", 7, "h", 3), "run-7-003.cutr");
        assert_eq!(expand_output_part("run-%n.cutr", 7, "h", 1234), "run-1234.cutr");
        assert_eq!(expand_output("run-%n.cutr", 7, "h"), "run-001.cutr");
        assert!(has_part_number("run-%n.cutr"));
        assert!(!has_part_number("run-%%n.cutr"));
        assert_eq!(expand_output_part("run-%%n.cutr", 7, "h", 2), "run-%n.cutr");
        assert!(has_part_number("a%%%n"));
    }
}
