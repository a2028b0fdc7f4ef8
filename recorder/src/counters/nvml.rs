//! Device metrics through NVML, on every machine with an NVIDIA driver (`--counters`): power, SM and memory
//! clocks, temperature, GPU and memory utilization, whether the clocks are held down by the power cap, by heat
//! or by a hardware slowdown, and PCIe and NVLink throughput, sampled on the recorder's own thread (default 100
//! Hz) into `counters` chunks, for the GPUs the process uses. The driver's libnvidia-ml is loaded at run time
//! (`nvml-wrapper`); without it the recording goes on, with a note.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cutr_format::{CounterMetric, CounterSamples};
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

/// Samples per chunk at most: a chunk a second at 100 Hz.
const SAMPLES_PER_CHUNK: usize = 128;

/// One metric: its name, unit, description, and how to read it.
struct Metric {
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    read: fn(&Device<'_>) -> Option<f64>,
}

fn throttled(d: &Device<'_>, mask: ThrottleReasons) -> Option<f64> {
    d.current_throttle_reasons().ok().map(|r| if r.intersects(mask) { 1.0 } else { 0.0 })
}

const METRICS: &[Metric] = &[
    Metric {
        name: "power",
        unit: "W",
        description: "board power draw",
        read: |d| d.power_usage().ok().map(|mw| mw as f64 / 1000.0),
    },
    Metric {
        name: "SM clock",
        unit: "MHz",
        description: "current SM clock",
        read: |d| d.clock_info(Clock::SM).ok().map(f64::from),
    },
    Metric {
        name: "memory clock",
        unit: "MHz",
        description: "current memory clock",
        read: |d| d.clock_info(Clock::Memory).ok().map(f64::from),
    },
    Metric {
        name: "temperature",
        unit: "C",
        description: "GPU die temperature",
        read: |d| d.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
    },
    Metric {
        name: "GPU utilization",
        unit: "%",
        description: "share of the driver's last sample period with a kernel running",
        read: |d| d.utilization_rates().ok().map(|u| f64::from(u.gpu)),
    },
    Metric {
        name: "memory utilization",
        unit: "%",
        description: "share of the driver's last sample period with device memory being read or written",
        read: |d| d.utilization_rates().ok().map(|u| f64::from(u.memory)),
    },
    Metric {
        name: "throttled: power cap",
        unit: "",
        description: "1 while the clocks are held down by the software power cap or the power brake",
        read: |d| throttled(d, ThrottleReasons::SW_POWER_CAP | ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN),
    },
    Metric {
        name: "throttled: thermal",
        unit: "",
        description: "1 while the clocks are held down by software or hardware thermal slowdown",
        read: |d| throttled(d, ThrottleReasons::SW_THERMAL_SLOWDOWN | ThrottleReasons::HW_THERMAL_SLOWDOWN),
    },
    Metric {
        name: "throttled: hardware slowdown",
        unit: "",
        description: "1 while the hardware slows the clocks (power brake, thermal, or an external signal)",
        read: |d| throttled(d, ThrottleReasons::HW_SLOWDOWN),
    },
];

/// PCIe bytes since the driver loaded (NVML field values `NVML_FI_DEV_PCIE_COUNT_TX_BYTES`/`_RX_BYTES`), turned
/// into rates between two readings. (`nvmlDeviceGetPcieThroughput` would block each reading for its own 20 ms
/// window.)
const PCIE_FIELDS: [(u32, &str, &str); 2] = [
    (197, "PCIe TX", "bytes per second sent over PCIe by the GPU, between two readings"),
    (198, "PCIe RX", "bytes per second received over PCIe by the GPU, between two readings"),
];

/// NVLink data KiB since the driver loaded, summed over the GPU's links (`NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`/
/// `_RX` with the scope `UINT_MAX`: every link), turned into rates like PCIe's. These are payload bytes; PM
/// sampling's `nvltx__bytes`/`nvlrx__bytes` count the links' raw bytes (the H200: ~1.8x the payload of a peer
/// copy). NaN on a GPU without NVLink.
const NVLINK_FIELDS: [(u32, &str, &str); 2] = [
    (138, "NVLink TX", "data bytes per second sent over all NVLink links, between two readings"),
    (139, "NVLink RX", "data bytes per second received over all NVLink links, between two readings"),
];
/// `scopeId` for "all links" in NVML's NVLink field values.
const ALL_LINKS: u32 = u32::MAX;

/// The last two byte counts of one device and when they were read.
#[derive(Default)]
struct ByteRates {
    last: Option<(Instant, [Option<u64>; 2])>,
}

impl ByteRates {
    /// Bytes per second since the last reading (NaN for the first, or a counter NVML does not give), for counts
    /// read at `t`.
    fn update(&mut self, t: Instant, now: [Option<u64>; 2]) -> [f64; 2] {
        let mut rates = [f64::NAN; 2];
        if let Some((t0, before)) = self.last {
            let dt = t.duration_since(t0).as_secs_f64();
            for i in 0..2 {
                if let (Some(a), Some(b)) = (before[i], now[i])
                    && b >= a
                    && dt > 0.0
                {
                    rates[i] = (b - a) as f64 / dt;
                }
            }
        }
        self.last = Some((t, now));
        rates
    }
}

/// A device's PCIe byte counters.
fn pcie_bytes(d: &Device<'_>) -> [Option<u64>; 2] {
    let ids: Vec<FieldId> = PCIE_FIELDS.iter().map(|f| FieldId(f.0)).collect();
    let mut now = [None; 2];
    if let Ok(values) = d.field_values_for(&ids) {
        for (slot, v) in now.iter_mut().zip(values) {
            *slot = match v.map(|s| s.value) {
                Ok(Ok(SampleValue::U64(b))) => Some(b),
                Ok(Ok(SampleValue::U32(b))) => Some(u64::from(b)),
                _ => None,
            };
        }
    }
    now
}

/// A device's NVLink data byte counters over all its links (NVML counts KiB).
fn nvlink_bytes(d: &Device<'_>) -> [Option<u64>; 2] {
    let ids = NVLINK_FIELDS.map(|(id, ..)| id);
    crate::ffi::nvml::field_counts(d, ids, ALL_LINKS).map(|v| v.map(|kib| kib.saturating_mul(1024)))
}

/// One device's byte-counter rates: PCIe's and NVLink's.
#[derive(Default)]
struct LinkRates {
    pcie: ByteRates,
    nvlink: ByteRates,
}

impl LinkRates {
    fn read(&mut self, d: &Device<'_>) -> [f64; 4] {
        let [a, b] = self.pcie.update(Instant::now(), pcie_bytes(d));
        let [c, e] = self.nvlink.update(Instant::now(), nvlink_bytes(d));
        [a, b, c, e]
    }
}

/// The metric descriptions every chunk carries.
fn metrics() -> Vec<CounterMetric> {
    METRICS
        .iter()
        .map(|m| CounterMetric { name: m.name.into(), unit: m.unit.into(), description: m.description.into() })
        .chain(PCIE_FIELDS.iter().chain(&NVLINK_FIELDS).map(|(_, name, description)| CounterMetric {
            name: (*name).into(),
            unit: "B/s".into(),
            description: (*description).into(),
        }))
        .collect()
}

/// The running sampler: stopping it sends what it holds.
pub(crate) struct NvmlSampler {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<()>,
}

/// A CUDA device as the recording knows it: its ordinal and its UUID as NVML writes it (`GPU-8-4-4-4-12` hex).
pub(crate) struct CudaDevice {
    pub ordinal: u32,
    pub uuid: String,
}

/// NVML's spelling of a 16-byte CUDA UUID.
pub(crate) fn uuid_text(bytes: &[u8]) -> String {
    let h: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    if h.len() != 32 {
        return String::new();
    }
    format!("GPU-{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

impl NvmlSampler {
    /// Starts sampling every `interval` each of the CUDA devices `devices` (found in NVML by UUID) once `in_use`
    /// says this process uses it (asked every [`IN_USE_CHECK`]) or NVML lists the process on it (every
    /// [`NVML_LIST_CHECKS`] checks): a rank of a job sees every GPU of its node but samples its own, as PM sampling
    /// does. All of NVML's devices, numbered as NVML numbers them, when the list is empty. `now` gives the file's
    /// clock (CUPTI's timestamp), `send` takes each chunk, `note` each problem. Returns why not when NVML cannot be
    /// loaded.
    pub fn start(
        interval: Duration,
        devices: Box<dyn Fn() -> Vec<CudaDevice> + Send>,
        in_use: Box<dyn Fn(u32) -> bool + Send>,
        now: Box<dyn Fn() -> Option<u64> + Send>,
        send: Box<dyn Fn(CounterSamples) + Send>,
        note: Box<dyn Fn(String) + Send>,
    ) -> Result<NvmlSampler, String> {
        let nvml = Nvml::init().map_err(|e| format!("NVML could not be loaded ({e}): no device metrics"))?;
        let (stop, stop_rx) = mpsc::channel();
        let thread = crate::threads::spawn("cutr-nvml", move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                // The CUDA devices are asked for from this thread, once CUDA has finished initializing.
                let devices = cuda_devices(&*devices, &stop_rx);
                let source = Source { devices: &devices, in_use: &*in_use, now: &*now };
                sample_loop(&nvml, interval, &source, &*send, &*note, &stop_rx)
            }));
            if r.is_err() {
                note("NVML sampling stopped on an internal error".into());
            }
        })
        .map_err(|e| e.to_string())?;
        Ok(NvmlSampler { stop, thread })
    }

    /// Stops the sampler after it has sent what it holds.
    pub fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The process's CUDA devices: asked for every 50 ms for up to 2 s (the driver may still be initializing when the
