//! Capture ranges (`--capture-range`): record only inside `cudaProfilerStart`/`cudaProfilerStop` (or the driver's
//! `cuProfilerStart`/`cuProfilerStop`), or inside NVTX ranges of one name, as Nsight Systems'
//! `--capture-range=cudaProfilerApi|nvtx` does. Outside, CUPTI's activity kinds are off. `--capture-range-end`
//! says what follows the first range: `stop` (nothing more is recorded), `repeat` (every range), `repeat:N` (the
//! first N). Each range's start and end are marked in the file (the `recording` counter track).
//!
//! The ranges are found through CUPTI callbacks (runtime, driver and NVTX domains, from the recorder's one
//! subscriber, `ffi::subscriber`) on the application's own threads: recording is turned on when `cudaProfilerStart` returns and off when `cudaProfilerStop` is entered, so
//! the work between is exactly what is recorded. NVTX pushes and pops are matched per thread with a stack.

use std::cell::RefCell;
use std::ffi::CStr;
use std::sync::Mutex;

use crate::ffi::subscriber::{
    CBID_CU_PROFILER_START, CBID_CU_PROFILER_STOP, CBID_CUDA_PROFILER_START, CBID_CUDA_PROFILER_STOP,
    CBID_NVTX_DOMAIN_CREATE_A, CBID_NVTX_DOMAIN_RANGE_POP, CBID_NVTX_DOMAIN_RANGE_PUSH_EX, CBID_NVTX_RANGE_POP,
    CBID_NVTX_RANGE_PUSH_A, DOMAIN_DRIVER, DOMAIN_NVTX, DOMAIN_RUNTIME, Event, EventUser, Site, Subscriber,
};

/// What delimits a capture range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureRange {
    /// `cuda-profiler-api`.
    ProfilerApi,
    /// `nvtx:NAME` (the default domain) or `nvtx:NAME@DOMAIN`.
    Nvtx { name: String, domain: Option<String> },
}

/// What happens after a range ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureEnd {
    /// Record nothing more.
    Stop,
    /// Record every later range too, or the first `N` in all.
    Repeat(Option<u32>),
}

impl CaptureRange {
    pub fn parse(s: &str) -> Result<CaptureRange, String> {
        match s.trim() {
            "cuda-profiler-api" | "cudaProfilerApi" => Ok(CaptureRange::ProfilerApi),
            t => {
                let Some(spec) = t.strip_prefix("nvtx:") else {
                    return Err(format!("'{s}': use cuda-profiler-api or nvtx:NAME[@DOMAIN]"));
                };
                let (name, domain) = match spec.rsplit_once('@') {
                    Some((n, d)) => (n, Some(d.to_string())),
                    None => (spec, None),
                };
                if name.is_empty() || domain.as_deref() == Some("") {
                    return Err(format!("'{s}': the range name and domain must not be empty"));
                }
                Ok(CaptureRange::Nvtx { name: name.to_string(), domain })
            }
        }
    }

    pub fn to_arg(&self) -> String {
        match self {
            CaptureRange::ProfilerApi => "cuda-profiler-api".into(),
            CaptureRange::Nvtx { name, domain: None } => format!("nvtx:{name}"),
            CaptureRange::Nvtx { name, domain: Some(d) } => format!("nvtx:{name}@{d}"),
        }
    }
}

impl CaptureEnd {
    pub fn parse(s: &str) -> Result<CaptureEnd, String> {
        match s.trim() {
            "stop" => Ok(CaptureEnd::Stop),
            "repeat" => Ok(CaptureEnd::Repeat(None)),
            t => match t.strip_prefix("repeat:").map(str::parse::<u32>) {
                Some(Ok(n)) if n > 0 => Ok(CaptureEnd::Repeat(Some(n))),
                _ => Err(format!("'{s}': use stop, repeat or repeat:N (N > 0)")),
            },
        }
    }

