//! CUPTI's PC Sampling API (CUPTI 12.4+) as the PC sampler ([`crate::pc_sampling`]) calls it: the [`PcCupti`]
//! trait, one safe, typed method per call (a count and the fill that follows it are one method), and its real
//! implementation, the functions resolved from the libcupti the session uses. The trait lets the fake CUPTI
//! ([`crate::fake`]) drive the sampler's state machine in tests without a GPU.
//!
//! The memory CUPTI writes PC records into is a `SampleBuffer` that only this module reaches into: a header, the
//! records and each record's stall-reason array, at addresses that do not move while CUPTI may write them. The
//! buffer a context is configured with (`Configured`) is one CUPTI keeps a pointer to until sampling is disabled
//! on that context, so it lives in a handle whose parts cannot be swapped out. When a call may be made (never into
//! a context that ended) is the caller's rule, not this module's.

use std::ffi::{CStr, c_char};
use std::path::Path;

use cudarc::cupti::sys as cs;
use cudarc::driver::sys::CUcontext;
use cutr_format::PcRecord;

use super::subscriber::ContextHandle;
use crate::ffi::cupti::{FnResultString, result_name};

/// The oldest CUPTI whose PC record layout (64 bytes, with `correlationId`) the recorder uses: CUDA 12.4.
pub const MIN_API_VERSION: u32 = 22;
/// Bytes of a stall reason's name (CUPTI_STALL_REASON_STRING_SIZE).
const STALL_REASON_NAME_BYTES: usize = 128;
const CUPTI_SUCCESS: u32 = 0;
/// cupti_result.h: 8 (13 is CUPTI_ERROR_NOT_READY).
const CUPTI_ERROR_OUT_OF_MEMORY: u32 = 8;

type F<P> = unsafe extern "C" fn(*mut P) -> u32;
/// `cuptiGetContextId` and `cuptiGetDeviceId`: `(CUcontext, uint32_t*)`.
type FnContextId = unsafe extern "C" fn(CUcontext, *mut u32) -> u32;

/// The CUPTI functions PC sampling calls, from the libcupti the session uses.
pub(crate) struct Api {
    enable: F<cs::CUpti_PCSamplingEnableParams>,
    disable: F<cs::CUpti_PCSamplingDisableParams>,
    get_data: F<cs::CUpti_PCSamplingGetDataParams>,
    set_config: F<cs::CUpti_PCSamplingConfigurationInfoParams>,
    num_stall_reasons: F<cs::CUpti_PCSamplingGetNumStallReasonsParams>,
    stall_reasons: F<cs::CUpti_PCSamplingGetStallReasonsParams>,
    cubin_crc: F<cs::CUpti_GetCubinCrcParams>,
    context_id: FnContextId,
    device_id: FnContextId,
    /// `cuptiGetTimestamp(uint64_t*)`: the clock of the collections' times.
    timestamp: unsafe extern "C" fn(*mut u64) -> u32,
    result_string: FnResultString,
}

/// A collection that failed.
#[derive(Debug)]
pub enum PcError {
    /// CUPTI_ERROR_OUT_OF_MEMORY: the hardware buffer filled and its samples were lost.
    HardwareBufferFull,
    Failed(String),
}

/// What CUPTI wrote in a buffer's header at its last fill.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferCounts {
    pub total_samples: u64,
    pub dropped_samples: u64,
    pub non_user_samples: u64,
    pub hardware_buffer_full: bool,
    /// PC records in the buffer.
    pub pcs: usize,
    /// PC records CUPTI still holds for a later collection.
    pub remaining_pcs: usize,
}

/// A context's configuration: CUPTI's indices of the stall reasons to count, the sampling period (CUPTI's
/// default when `None`), and the buffer CUPTI fills at disable.
pub struct ConfigRequest {
    pub indices: Vec<u32>,
    pub period_log2: Option<u32>,
    pub buffer: SampleBuffer,
}

/// A context configured for sampling: what CUPTI was given, kept as long as it may point into it (until the
/// context's sampling is disabled, when CUPTI copies what it still holds into the buffer).
pub struct Configured {
    /// Given to CUPTI by pointer; kept so that pointer never outlives it.
    _indices: Vec<u32>,
    buffer: SampleBuffer,
}

