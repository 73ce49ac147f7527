// Device helpers shared by the kernels: 16-bit element types, cp.async copies into shared
// memory, exp2, fp16/bf16 packing and the XOR swizzle of a row-major tile (flash_fwd_mma,
// flash_fwd_wgmma, flash_fwd_ws); then what the two wgmma kernels share: descriptors, wgmma
// fences, masking, the online-softmax step and the P -> A conversion. Included through
// NVRTC's include path (-I kernels/, see flash.py).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#define FA_NEG_INF (__int_as_float(0xff800000))

__device__ __forceinline__ u32 fa_smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills (rows past the end of a matrix).
__device__ __forceinline__ void fa_cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void fa_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void fa_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Pack two floats into a 16-bit pair (DT = 0 fp16, 1 bf16): `lo` in the low half (lower column).
template <int DT>
__device__ __forceinline__ u32 fa_pack(float lo, float hi) {
    u32 r;
    if constexpr (DT == 0) {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile whose rows are D halves long
// (chunk c stored at c ^ (r & 7), so ldmatrix / the epilogue's row reads avoid bank conflicts).
template <int D>
__device__ __forceinline__ u32 fa_swz(int r, int c) {
    return static_cast<u32>(r * (D * 2) + ((c ^ (r & 7)) << 4));
}

// ---- shared by the wgmma kernels (flash_fwd_wgmma.cu, flash_fwd_ws.cu) ----
// wgmma needs the sm_90a target (flash.py passes -arch=sm_90a -DFA_FORCE_WGMMA); under a
// plain sm_90 compile FA_HAVE_WGMMA is 0 and those kernels' bodies trap.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || defined(FA_FORCE_WGMMA)
#define FA_HAVE_WGMMA 1
#else
#define FA_HAVE_WGMMA 0
#endif

// An empty asm that pins x in a register: keeps wgmma accumulators from being read or
// reordered across the asynchronous GEMM (the compiler does not see wgmma's writes).
__device__ __forceinline__ void fa_reg_fence(float& x) { asm volatile("" : "+f"(x)::"memory"); }

// Shared-memory matrix descriptor: start address, leading / stride byte offsets, 128B swizzle.
__device__ __forceinline__ u64 fa_desc(u32 addr, u32 lbo, u32 sbo) {
    return static_cast<u64>((addr & 0x3FFFF) >> 4) | (static_cast<u64>(lbo >> 4) << 16) |
           (static_cast<u64>(sbo >> 4) << 32) | (1ull << 62);
}

// Copy rows [row0, row0 + ROWS) of a (nrows, D) matrix whose rows lie `stride` elements
// apart (D: contiguous) into the wgmma panel layout: panel p holds columns [64p, 64p + 64)
// as ROWS rows of 128 bytes; rows past nrows are zero-filled.
template <int D, int ROWS, int NT>
__device__ __forceinline__ void fa_load_panels(u32 dst, const u16* __restrict__ src, int row0,
                                               int nrows, int tid, long long stride = D) {
    constexpr int CPR = D / 8;
    constexpr int TOTAL = ROWS * CPR;
#pragma unroll
    for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
        const int idx = tid + i * NT;
        if (TOTAL % NT != 0 && idx >= TOTAL) break;
        const int r = idx / CPR;
        const int cg = idx % CPR;
        const int grow = row0 + r;
        const bool ok = grow < nrows;
        const u16* g = src + (ok ? (grow * stride + cg * 8) : 0);
        const u32 off = (cg >> 3) * (ROWS * 128) + r * 128 + (((cg & 7) ^ (r & 7)) << 4);
        fa_cp_async16(dst + off, g, ok ? 16 : 0);
    }
}

#if FA_HAVE_WGMMA
// Generic-proxy writes to shared memory (cp.async, st.shared) before async-proxy reads
// (wgmma operands, bulk copies).
__device__ __forceinline__ void fa_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void fa_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fa_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void fa_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

#include "wgmma_wrappers.cuh"

// Issue S = Q K^T for one warpgroup (not waited for): D / 16 k-steps of wgmma.m64nNk16, A = the
// warpgroup's Q rows at qwg and B = the K tile at kbase (BN rows), both K-major 128B-swizzled
// panels. N < BN computes the tile's first N keys only (s[0, N / 2) of the accumulator).
template <int DT, int D, int BM, int BN, int N = BN>
__device__ __forceinline__ void fa_issue_s(float* s, u32 qwg, u32 kbase) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u64 da = fa_desc(qwg + (kk >> 2) * (BM * 128) + (kk & 3) * 32, 16, 1024);
        const u64 db = fa_desc(kbase + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
        fa_wgmma_ss<DT, N>(s, da, db, kk > 0);
    }
    fa_wgmma_commit();
}

