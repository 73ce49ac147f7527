// FlashAttention forward on Hopper with TMA and warp specialisation (sm_90a only).
//
// Same contract as flash_fwd_wgmma.cu: Q (B, H, Nq, D), K/V (B, H / group, Nk, D), O like Q,
// at the element strides of FaFwdLayout (flash_fwd_layout.cuh; Q, K and V through their
// tensor maps, O through the layout), fp16 (DT = 0) or bf16 bits (DT = 1), fp32
// accumulation; LSE (B, H, Nq) fp32 contiguous, natural log, optional (nullptr), -inf for
// rows that see no key; bottom-right causal alignment.
//
// FlashAttention-3's techniques, written afresh:
//   * TMA: Q, K and V tiles arrive through the bulk tensor copy engine, described by tensor
//     maps the host encodes (compute/gpu/tma.py) and passes by value. Each map is 4-D
//     (D, N, heads, batch) with the tensor's strides, a box of 64 columns x ROWS x 1 x 1 and
//     the 128-byte swizzle, so one box is one 64-column panel of the layout wgmma reads, and
//     rows past N are zero-filled; K and V are read at K/V head h / group (GQA).
//   * Warp specialisation: warpgroup 0 is the producer; one of its threads issues every TMA
//     copy into rings of ST stages of K and of V, each stage with a "full" mbarrier (the TMA
//     completes its bytes on it) and an "empty" one (the consumers release it).
//   * setmaxnreg: the producer drops to FaRegs::PRODUCER registers and the NC consumer
//     warpgroups (64 query rows each, BM = 64 NC) rise to FaRegs::CONSUMER.
//   * Intra-warpgroup overlap (FA_WS_OVERLAP): S_j and O += P_{j-1} V_{j-1} issued back to
//     back; the softmax of S_j runs while P_{j-1} V_{j-1} is on the tensor cores.
//   * Scheduler barrier (FA_WS_PINGPONG): the consumers take turns issuing their GEMMs.
//   * Work order: a persistent grid drawing items from a ticket counter (FA_WS_PERSIST),
//     causal items longest first (FA_WS_LPT), Q released early (FA_WS_EARLYQ), query blocks
//     ending at Nq (FA_WS_ENDQ); Q in registers (FA_WS_QREG); O staged a panel at a time
//     (FA_WS_PANELO). ws_traits.cuh names them; flash_select.py says where each is used, and
//     FLASH_NOTES.md records the measurements and the variants that were removed.
// Parts: ws_traits.cuh (the traits and static shape), ws_pipeline.cuh (TMA, mbarriers, named
// barriers, shared-memory layout), ws_scheduler.cuh (work items), ws_producer.cuh (the
// producer warpgroup), ws_consumer.cuh (the consumers: main loop, masking, epilogue); this
// file assembles them into the kernel and lists the instantiations CI compiles.
// No block-wide barrier is executed after the roles split; the O epilogue goes through each
// consumer warpgroup's own (dead) rows of the Q tile (or a separate tile when persistent).
//
// Under a plain sm_90 compile (no 'a' features) the kernel body is empty and traps, so the
// file still compiles with `nvcc -arch=sm_90 --ptx`; flash.py compiles it with -arch=sm_90a.
// compile-check-arch: sm_90a

#include "common.cuh"
#include "flash_fwd_layout.cuh"
#include "ws_consumer.cuh"
#include "ws_pipeline.cuh"
#include "ws_producer.cuh"
#include "ws_traits.cuh"