impl Configured {
    /// Holds the request's stall-reason indices and buffer, the memory a configuration points CUPTI at (a
    /// CUPTI that writes nothing, as the fake's, leaves the buffer empty).
    pub fn new(request: ConfigRequest) -> Configured {
        Configured { _indices: request.indices, buffer: request.buffer }
    }

    /// What CUPTI wrote in the buffer's header at disable.
    pub fn counts(&self) -> BufferCounts {
        self.buffer.counts()
    }

    /// The records CUPTI copied into the buffer at disable.
    pub fn take_records(&mut self) -> Vec<PcRecord> {
        self.buffer.take_records()
    }
}

/// The PC sampling calls the sampler makes, in the order it makes them; when a call may be made (never into a
/// context that ended) is the caller's rule. The real one is libcupti's; the fake CUPTI's records the calls.
pub trait PcCupti: Send + Sync {
    /// `cuptiGetTimestamp`: now on CUPTI's clock (0 when CUPTI cannot say).
    fn now(&self) -> u64;
    /// `cuptiGetContextId` of a live context.
    fn context_id(&self, ctx: ContextHandle) -> Result<u32, String>;
    /// `cuptiGetDeviceId` of a live context.
    fn device_id(&self, ctx: ContextHandle) -> Result<u32, String>;
    /// `cuptiPCSamplingEnable`.
    fn enable(&self, ctx: ContextHandle) -> Result<(), String>;
    /// `cuptiPCSamplingGetNumStallReasons`, then `cuptiPCSamplingGetStallReasons`: the context's stall-reason
    /// table, `(CUPTI's index, full name)`.
    fn stall_reasons(&self, ctx: ContextHandle) -> Result<Vec<(u32, String)>, String>;
    /// `cuptiPCSamplingSetConfigurationAttribute`: continuous collection (kernels are not serialized), the
    /// stall reasons, the buffer filled at disable, and the period when one is given.
    fn configure(&self, ctx: ContextHandle, request: ConfigRequest) -> Result<Configured, String>;
    /// `cuptiPCSamplingGetData` into `buffer` (prepared for CUPTI first); its header's counts are read with
    /// [`SampleBuffer::counts`] whether or not the call succeeded.
    fn get_data(&self, ctx: ContextHandle, buffer: &mut SampleBuffer) -> Result<(), PcError>;
    /// `cuptiPCSamplingDisable`: CUPTI copies into the configured buffer (prepared for it first) the samples not
    /// yet collected, read back with [`Configured::counts`] and [`Configured::take_records`].
    fn disable(&self, ctx: ContextHandle, configured: &mut Configured) -> Result<(), String>;
    /// `cuptiGetCubinCrc`: CUPTI's name for a cubin, the one its PC records carry.
    fn cubin_crc(&self, cubin: &[u8]) -> Result<u64, String>;
}

impl Api {
    pub fn load(path: &Path) -> Result<Api, String> {
        let lib = super::cupti::Library::open(path)?;
        // SAFETY: each symbol's C signature is the one its field's type declares (cupti_pcsampling.h,
        // cupti_callbacks.h, cupti_activity.h).
        unsafe {
            macro_rules! sym {
                ($name:literal) => {
                    lib.function(concat!($name, "\0"), " (PC sampling needs CUPTI 12.4+)")?
                };
            }
            Ok(Api {
                enable: sym!("cuptiPCSamplingEnable"),
                disable: sym!("cuptiPCSamplingDisable"),
                get_data: sym!("cuptiPCSamplingGetData"),
                set_config: sym!("cuptiPCSamplingSetConfigurationAttribute"),
                num_stall_reasons: sym!("cuptiPCSamplingGetNumStallReasons"),
                stall_reasons: sym!("cuptiPCSamplingGetStallReasons"),
                cubin_crc: sym!("cuptiGetCubinCrc"),
                context_id: sym!("cuptiGetContextId"),
                device_id: sym!("cuptiGetDeviceId"),
                timestamp: sym!("cuptiGetTimestamp"),
                result_string: sym!("cuptiGetResultString"),
            })
        }
    }