// fa_issue_s with the warpgroup's Q rows as A fragments in registers (flash_fwd_ws's MODE bit
// 8, FLASH_NOTES v9): Q is read from shared memory once per work item (fa_load_q_frags)
// instead of once per key tile by every k-step of the S GEMM.
template <int DT, int D, int BN>
__device__ __forceinline__ void fa_issue_s_rk(float* s, u32 (*qa)[4], u32 kbase) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u64 db = fa_desc(kbase + (kk >> 2) * (BN * 128) + (kk & 3) * 32, 16, 1024);
        fa_wgmma_rk<DT, BN>(s, qa[kk], db, kk > 0);
    }
    fa_wgmma_commit();
}

// The A fragments of a warpgroup's 64 Q rows at qwg (K-major 128B-swizzled panels, BM rows
// each) for the D / 16 k-steps: the accumulator layout (see fa_to_a), row g / g + 8 of the
// warp's 16, columns 16 kk + 2 t (+1) and 16 kk + 8 + 2 t (+1).
template <int D, int BM>
__device__ __forceinline__ void fa_load_q_frags(u32 (*qa)[4], u32 qwg, int warp, int g, int t) {
    const int r = warp * 16 + g;  // row g + 8 has the same swizzle (r & 7)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u32 row = qwg + (kk >> 2) * (BM * 128) + r * 128 + 4 * t;
        const u32 lo = row + (((2 * (kk & 3)) ^ (r & 7)) << 4);
        const u32 hi = row + (((2 * (kk & 3) + 1) ^ (r & 7)) << 4);
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(qa[kk][0]) : "r"(lo));
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(qa[kk][1]) : "r"(lo + 8 * 128));
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(qa[kk][2]) : "r"(hi));
        asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(qa[kk][3]) : "r"(hi + 8 * 128));
    }
}

// Issue O += P V (not waited for): KS k-steps (all BN / 16 by default; fewer when the tile's
// later keys have P = 0) of wgmma.m64nDk16 with A = P from registers and B = the V tile at
// vbase, MN-major (LBO = stride between 64-column panels, SBO = stride between 8-row groups:
// CUTLASS's canonical form; FLASH_NOTES.md records the swapped reading, which gives rel err ~1).
template <int DT, int D, int BN, int KS = BN / 16>
__device__ __forceinline__ void fa_issue_pv(float* o, u32 (*a)[4], u32 vbase) {
    constexpr u32 V_LBO = BN * 128;
    constexpr u32 V_SBO = 1024;
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < KS; ++kk)
        fa_wgmma_rs<DT, D>(o, a[kk], fa_desc(vbase + kk * 2048, V_LBO, V_SBO));
    fa_wgmma_commit();
}
#endif  // FA_HAVE_WGMMA

// Accumulator element i of a thread: row (i >> 1) & 1 (0: g, 1: g + 8), column 8 * (i >> 2)
// + 2 * t + (i & 1) (the same layout for wgmma m64nN per warp and mma.sync m16n8). Keys past
// Nk and, if causal, keys c > r + offset get -inf.
template <int NS>
__device__ __forceinline__ void fa_mask(float* s, int n0, int Nk, int row_a, int t, int causal,
                                        int offset) {
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const int col = n0 + (i >> 2) * 8 + 2 * t + (i & 1);
        const int row = row_a + (((i >> 1) & 1) << 3);
        if (col >= Nk || (causal && col > row + offset)) s[i] = FA_NEG_INF;
    }
}

