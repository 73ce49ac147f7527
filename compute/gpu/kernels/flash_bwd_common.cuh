// The tensor-core backward's shared parts (flash_bwd_wgmma.cu, flash_bwd_ws.cu): the tile
// sizes, the preprocess and postprocess kernels, and the device helpers for the dQ reductions
// and the dK / dV epilogue. The contract and the design: flash_bwd_wgmma.cu's file comment.
#pragma once

#include "common.cuh"

#define FB_BN 128  // keys per CTA (two warpgroups of 64)
#define FB_BM 64   // queries per streamed block
#define FB_NT 256

__device__ __forceinline__ float fb_pos_inf() { return __int_as_float(0x7f800000); }

// The low / high 16-bit element of a pair as float (DT = 0 fp16, 1 bf16).
template <int DT>
__device__ __forceinline__ float fb_lo(u32 pair) {
    if constexpr (DT == 1) return __uint_as_float(pair << 16);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(static_cast<unsigned short>(pair & 0xffffu)));
    return f;
}
template <int DT>
__device__ __forceinline__ float fb_hi(u32 pair) {
    if constexpr (DT == 1) return __uint_as_float(pair & 0xffff0000u);
    float f;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(f) : "h"(static_cast<unsigned short>(pair >> 16)));
    return f;
}

// 1. D and L2 for every padded row: one warp per row (lanes over d), rows past Nq padded.
template <int DT, int D>
__global__ void flash_bwd_pre(const u16* __restrict__ O, const u16* __restrict__ dO,
                              const float* __restrict__ LSE, float* __restrict__ L2,
                              float* __restrict__ Dsum, int Nq, int Npad, int rows_total) {
    const int warp_global = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp_global >= rows_total) return;
    const long long bh = warp_global / Npad;
    const int r = warp_global % Npad;
    float acc = 0.f;
    float l2 = fb_pos_inf();
    if (r < Nq) {
        const long long base = (bh * Nq + r) * D;
#pragma unroll
        for (int c = lane * 2; c < D; c += 64) {
            const u32 po = *reinterpret_cast<const u32*>(O + base + c);
            const u32 pd = *reinterpret_cast<const u32*>(dO + base + c);
            acc = fmaf(fb_lo<DT>(po), fb_lo<DT>(pd), fmaf(fb_hi<DT>(po), fb_hi<DT>(pd), acc));
        }
        const float lse = LSE[bh * Nq + r];
        if (lse != FA_NEG_INF) l2 = lse * 1.4426950408889634f;
    }
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, s);
    if (lane == 0) {
        L2[bh * Npad + r] = l2;
        Dsum[bh * Npad + r] = l2 == fb_pos_inf() ? 0.f : acc;
    }
}

// 3. dQ = dQaccum * scale (fp32, rows padded to Npad) -> the input dtype, two elements a thread.
template <int DT, int D>
__global__ void flash_bwd_post(const float* __restrict__ dQacc, u16* __restrict__ dQ, int Nq,
                               int Npad, long long pairs, float scale) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= pairs) return;
    const long long e = 2 * i;
    const long long row = e / D;  // bh * Nq + r
    const int c = static_cast<int>(e % D);
    const long long bh = row / Nq;
    const int r = static_cast<int>(row % Nq);
    const float2 v = *reinterpret_cast<const float2*>(dQacc + (bh * Npad + r) * D + c);
    *reinterpret_cast<u32*>(dQ + e) = fa_pack<DT>(v.x * scale, v.y * scale);
}

// 3'. MODES 4, 5: the same from the fragment-ordered accumulator (see flash_bwd_main): one
//    thread per float4, i.e. two column pairs of rows r and r + 8.
template <int DT, int D>
__global__ void flash_bwd_post_frag(const float* __restrict__ dQacc, u16* __restrict__ dQ, int Nq,
                                    int nblk, long long quads, float scale) {
    const long long q = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (q >= quads) return;
    constexpr int NC = D / 64;
    const int f4 = static_cast<int>(q & 1023);
    const long long cid = q >> 10;
    const int j = f4 >> 7;
    const int lt = f4 & 127;
    const int w = static_cast<int>(cid % NC);
    const long long bb = cid / NC;
    const int blk = static_cast<int>(bb % nblk);
    const long long bh = bb / nblk;
    const int row = blk * 64 + (lt >> 5) * 16 + ((lt & 31) >> 2);
    const int col = w * 64 + 8 * j + 2 * (lt & 3);
    const float4 v = reinterpret_cast<const float4*>(dQacc)[q];
    u16* base = dQ + bh * Nq * D;
    if (row < Nq)
        *reinterpret_cast<u32*>(base + static_cast<long long>(row) * D + col) =
            fa_pack<DT>(v.x * scale, v.y * scale);
    if (row + 8 < Nq)
        *reinterpret_cast<u32*>(base + static_cast<long long>(row + 8) * D + col) =
            fa_pack<DT>(v.z * scale, v.w * scale);
}