/// recorder starts, inside `cuInit`); empty when it never answers or the recording stops first.
fn cuda_devices(devices: &dyn Fn() -> Vec<CudaDevice>, stop: &mpsc::Receiver<()>) -> Vec<CudaDevice> {
    for _ in 0..40 {
        let d = devices();
        if !d.is_empty() {
            return d;
        }
        if stop.recv_timeout(Duration::from_millis(50)).is_ok() {
            break;
        }
    }
    Vec::new()
}

/// The NVML devices to sample, each with the device number the file uses.
fn find_devices<'n>(nvml: &'n Nvml, devices: &[CudaDevice], note: &dyn Fn(String)) -> Vec<(u32, Device<'n>)> {
    if devices.is_empty() {
        note("NVML devices are numbered as NVML numbers them (the CUDA devices were not known)".into());
        let n = nvml.device_count().unwrap_or(0);
        return (0..n).filter_map(|i| nvml.device_by_index(i).ok().map(|d| (i, d))).collect();
    }
    devices
        .iter()
        .filter_map(|c| match nvml.device_by_uuid(c.uuid.as_str()) {
            Ok(d) => Some((c.ordinal, d)),
            Err(e) => {
                note(format!("NVML has no device {} (CUDA device {}): {e}", c.uuid, c.ordinal));
                None
            }
        })
        .collect()
}