    /// `Ok` for CUPTI_SUCCESS, else the call and CUPTI's name for the code.
    fn check(&self, call: &str, code: u32) -> Result<(), String> {
        if code == CUPTI_SUCCESS {
            return Ok(());
        }
        Err(format!("{call}: {}", result_name(self.result_string, code)))
    }
}

impl PcCupti for Api {
    fn now(&self) -> u64 {
        let mut t = 0;
        // SAFETY: a valid out-pointer.
        unsafe { (self.timestamp)(&mut t) };
        t
    }

    fn context_id(&self, ctx: ContextHandle) -> Result<u32, String> {
        let mut id = 0u32;
        // SAFETY: the caller's context lives (CUPTI named it in a callback and it was not destroyed since); valid
        // out-pointer.
        let code = unsafe { (self.context_id)(ctx.0 as CUcontext, &mut id) };
        self.check("cuptiGetContextId", code)?;
        Ok(id)
    }

    fn device_id(&self, ctx: ContextHandle) -> Result<u32, String> {
        let mut device = 0u32;
        // SAFETY: as in `context_id`.
        let code = unsafe { (self.device_id)(ctx.0 as CUcontext, &mut device) };
        self.check("cuptiGetDeviceId", code)?;
        Ok(device)
    }

    fn enable(&self, ctx: ContextHandle) -> Result<(), String> {
        // SAFETY: CUPTI params structs are plain C data (integers and pointers): all-zero is a valid value.
        let mut p: cs::CUpti_PCSamplingEnableParams = unsafe { std::mem::zeroed() };
        p.size = std::mem::size_of_val(&p);
        p.ctx = ctx.0 as CUcontext;
        // SAFETY: params with their size and a live context.
        self.check("cuptiPCSamplingEnable", unsafe { (self.enable)(&mut p) })
    }

    fn stall_reasons(&self, ctx: ContextHandle) -> Result<Vec<(u32, String)>, String> {
        let mut n = 0usize;
        // SAFETY: plain C data, as in `enable`.
        let mut q: cs::CUpti_PCSamplingGetNumStallReasonsParams = unsafe { std::mem::zeroed() };
        q.size = std::mem::size_of_val(&q);
        q.ctx = ctx.0 as CUcontext;
        q.numStallReasons = &mut n;
        // SAFETY: params with their size, a live context, and an out-pointer to a local.
        self.check("cuptiPCSamplingGetNumStallReasons", unsafe { (self.num_stall_reasons)(&mut q) })?;
        let mut indices = vec![0u32; n];
        let mut names: Vec<Vec<u8>> = vec![vec![0; STALL_REASON_NAME_BYTES]; n];
        let mut name_ptrs: Vec<*mut c_char> = names.iter_mut().map(|v| v.as_mut_ptr().cast()).collect();
        // SAFETY: plain C data, as in `enable`.
        let mut r: cs::CUpti_PCSamplingGetStallReasonsParams = unsafe { std::mem::zeroed() };
        r.size = std::mem::size_of_val(&r);
        r.ctx = ctx.0 as CUcontext;
        r.numStallReasons = n;
        r.stallReasonIndex = indices.as_mut_ptr();
        r.stallReasons = name_ptrs.as_mut_ptr();
        // SAFETY: params with their size and a live context; `indices` has `n` entries and every name buffer the
        // size CUPTI writes (CUPTI_STALL_REASON_STRING_SIZE), all outliving the call.
        self.check("cuptiPCSamplingGetStallReasons", unsafe { (self.stall_reasons)(&mut r) })?;
        Ok(indices.into_iter().zip(&names).map(|(i, name)| (i, name_text(name))).collect())
    }