#if FA_HAVE_WGMMA
__device__ __forceinline__ void fb_red_v2(float* p, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}
// One bulk (TMA-engine) reduction: global[0 .. bytes) += shared[0 .. bytes), fp32, asynchronous;
// bulk_group completion (wait .read before reusing the shared source, plain before exit).
__device__ __forceinline__ void fb_bulk_add(float* g, u32 s, u32 bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                 ::"l"(g), "r"(s), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void fb_bulk_wait() {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
// Wait until at most N of this thread's bulk groups are still reading their shared source.
template <int N>
__device__ __forceinline__ void fb_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
// Named barrier of one warpgroup (ids 1, 2; 0 is __syncthreads).
__device__ __forceinline__ void fb_wg_bar(int wg) {
    asm volatile("bar.sync %0, 128;\n" ::"r"(wg + 1) : "memory");
}
// Deterministic mode's ticket: wait until *sem == want (acquire), then order the bulk
// reduction (async proxy) after it; fb_sem_release publishes this CTA's completed reduction.
__device__ __forceinline__ void fb_sem_wait(const int* sem, int want) {
    int v;
    while (true) {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(sem) : "memory");
        if (v == want) break;
        __nanosleep(64);
    }
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
__device__ __forceinline__ void fb_sem_release(int* sem) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(sem) : "memory");
}

// Pᵀ = exp2(Sᵀ scale log2 e - L2) in place of Sᵀ, zero where masked. Element e of a
// warpgroup's 64 x 64 accumulator: key row row_k + 8 ((e >> 1) & 1), query column
// 8 (e >> 2) + 2 t + (e & 1) of the block at q0; lrow holds the block's 64 L2 values.
template <int NS>
__device__ __forceinline__ void fb_probs(float* s, const float* lrow, float scale_log2,
                                         bool mask, int row_k, int q0, int t, int Nk,
                                         int causal, int offset) {
#pragma unroll
    for (int e = 0; e < NS; e += 2) {
        const int col = 8 * (e >> 2) + 2 * t;
        const float2 l2 = *reinterpret_cast<const float2*>(lrow + col);
        float p0 = fa_exp2(fmaf(s[e], scale_log2, -l2.x));
        float p1 = fa_exp2(fmaf(s[e + 1], scale_log2, -l2.y));
        if (mask) {
            const int row = row_k + 8 * ((e >> 1) & 1);
            const int r = q0 + col;
            if (row >= Nk || (causal && row > r + offset)) p0 = 0.f;
            if (row >= Nk || (causal && row > r + 1 + offset)) p1 = 0.f;
        }
        s[e] = p0;
        s[e + 1] = p1;
    }
}

// dSᵀ = Pᵀ o (dPᵀ - D) in place of dPᵀ (drow: the block's 64 D values).
template <int NS>
__device__ __forceinline__ void fb_dsoft(float* dp, const float* p, const float* drow, int t) {
#pragma unroll
    for (int e = 0; e < NS; e += 2) {
        const float2 dd = *reinterpret_cast<const float2*>(drow + 8 * (e >> 2) + 2 * t);
        dp[e] = p[e] * (dp[e] - dd.x);
        dp[e + 1] = p[e + 1] * (dp[e + 1] - dd.y);
    }
}

// A warpgroup's dSᵀ (A fragments) into the 128B-swizzled key-major tile at buf (128 key rows
// of 64 queries): a[kk][q] holds columns 16 kk + 8 (q >> 1) + 2 t of row r0 + 8 (q & 1).
__device__ __forceinline__ void fb_store_dst(u32 (*ads)[4], u32 buf, int r0, int t) {
#pragma unroll
    for (int kk = 0; kk < FB_BM / 16; ++kk) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int r = r0 + 8 * (q & 1);
            const int chunk = 2 * kk + (q >> 1);
            const u32 addr = buf + r * 128 + ((chunk ^ (r & 7)) << 4) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(ads[kk][q]));
        }
    }
}

