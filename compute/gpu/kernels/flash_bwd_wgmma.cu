// FlashAttention backward on Hopper tensor cores with wgmma (sm_90a only): the fallback (modes
// 0, 4, 5 of flash_backward.py) since the warp-specialised flash_bwd_ws.cu, which keeps this
// file's tile, GEMMs and layouts and measured 1.28-1.38x faster (BACKWARD_NOTES.md).
//
// Contract (compute/gpu/flash_backward.py launches the three kernels in order):
//   Q, dQ (B, H, Nq, D); K, V, dK, dV (B, H, Nk, D); O, dO like Q; contiguous, fp16 (DT = 0)
//   or bf16 bits (DT = 1); LSE (B, H, Nq) fp32 natural log of the scaled scores, -inf for rows
//   that see no key (flash_attention(..., return_lse=True)); bottom-right causal alignment
//   (query r sees key c iff c <= r + Nk - Nq); rows that see no key get zero gradients.
//
//   1. flash_bwd_pre: D = rowsum(dO o O) and L2 = LSE * log2 e into per-head buffers padded to
//      a whole number of 64-row query blocks (padding and -inf rows: L2 = +inf, D = 0, so the
//      main kernel's P = exp2(S * scale log2 e - L2) is exactly 0 there with no bounds checks).
//   2. flash_bwd_main: one CTA per (128-key block, batch*head), two warpgroups of 64 keys each
//      keeping K_j, V_j in shared memory and dK_j, dV_j in registers, while 64-row query blocks
//      of Q, dO, L2, D stream past through a two-stage cp.async ring. Per query block, each
//      warpgroup:
//        S^T  = K Q^T         wgmma.ss, A = K (K-major), B = Q (K-major)
//        dP^T = V dO^T        wgmma.ss, A = V (K-major), B = dO (K-major)
//        P^T  = exp2(S^T scale log2e - L2),  dS^T = P^T o (dP^T - D)
//        dV  += P^T dO        wgmma.rs, A = P^T from registers, B = dO MN-major
//        dK  += dS^T Q        wgmma.rs, A = dS^T from registers, B = Q MN-major
//      and writes dS^T to shared memory (key-major rows of 64 queries, the 128B-swizzled
//      layout), then, after a CTA barrier,
//        dQ_i += dS K         wgmma.tt, A = dS (MN-major: dS^T's rows), B = K (MN-major)
//      d = 128: warpgroup w takes d columns [64w, 64w + 64); d = 64: warpgroup (i & 1) takes
//      query block i whole. Its fp32 accumulator goes to the global dQ accumulator: MODE 0
//      by red.global.add.v2.f32 per thread, FA2's atomics; MODE 4 through shared memory in
//      the accumulator's own order and one bulk reduction per 64 x 64 tile, FA4's; MODE 5
//      (deterministic=True before flash_bwd_ws.cu) as 4, the key blocks adding each
//      tile in a fixed order. Causal: query blocks wholly above the key block are skipped;
//      only blocks crossing the diagonal, and key tails, are masked.
//   3. flash_bwd_post (MODE 0) / flash_bwd_post_frag (MODES 4, 5): dQ = dQaccum * scale in the
//      input dtype. dK is scaled in the epilogue.
//
// The shared-memory layouts and descriptors are the forward's (flash_fwd_wgmma.cu, common.cuh):
// fa_issue_s<.., 128, 64> is S^T with the 128-row K tile as A, fa_issue_pv<.., 64> is the
// P V form with a 64-row B tile.
// compile-check-arch: sm_90a

#include "flash_bwd_common.cuh"