    fn configure(&self, ctx: ContextHandle, request: ConfigRequest) -> Result<Configured, String> {
        use cs::CUpti_PCSamplingConfigurationAttributeType as T;
        let ConfigRequest { mut indices, period_log2, mut buffer } = request;
        let attr = |t: T| {
            // SAFETY: plain C data (a tag and a union of plain C data), as in `enable`.
            let mut a: cs::CUpti_PCSamplingConfigurationInfo = unsafe { std::mem::zeroed() };
            a.attributeType = t;
            a
        };
        let mut attrs: Vec<cs::CUpti_PCSamplingConfigurationInfo> = Vec::new();
        let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE);
        a.attributeData.collectionModeData.collectionMode =
            cs::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
        attrs.push(a);
        let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON);
        a.attributeData.stallReasonData.stallReasonCount = indices.len();
        a.attributeData.stallReasonData.pStallReasonIndex = indices.as_mut_ptr();
        attrs.push(a);
        let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER);
        a.attributeData.samplingDataBufferData.samplingDataBuffer = buffer.header_ptr().cast();
        attrs.push(a);
        if let Some(period) = period_log2 {
            let mut a = attr(T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD);
            a.attributeData.samplingPeriodData.samplingPeriod = period;
            attrs.push(a);
        }
        // SAFETY: plain C data, as in `enable`.
        let mut c: cs::CUpti_PCSamplingConfigurationInfoParams = unsafe { std::mem::zeroed() };
        c.size = std::mem::size_of_val(&c);
        c.ctx = ctx.0 as CUcontext;
        c.numAttributes = attrs.len();
        c.pPCSamplingConfigurationInfo = attrs.as_mut_ptr();
        // SAFETY: params with their size and a live context; `attrs` and the indices outlive the call; the
        // buffer's parts sit on the heap, so they stay where CUPTI was told while `Configured` holds them.
        self.check("cuptiPCSamplingSetConfigurationAttribute", unsafe { (self.set_config)(&mut c) })?;
        Ok(Configured { _indices: indices, buffer })
    }

    fn get_data(&self, ctx: ContextHandle, buffer: &mut SampleBuffer) -> Result<(), PcError> {
        buffer.reset();
        // SAFETY: plain C data, as in `enable`.
        let mut p: cs::CUpti_PCSamplingGetDataParams = unsafe { std::mem::zeroed() };
        p.size = std::mem::size_of_val(&p);
        p.ctx = ctx.0 as CUcontext;
        p.pcSamplingData = buffer.header_ptr().cast();
        // SAFETY: params with their size, a context being sampled, and a buffer whose header points at its own
        // records and stall arrays (just reset), all borrowed for the call.
        let code = unsafe { (self.get_data)(&mut p) };
        if code == CUPTI_ERROR_OUT_OF_MEMORY {
            return Err(PcError::HardwareBufferFull);
        }
        self.check("cuptiPCSamplingGetData", code).map_err(PcError::Failed)
    }

    fn disable(&self, ctx: ContextHandle, configured: &mut Configured) -> Result<(), String> {
        configured.buffer.reset();
        // SAFETY: plain C data, as in `enable`.
        let mut p: cs::CUpti_PCSamplingDisableParams = unsafe { std::mem::zeroed() };
        p.size = std::mem::size_of_val(&p);
        p.ctx = ctx.0 as CUcontext;
        // SAFETY: params with their size and a context being sampled; the buffer CUPTI writes is the one it was
        // configured with, held by `configured` and borrowed for the call.
        self.check("cuptiPCSamplingDisable", unsafe { (self.disable)(&mut p) })
    }

    fn cubin_crc(&self, cubin: &[u8]) -> Result<u64, String> {
        let mut p = cs::CUpti_GetCubinCrcParams {
            size: std::mem::size_of::<cs::CUpti_GetCubinCrcParams>(),
            cubinSize: cubin.len(),
            cubin: cubin.as_ptr().cast(),
            cubinCrc: 0,
        };
        // SAFETY: params with their size; the cubin's bytes are borrowed for the call.
        self.check("cuptiGetCubinCrc", unsafe { (self.cubin_crc)(&mut p) })?;
        Ok(p.cubinCrc)
    }
}

