//! Kineto's "est. achieved occupancy %" of a kernel launch: the blocks per SM the launch could keep resident
//! (CUDA's occupancy calculator: the warp, register, shared memory and block limits of the device, for the
//! kernel's registers, block size and shared memory), capped by the blocks the grid gives each SM, as a share of
//! the SM's thread slots. Computed as Kineto does: its default function attributes and device state (no carveout
//! preference, the default per-block shared memory limit), so the numbers match PyTorch profiler traces.
//!
//! The limits follow NVIDIA's `cuda_occupancy.h` (`cudaOccMaxActiveBlocksPerMultiprocessor`) for compute
//! capability 7.0 and newer; `tests/tests/occupancy.rs` checks this against that header, compiled, on thousands of
//! launches.

/// What the calculator needs of a device (`cudaDeviceProp`'s names).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    pub compute_major: i32,
    pub compute_minor: i32,
    pub max_threads_per_block: i32,
    pub max_threads_per_multiprocessor: i32,
    pub regs_per_block: i32,
    pub regs_per_multiprocessor: i32,
    pub warp_size: i32,
    pub shared_mem_per_block: u64,
    pub shared_mem_per_multiprocessor: u64,
    /// Shared memory the driver reserves per block (1 KiB from Ampere on).
    pub reserved_shared_mem_per_block: u64,
    pub multiprocessors: i32,
}

/// A kernel launch, as a kernel record gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub grid_blocks: u64,
    pub block_threads: i32,
    pub registers_per_thread: i32,
    pub static_shared_memory: u64,
    pub dynamic_shared_memory: u64,
}

fn divide_round_up(x: i64, y: i64) -> i64 {
    (x + y - 1) / y
}

fn round_up(x: i64, y: i64) -> i64 {
    y * divide_round_up(x, y)
}

/// Blocks an SM can hold by the number of blocks alone.
fn max_blocks_per_sm(d: &DeviceLimits) -> Option<i64> {
    Some(match (d.compute_major, d.compute_minor) {
        (7, 5) => 16,
        (7, _) => 32,
        (8, 0) => 32,
        (8, 9) => 24,
        (8, _) => 16,
        (9, _) => 32,
        (10, 1) => 24,
        (10, _) => 32,
        (11, 0) => 24,
        (11, _) => 32,
        (12, _) => 24,
        _ => return None,
    })
}

/// The shared memory configurations an SM can be set to (bytes), smallest first: the carveouts of each
/// architecture.
fn smem_configs(d: &DeviceLimits) -> Option<&'static [u64]> {
    const K: u64 = 1024;
    const TURING: &[u64] = &[32 * K, 64 * K];
    const VOLTA: &[u64] = &[0, 8 * K, 16 * K, 32 * K, 64 * K, 96 * K];
    const GA100: &[u64] = &[0, 8 * K, 16 * K, 32 * K, 64 * K, 100 * K, 132 * K, 164 * K];
    const GA10X: &[u64] = &[0, 8 * K, 16 * K, 32 * K, 64 * K, 100 * K];
    const HOPPER: &[u64] = &[0, 8 * K, 16 * K, 32 * K, 64 * K, 100 * K, 132 * K, 164 * K, 196 * K, 228 * K];
    Some(match (d.compute_major, d.compute_minor) {
        (7, 5) => TURING,
        (7, _) => VOLTA,
        (8, 0) | (8, 7) => GA100,
        (8, _) => GA10X,
        (9, _) => HOPPER,
        (10 | 11, 0 | 1 | 3) => HOPPER,
        (12, 0 | 1) => GA10X,
        _ => return None,
    })
}

/// `size` rounded up to the next shared memory configuration, `None` past the largest.
fn align_up_smem(size: u64, d: &DeviceLimits) -> Option<u64> {
    let configs = smem_configs(d)?;
    // Turing has no zero configuration: anything up to 32 KiB takes the smallest.
    configs.iter().copied().find(|&c| size <= c)
}

/// Blocks per SM by warps.
fn warps_limit(d: &DeviceLimits, block_threads: i64) -> i64 {
    if block_threads > d.max_threads_per_block as i64 {
        return 0;
    }
    let max_warps = (d.max_threads_per_multiprocessor / d.warp_size) as i64;
    max_warps / divide_round_up(block_threads, d.warp_size as i64)
}

/// Blocks per SM by registers: allocated per warp in units of 256, from four sub-partitions of the register file.
fn registers_limit(d: &DeviceLimits, block_threads: i64, regs: i64) -> i64 {
    const ALLOCATION_UNIT: i64 = 256;
    const SUB_PARTITIONS: i64 = 4;
    const MAX_REGS_PER_THREAD: i64 = 256;
    let warps = divide_round_up(block_threads, d.warp_size as i64);
    let per_warp = round_up(regs * d.warp_size as i64, ALLOCATION_UNIT);
    let per_block = per_warp * warps;
    let assumed_per_block = per_warp * round_up(warps, SUB_PARTITIONS);
    let regs_per_block = d.regs_per_block as i64;
    if regs_per_block < assumed_per_block || regs_per_block < per_block || regs > MAX_REGS_PER_THREAD {
        return 0;
    }
    if per_warp == 0 {
        return i64::from(i32::MAX);
    }
    let warps_per_sub_partition = d.regs_per_multiprocessor as i64 / SUB_PARTITIONS / per_warp;
    warps_per_sub_partition * SUB_PARTITIONS / warps
}