/// How often devices not yet sampled are checked for use by this process.
const IN_USE_CHECK: Duration = Duration::from_millis(200);
/// NVML's process list (a query per device, slower than the driver's primary-context state) is read at one check
/// in this many: a rank's unused GPUs are asked about forever.
const NVML_LIST_CHECKS: u32 = 10;

/// What the sampling loop reads besides NVML: the CUDA devices, which of them this process uses, the clock.
struct Source<'a> {
    devices: &'a [CudaDevice],
    in_use: &'a dyn Fn(u32) -> bool,
    now: &'a dyn Fn() -> Option<u64>,
}

/// Marks the devices (by index) that `in_use` now says this process uses; one marked stays marked (a process
/// that let go of a GPU keeps its samples on one track), and is not asked about again.
fn choose_devices(sampled: &mut [bool], in_use: &dyn Fn(usize) -> bool) {
    for (i, sampled) in sampled.iter_mut().enumerate().filter(|(_, s)| !**s) {
        *sampled = in_use(i);
    }
}

/// Whether NVML lists this process among those with a compute context on `d`: a context of its own (not the
/// primary one) counts too. In a container with a PID namespace of its own NVML may list host PIDs, which never
/// match: then only the caller's other signals remain.
fn runs_here(d: &Device<'_>) -> bool {
    let me = std::process::id();
    d.running_compute_processes().is_ok_and(|ps| ps.iter().any(|p| p.pid == me))
}