// Pᵀ and dSᵀ (fp32 accumulators p, ds) to A fragments; dSᵀ into the tile at dsbuf (key rows
// from r0); then dV += Pᵀ dO and dK += dSᵀ Q issued (not waited for; dO and Q the stage's
// tiles at dobase, qbase), and the proxy fence that lets the dQ GEMM read dSᵀ after a barrier.
template <int DT, int D, int NS, int NA>
__device__ __forceinline__ void fb_dkv_step(const float* p, const float* ds, float* dv,
                                            float* dk, u32 dsbuf, int r0, int t, u32 dobase,
                                            u32 qbase) {
    u32 ap[FB_BM / 16][4], ads[FB_BM / 16][4];
    fa_to_a<DT, NS>(p, ap);
    fa_to_a<DT, NS>(ds, ads);
    fb_store_dst(ads, dsbuf, r0, t);
#pragma unroll
    for (int e = 0; e < NA; ++e) {
        fa_reg_fence(dv[e]);
        fa_reg_fence(dk[e]);
    }
    fa_issue_pv<DT, D, FB_BM>(dv, ap, dobase);
    fa_issue_pv<DT, D, FB_BM>(dk, ads, qbase);
    fa_fence_proxy_async();
}

// Issue dQ_i = dS K for 64 queries x 64 columns (not waited for): A = dS, i.e. the dSᵀ tile at
// ds read MN-major; B = the K panel at kpanel, MN-major.
template <int DT>
__device__ __forceinline__ void fb_issue_dq(float* dq, u32 ds, u32 kpanel) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BN / 16; ++kk) {
        const u64 da = fa_desc(ds + kk * 2048, FB_BN * 128, 1024);
        const u64 db = fa_desc(kpanel + kk * 2048, FB_BN * 128, 1024);
        fa_wgmma_tt<DT, 64>(dq, da, db, kk > 0);
    }
    fa_wgmma_commit();
}

// The 64 x 64 fp32 dQ tile into buf in accumulator order (fb_dq_bulk's), then the proxy
// fence that lets the bulk copy engine read it after a barrier.
__device__ __forceinline__ void fb_dq_store(const float* dq, u32 buf, int wtid) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                         buf + static_cast<u32>(j * 128 + wtid) * 16u),
                     "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3]));
    }
    fa_fence_proxy_async();
}

// MODES 4, 5: the 64 x 64 fp32 dQ tile in accumulator order (thread w of the warpgroup writes
// dq[4 j .. 4 j + 3] at float4 j * 128 + w: conflict-free 16-byte stores) into buf, one of the
// warpgroup's two buffers, then one bulk reduction of it by the warpgroup's first thread into
// the accumulator's chunk (held in the same order; flash_bwd_post_frag undoes it). DET: key
// block kb adds block i's tile in its turn (causal: the last contributing key block first).
// bar: the warpgroup's named barrier (fb_wg_bar's argument); want: DET's ticket, the number
// of key blocks that add the chunk before this one (fb_ticket).
template <bool DET>
__device__ __forceinline__ void fb_dq_bulk(const float* dq, u32 buf, int wtid, int bar,
                                           float* __restrict__ dQacc, int* __restrict__ sems,
                                           long long chunk, int want) {
    if (wtid == 0) fb_bulk_wait_read<1>();  // this buffer's last reduction has read it
    fb_wg_bar(bar);
    fb_dq_store(dq, buf, wtid);
    fb_wg_bar(bar);
    if (wtid == 0) {
        if constexpr (DET) fb_sem_wait(sems + chunk, want);
        fb_bulk_add(dQacc + chunk * 4096, buf, 16384u);
        if constexpr (DET) fb_sem_release(sems + chunk);
    }
}
#endif

// DET's ticket of key block kb for query block i: the key blocks add in turn, causal from the
// last that block i sees (the grid is launched reversed), else from the first; gridDim.x is
// the key-block count.
__device__ __forceinline__ int fb_ticket(int i, int offset, int kb, int causal) {
    const int last = min(static_cast<int>(gridDim.x) - 1, (i * FB_BM + FB_BM - 1 + offset) / FB_BN);
    return causal ? last - kb : kb;
}

// Causal: the first query block that sees key k0 (block i is needed iff its last row does:
// 64 i + 63 + offset >= k0, offset = Nk - Nq); 0 without the mask.
__device__ __forceinline__ int fb_first_block(int k0, int offset, int causal) {
    if (!causal) return 0;
    const int x = k0 - offset - (FB_BM - 1);
    return x > 0 ? (x + FB_BM - 1) / FB_BM : 0;
}

// Store one warpgroup's 64 x D accumulator rows (keys) as 16-bit pairs, times `mul`.
template <int DT, int D>
__device__ __forceinline__ void fb_store_rows(const float* acc, u16* __restrict__ dst, int row_a,
                                              int nrows, int t, float mul) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row_a + 8 * h;
        if (row < nrows) {
            u16* p = dst + static_cast<long long>(row) * D;
#pragma unroll
            for (int dn = 0; dn < D / 8; ++dn) {
                *reinterpret_cast<u32*>(p + 8 * dn + 2 * t) =
                    fa_pack<DT>(acc[4 * dn + 2 * h] * mul, acc[4 * dn + 2 * h + 1] * mul);
            }
        }
    }
}