/// Blocks per SM by shared memory, with the default per-block limit and no carveout preference (Kineto's).
fn shared_memory_limit(d: &DeviceLimits, l: &Launch) -> Option<i64> {
    let granularity: i64 = if d.compute_major >= 8 { 128 } else { 256 };
    let preference = align_up_smem(d.shared_mem_per_multiprocessor, d)?;
    let per_block = (l.static_shared_memory + d.reserved_shared_mem_per_block + l.dynamic_shared_memory) as i64;
    let allocated = round_up(per_block, granularity) as u64;
    let mut block_limit = d.shared_mem_per_block;
    if d.compute_major >= 8 {
        block_limit += d.reserved_shared_mem_per_block;
    }
    if allocated > block_limit {
        return Some(0);
    }
    let per_sm = if preference >= allocated { preference } else { align_up_smem(allocated, d)? };
    Some(per_sm.checked_div(allocated).map_or(i64::from(i32::MAX), |b| b as i64))
}

/// The blocks per SM each resource alone allows a launch: the calculator's limits before their minimum, so that a
/// report can name the one that binds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLimits {
    /// By the register file, for the kernel's registers per thread.
    pub registers: i64,
    /// By shared memory (static, dynamic and the driver's reserve per block).
    pub shared_memory: i64,
    /// By the SM's warp slots, for the block size.
    pub warps: i64,
    /// By the architecture's most resident blocks per SM.
    pub blocks: i64,
}

impl BlockLimits {
    /// The blocks an SM keeps resident: the smallest limit.
    pub fn active(&self) -> i64 {
        self.registers.min(self.shared_memory).min(self.warps).min(self.blocks)
    }
}

/// Each resource's limit on the blocks per SM of this launch, `None` for a device older than compute capability
/// 7.0 or one the calculator does not know.
pub fn block_limits(d: &DeviceLimits, l: &Launch) -> Option<BlockLimits> {
    if l.block_threads <= 0 || d.warp_size <= 0 || d.compute_major < 7 {
        return None;
    }
    let threads = l.block_threads as i64;
    // Virtual resources limit only compute capability 10 and later, and a kernel record does not say its count.
    Some(BlockLimits {
        registers: registers_limit(d, threads, l.registers_per_thread as i64),
        shared_memory: shared_memory_limit(d, l)?,
        warps: warps_limit(d, threads),
        blocks: max_blocks_per_sm(d)?,
    })
}

/// Blocks an SM keeps resident for this launch (`cudaOccMaxActiveBlocksPerMultiprocessor`), `None` for a device
/// older than compute capability 7.0 or one the calculator does not know.
pub fn active_blocks_per_sm(d: &DeviceLimits, l: &Launch) -> Option<i64> {
    block_limits(d, l).map(|b| b.active())
}

/// Kineto's "est. achieved occupancy %": `min(active blocks per SM, grid blocks / SMs) * block threads / max
/// threads per SM`, as a rounded percentage. `None` where the calculator cannot say (see
/// [`active_blocks_per_sm`]).
pub fn estimated_achieved_occupancy_pct(d: &DeviceLimits, l: &Launch) -> Option<i64> {
    let active = active_blocks_per_sm(d, l)?;
    if d.multiprocessors <= 0 || d.max_threads_per_multiprocessor <= 0 {
        return None;
    }
    let per_sm = l.grid_blocks as f32 / d.multiprocessors as f32;
    let occupancy = (active as f32).min(per_sm) * l.block_threads as f32 / d.max_threads_per_multiprocessor as f32;
    Some((occupancy * 100.0).round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An H100 SXM's limits (compute capability 9.0, 132 SMs).
    pub fn h100() -> DeviceLimits {
        DeviceLimits {
            compute_major: 9,
            compute_minor: 0,
            max_threads_per_block: 1024,
            max_threads_per_multiprocessor: 2048,
            regs_per_block: 65536,
            regs_per_multiprocessor: 65536,
            warp_size: 32,
            shared_mem_per_block: 49152,
            shared_mem_per_multiprocessor: 233472,
            reserved_shared_mem_per_block: 1024,
            multiprocessors: 132,
        }
    }

    #[test]
    fn the_limits_of_typical_launches_on_an_h100() {
        let l = |grid_blocks, block_threads, regs, smem| Launch {
            grid_blocks,
            block_threads,
            registers_per_thread: regs,
            static_shared_memory: smem,
            dynamic_shared_memory: 0,
        };
        let d = h100();
        // 128 threads, 16 registers: warps allow 16 blocks (2048 / 128), blocks 32, registers 32: 16 resident.
        assert_eq!(active_blocks_per_sm(&d, &l(1, 128, 16, 0)), Some(16));
        // The grid of the loop fixture's elementwise kernel (65 blocks on 132 SMs): 65/132 * 128/2048 = 3%.
        assert_eq!(estimated_achieved_occupancy_pct(&d, &l(65, 128, 16, 0)), Some(3));
        // 256 threads of 128 registers: 32 KiB registers per block, 2 blocks.
        assert_eq!(active_blocks_per_sm(&d, &l(10_000, 256, 128, 0)), Some(2));
        assert_eq!(estimated_achieved_occupancy_pct(&d, &l(10_000, 256, 128, 0)), Some(25));
        // 40 KiB of static shared memory (+1 KiB reserved): 228 KiB / 41 KiB = 5 blocks.
        assert_eq!(active_blocks_per_sm(&d, &l(10_000, 64, 32, 40 << 10)), Some(5));
        // More than the default 48 KiB per block (+1 reserved): none, as Kineto computes it.
        assert_eq!(active_blocks_per_sm(&d, &l(10_000, 64, 32, 49 << 10)), Some(0));
        // Blocks larger than the device allows.
        assert_eq!(active_blocks_per_sm(&d, &l(1, 2048, 16, 0)), Some(0));
        assert_eq!(active_blocks_per_sm(&DeviceLimits { compute_major: 6, ..d }, &l(1, 128, 16, 0)), None);
    }
}
