// The ws backward's per-block steps (flash_bwd_ws.cu), written for few instructions per block:
// the same GEMMs, layouts and arithmetic as flash_bwd_common.cuh's fb_* steps (which the wgmma
// fallback keeps), but
//   * wgmma descriptors from a low word computed once per tile and an immediate k-step offset
//     (the high word is a constant), so each HGMMA costs one or two uniform-datapath adds
//     instead of a mask, shift, or, constant and four R2UR moves per thread;
//   * the causal / edge mask a template argument (one branch per block, not one per pair);
//   * L2 and D read at immediate offsets from one shared address;
//   * dSᵀ stored with four stmatrix.x4 a thread from offsets computed once.
// BACKWARD_NOTES.md ("Nsight Compute: ours against FA4") has the profile that asked for this.
#pragma once

#include "flash_bwd_common.cuh"
#include "ws_pipeline.cuh"

#if FA_HAVE_WGMMA
// A descriptor's low word: start address >> 4 and the leading byte offset (128B swizzle).
__device__ __forceinline__ u32 fbw_lo(u32 addr, u32 lbo) {
    return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16);
}
// The descriptor at `off` bytes past the tile whose low word is lo; SBO = 1024, 128B swizzle.
// Shared addresses stay below 2^18, so the start-address field never carries into the LBO.
__device__ __forceinline__ u64 fbw_desc(u32 lo, u32 off) {
    return (static_cast<u64>((1024u >> 4) | (1u << 30)) << 32) | (lo + (off >> 4));
}

// Sᵀ (or dPᵀ) = A Bᵀ for one warpgroup, not waited for: A = its 64 key rows of a 128-row
// K-major tile (low word alo), B = a 64-row K-major Q (or dO) tile (low word blo).
template <int DT, int D>
__device__ __forceinline__ void fbw_issue_s(float* s, u32 alo, u32 blo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const u64 da = fbw_desc(alo, (kk >> 2) * (FB_BN * 128) + (kk & 3) * 32);
        const u64 db = fbw_desc(blo, (kk >> 2) * (FB_BM * 128) + (kk & 3) * 32);
        fa_wgmma_ss<DT, FB_BM>(s, da, db, kk > 0);
    }
    fa_wgmma_commit();
}

// acc += A B, A from registers (64 keys x 64 queries), B = the 64-row Q (or dO) tile read
// MN-major (low word blo, LBO = the 64-row panel stride): dV += Pᵀ dO, dK += dSᵀ Q.
template <int DT, int D>
__device__ __forceinline__ void fbw_issue_pv(float* acc, u32 (*a)[4], u32 blo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BM / 16; ++kk)
        fa_wgmma_rs<DT, D>(acc, a[kk], fbw_desc(blo, kk * 2048));
    fa_wgmma_commit();
}

// dQ_i = dS K for 64 queries x 64 columns, not waited for: A = the dSᵀ tile read MN-major
// (low word dlo), B = the K panel (low word klo), MN-major; both with LBO = 128 rows.
template <int DT>
__device__ __forceinline__ void fbw_issue_dq(float* dq, u32 dlo, u32 klo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BN / 16; ++kk)
        fa_wgmma_tt<DT, 64>(dq, fbw_desc(dlo, kk * 2048), fbw_desc(klo, kk * 2048), kk > 0);
    fa_wgmma_commit();
}

// Two floats at shared address a + OFF (OFF an immediate).
template <int OFF>
__device__ __forceinline__ float2 fbw_lds2(u32 a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2+%3];\n"
                 : "=f"(v.x), "=f"(v.y) : "r"(a), "n"(OFF));
    return v;
}

// The pair of a block's L2 (or D) values at query columns 8 j + 2 t, 8 j + 2 t + 1, from
// a = this thread's first pair; j is a constant once the callers' loops unroll, so the
// switch leaves one load at an immediate offset (j < 8 for 64-row blocks, < 10 for
// flash_bwd_ws80.cuh's 80 rows).
__device__ __forceinline__ float2 fbw_row_pair(u32 a, int j) {
    switch (j) {
        case 0: return fbw_lds2<0>(a);
        case 1: return fbw_lds2<32>(a);
        case 2: return fbw_lds2<64>(a);
        case 3: return fbw_lds2<96>(a);
        case 4: return fbw_lds2<128>(a);
        case 5: return fbw_lds2<160>(a);
        case 6: return fbw_lds2<192>(a);
        case 7: return fbw_lds2<224>(a);
        case 8: return fbw_lds2<256>(a);
        default: return fbw_lds2<288>(a);
    }
}