// 2. The main kernel (see the file comment). Shared memory, 1024-byte aligned:
//    K, V (128 x D each) | Q, dO (2 stages x 64 x D each) | dS^T (128 x 64) | L2, D (2 x 64 each)
//    | MODES 4, 5: two 64 x 64 fp32 dQ buffers per warpgroup
// MODE (flash_backward.py's DEFAULT_MODES per d; BACKWARD_NOTES.md has the measurements):
//   0  the dQ split above (d=128: by columns; d=64: alternate warpgroups), atomics;
//   4  the same split; each warpgroup's 64 x 64 tile goes to one of its two shared buffers in
//      accumulator order and its first thread adds the buffer to the global accumulator (held
//      in that order per (block, 64-column chunk)) with one cp.reduce.async.bulk;
//   5  as 4, with a ticket per (head, block, chunk): the key blocks add a tile one after the
//      other in a fixed order (ascending; causal: descending, and the grid's x reversed so a
//      CTA only ever waits for CTAs dispatched before it), so dQ is bitwise repeatable.
template <int DT, int D, int MODE>
__global__ void __launch_bounds__(FB_NT, 1)
    flash_bwd_main(const u16* __restrict__ Q, const u16* __restrict__ K,
                   const u16* __restrict__ V, const u16* __restrict__ dO,
                   const float* __restrict__ L2, const float* __restrict__ Dsum,
                   float* __restrict__ dQacc, u16* __restrict__ dK, u16* __restrict__ dV,
                   int* __restrict__ sems, int Nq, int Nk, int Npad, float scale,
                   float scale_log2, int causal) {
#if FA_HAVE_WGMMA
    constexpr int NS = FB_BM / 2;  // S^T / dP^T accumulator registers (64 x 64 per warpgroup)
    constexpr int NA = D / 2;      // dK / dV accumulator registers (64 x D per warpgroup)
    constexpr u32 KV_BYTES = FB_BN * D * 2;
    constexpr u32 QT_BYTES = FB_BM * D * 2;
    constexpr u32 DS_BYTES = FB_BN * FB_BM * 2;
    extern __shared__ __align__(128) unsigned char fb_smem[];
    const u32 base = (fa_smem_addr(fb_smem) + 1023u) & ~1023u;
    const u32 sK = base;
    const u32 sV = sK + KV_BYTES;
    const u32 sQ = sV + KV_BYTES;
    const u32 sdO = sQ + 2 * QT_BYTES;
    const u32 sdS = sdO + 2 * QT_BYTES;
    const u32 sLD = sdS + DS_BYTES;  // stage s: L2 at sLD + 512 s, D at sLD + 512 s + 256
    const u32 sDQ = sLD + 1024;
    static_assert(MODE == 0 || MODE == 4 || MODE == 5, "flash_bwd_main: MODE 0, 4 or 5");
    constexpr bool FRAG = MODE >= 4;
    constexpr bool DET = MODE == 5;
    int ntile = 0;  // FRAG: dQ tiles this warpgroup has written (its buffer is ntile & 1)
    const float* fLD = reinterpret_cast<const float*>(fb_smem + (sLD - fa_smem_addr(fb_smem)));

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = (tid >> 5) & 3;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    // Deterministic causal: the shortest key block (the last) adds first, so it is launched first.
    const int kb = (DET && causal) ? static_cast<int>(gridDim.x - 1 - blockIdx.x)
                                   : static_cast<int>(blockIdx.x);
    const int k0 = kb * FB_BN;
    const int kw0 = k0 + wg * 64;  // this warpgroup's first key
    const long long bh = blockIdx.y;
    const u16* Qb = Q + bh * Nq * D;
    const u16* dOb = dO + bh * Nq * D;
    const float* L2b = L2 + bh * Npad;
    const float* Db = Dsum + bh * Npad;
    float* dQb = dQacc + bh * Npad * D;
    const int offset = Nk - Nq;
    const int i0 = fb_first_block(k0, offset, causal);
    const int nblk = Npad / FB_BM;
    const int row_k = kw0 + warp * 16 + g;  // key row of accumulator elements with h = 0

    float dv[NA], dk[NA];
#pragma unroll
    for (int i = 0; i < NA; ++i) dv[i] = dk[i] = 0.f;

    auto load_stage = [&](int i, int stage) {
        fa_load_panels<D, FB_BM, FB_NT>(sQ + stage * QT_BYTES, Qb, i * FB_BM, Nq, tid);
        fa_load_panels<D, FB_BM, FB_NT>(sdO + stage * QT_BYTES, dOb, i * FB_BM, Nq, tid);
        if (tid < 32) {  // 16 chunks of L2, 16 of D (padded buffers: always in bounds)
            const float* src = (tid < 16 ? L2b : Db) + i * FB_BM + (tid & 15) * 4;
            fa_cp_async16(sLD + stage * 512 + (tid >> 4) * 256 + (tid & 15) * 16, src, 16);
        }
    };

    fa_load_panels<D, FB_BN, FB_NT>(sK, K + bh * Nk * D, k0, Nk, tid);
    fa_load_panels<D, FB_BN, FB_NT>(sV, V + bh * Nk * D, k0, Nk, tid);
    if (i0 < nblk) load_stage(i0, 0);
    fa_cp_async_commit();

    for (int i = i0; i < nblk; ++i) {
        const int stage = (i - i0) & 1;
        if constexpr (FRAG) {
            // Block i's stage landed; after the barrier every thread is done with block i - 1,
            // so its stage takes block i + 1 (no barrier at the loop's end).
            fa_cp_async_wait<0>();
            fa_fence_proxy_async();
            __syncthreads();
            if (i + 1 < nblk) {
                load_stage(i + 1, stage ^ 1);
                fa_cp_async_commit();
            }
        } else {
            if (i + 1 < nblk) {
                load_stage(i + 1, stage ^ 1);
                fa_cp_async_commit();
                fa_cp_async_wait<1>();
            } else {
                fa_cp_async_wait<0>();
            }
            fa_fence_proxy_async();
            __syncthreads();
        }
        const u32 qbase = sQ + stage * QT_BYTES;
        const u32 dobase = sdO + stage * QT_BYTES;
        const int q0 = i * FB_BM;

        float s[NS], dp[NS];
        fa_issue_s<DT, D, FB_BN, FB_BM>(s, sK + wg * 64 * 128, qbase);
        fa_issue_s<DT, D, FB_BN, FB_BM>(dp, sV + wg * 64 * 128, dobase);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int e = 0; e < NS; ++e) {
            fa_reg_fence(s[e]);
            fa_reg_fence(dp[e]);
        }
        const bool mask = (kw0 + 64 > Nk) || (causal && kw0 + 63 > q0 + offset);
        const float* lrow = fLD + stage * 128;
        fb_probs<NS>(s, lrow, scale_log2, mask, row_k, q0, t, Nk, causal, offset);
        fb_dsoft<NS>(dp, s, lrow + 64, t);
        fb_dkv_step<DT, D, NS, NA>(s, dp, dv, dk, sdS, row_k - k0, t, dobase, qbase);
        __syncthreads();  // both warpgroups' dS^T are in shared memory

        const bool dq_here = (D == 128) || (wg == ((i - i0) & 1));
        float dq[32];
        if (dq_here) {
            fb_issue_dq<DT>(dq, sdS, sK + (D == 128 ? wg : 0) * (FB_BN * 128));
        }
        fa_wgmma_wait<0>();
#pragma unroll
        for (int e = 0; e < NA; ++e) {
            fa_reg_fence(dv[e]);
            fa_reg_fence(dk[e]);
        }
        if (FRAG && dq_here) {
#pragma unroll
            for (int e = 0; e < 32; ++e) fa_reg_fence(dq[e]);
            const u32 buf = sDQ + static_cast<u32>(wg * 2 + (ntile & 1)) * 16384u;
            const long long chunk = (bh * nblk + i) * (D / 64) + (D == 128 ? wg : 0);
            fb_dq_bulk<DET>(dq, buf, tid & 127, wg, dQacc, sems, chunk,
                            DET ? fb_ticket(i, offset, kb, causal) : 0);
            ++ntile;
        } else if (dq_here) {
#pragma unroll
            for (int e = 0; e < 32; ++e) fa_reg_fence(dq[e]);
            const int col0 = (D == 128 ? wg : 0) * 64;
            // dq element e: query row 16 warp + g + 8 ((e >> 1) & 1), column 8 (e >> 2) + 2 t.
#pragma unroll
            for (int e = 0; e < 32; e += 2) {
                const int r = q0 + warp * 16 + g + 8 * ((e >> 1) & 1);
                const int c = col0 + 8 * (e >> 2) + 2 * t;
                fb_red_v2(dQb + static_cast<long long>(r) * D + c, dq[e], dq[e + 1]);
            }
        }
        if constexpr (!FRAG) __syncthreads();  // this stage and dS^T are overwritten next
    }
    if constexpr (FRAG) {
        if ((tid & 127) == 0) fb_bulk_wait();  // shared memory stays until the reads are done
    }
    if (i0 >= nblk) fa_cp_async_wait<0>();
    fb_store_rows<DT, D>(dv, dV + bh * Nk * D, row_k, Nk, t, 1.f);
    fb_store_rows<DT, D>(dk, dK + bh * Nk * D, row_k, Nk, t, scale);
#else
    __trap();
#endif
}

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK instantiates the variants flash_backward.py uses.
#define FB_MAIN(DT, D, M)                                                                   \
    template __global__ void flash_bwd_main<DT, D, M>(                                      \
        const u16*, const u16*, const u16*, const u16*, const float*, const float*, float*, \
        u16*, u16*, int*, int, int, int, float, float, int);
#define FB_INST(DT, D)                                                                       \
    template __global__ void flash_bwd_pre<DT, D>(const u16*, const u16*, const float*,     \
                                                  float*, float*, int, int, int);            \
    template __global__ void flash_bwd_post<DT, D>(const float*, u16*, int, int, long long, \
                                                   float);                                   \
    template __global__ void flash_bwd_post_frag<DT, D>(const float*, u16*, int, int,       \
                                                        long long, float);                   \
    FB_MAIN(DT, D, 0) FB_MAIN(DT, D, 4) FB_MAIN(DT, D, 5)
FB_INST(0, 64)
FB_INST(1, 64)
FB_INST(0, 128)
FB_INST(1, 128)
#endif
