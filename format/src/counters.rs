//! Counter samples over time (`counters` chunks, format 1.3): the values of a source's metrics on one device,
//! each sample with the interval it covers on the file's one clock. Sources: CUPTI's PM Sampling API (hardware
//! counters, evaluated in the recorder with the Profiler Host API) and NVML (power, clocks, temperature,
//! utilization, throttle reasons).

use cutr_schema::fb;
use flatbuffers::FlatBufferBuilder;

use crate::error::ChunkError;

/// A metric, described once per chunk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CounterMetric {
    pub name: String,
    pub unit: String,
    pub description: String,
}

/// One chunk's samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CounterSamples {
    /// `pm_sampling` or `nvml`.
    pub source: String,
    pub device: u32,
    pub metrics: Vec<CounterMetric>,
    pub t_start: Vec<u64>,
    pub t_end: Vec<u64>,
    /// Row-major: sample i, metric j at `i * metrics.len() + j`; NaN where a reading failed.
    pub values: Vec<f64>,
    pub lost_samples: u64,
}

impl CounterSamples {
    /// Samples in the chunk.
    pub fn len(&self) -> usize {
        self.t_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_start.is_empty()
    }

    /// Sample `i`'s value of metric `j`.
    pub fn value(&self, i: usize, j: usize) -> f64 {
        self.values.get(i * self.metrics.len() + j).copied().unwrap_or(f64::NAN)
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = FlatBufferBuilder::with_capacity(256 + self.values.len() * 8 + self.t_start.len() * 16);
        let metrics: Vec<_> = self
            .metrics
            .iter()
            .map(|m| {
                let (name, unit, description) =
                    (b.create_string(&m.name), b.create_string(&m.unit), b.create_string(&m.description));
                fb::CounterMetric::create(
                    &mut b,
                    &fb::CounterMetricArgs { name: Some(name), unit: Some(unit), description: Some(description) },
                )
            })
            .collect();
        let metrics = b.create_vector(&metrics);
        let source = b.create_string(&self.source);
        let t_start = b.create_vector(&self.t_start);
        let t_end = b.create_vector(&self.t_end);
        let values = b.create_vector(&self.values);
        let root = fb::CounterSamples::create(
            &mut b,
            &fb::CounterSamplesArgs {
                source: Some(source),
                device: self.device,
                metrics: Some(metrics),
                t_start: Some(t_start),
                t_end: Some(t_end),
                values: Some(values),
                lost_samples: self.lost_samples,
            },
        );
        b.finish(root, None);
        b.finished_data().to_vec()
    }

    /// Reads a chunk; the columns must agree (as many ends as starts, a value per metric per sample).
    pub fn from_bytes(bytes: &[u8]) -> Result<CounterSamples, ChunkError> {
        let s = flatbuffers::root::<fb::CounterSamples>(bytes)
            .map_err(|e| ChunkError::Malformed(format!("counter samples: {e}")))?;
        let text = |s: Option<&str>| s.unwrap_or("").to_string();
        let out = CounterSamples {
            source: text(s.source()),
            device: s.device(),
            metrics: s
                .metrics()
                .map(|v| {
                    v.iter()
                        .map(|m| CounterMetric {
                            name: text(m.name()),
                            unit: text(m.unit()),
                            description: text(m.description()),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            t_start: s.t_start().map(|v| v.iter().collect()).unwrap_or_default(),
            t_end: s.t_end().map(|v| v.iter().collect()).unwrap_or_default(),
            values: s.values().map(|v| v.iter().collect()).unwrap_or_default(),
            lost_samples: s.lost_samples(),
        };
        columns_agree(out.t_start.len(), out.t_end.len(), out.values.len(), out.metrics.len())?;
        Ok(out)
    }

    /// Checks a chunk as [`CounterSamples::from_bytes`] reads it (the flatbuffer verified, the columns in
    /// agreement) without copying its names and readings out; returns its device. For `info`, which reads every
    /// chunk of a file and keeps none.
    /// Checks a chunk's columns without copying them: its device and how many samples it holds.
    pub fn check(bytes: &[u8]) -> Result<(u32, usize), ChunkError> {
        let s = flatbuffers::root::<fb::CounterSamples>(bytes)
            .map_err(|e| ChunkError::Malformed(format!("counter samples: {e}")))?;
        let len = |n: Option<usize>| n.unwrap_or(0);
        columns_agree(
            len(s.t_start().map(|v| v.len())),
            len(s.t_end().map(|v| v.len())),
            len(s.values().map(|v| v.len())),
            len(s.metrics().map(|v| v.len())),
        )?;
        Ok((s.device(), len(s.t_start().map(|v| v.len()))))
    }
}

/// As many ends as starts, and a value per metric per sample.
fn columns_agree(starts: usize, ends: usize, values: usize, metrics: usize) -> Result<(), ChunkError> {
    if ends != starts || Some(values) != starts.checked_mul(metrics) {
        return Err(ChunkError::Malformed(format!(
            "counter samples: {starts} starts, {ends} ends and {values} values for {metrics} metrics"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CounterSamples {
        CounterSamples {
            source: "nvml".into(),
            device: 1,
            metrics: vec![
                CounterMetric { name: "power".into(), unit: "W".into(), description: "board power draw".into() },
                CounterMetric { name: "sm_clock".into(), unit: "MHz".into(), description: String::new() },
            ],
            t_start: vec![100, 200],
            t_end: vec![100, 200],
            values: vec![312.5, 1980.0, f64::NAN, 1755.0],
            lost_samples: 1,
        }
    }

    #[test]
    fn a_chunk_round_trips_and_reads_by_sample_and_metric() {
        let s = sample();
        let back = CounterSamples::from_bytes(&s.to_bytes()).unwrap();
        assert_eq!((back.len(), back.value(0, 1), back.value(1, 1)), (2, 1980.0, 1755.0));
        assert!(back.value(1, 0).is_nan());
        assert_eq!((back.metrics, back.t_end, back.lost_samples), (s.metrics, s.t_end, 1));
    }

    #[test]
    fn columns_that_disagree_are_damage() {
        let mut s = sample();
        assert_eq!(CounterSamples::check(&s.to_bytes()).unwrap(), (1, s.len()));
        s.values.pop();
        let want = ChunkError::Malformed("counter samples: 2 starts, 2 ends and 3 values for 2 metrics".into());
        assert_eq!(CounterSamples::from_bytes(&s.to_bytes()).unwrap_err().to_string(), want.to_string());
        assert_eq!(CounterSamples::check(&s.to_bytes()).unwrap_err().to_string(), want.to_string());
    }
}