// P = exp2(S scale log2 e - L2) of accumulator entries s[e], s[e + 1] (queries with L2 l2.x,
// l2.y), unmasked: the 64- and 80-row kernels' exponentials (fbw_probs_pair, fbw80_probs).
__device__ __forceinline__ float2 fbw_exp_pair(const float* s, int e, float scale_log2,
                                               float2 l2) {
    return make_float2(fa_exp2(fmaf(s[e], scale_log2, -l2.x)),
                       fa_exp2(fmaf(s[e + 1], scale_log2, -l2.y)));
}

// Row pair j of fbw_probs (its four accumulator entries s[4 j .. 4 j + 3]).
template <bool MASK>
__device__ __forceinline__ void fbw_probs_pair(float* s, u32 l2a, int j, float scale_log2,
                                               int row_k, int q0, int t, int Nk, int lo,
                                               int hi) {
    const float2 l2 = fbw_row_pair(l2a, j);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int e = 4 * j + 2 * h;
        const float2 p = fbw_exp_pair(s, e, scale_log2, l2);
        float p0 = p.x, p1 = p.y;
        if constexpr (MASK) {
            const int row = row_k + 8 * h;
            const int r = q0 + 8 * j + 2 * t;
            if (row >= Nk || row > r + hi || row < r + lo) p0 = 0.f;
            if (row >= Nk || row > r + 1 + hi || row < r + 1 + lo) p1 = 0.f;
        }
        s[e] = p0;
        s[e + 1] = p1;
    }
}

// Pᵀ = exp2(Sᵀ scale log2 e - L2) in place (fb_probs' layout); l2a = the shared address of
// this thread's first L2 pair (the block's L2 row + 8 t bytes). MASK: zero where key row
// row >= Nk or outside query r's band, row < r + lo or row > r + hi.
template <int NS, bool MASK>
__device__ __forceinline__ void fbw_probs(float* s, u32 l2a, float scale_log2, int row_k, int q0,
                                          int t, int Nk, int lo, int hi) {
#pragma unroll
    for (int j = 0; j < NS / 4; ++j)
        fbw_probs_pair<MASK>(s, l2a, j, scale_log2, row_k, q0, t, Nk, lo, hi);
}

// DVK (mode 25, d = 64; BACKWARD_NOTES.md, round 49): fbw_probs with dV += Pᵀ dO
// issued as its rows are ready: k-step kk of the RS wgmma takes the queries 16 kk .. 16 kk +
// 15, row pairs 2 kk and 2 kk + 1, so after those two pairs' exponentials they are packed
// into a[kk], and every KPG k-steps the last KPG go to the tensor cores in a commit group
// of their own (a fence for a[kk]'s registers first) while the next pairs' exponentials run:
// KPG = 2, two groups (mode 25). The same arithmetic and the same four
// k-steps in the same order into dv as fbw_probs, fa_to_a and fbw_issue_pv: only the groups
// differ.
template <int DT, int D, int NS, bool MASK, int KPG>
__device__ __forceinline__ void fbw_probs_dv(float* s, u32 (*a)[4], float* dv, u32 l2a,
                                             float scale_log2, int row_k, int q0, int t, int Nk,
                                             int lo, int hi, u32 blo) {
#pragma unroll
    for (int kk = 0; kk < NS / 8; ++kk) {
#pragma unroll
        for (int j = 2 * kk; j < 2 * kk + 2; ++j)
            fbw_probs_pair<MASK>(s, l2a, j, scale_log2, row_k, q0, t, Nk, lo, hi);
        a[kk][0] = fa_pack<DT>(s[8 * kk + 0], s[8 * kk + 1]);
        a[kk][1] = fa_pack<DT>(s[8 * kk + 2], s[8 * kk + 3]);
        a[kk][2] = fa_pack<DT>(s[8 * kk + 4], s[8 * kk + 5]);
        a[kk][3] = fa_pack<DT>(s[8 * kk + 6], s[8 * kk + 7]);
        if (kk % KPG == KPG - 1) {
            fa_wgmma_fence();
#pragma unroll
            for (int k = kk + 1 - KPG; k <= kk; ++k)
                fa_wgmma_rs<DT, D>(dv, a[k], fbw_desc(blo, k * 2048));
            fa_wgmma_commit();
        }
    }
}

// dSᵀ = Pᵀ o (dPᵀ - D) in place of dPᵀ; da = the shared address of this thread's first D
// pair.
template <int NS>
__device__ __forceinline__ void fbw_dsoft(float* dp, const float* p, u32 da) {
#pragma unroll
    for (int j = 0; j < NS / 4; ++j) {
        const float2 dd = fbw_row_pair(da, j);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int e = 4 * j + 2 * h;
            dp[e] = p[e] * (dp[e] - dd.x);
            dp[e + 1] = p[e + 1] * (dp[e + 1] - dd.y);
        }
    }
}