    pub fn to_arg(self) -> String {
        match self {
            CaptureEnd::Stop => "stop".into(),
            CaptureEnd::Repeat(None) => "repeat".into(),
            CaptureEnd::Repeat(Some(n)) => format!("repeat:{n}"),
        }
    }
}

/// What a range boundary asks of the recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    TurnOn,
    TurnOff,
    Nothing,
}

/// The ranges seen so far and whether one is open: what each boundary means.
#[derive(Clone, Debug)]
pub struct CaptureState {
    end: CaptureEnd,
    /// Ranges begun so far.
    begun: u32,
    /// Open ranges of the name (a nested one does not end the capture).
    open: u32,
    finished: bool,
}

impl CaptureState {
    pub fn new(end: CaptureEnd) -> CaptureState {
        CaptureState { end, begun: 0, open: 0, finished: false }
    }

    /// A range begins.
    pub fn begin(&mut self) -> Action {
        if self.finished {
            return Action::Nothing;
        }
        self.open += 1;
        if self.open > 1 {
            return Action::Nothing;
        }
        self.begun += 1;
        Action::TurnOn
    }

    /// A range ends (an end without a begin is ignored).
    pub fn end(&mut self) -> Action {
        if self.finished || self.open == 0 {
            return Action::Nothing;
        }
        self.open -= 1;
        if self.open > 0 {
            return Action::Nothing;
        }
        self.finished = match self.end {
            CaptureEnd::Stop => true,
            CaptureEnd::Repeat(None) => false,
            CaptureEnd::Repeat(Some(n)) => self.begun >= n,
        };
        Action::TurnOff
    }
}

/// The running capture: the range, its state, and what turns recording on and off.
struct Capture {
    range: CaptureRange,
    state: Mutex<CaptureState>,
    /// Domain handles (as NVTX gives them) whose name is the range's domain.
    domains: Mutex<Vec<usize>>,
    turn: Box<dyn Fn(bool) + Send + Sync>,
}

thread_local! {
    /// Per thread: for each open NVTX range (default domain, or the range's domain), whether it is a capture one.
    static STACK: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
}

impl Capture {
    fn apply(&self, a: Action) {
        match a {
            Action::TurnOn => (self.turn)(true),
            Action::TurnOff => (self.turn)(false),
            Action::Nothing => {}
        }
    }

    fn push(&self, is_capture: bool) {
        STACK.with(|s| s.borrow_mut().push(is_capture));
        if is_capture {
            let a = self.state.lock().unwrap().begin();
            self.apply(a);
        }
    }

    fn pop(&self) {
        if STACK.with(|s| s.borrow_mut().pop()) == Some(true) {
            let a = self.state.lock().unwrap().end();
            self.apply(a);
        }
    }

    fn name_matches(&self, message: Option<&CStr>) -> bool {
        let CaptureRange::Nvtx { name, .. } = &self.range else { return false };
        message.is_some_and(|m| m.to_bytes() == name.as_bytes())
    }

    fn on_api(&self, cbid: u32, site: Site) {
        let start = cbid == CBID_CUDA_PROFILER_START || cbid == CBID_CU_PROFILER_START;
        let action = if start && site == Site::Exit {
            self.state.lock().unwrap().begin()
        } else if !start && site == Site::Enter {
            self.state.lock().unwrap().end()
        } else {
            Action::Nothing
        };
        self.apply(action);
    }

    fn is_domain(&self, handle: usize) -> bool {
        self.domains.lock().unwrap().contains(&handle)
    }
}