// A band's mask (FA_WS_BAND): row r keeps keys r + lo <= c <= r + hi below Nk.
template <int NS>
__device__ __forceinline__ void fa_mask_band(float* s, int n0, int Nk, int row_a, int t, int lo,
                                             int hi) {
#pragma unroll
    for (int i = 0; i < NS; ++i) {
        const int col = n0 + (i >> 2) * 8 + 2 * t + (i & 1);
        const int row = row_a + (((i >> 1) & 1) << 3);
        if (col >= Nk || col > row + hi || col < row + lo) s[i] = FA_NEG_INF;
    }
}

// Online softmax on one S tile in the exp2 domain (scale * log2 e folded into one FFMA):
//   m_new = max(m, rowmax(S) * scale_log2)          (running max, eq. m_i^(j))
//   alpha = exp2(m - m_new)                          (rescale factor of l and O)
//   P     = exp2(S * scale_log2 - m_new)             (eq. P~_i^(j))
//   l     = alpha * l + rowsum(P)                    (eq. l_i^(j); quad-reduced at the end)
// The sum of x over the four threads of a quad (the threads that share a row of an
// accumulator fragment): a row's full softmax denominator from the per-thread parts.
__device__ __forceinline__ float fa_quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Row h's (0: row g, 1: row g + 8) maximum over this tile, reduced across the quad.
template <int NS>
__device__ __forceinline__ float fa_row_max(const float* s, int h) {
    float mx = FA_NEG_INF;
#pragma unroll
    for (int jn = 0; jn < NS / 4; ++jn)
        mx = fmaxf(mx, fmaxf(s[4 * jn + 2 * h], s[4 * jn + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
    return fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
}

// Row h of S becomes P = exp2(S * scale_log2 - m_use) in place; returns this thread's sum.
template <int NS>
__device__ __forceinline__ float fa_exp_row(float* s, int h, float scale_log2, float m_use) {
    float rs = 0.f;
#pragma unroll
    for (int jn = 0; jn < NS / 4; ++jn) {
        const float p0 = fa_exp2(fmaf(s[4 * jn + 2 * h], scale_log2, -m_use));
        const float p1 = fa_exp2(fmaf(s[4 * jn + 2 * h + 1], scale_log2, -m_use));
        s[4 * jn + 2 * h] = p0;
        s[4 * jn + 2 * h + 1] = p1;
        rs += p0 + p1;
    }
    return rs;
}

template <int NS>
__device__ __forceinline__ void fa_softmax(float* s, float* m, float* l, float* alpha,
                                           float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float m_new = fmaxf(m[h], fa_row_max<NS>(s, h) * scale_log2);
        const float m_use = (m_new == FA_NEG_INF) ? 0.f : m_new;  // no -inf - -inf
        alpha[h] = fa_exp2(m[h] - m_use);
        m[h] = m_new;
        l[h] = l[h] * alpha[h] + fa_exp_row<NS>(s, h, scale_log2, m_use);
    }
}

// O <- diag(alpha) O (eq. O_i^(j) = diag(exp(m^(j-1) - m^(j))) O_i^(j-1) + ...).
template <int NO>
__device__ __forceinline__ void fa_rescale(float* o, const float* alpha) {
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i] *= alpha[(i >> 1) & 1];
}

// P (fp32, accumulator layout) -> A fragments of wgmma k-steps of 16 keys (the layouts
// coincide, so this is a conversion in place, no data movement between threads).
template <int DT, int NS>
__device__ __forceinline__ void fa_to_a(const float* s, u32 (*a)[4]) {
#pragma unroll
    for (int kk = 0; kk < NS / 8; ++kk) {
        a[kk][0] = fa_pack<DT>(s[8 * kk + 0], s[8 * kk + 1]);
        a[kk][1] = fa_pack<DT>(s[8 * kk + 2], s[8 * kk + 3]);
        a[kk][2] = fa_pack<DT>(s[8 * kk + 4], s[8 * kk + 5]);
        a[kk][3] = fa_pack<DT>(s[8 * kk + 6], s[8 * kk + 7]);
    }
}
