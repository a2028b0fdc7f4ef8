//! The kernels the synthetic loop launches, as CUPTI names and configures them.

use super::um;

/// A kernel the synthetic workload launches.
#[derive(Clone, Copy, Debug)]
pub struct SynthKernel {
    /// As CUPTI reports it (mangled for C++ kernels).
    pub name: &'static str,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub registers: u16,
    pub static_smem: i32,
    pub dynamic_smem: i32,
    /// Mean GPU duration.
    pub mean_ns: u64,
}

const fn k(
    name: &'static str,
    grid: [i32; 3],
    block: [i32; 3],
    registers: u16,
    dynamic_smem: i32,
    mean_ns: u64,
) -> SynthKernel {
    SynthKernel { name, grid, block, registers, static_smem: 0, dynamic_smem, mean_ns }
}

/// The kernels of the synthetic loop. The mangled names were produced by g++ from templates shaped like
/// PyTorch's, so `c++filt` demangles them (lambdas and anonymous namespaces included).
pub const KERNELS: &[SynthKernel] = &[
    k(
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        [16, 8, 1],
        [384, 1, 1],
        168,
        213_000,
        18_000,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_15CUDAFunctor_addIfEENS_6detail5ArrayIPcLi3EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        16,
        0,
        3_000,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4EZNS0_19launch_clamp_scalarERNS_18TensorIteratorBaseEEUlfE_NS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        18,
        0,
        2_500,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_13AUnaryFunctorIfffNS0_15binary_internal10MulFunctorIfEEEENS_6detail5ArrayIPcLi2EEEEEviT0_T1_",
        [128, 1, 1],
        [128, 1, 1],
        18,
        0,
        2_800,
    ),
    k(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
        [64, 1, 1],
        [128, 1, 1],
        12,
        0,
        1_500,
    ),
    k(
        "_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11instantiateEvEUlffE_EEjfLi4EEEEEvT1_",
        [1, 1, 1],
        [512, 1, 1],
        32,
        16,
        5_000,
    ),
    k(
        "_ZN2at6native12_GLOBAL__N_119cunn_SoftMaxForwardILi4EfffNS1_22SoftMaxForwardEpilogueEEEvPT2_PKT0_l",
        [256, 1, 1],
        [128, 1, 1],
        30,
        1024,
        6_000,
    ),
    k(
        "_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi4EEENS1_11AdamFunctorIfLNS0_9ADAM_MODEE1EEEJfffffbbPfS8_EEEvT_T0_DpT1_",
        [320, 1, 1],
        [512, 1, 1],
        64,
        0,
        25_000,
    ),
    k("triton_poi_fused_add_mul_0", [1024, 1, 1], [256, 1, 1], 24, 0, 2_000),
    k(
        "_ZN7cutlass7Kernel2I62cutlass_80_wmma_tensorop_s161616gemm_f16_32x32_128x1_tn_align8EEvNT_6ParamsE",
        [64, 4, 1],
        [128, 1, 1],
        96,
        32_768,
        12_000,
    ),
    k(
        "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
        [4, 1, 1],
        [544, 1, 1],
        90,
        0,
        40_000,
    ),
];

pub(super) const GEMM: usize = 0;
pub(super) const ADD: usize = 1;
pub(super) const RELU: usize = 2;
pub(super) const MUL: usize = 3;
pub(super) const FILL: usize = 4;
pub(super) const REDUCE: usize = 5;
pub(super) const SOFTMAX: usize = 6;
pub(super) const ADAM: usize = 7;
pub(super) const TRITON: usize = 8;
pub(super) const CUTLASS: usize = 9;
pub(super) const NCCL: usize = 10;
/// The unified memory episodes' kernel ([`um::UM_KERNEL`]), after the loop's.
pub(super) const UM_KERNEL_INDEX: usize = KERNELS.len();

/// A kernel by index: the loop's, or the unified memory episodes'.
pub(super) fn kernel_def(ki: usize) -> SynthKernel {
    KERNELS.get(ki).copied().unwrap_or(um::UM_KERNEL)
}