// The persistent grid: gridDim.x CTAs, one per SM; the producer draws each next work item
// from a global ticket counter with atomicAdd, so an SM that finishes early takes the next
// item at once, and hands it to the consumers through shared memory (`slot`); the K/V rings
// and mbarrier phases run on across items, so the next item's loads overlap this one's tail.
template <int DT, int D, int NC, int BN, int ST, int MODE>
__device__ __forceinline__ void fa_ws_body(const FaTmap& tmQ, const FaTmap& tmK,
                                           const FaTmap& tmV, u16* __restrict__ O,
                                           float* __restrict__ LSE, int Nq, int Nk,
                                           float scale_log2, int causal, int num_qb, int BH,
                                           int* __restrict__ tickets, int section,
                                           const FaFwdLayout& lay) {
#if FA_HAVE_WGMMA
    using K = FaWsKernel<DT, D, NC, BN, ST, MODE>;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const u32 base = (fa_smem_addr(fa_smem) + 1023u) & ~1023u;
    const FaWsAddrs A = fa_ws_addrs<typename K::L, ST>(base);
    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // 0: producer, 1..NC: consumers
    const int total = num_qb * BH;
    // The grid's item (ignored when persistent): blocks are dispatched in linear order.
    const int first = blockIdx.y * num_qb + blockIdx.x;

    if (tid == 0) {
        fa_mbar_init(A.barQ, 1);
        fa_mbar_init(A.emptyQ, K::NCT);
        for (int s = 0; s < ST; ++s) {
            fa_mbar_init(A.fullK + 8 * s, 1);
            fa_mbar_init(A.fullV + 8 * s, 1);
            fa_mbar_init(A.emptyK + 8 * s, K::NCT);
            fa_mbar_init(A.emptyV + 8 * s, K::NCT);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the last block-wide barrier: roles split below

    if (wg == 0) {
        fa_ws_producer<K>(A, tmQ, tmK, tmV, tid, first, total, tickets, num_qb, BH, causal,
                          section, Nq, Nk, lay);
        return;
    }
    fa_ws_consumer<K>(A, O, LSE, Nq, Nk, scale_log2, causal, num_qb, BH, section, first, total,
                      tid, wg, lay);
#else
    __trap();
#endif
}

#define FA_WS_PARAMS                                                                          \
    const __grid_constant__ FaTmap tmQ, const __grid_constant__ FaTmap tmK,                  \
        const __grid_constant__ FaTmap tmV, u16 *__restrict__ O, float *__restrict__ LSE,    \
        int Nq, int Nk, float scale_log2, int causal, int num_qb, int BH,                    \
        int *__restrict__ tickets, int section, const __grid_constant__ FaFwdLayout lay
#define FA_WS_ARGS \
    tmQ, tmK, tmV, O, LSE, Nq, Nk, scale_log2, causal, num_qb, BH, tickets, section, lay

// MODE: the traits of ws_traits.cuh, or-ed (FA_WS_OVERLAP | FA_WS_PINGPONG | ...).
template <int DT, int D, int NC, int BN, int ST, int MODE>
__global__ void __launch_bounds__((NC + 1) * 128, 1) flash_fwd_ws(FA_WS_PARAMS) {
    fa_ws_body<DT, D, NC, BN, ST, MODE>(FA_WS_ARGS);
}

// Explicit instantiation of one variant (the COMPILE_CHECK list below; lab/sass_loop.py).
#define FA_WS_INST(DT, D, NC, BN, ST, MODE)                                                  \
    template __global__ void flash_fwd_ws<DT, D, NC, BN, ST, MODE>(                          \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap,                      \
        const __grid_constant__ FaTmap, u16*, float*, int, int, float, int, int, int, int*,  \
        int, const __grid_constant__ FaFwdLayout);

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK type-checks the shipped defaults (flash_select.py) and the
// serial schedule, one stage count more and Q in registers on the grid.
#define FA_WS_DEFAULT (FA_WS_OVERLAP | FA_WS_PINGPONG)
FA_WS_INST(0, 64, 3, 128, 2, FA_WS_DEFAULT)
FA_WS_INST(1, 64, 3, 128, 2, FA_WS_DEFAULT | FA_WS_LPT)
FA_WS_INST(0, 64, 3, 128, 2, FA_WS_DEFAULT | FA_WS_PERSIST | FA_WS_LPT | FA_WS_EARLYQ | FA_WS_ENDQ)
FA_WS_INST(1, 128, 2, 128, 2, FA_WS_DEFAULT)
FA_WS_INST(0, 128, 2, 176, 2, FA_WS_DEFAULT)
FA_WS_INST(1, 128, 2, 128, 2, FA_WS_DEFAULT | FA_WS_PERSIST | FA_WS_EARLYQ)
FA_WS_INST(0, 128, 2, 128, 2, FA_WS_DEFAULT | FA_WS_PERSIST | FA_WS_LPT | FA_WS_QREG | FA_WS_EARLYQ)
FA_WS_INST(1, 128, 2, 176, 2, FA_WS_DEFAULT | FA_WS_PERSIST | FA_WS_LPT | FA_WS_PANELO | FA_WS_EARLYQ)
FA_WS_INST(1, 64, 2, 128, 2, 0)
FA_WS_INST(0, 128, 2, 128, 3, FA_WS_OVERLAP)
FA_WS_INST(0, 128, 2, 128, 2, FA_WS_DEFAULT | FA_WS_QREG)
FA_WS_INST(1, 64, 3, 128, 2, FA_WS_DEFAULT | FA_WS_BAND)
FA_WS_INST(0, 128, 2, 128, 2, FA_WS_DEFAULT | FA_WS_BAND)
#endif