/// A NUL-terminated name CUPTI wrote into a buffer (all of it, should CUPTI write no NUL).
fn name_text(buffer: &[u8]) -> String {
    let bytes = CStr::from_bytes_until_nul(buffer).map_or(buffer, CStr::to_bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// A buffer CUPTI fills with PC records: the header, the records, and each record's stall-reason array, all on
/// the heap, so moving the buffer leaves the addresses CUPTI was given where they are.
pub struct SampleBuffer {
    data: Box<cs::CUpti_PCSamplingData>,
    pcs: Vec<cs::CUpti_PCSamplingPCData>,
    stalls: Vec<cs::CUpti_PCSamplingStallReason>,
    reasons_per_pc: usize,
}

// SAFETY: the raw pointers inside point into the buffer's own allocations (and at CUPTI's function names, which
// CUPTI keeps for any thread); the buffer has one owner, which moves it between threads only behind a mutex.
unsafe impl Send for SampleBuffer {}

impl SampleBuffer {
    /// Room for `capacity` records of `reasons_per_pc` stall reasons each (at least one, so that every record has
    /// an array to point at).
    pub fn new(capacity: usize, reasons_per_pc: usize) -> SampleBuffer {
        let reasons_per_pc = reasons_per_pc.max(1);
        // SAFETY: these are plain C structs for which all-zero is a valid value (null pointers, zero counts).
        let zeroed_pc: cs::CUpti_PCSamplingPCData = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let data: cs::CUpti_PCSamplingData = unsafe { std::mem::zeroed() };
        let mut b = SampleBuffer {
            data: Box::new(data),
            pcs: vec![zeroed_pc; capacity],
            stalls: vec![
                cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 0, samples: 0 };
                capacity * reasons_per_pc
            ],
            reasons_per_pc,
        };
        b.reset();
        b
    }

    /// The header's address, what CUPTI is given.
    fn header_ptr(&mut self) -> *mut cs::CUpti_PCSamplingData {
        &mut *self.data
    }

    /// Sets the sizes and pointers CUPTI reads before it fills the buffer again.
    fn reset(&mut self) {
        let n = self.reasons_per_pc;
        for (pc, stalls) in self.pcs.iter_mut().zip(self.stalls.chunks_exact_mut(n)) {
            pc.size = std::mem::size_of::<cs::CUpti_PCSamplingPCData>();
            pc.stallReasonCount = n;
            pc.stallReason = stalls.as_mut_ptr();
            pc.functionName = std::ptr::null_mut();
        }
        self.data.size = std::mem::size_of::<cs::CUpti_PCSamplingData>();
        self.data.collectNumPcs = self.pcs.len();
        self.data.pPcData = self.pcs.as_mut_ptr();
        self.data.totalNumPcs = 0;
    }

    /// Sets CUPTI's count of samples taken, as the fake CUPTI's `cuptiPCSamplingGetData` writes it.
    pub(crate) fn set_total_samples(&mut self, n: u64) {
        self.data.totalSamples = n as _;
    }

    /// What CUPTI wrote in the header at the last fill.
    pub fn counts(&self) -> BufferCounts {
        let d = &*self.data;
        BufferCounts {
            total_samples: d.totalSamples,
            dropped_samples: d.droppedSamples,
            non_user_samples: d.nonUsrKernelsTotalSamples,
            hardware_buffer_full: d.hardwareBufferFull != 0,
            pcs: d.totalNumPcs,
            remaining_pcs: d.remainingNumPcs,
        }
    }

    /// The records CUPTI wrote, copied out.
    pub fn take_records(&mut self) -> Vec<PcRecord> {
        let n = (self.data.totalNumPcs).min(self.pcs.len());
        let mut out = Vec::with_capacity(n);
        for (i, pc) in self.pcs[..n].iter_mut().enumerate() {
            // The name is copied, never freed: CUPTI shares one name between the records of a function (freeing
            // each record's pointer double-frees, as PyTorch runs showed) and may keep it for later collections.
            let name = if pc.functionName.is_null() {
                String::new()
            } else {
                // SAFETY: CUPTI wrote a NUL-terminated string, valid while sampling is enabled.
                unsafe { CStr::from_ptr(pc.functionName).to_string_lossy().into_owned() }
            };
            pc.functionName = std::ptr::null_mut();
            // The record's stall array is its own slice of `stalls` (as `reset` pointed it), of which CUPTI filled
            // `stallReasonCount` entries.
            let count = pc.stallReasonCount.min(self.reasons_per_pc);
            let stalls = &self.stalls[i * self.reasons_per_pc..][..count];
            out.push(PcRecord {
                cubin_crc: pc.cubinCrc,
                pc_offset: pc.pcOffset,
                function_index: pc.functionIndex,
                function_name: name,
                stalls: stalls
                    .iter()
                    .filter(|s| s.samples > 0)
                    .map(|s| (s.pcSamplingStallReasonIndex, s.samples))
                    .collect(),
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::pm::real_libcupti_for_test;

    /// Every function this module calls is in CUDA 13.0's real libcupti.
    #[test]
    fn every_function_is_in_the_real_libcupti() {
        let api = Api::load(&real_libcupti_for_test()).unwrap();
        assert_eq!(api.check("x", CUPTI_ERROR_OUT_OF_MEMORY).unwrap_err(), "x: CUPTI_ERROR_OUT_OF_MEMORY");
    }

    /// The record layout `MIN_API_VERSION` stands for (CUPTI 12.4's, with `correlationId`), as cudarc generated
    /// it from CUPTI 13.0's headers: CUPTI is told these sizes and walks the records by them.
    #[test]
    fn records_have_the_layout_of_cupti_12_4() {
        assert_eq!(std::mem::size_of::<cs::CUpti_PCSamplingPCData>(), 64);
        assert_eq!(std::mem::offset_of!(cs::CUpti_PCSamplingPCData, correlationId), 56);
        assert_eq!(std::mem::size_of::<cs::CUpti_PCSamplingData>(), 80);
        assert_eq!(std::mem::offset_of!(cs::CUpti_PCSamplingData, hardwareBufferFull), 72);
        assert_eq!(std::mem::size_of::<cs::CUpti_PCSamplingStallReason>(), 8);
    }

    /// A buffer points CUPTI at its own records and stall arrays, and reads back what CUPTI wrote there.
    #[test]
    fn a_buffer_reads_back_what_cupti_wrote() {
        let mut b = SampleBuffer::new(3, 2);
        assert_eq!(b.data.collectNumPcs, 3);
        assert_eq!(b.data.pPcData, b.pcs.as_mut_ptr());
        assert_eq!(b.pcs[2].stallReason, b.stalls[4..].as_mut_ptr());
        assert!(b.take_records().is_empty());
        // As CUPTI fills it: two records, the second with one of its two stall entries.
        let name = std::ffi::CString::new("kernel").unwrap();
        b.data.totalNumPcs = 2;
        b.data.totalSamples = 9;
        b.data.hardwareBufferFull = 1;
        b.pcs[0].cubinCrc = 7;
        b.pcs[0].pcOffset = 0x40;
        b.pcs[0].functionName = name.as_ptr().cast_mut();
        b.stalls[0] = cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 3, samples: 5 };
        b.stalls[1] = cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 4, samples: 0 };
        b.pcs[1].stallReasonCount = 1;
        b.stalls[2] = cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 6, samples: 4 };
        b.stalls[3] = cs::CUpti_PCSamplingStallReason { pcSamplingStallReasonIndex: 8, samples: 1 };
        let c = b.counts();
        assert_eq!((c.total_samples, c.hardware_buffer_full, c.pcs), (9, true, 2));
        let r = b.take_records();
        assert_eq!((r[0].cubin_crc, r[0].pc_offset, r[0].function_name.as_str()), (7, 0x40, "kernel"));
        assert_eq!(r[0].stalls, [(3, 5)]);
        assert_eq!((r[1].function_name.as_str(), &r[1].stalls[..]), ("", &[(6, 4)][..]));
        assert!(b.pcs[0].functionName.is_null(), "the name is CUPTI's, never kept");
        b.reset();
        assert_eq!((b.data.totalNumPcs, b.pcs[1].stallReasonCount), (0, 2));
    }

    #[test]
    fn a_name_is_read_to_its_nul() {
        assert_eq!(name_text(b"wait\0\0junk"), "wait");
        assert_eq!(name_text(b"full"), "full");
    }
}