fn sample_loop(
    nvml: &Nvml,
    interval: Duration,
    source: &Source<'_>,
    send: &dyn Fn(CounterSamples),
    note: &dyn Fn(String),
    stop: &mpsc::Receiver<()>,
) {
    let devices = find_devices(nvml, source.devices, note);
    let empty =
        |device: u32| CounterSamples { source: "nvml".into(), device, metrics: metrics(), ..Default::default() };
    let mut pending: Vec<CounterSamples> = devices.iter().map(|(id, _)| empty(*id)).collect();
    let mut links: Vec<LinkRates> = devices.iter().map(|_| LinkRates::default()).collect();
    // Without the CUDA devices' numbers NVML's cannot be matched to this process's use: every device is sampled.
    let mut sampled: Vec<bool> = vec![source.devices.is_empty(); devices.len()];
    let (mut next_check, mut checks) = (Instant::now(), 0u32);
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next_check {
            let ask_nvml = checks % NVML_LIST_CHECKS == 0;
            choose_devices(&mut sampled, &|i| (source.in_use)(devices[i].0) || (ask_nvml && runs_here(&devices[i].1)));
            next_check = Instant::now() + IN_USE_CHECK;
            checks = checks.wrapping_add(1);
        }
        let chosen = devices.iter().zip(pending.iter_mut()).zip(links.iter_mut()).zip(&sampled).filter(|x| *x.1);
        for ((((_, device), out), links), _) in chosen {
            let Some(ts) = (source.now)() else { continue };
            let before = out.values.len();
            out.values.extend(METRICS.iter().map(|m| (m.read)(device).unwrap_or(f64::NAN)));
            out.values.extend(links.read(device));
            if out.values[before..].iter().all(|v| v.is_nan()) {
                out.values.truncate(before);
                out.lost_samples += 1;
                continue;
            }
            out.t_start.push(ts);
            out.t_end.push(ts);
        }
        for (i, out) in pending.iter_mut().enumerate() {
            if out.len() >= SAMPLES_PER_CHUNK {
                send(std::mem::replace(out, empty(devices[i].0)));
            }
        }
        // A fixed rate: the next sample is due one interval after the last was due, not after it ended.
        next += interval;
        let wait = next.saturating_duration_since(Instant::now());
        if wait.is_zero() {
            next = Instant::now();
        }
        match stop.recv_timeout(wait) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for out in pending {
        if !out.is_empty() || out.lost_samples > 0 {
            send(out);
        }
    }
    if !devices.is_empty() && !sampled.iter().any(|s| *s) {
        note(
            "sampled no GPU: on none of the process's CUDA devices was its primary context active, a context seen \
             by PM sampling, or the process listed by NVML (in a container NVML may list host PIDs)"
                .into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_uuids_are_spelled_as_nvml_spells_them() {
        let bytes = [0x7d, 0x58, 0x9e, 0xf7, 0x47, 0x82, 0x69, 0xc3, 0x4c, 0x3d, 0xb6, 0x86, 0x4b, 0x61, 0xd6, 0x8f];
        assert_eq!(uuid_text(&bytes), "GPU-7d589ef7-4782-69c3-4c3d-b6864b61d68f");
        assert_eq!(uuid_text(&[1, 2]), "");
    }

    /// A rate needs two readings of a counter that did not go back; a counter NVML lacks stays NaN.
    #[test]
    fn byte_rates_come_from_two_readings() {
        let mut r = ByteRates::default();
        let t0 = Instant::now();
        assert!(r.update(t0, [Some(1000), None]).iter().all(|v| v.is_nan()), "first reading: no rate yet");
        let t1 = t0 + Duration::from_millis(10);
        let [tx, rx] = r.update(t1, [Some(1000 + 5_000_000), Some(7)]);
        assert_eq!(tx, 5e8, "5 MB in 10 ms");
        assert!(rx.is_nan(), "no earlier reading of RX");
        let [tx, rx] = r.update(t1 + Duration::from_millis(20), [Some(10), Some(7 + 1000)]);
        assert!(tx.is_nan(), "a counter that went back (driver reloaded) gives no rate");
        assert_eq!(rx, 50_000.0);
        assert!(r.update(t1 + Duration::from_millis(20), [Some(20), Some(2000)]).iter().all(|v| v.is_nan()), "no time");
    }

    /// A GPU is sampled from the first check that finds it in use on, and never asked about again; one never in
    /// use is never sampled.
    #[test]
    fn devices_are_sampled_once_in_use() {
        let mut sampled = [false; 4];
        let asked = std::cell::RefCell::new(Vec::new());
        let ask = |in_use: &'static [usize]| {
            let asked = &asked;
            move |i: usize| {
                asked.borrow_mut().push(i);
                in_use.contains(&i)
            }
        };
        choose_devices(&mut sampled, &ask(&[]));
        assert_eq!(sampled, [false; 4], "nothing in use yet");
        choose_devices(&mut sampled, &ask(&[2]));
        assert_eq!(sampled, [false, false, true, false]);
        // Later device 0 is in use too and device 2 no longer: 2 stays, 0 joins, 2 is not asked about again.
        asked.borrow_mut().clear();
        choose_devices(&mut sampled, &ask(&[0]));
        assert_eq!(sampled, [true, false, true, false]);
        assert_eq!(*asked.borrow(), [0, 1, 3]);
    }

    #[test]
    fn every_metric_is_described_once() {
        let m = metrics();
        assert_eq!(m.len(), 13);
        let mut names: Vec<&str> = m.iter().map(|m| m.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 13);
    }
}