impl EventUser for Capture {
    fn on_event(&self, event: &Event<'_>) {
        let wants_domain = matches!(&self.range, CaptureRange::Nvtx { domain: Some(_), .. });
        match *event {
            Event::Api { cbid, site, .. } => self.on_api(cbid, site),
            Event::NvtxPush { message } if !wants_domain => self.push(self.name_matches(message)),
            Event::NvtxPop if !wants_domain => self.pop(),
            Event::NvtxDomainCreate { name, handle } => {
                let CaptureRange::Nvtx { domain: Some(want), .. } = &self.range else { return };
                if name.is_some_and(|n| n.to_bytes() == want.as_bytes()) {
                    self.domains.lock().unwrap().push(handle);
                }
            }
            Event::NvtxDomainPush { handle, message } if wants_domain && self.is_domain(handle) => {
                self.push(self.name_matches(message))
            }
            Event::NvtxDomainPop { handle } if wants_domain && self.is_domain(handle) => self.pop(),
            _ => {}
        }
    }
}

/// Registers the callbacks that delimit `range` with the recorder's subscriber; `turn(on)` switches recording.
/// Fails (and nothing is dispatched to the capture) where CUPTI refuses to enable them.
pub(crate) fn start(
    subscriber: &Subscriber,
    range: CaptureRange,
    end: CaptureEnd,
    turn: Box<dyn Fn(bool) + Send + Sync>,
) -> Result<(), String> {
    let nvtx = matches!(range, CaptureRange::Nvtx { .. });
    let capture: &'static Capture = Box::leak(Box::new(Capture {
        range,
        state: Mutex::new(CaptureState::new(end)),
        domains: Mutex::new(Vec::new()),
        turn,
    }));
    let wants: &[(u32, u32)] = if nvtx {
        &[
            (DOMAIN_NVTX, CBID_NVTX_RANGE_PUSH_A),
            (DOMAIN_NVTX, CBID_NVTX_RANGE_POP),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_CREATE_A),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_RANGE_PUSH_EX),
            (DOMAIN_NVTX, CBID_NVTX_DOMAIN_RANGE_POP),
        ]
    } else {
        &[
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_START),
            (DOMAIN_RUNTIME, CBID_CUDA_PROFILER_STOP),
            (DOMAIN_DRIVER, CBID_CU_PROFILER_START),
            (DOMAIN_DRIVER, CBID_CU_PROFILER_STOP),
        ]
    };
    subscriber.register(wants, capture).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_ends_parse_and_read_back() {
        for s in ["cuda-profiler-api", "nvtx:step", "nvtx:train step@my.domain"] {
            assert_eq!(CaptureRange::parse(s).unwrap().to_arg(), s);
        }
        assert_eq!(
            CaptureRange::parse("nvtx:a@b@c").unwrap(),
            CaptureRange::Nvtx { name: "a@b".into(), domain: Some("c".into()) }
        );
        assert!(CaptureRange::parse("nvtx:").is_err() && CaptureRange::parse("nvtx:x@").is_err());
        assert!(CaptureRange::parse("profiler").is_err());
        for s in ["stop", "repeat", "repeat:3"] {
            assert_eq!(CaptureEnd::parse(s).unwrap().to_arg(), s);
        }
        assert!(CaptureEnd::parse("repeat:0").is_err() && CaptureEnd::parse("again").is_err());
    }

    #[test]
    fn stop_records_the_first_range_only() {
        let mut s = CaptureState::new(CaptureEnd::Stop);
        assert_eq!([s.end(), s.begin(), s.begin(), s.end(), s.end()], {
            use Action::*;
            [Nothing, TurnOn, Nothing, Nothing, TurnOff]
        });
        assert_eq!((s.begin(), s.end()), (Action::Nothing, Action::Nothing));
    }

    #[test]
    fn repeat_n_records_the_first_n_ranges() {
        let mut s = CaptureState::new(CaptureEnd::Repeat(Some(2)));
        let mut on = 0;
        for _ in 0..5 {
            if s.begin() == Action::TurnOn {
                on += 1;
            }
            s.end();
        }
        assert_eq!(on, 2);
        let mut all = CaptureState::new(CaptureEnd::Repeat(None));
        assert!((0..10).all(|_| all.begin() == Action::TurnOn && all.end() == Action::TurnOff));
    }
}
