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

// 1. flash_bwd_pre on strided O and dO: D and L2 for the 64 padded rows of one query block
//    (block g = bh * nblk + blk), and that block's dQ accumulator chunks (and DET's tickets)
//    zeroed, so no memset runs before it. 16-byte loads, D / 8 threads a row, every row's
//    loads issued before any sum: one warp per row with 4-byte loads left too few bytes in
//    flight at d = 64 (BACKWARD_NOTES.md, round 40).
//    The body is fbw_pre's, shared with flash_bwd_ws80.cuh's flash_bwd_pre80_s, whose padded
//    row r holds query row r - pad (ENDQ: the causal 80-row blocks end at N_q).
template <int DT, int D, bool ENDQ>
__device__ __forceinline__ void fbw_pre(const u16* __restrict__ O, const u16* __restrict__ dO,
                                        const float* __restrict__ LSE, float* __restrict__ L2,
                                        float* __restrict__ Dsum, float* __restrict__ dQacc,
                                        int* __restrict__ tickets, int Nq, int Npad, int pad,
                                        const FbwLayout& lay) {
    constexpr int TPR = D / 8;       // threads per row, 8 columns each
    constexpr int RPP = 256 / TPR;   // rows per pass
    constexpr int PASSES = 64 / RPP;
    const int t = threadIdx.x;
    const long long g = blockIdx.x;
    const int nblk = Npad / 64;
    const long long bh = g / nblk;
    const int r0 = static_cast<int>(g - bh * nblk) * 64 + t / TPR;
    const int c = (t % TPR) * 8;
    const long long b = bh / lay.heads, h = bh - b * lay.heads;
    const u16* o = O + b * lay.o_b + h * lay.o_h + c;
    const u16* gd = dO + b * lay.do_b + h * lay.do_h + c;
    uint4 po[PASSES], pd[PASSES];
    float lse[PASSES];
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const int r = r0 + p * RPP - (ENDQ ? pad : 0);  // the query row
        po[p] = pd[p] = make_uint4(0u, 0u, 0u, 0u);
        lse[p] = FA_NEG_INF;
        if (r < Nq && (!ENDQ || r >= 0)) {
            po[p] = *reinterpret_cast<const uint4*>(o + r * lay.o_r);
            pd[p] = *reinterpret_cast<const uint4*>(gd + r * lay.do_r);
            if (t % TPR == 0) lse[p] = LSE[bh * Nq + r];
        }
    }
    // The zeroing's stores go out while the loads are in flight.
    float4* z = reinterpret_cast<float4*>(dQacc) + g * (D * 16);
#pragma unroll
    for (int s = 0; s < D / 16; ++s) z[t + 256 * s] = make_float4(0.f, 0.f, 0.f, 0.f);
    if (tickets != nullptr && t < D / 64) tickets[g * (D / 64) + t] = 0;
#pragma unroll
    for (int p = 0; p < PASSES; ++p) {
        const u32 ow[4] = {po[p].x, po[p].y, po[p].z, po[p].w};
        const u32 dw[4] = {pd[p].x, pd[p].y, pd[p].z, pd[p].w};
        float acc = 0.f;
#pragma unroll
        for (int e = 0; e < 4; ++e)
            acc = fmaf(fb_lo<DT>(ow[e]), fb_lo<DT>(dw[e]), fmaf(fb_hi<DT>(ow[e]), fb_hi<DT>(dw[e]), acc));
#pragma unroll
        for (int s = TPR / 2; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, s);
        const int r = r0 + p * RPP;
        if (t % TPR == 0) {
            const float l2 = lse[p] == FA_NEG_INF ? fb_pos_inf() : lse[p] * 1.4426950408889634f;
            L2[bh * Npad + r] = l2;
            Dsum[bh * Npad + r] = l2 == fb_pos_inf() ? 0.f : acc;
        }
    }
}

template <int DT, int D>
__global__ void __launch_bounds__(256) flash_bwd_pre_s(
    const u16* __restrict__ O, const u16* __restrict__ dO, const float* __restrict__ LSE,
    float* __restrict__ L2, float* __restrict__ Dsum, float* __restrict__ dQacc,
    int* __restrict__ tickets, int Nq, int Npad, const FbwLayout lay) {
    fbw_pre<DT, D, false>(O, dO, LSE, L2, Dsum, dQacc, tickets, Nq, Npad, 0, lay);
}

// One 16-byte store (a plain uint4 assignment was split into four 4-byte stores by nvcc 13.0).
__device__ __forceinline__ void fbw_st16(u16* p, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c),
                 "r"(d)
                 : "memory");
}

// 3. flash_bwd_post_frag into strided dQ: one block per 64 x 64 chunk of the fragment-ordered
//    fp32 accumulator (flash_bwd_ws's bulk reductions; chunk = (bh * nblk + blk) * D / 64 +
//    w), times the scale, in the input dtype. Thread (j = t % 8, m = t / 8) reads the four
//    float4 of one quad (64 contiguous bytes: columns 8j..8j+7 of rows rg and rg + 8) and
//    stores each row's 8 columns as one 16-byte store, so a warp's store covers four whole
//    128-byte rows (a thread per float4 stored 4 bytes, eight rows a warp, round 40).
template <int DT, int D>
__global__ void __launch_bounds__(256) flash_bwd_post_frag_s(
    const float* __restrict__ dQacc, u16* __restrict__ dQ, int Nq, int nblk, float scale,
    const FbwLayout lay) {
    constexpr int NC = D / 64;
    const int t = threadIdx.x;
    const long long cid = blockIdx.x;
    const int w = static_cast<int>(cid % NC);
    const long long bb = cid / NC;
    const int blk = static_cast<int>(bb % nblk);
    const long long bh = bb / nblk;
    const int j = t & 7, m = t >> 3;
    const float4* src = reinterpret_cast<const float4*>(dQacc) + cid * 1024 + j * 128 + 4 * m;
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = src[k];
    const int row = blk * 64 + (m >> 3) * 16 + (m & 7);
    const long long b = bh / lay.heads, h = bh - b * lay.heads;
    u16* base = dQ + b * lay.dq_b + h * lay.dq_h + w * 64 + 8 * j;
    if (row < Nq)
        fbw_st16(base + row * lay.dq_r, fa_pack<DT>(v[0].x * scale, v[0].y * scale),
                 fa_pack<DT>(v[1].x * scale, v[1].y * scale),
                 fa_pack<DT>(v[2].x * scale, v[2].y * scale),
                 fa_pack<DT>(v[3].x * scale, v[3].y * scale));
    if (row + 8 < Nq)
        fbw_st16(base + (row + 8) * lay.dq_r, fa_pack<DT>(v[0].z * scale, v[0].w * scale),
                 fa_pack<DT>(v[1].z * scale, v[1].w * scale),
                 fa_pack<DT>(v[2].z * scale, v[2].w * scale),
                 fa_pack<DT>(v[3].z * scale, v[3].w * scale));
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
