// A per-block timeline of a few CTAs of the ws backward (lab only: compute/gpu/lab/
// backward_timeline.py builds flash_bwd_ws.cu with -DFBW_TIMELINE). Without that define every
// macro below is empty, so the shipped kernels' PTX is unchanged.
// With it: lane 0 of each warp of the CTAs whose launch index (blockIdx.y * gridDim.x +
// blockIdx.x) is in fbw_tl_pick writes %clock (32 bits) at numbered points of each query block it
// (FBW_TL(it, ev)) into fbw_tl[cta slot][warp][it][ev]; block FBW_TL_BLOCKS of each warp holds
// the CTA's own stamps (FBW_TL_CTA: 0 start, 1 %smid, 2 end, 3 items, 4 / 5 %globaltimer_lo
// at start / end, ns). The event numbers are the kernels'; backward_timeline.py names them.
#pragma once

#ifdef FBW_TIMELINE
#define FBW_TL_CTAS 4
#define FBW_TL_WARPS 12
#define FBW_TL_BLOCKS 256
#define FBW_TL_EV 20

__device__ unsigned int fbw_tl[FBW_TL_CTAS * FBW_TL_WARPS * (FBW_TL_BLOCKS + 1) * FBW_TL_EV];
__device__ int fbw_tl_pick[FBW_TL_CTAS];

// The SM's clock, low 32 bits (wraps after ~2 s at 1.98 GHz; a kernel runs milliseconds).
__device__ __forceinline__ unsigned int fbw_tl_clock() {
    unsigned int c;
    asm volatile("mov.u32 %0, %%clock;\n" : "=r"(c)::"memory");
    return c;
}

// The index of this warp's first stamp in fbw_tl, or -1: not lane 0, or not a picked CTA
// (an int beside a constant base, not a pointer: one register held across the loop).
__device__ __forceinline__ int fbw_tl_row() {
    if ((threadIdx.x & 31) != 0) return -1;
    const int lin = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
    for (int c = 0; c < FBW_TL_CTAS; ++c)
        if (fbw_tl_pick[c] == lin)
            return (c * FBW_TL_WARPS + static_cast<int>(threadIdx.x >> 5)) * (FBW_TL_BLOCKS + 1) *
                   FBW_TL_EV;
    return -1;
}

#define FBW_TL_DECL const int fbw_tli = fbw_tl_row();
#define FBW_TL(it, ev)                                                        \
    do {                                                                      \
        if (fbw_tli >= 0 && (it) < FBW_TL_BLOCKS)                             \
            fbw_tl[fbw_tli + (it) * FBW_TL_EV + (ev)] = fbw_tl_clock();       \
    } while (0)
#define FBW_TL_CTA(ev, value)                                                 \
    do {                                                                      \
        if (fbw_tli >= 0) fbw_tl[fbw_tli + FBW_TL_BLOCKS * FBW_TL_EV + (ev)] = (value); \
    } while (0)
#define FBW_TL_START                                                          \
    do {                                                                      \
        unsigned int gt, sm;                                                  \
        asm volatile("mov.u32 %0, %%globaltimer_lo;\n" : "=r"(gt));           \
        asm volatile("mov.u32 %0, %%smid;\n" : "=r"(sm));                     \
        FBW_TL_CTA(0, fbw_tl_clock());                                        \
        FBW_TL_CTA(1, sm);                                                    \
        FBW_TL_CTA(4, gt);                                                    \
    } while (0)
#define FBW_TL_END(items)                                                     \
    do {                                                                      \
        unsigned int gt;                                                      \
        asm volatile("mov.u32 %0, %%globaltimer_lo;\n" : "=r"(gt));           \
        FBW_TL_CTA(2, fbw_tl_clock());                                        \
        FBW_TL_CTA(3, (items));                                               \
        FBW_TL_CTA(5, gt);                                                    \
    } while (0)
#else
#define FBW_TL_DECL
#define FBW_TL(it, ev) \
    do {               \
    } while (0)
#define FBW_TL_START \
    do {             \
    } while (0)
#define FBW_TL_END(items) \
    do {                  \
    } while (0)
#endif
