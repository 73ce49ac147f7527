// Where the ws backward's tensors live (flash_bwd_ws.cu): the element strides over (batch,
// head, row) of O, dO (read by the preprocess), dQ (written by the postprocess), dK and dV
// (written by the main kernel), the last dimension unit, and GQA / MQA: query head h of a
// batch reads K/V head h / group. Q, K, V and dO reach the main kernel as 4-D tensor maps
// (compute/gpu/tma.py), which carry their own strides. LSE, L2, D and the dQ accumulator are
// the kernels' own contiguous arrays, indexed by the flat query head bh = b * heads + h.
// The host fills it (compute/gpu/flash_backward.py, _Layout) and passes it by value. The
// fallback kernel (flash_bwd_wgmma.cu) keeps flash_bwd_common.cuh's contiguous pre / post,
// which these two follow line for line but for the addressing: folding both into shared
// helpers changed the fallback's PTX, which stays as measured until it is retired (issue 30).
#pragma once

#include "flash_bwd_common.cuh"

struct FbwLayout {
    long long o_b, o_h, o_r;  // O's batch, head and row strides in elements
    long long do_b, do_h, do_r;
    long long dq_b, dq_h, dq_r;
    long long dk_b, dk_h, dk_r;  // dK, dV: kv_heads = heads / group heads
    long long dv_b, dv_h, dv_r;
    int heads;  // query heads per batch
    int group;  // query heads per K/V head (1 without GQA)
    // flash_bwd_ws: query row r sees keys r + lo <= c <= r + hi (a band; causal: hi = N_k -
    // N_q; flash_launch.BAND_OPEN for an unbounded side).
    int lo, hi;
};

// 1. flash_bwd_pre on strided O and dO: D and L2 for every padded row, one warp per row.
template <int DT, int D>
__global__ void flash_bwd_pre_s(const u16* __restrict__ O, const u16* __restrict__ dO,
                                const float* __restrict__ LSE, float* __restrict__ L2,
                                float* __restrict__ Dsum, int Nq, int Npad, int rows_total,
                                const FbwLayout lay) {
    const int warp_global = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (warp_global >= rows_total) return;
    const long long bh = warp_global / Npad;
    const int r = warp_global % Npad;
    float acc = 0.f;
    float l2 = fb_pos_inf();
    if (r < Nq) {
        const long long b = bh / lay.heads, h = bh - b * lay.heads;
        const u16* o = O + b * lay.o_b + h * lay.o_h + r * lay.o_r;
        const u16* g = dO + b * lay.do_b + h * lay.do_h + r * lay.do_r;
#pragma unroll
        for (int c = lane * 2; c < D; c += 64) {
            const u32 po = *reinterpret_cast<const u32*>(o + c);
            const u32 pd = *reinterpret_cast<const u32*>(g + c);
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

// 3. flash_bwd_post_frag into strided dQ: the fragment-ordered fp32 accumulator (one thread
//    per float4: two column pairs of rows r and r + 8) times the scale, in the input dtype.
template <int DT, int D>
__global__ void flash_bwd_post_frag_s(const float* __restrict__ dQacc, u16* __restrict__ dQ,
                                      int Nq, int nblk, long long quads, float scale,
                                      const FbwLayout lay) {
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
    const long long b = bh / lay.heads, h = bh - b * lay.heads;
    u16* base = dQ + b * lay.dq_b + h * lay.dq_h + col;
    if (row < Nq)
        *reinterpret_cast<u32*>(base + row * lay.dq_r) = fa_pack<DT>(v.x * scale, v.y * scale);
    if (row + 8 < Nq)
        *reinterpret_cast<u32*>(base + (row + 8) * lay.dq_r) =
            fa_pack<DT>(v.z * scale, v.w * scale);
}

// fb_store_rows at a row stride: one warpgroup's 64 x D accumulator rows (keys) as 16-bit
// pairs, times `mul`, into rows of `stride` elements from dst.
template <int DT, int D>
__device__ __forceinline__ void fbw_store_rows(const float* acc, u16* __restrict__ dst,
                                               long long stride, int row_a, int nrows, int t,
                                               float mul) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row_a + 8 * h;
        if (row < nrows) {
            u16* p = dst + row * stride;
#pragma unroll
            for (int dn = 0; dn < D / 8; ++dn) {
                *reinterpret_cast<u32*>(p + 8 * dn + 2 * t) =
                    fa_pack<DT>(acc[4 * dn + 2 * h] * mul, acc[4 * dn + 2 * h + 1] * mul);
            }
        }
    }
}