// This lane's stmatrix row addresses in a dSᵀ tile, relative to the tile, for its 16 k-step
// columns kk: lane L gives row L % 8 of 8x8 matrix q = L / 8 (rows 8 (q & 1) of the warp's
// 16, columns 16 kk + 8 (q >> 1)), 128B-swizzled like fb_store_dst. r0w: the warp's first
// key row in the 128-row tile.
__device__ __forceinline__ void fbw_dst_offsets(u32* off, int r0w, int lane) {
    const int q = lane >> 3;
    const int row = r0w + 8 * (q & 1) + (lane & 7);
#pragma unroll
    for (int kk = 0; kk < FB_BM / 16; ++kk)
        off[kk] = row * 128 + (((2 * kk + (q >> 1)) ^ (lane & 7)) << 4);
}

// DET's ticket of key block kb for query block i (fb_ticket's, for a band too): the key
// blocks that see block i add in turn, causal from the last (as launched), else from the
// first, the one holding its first row's first key (rows see keys r + lo .. r + hi).
__device__ __forceinline__ int fbw_ticket(int i, int kb, int causal, int offset, int lo) {
    const int q0 = i * FB_BM;
    return causal ? min(static_cast<int>(gridDim.x) - 1, (q0 + FB_BM - 1 + offset) / FB_BN) - kb
                  : kb - max(0, q0 + lo) / FB_BN;
}

// Named barrier arrival without waiting (bar.sync's partner).
__device__ __forceinline__ void fbw_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// DRAIN: named barriers between consumer cw's two dQ buffers and its drain warp: FULL (the
// consumer's tile is stored) and FREE (the bulk reduction has read it).
__device__ __forceinline__ int fbw_full_bar(int cw, int b) { return 4 + 2 * cw + b; }
__device__ __forceinline__ int fbw_free_bar(int cw, int b) { return 8 + 2 * cw + b; }

// DRAIN: a producer-warpgroup warp adding consumer cw's dQ tiles (the items its loop gives
// it, in the same order) by bulk reduction, so no consumer thread issues one or waits for
// its read (or, DET, for the ticket): per tile, wait for FULL, lane 0 adds (DET: in its
// turn), waits until the tile is read, and the warp frees the buffer unless it is one of
// the last two (whose FREE no consumer waits for).
template <int D, bool DET>
__device__ __forceinline__ void fbw_drain(int cw, int lane, u32 sDQ, float* __restrict__ dQacc,
                                          int* __restrict__ sems, int items, int i0, int i1,
                                          int nblk, int bh0, int kb, int causal, int offset,
                                          int lo) {
    const int ntiles = D == 128 ? items : (items + 1 - cw) / 2;
    int n = 0;
    for (int it = 0, i = i0, gq = 0; it < items; ++it) {
        if (D == 128 || cw == (it & 1)) {
            const int b = n & 1;
            const u32 buf = sDQ + static_cast<u32>(cw * 2 + b) * 16384u;
            fa_bar_sync(fbw_full_bar(cw, b), 160);
            if (lane == 0) {
                const long long chunk =
                    (static_cast<long long>(bh0 + gq) * nblk + i) * (D / 64) + (D == 128 ? cw : 0);
                if constexpr (DET) fb_sem_wait(sems + chunk, fbw_ticket(i, kb, causal, offset, lo));
                fb_bulk_add(dQacc + chunk * 4096, buf, 16384u);
                if constexpr (DET) fb_sem_release(sems + chunk);
                else fb_bulk_wait_read<0>();
            }
            __syncwarp();
            if (n + 2 < ntiles) fbw_bar_arrive(fbw_free_bar(cw, b), 160);
            ++n;
        }
        if (++i == i1) {
            i = i0;
            ++gq;
        }
    }
    if (lane == 0) fb_bulk_wait();
}

// The warpgroup's dSᵀ A fragments into the tile at buf: one stmatrix.x4 per k-step (matrix
// q of k-step kk is a[kk][q], the mma fragment layout).
__device__ __forceinline__ void fbw_store_dst(u32 (*a)[4], u32 buf, const u32* off) {
#pragma unroll
    for (int kk = 0; kk < FB_BM / 16; ++kk)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
                     ::"r"(buf + off[kk]), "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]),
                     "r"(a[kk][3]) : "memory");
}
#endif
