// The ws backward at d = 128 with 80-row query blocks (flash_backward's mode 13, the default
// there without a band, causal or not): FlashAttention-4's sm90 tile for non-causal d = 128
// (flash_bwd_sm90.py via interface.py's _tile_size_bwd_sm90: 80 x 128, dQ with swapped
// operands). Each consumer warpgroup still owns 64 of the CTA's 128 keys; per query block it
// does 25% more work than flash_bwd_ws.cu's 64-row block for the same fixed costs (the dSᵀ
// hand-off barrier, the stage waits, one dQ tile drain, the L2 / D reads' setup).
// BACKWARD_NOTES.md ("Round 46"; causal, with query blocks that end at N_q, "Round 47
// (bwd11)") has why and what it measured against mode 7.
// What changes against flash_bwd_ws.cu (same producer, rings, early dV, one named barrier):
//   * Sᵀ, dPᵀ are m64n80 GEMMs (40 accumulator registers each), dV, dK five k-steps of 16;
//   * wgmma's M is 64, so dQ (80 rows) is computed transposed: dQᵀ (64 columns of d x 80
//     queries) = Kᵀ dSᵀ, A = the K panel read MN-major, B = dS stored (query, key) K-major,
//     which each consumer writes into its own 64-key panel with stmatrix.trans;
//   * the dQᵀ tile goes to a chunk of 64 x 80 floats in accumulator order (one bulk reduction,
//     20 KB), converted by flash_bwd_post_t80_s; one dQ buffer per consumer (two would pass
//     the 232,448-byte limit), so its store waits for the previous reduction to have read it;
//   * causal (CAUSAL, below: end-aligned blocks, L2 / D shifted by flash_bwd_pre80_s); no band
//     or deterministic order (the host refuses them); the key tail is masked as before. Rows
//     are padded to a multiple of 320 (64 and 80), so the preprocess pads L2 / D and zeroes
//     the accumulator unchanged.
// Included by flash_bwd_ws.cu after its own helpers (fbw_bulk_load, fbw_longest_first).
#pragma once

#include "flash_bwd_layout.cuh"
#include "flash_bwd_timeline.cuh"
#include "flash_bwd_ws_steps.cuh"
#include "ws_pipeline.cuh"

#define FBW80_BM 80  // queries per streamed block

// Shared memory from the 1024-byte aligned base (+ 1024 is the host's smem_bytes(128, 13)):
// K, V | 2 stages of Q, of dO | two dS tiles | one fp32 dQᵀ tile per consumer | 2 stages of
// L2 and D (320 bytes each) | mbarriers: KV, fullQ[2], fulldO[2], empty[2].
struct Fbw80Smem {
    static constexpr int ST = 2;
    static constexpr u32 KV_BYTES = FB_BN * 128 * 2;
    static constexpr u32 PANEL = FBW80_BM * 128;  // one 64-column panel of a Q, dO or dS tile
    static constexpr u32 QT_BYTES = 2 * PANEL;
    static constexpr u32 DS_BYTES = 2 * PANEL;    // 80 queries x 128 keys
    static constexpr u32 DQ_BYTES = FBW80_BM * 64 * 4;
    static constexpr u32 LD_BYTES = 2 * FBW80_BM * 4;  // L2, then D
    static constexpr u32 K_OFF = 0;
    static constexpr u32 V_OFF = KV_BYTES;
    static constexpr u32 Q_OFF = 2 * KV_BYTES;
    static constexpr u32 DO_OFF = Q_OFF + ST * QT_BYTES;
    static constexpr u32 DS_OFF = DO_OFF + ST * QT_BYTES;
    static constexpr u32 DQ_OFF = DS_OFF + 2 * DS_BYTES;
    static constexpr u32 LD_OFF = DQ_OFF + 2 * DQ_BYTES;
    static constexpr u32 BAR_OFF = LD_OFF + ST * LD_BYTES;
    static constexpr u32 BYTES = BAR_OFF + 8 * (1 + 3 * ST);
};
static_assert(Fbw80Smem::BYTES + 1024 <= 232448, "over the opt-in shared memory limit");

#if FA_HAVE_WGMMA
// Sᵀ (or dPᵀ) = A Bᵀ, 64 keys x 80 queries, not waited for: A = the warpgroup's 64 rows of
// the 128-row K (V) tile, B = the 80-row Q (dO) tile, both K-major.
template <int DT>
__device__ __forceinline__ void fbw80_issue_s(float* s, u32 alo, u32 blo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
        const u64 da = fbw_desc(alo, (kk >> 2) * (FB_BN * 128) + (kk & 3) * 32);
        const u64 db = fbw_desc(blo, (kk >> 2) * Fbw80Smem::PANEL + (kk & 3) * 32);
        fa_wgmma_ss<DT, FBW80_BM>(s, da, db, kk > 0);
    }
    fa_wgmma_commit();
}

// acc (64 keys x 128) += A B, A from registers (64 keys x 80 queries, five k-steps), B = the
// 80-row Q (dO) tile read MN-major (LBO = its panel stride).
template <int DT>
__device__ __forceinline__ void fbw80_issue_pv(float* acc, u32 (*a)[4], u32 blo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < FBW80_BM / 16; ++kk)
        fa_wgmma_rs<DT, 128>(acc, a[kk], fbw_desc(blo, kk * 2048));
    fa_wgmma_commit();
}

// dQᵀ (64 columns of d x 80 queries) = Kᵀ dSᵀ over the 128 keys, not waited for: A = the
// warpgroup's K panel read MN-major (low word klo), B = the dS tile (query rows, key panels)
// K-major (low word dlo).
template <int DT>
__device__ __forceinline__ void fbw80_issue_dq(float* dq, u32 klo, u32 dlo) {
    fa_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < FB_BN / 16; ++kk)
        fa_wgmma_ts<DT, FBW80_BM>(dq, fbw_desc(klo, kk * 2048),
                                  fbw_desc(dlo, (kk >> 2) * Fbw80Smem::PANEL + (kk & 3) * 32),
                                  kk > 0);
    fa_wgmma_commit();
}

// Pᵀ = exp2(Sᵀ scale log2 e - L2) in place; MASK: zero at key rows >= Nk or, CAUSAL, at key
// rows row > r + hi of query r (hi = N_k - N_q), which holds for every row >= N_k too (r <
// N_q), so the causal mask is that test alone: over = row_k - (the last key this thread's
// first query, r = q0 + 2 t, sees), its queries in register group j being r + 8 j, + 1.
template <bool MASK, bool CAUSAL>
__device__ __forceinline__ void fbw80_probs(float* s, u32 l2a, float scale_log2, int row_k,
                                            int Nk, int over) {
#pragma unroll
    for (int j = 0; j < FBW80_BM / 8; ++j) {
        const float2 l2 = fbw_row_pair(l2a, j);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int e = 4 * j + 2 * h;
            const float2 p = fbw_exp_pair(s, e, scale_log2, l2);
            float p0 = p.x, p1 = p.y;
            if constexpr (MASK && CAUSAL) {
                if (over + 8 * h > 8 * j) p0 = 0.f;
                if (over + 8 * h > 8 * j + 1) p1 = 0.f;
            } else if constexpr (MASK) {
                if (row_k + 8 * h >= Nk) p0 = p1 = 0.f;
            }
            s[e] = p0;
            s[e + 1] = p1;
        }
    }
}

// dSᵀ = Pᵀ o (dPᵀ - D) in place of dPᵀ (da: this thread's first D pair).
__device__ __forceinline__ void fbw80_dsoft(float* dp, const float* p, u32 da) {
#pragma unroll
    for (int j = 0; j < FBW80_BM / 8; ++j) {
        const float2 dd = fbw_row_pair(da, j);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int e = 4 * j + 2 * h;
            dp[e] = p[e] * (dp[e] - dd.x);
            dp[e + 1] = p[e + 1] * (dp[e + 1] - dd.y);
        }
    }
}

// This lane's stmatrix.trans row address in the dS tile, relative to it, for k-step 0 (k-step
// kk is 2048 bytes on): matrix q = lane / 8 of a k-step holds keys 8 (q & 1) of the warp's 16
// and queries 8 (q >> 1) of the step's 16; stored transposed, lane row i = lane % 8 is query
// 8 (q >> 1) + i, its 8 keys one 16-byte chunk of the consumer's panel, 128B-swizzled as the
// copy engine writes Q.
__device__ __forceinline__ u32 fbw80_ds_offset(int cw, int warp, int lane) {
    const int q = lane >> 3, i = lane & 7;
    const int row = 8 * (q >> 1) + i;
    return cw * Fbw80Smem::PANEL + row * 128 + (((2 * warp + (q & 1)) ^ i) << 4);
}

__device__ __forceinline__ void fbw80_store_ds(u32 (*a)[4], u32 addr) {
#pragma unroll
    for (int kk = 0; kk < FBW80_BM / 16; ++kk)
        asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
                     ::"r"(addr + kk * 2048), "r"(a[kk][0]), "r"(a[kk][1]), "r"(a[kk][2]),
                     "r"(a[kk][3]) : "memory");
}

// The dQᵀ tile (40 floats a thread) into this consumer's buffer in accumulator order (float4
// j * 128 + ctid: conflict-free), then one bulk reduction into its chunk. One buffer: thread
// 0 first waits until the previous reduction has read it. bar: the consumer's own named
// barrier (2 + cw; 1 is the hand-off).
__device__ __forceinline__ void fbw80_dq_bulk(const float* dq, u32 buf, int ctid, int bar,
                                              float* __restrict__ dst) {
    if (ctid == 0) fb_bulk_wait_read<0>();
    fa_bar_sync(bar, 128);
#pragma unroll
    for (int j = 0; j < FBW80_BM / 8; ++j) {
        asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                         buf + static_cast<u32>(j * 128 + ctid) * 16u),
                     "f"(dq[4 * j]), "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3]));
    }
    fa_fence_proxy_async();
    fa_bar_sync(bar, 128);
    if (ctid == 0) fb_bulk_add(dst, buf, Fbw80Smem::DQ_BYTES);
}
// The end of a block's GEMMs: wait for all of them, release the stage (Q, dO, L2, D are no
// longer read) and pin dV, dK's registers after the wait.
template <int NA>
__device__ __forceinline__ void fbw80_release(float* dv, float* dk, u32 empty) {
    fa_wgmma_wait<0>();
    fa_mbar_arrive(empty);
#pragma unroll
    for (int e = 0; e < NA; ++e) {
        fa_reg_fence(dv[e]);
        fa_reg_fence(dk[e]);
    }
}
#endif

// flash_bwd_ws's arguments (sems and causal unused: CAUSAL is the template's; no band). Grid
// (key blocks, batch * kv_heads); Npad a multiple of 320. Without CAUSAL query block i is rows
// [80 i, 80 i + 80) and every key block streams all of them. CAUSAL (bottom-right, hi =
// lay.hi = N_k - N_q): the blocks end at N_q, block i being rows [80 i - pad, 80 i - pad + 80)
// with pad = 80 ceil(N_q / 80) - N_q (our forward's end-aligned blocks, FLASH_NOTES v13), so
// the partial block is the first, which only the key blocks at the start of the diagonal
// stream, instead of the last, which every key block streams; L2 / D are stored shifted by
// pad (flash_bwd_pre80_s), so block i's are still at 80 i, and the copy engine zero-fills the
// rows before 0. A key block streams [i0, ceil(N_q / 80)) from the first block whose last row
// reaches it, masks per element only the tiles the diagonal (or the key tail) crosses, and the
// CTAs launch longest first (fbw_longest_first).
// DQ_FIRST (mode 23, the non-causal default; BACKWARD_NOTES.md round 48): FlashAttention-4's
// order after the hand-off, dQ issued before dK, so the single dQᵀ buffer's wait, the tile's
// store and its two barriers run while the tensor cores still hold dK, instead of after every
// GEMM is done.
template <int DT, bool CAUSAL = false, bool DQ_FIRST = false>
__global__ void __launch_bounds__(384, 1)
    flash_bwd_ws80(const __grid_constant__ FaTmap tmQ, const __grid_constant__ FaTmap tmK,
                   const __grid_constant__ FaTmap tmV, const __grid_constant__ FaTmap tmdO,
                   const float* __restrict__ L2, const float* __restrict__ Dsum,
                   float* __restrict__ dQacc, u16* __restrict__ dK, u16* __restrict__ dV,
                   int* __restrict__ sems, int Nq, int Nk, int Npad, float scale,
                   float scale_log2, int causal, const FbwLayout lay) {
#if FA_HAVE_WGMMA
    (void)sems;
    (void)causal;
    using L = Fbw80Smem;
    constexpr int ST = L::ST;
    constexpr int NS = FBW80_BM / 2;  // Sᵀ / dPᵀ / dQᵀ accumulator registers
    constexpr int NA = 64;            // dK / dV accumulator registers (64 x 128)
    extern __shared__ __align__(128) unsigned char fb_smem[];
    const u32 base = (fa_smem_addr(fb_smem) + 1023u) & ~1023u;
    const u32 sK = base + L::K_OFF, sV = base + L::V_OFF, sQ = base + L::Q_OFF;
    const u32 sdO = base + L::DO_OFF, sdS = base + L::DS_OFF, sDQ = base + L::DQ_OFF;
    const u32 sLD = base + L::LD_OFF;
    const u32 barKV = base + L::BAR_OFF;
    const u32 fullQ = barKV + 8, fulldO = fullQ + 8 * ST, empty = fulldO + 8 * ST;

    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    int kb = static_cast<int>(blockIdx.x), row = static_cast<int>(blockIdx.y);
    if constexpr (CAUSAL) fbw_longest_first(kb, row);  // unequal CTAs: the longest first
    const int k0 = kb * FB_BN;
    const int kv_heads = lay.heads / lay.group;
    const int bat = row / kv_heads;
    const int hk = row - bat * kv_heads;
    const int bh0 = bat * lay.heads + hk * lay.group;
    const int nb = (Nq + FBW80_BM - 1) / FBW80_BM;  // query blocks of a head
    const int nblk = Npad / FBW80_BM;                // the accumulator's blocks per head
    const int pad = CAUSAL ? nb * FBW80_BM - Nq : 0;  // block i's first row is 80 i - pad
    // CAUSAL: query r sees keys <= r + lay.hi, so block i's first row sees keys <= 80 i + hp.
    const int hp = lay.hi - pad;
    // The first query block whose last row reaches k0 (< nb: row N_q - 1 reaches every key).
    const int i0 = CAUSAL ? max(0, k0 - hp) / FBW80_BM : 0;
    const int items = (nb - i0) * lay.group;

    if (tid == 0) {
        fa_mbar_init(barKV, 1);
        for (int s = 0; s < ST; ++s) {
            fa_mbar_init(fullQ + 8 * s, 1);
            fa_mbar_init(fulldO + 8 * s, 1);
            fa_mbar_init(empty + 8 * s, 2 * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    FBW_TL_DECL
    FBW_TL_START;

    if (wg == 0) {
        fa_setmaxnreg_dec<24>();
        if (tid == 0) {
            fa_tma_prefetch(&tmQ);
            fa_tma_prefetch(&tmdO);
            fa_mbar_expect_tx(barKV, 2 * L::KV_BYTES);
            fa_load_kv<2, FB_BN>(sK, &tmK, k0, hk, bat, barKV);
            fa_load_kv<2, FB_BN>(sV, &tmV, k0, hk, bat, barKV);
            for (int it = 0, i = i0, gq = 0; it < items; ++it) {
                const int s = it % ST;
                const int h = hk * lay.group + gq;
                const long long bh = bh0 + gq;
                const float* L2b = L2 + bh * Npad + i * FBW80_BM;
                const float* Db = Dsum + bh * Npad + i * FBW80_BM;
                const u32 ld = sLD + s * L::LD_BYTES;
                FBW_TL(it, 0);
                fa_mbar_wait(empty + 8 * s, ((it / ST) & 1) ^ 1);
                FBW_TL(it, 1);
                fa_mbar_expect_tx(fullQ + 8 * s, L::QT_BYTES + FBW80_BM * 4);
                fa_load_kv<2, FBW80_BM>(sQ + s * L::QT_BYTES, &tmQ, i * FBW80_BM - pad, h, bat,
                                        fullQ + 8 * s);
                fbw_bulk_load(ld, L2b, FBW80_BM * 4, fullQ + 8 * s);
                fa_mbar_expect_tx(fulldO + 8 * s, L::QT_BYTES + FBW80_BM * 4);
                fa_load_kv<2, FBW80_BM>(sdO + s * L::QT_BYTES, &tmdO, i * FBW80_BM - pad, h,
                                        bat, fulldO + 8 * s);
                fbw_bulk_load(ld + FBW80_BM * 4, Db, FBW80_BM * 4, fulldO + 8 * s);
                FBW_TL(it, 2);
                if (++i == nb) {
                    i = i0;
                    ++gq;
                }
            }
        }
        FBW_TL_END(items);
        return;
    }

    fa_setmaxnreg_inc<240>();
    const int cw = __shfl_sync(0xffffffffu, wg - 1, 0);  // keys [k0 + 64 cw, k0 + 64 cw + 64)
    const int ctid = tid & 127;
    const int warp = ctid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int kw0 = k0 + cw * 64;
    const int row_k = kw0 + warp * 16 + g;
    const u32 klo = fbw_lo(sK + cw * 64 * 128, 16), vlo = fbw_lo(sV + cw * 64 * 128, 16);
    const u32 kdq = fbw_lo(sK + cw * (FB_BN * 128), FB_BN * 128);
    const u32 ds_off = fbw80_ds_offset(cw, warp, lane);
    const u32 dqbuf = sDQ + cw * L::DQ_BYTES;
    const bool tail = kw0 + 64 > Nk;

    float dv[NA], dk[NA];
#pragma unroll
    for (int e = 0; e < NA; ++e) dv[e] = dk[e] = 0.f;

    fa_mbar_wait(barKV, 0);
    for (int it = 0, i = i0, gq = 0; it < items; ++it) {
        const int s = it % ST;
        const long long bh = bh0 + gq;
        const u32 par = (it / ST) & 1;
        const u32 qbase = sQ + s * L::QT_BYTES;
        const u32 dobase = sdO + s * L::QT_BYTES;
        const u32 dsbuf = sdS + (it & 1) * L::DS_BYTES;
        const u32 lda = sLD + s * L::LD_BYTES + 8 * t;

        float sv[NS], dp[NS];
        // Register-free definitions: the wrappers take accumulators as "+f", so without
        // them the arrays count as live across the back edge, and ptxas serialised the
        // wgmmas for want of registers (C7512).
#pragma unroll
        for (int e = 0; e < NS; ++e) asm volatile("" : "=f"(sv[e]), "=f"(dp[e]));
        FBW_TL(it, 0);
        fa_mbar_wait(fullQ + 8 * s, par);
        FBW_TL(it, 1);
        fbw80_issue_s<DT>(sv, klo, fbw_lo(qbase, 16));
        FBW_TL(it, 2);
        fa_mbar_wait(fulldO + 8 * s, par);
        FBW_TL(it, 3);
        fbw80_issue_s<DT>(dp, vlo, fbw_lo(dobase, 16));
        FBW_TL(it, 4);
        fa_wgmma_wait<1>();
        FBW_TL(it, 5);
#pragma unroll
        for (int e = 0; e < NS; ++e) fa_reg_fence(sv[e]);
        // Masked tiles: the key tail or, CAUSAL, those the diagonal crosses (a key of this
        // consumer's 64 past the last the block's first row sees, which the tail's keys are).
        const int lim0 = i * FBW80_BM + hp;  // the last key the block's first row sees
        if (CAUSAL ? kw0 + 63 > lim0 : tail)
            fbw80_probs<true, CAUSAL>(sv, lda, scale_log2, row_k, Nk, row_k - lim0 - 2 * t);
        else
            fbw80_probs<false, CAUSAL>(sv, lda, scale_log2, row_k, Nk, 0);
        FBW_TL(it, 6);
        u32 ap[FBW80_BM / 16][4], ads[FBW80_BM / 16][4];
        fa_to_a<DT, NS>(sv, ap);
        // dV before the wait for dPᵀ, as flash_bwd_ws.cu does (FA4 issues it after dS; here
        // that measured 0.97-1.02x, BACKWARD_NOTES.md round 47).
#pragma unroll
        for (int e = 0; e < NA; ++e) fa_reg_fence(dv[e]);
        fbw80_issue_pv<DT>(dv, ap, fbw_lo(dobase, L::PANEL));
        FBW_TL(it, 7);
        fa_wgmma_wait<1>();
        FBW_TL(it, 8);
#pragma unroll
        for (int e = 0; e < NS; ++e) fa_reg_fence(dp[e]);
        fbw80_dsoft(dp, sv, lda + FBW80_BM * 4);
        fa_to_a<DT, NS>(dp, ads);
        // Buffer it & 1 was last read by block it - 2's dQ GEMMs, which both consumers
        // finished before block it - 1's barrier.
        fbw80_store_ds(ads, dsbuf + ds_off);
        FBW_TL(it, 9);
        if constexpr (!DQ_FIRST) {  // dK first: the tensor cores run it under the hand-off
#pragma unroll
            for (int e = 0; e < NA; ++e) fa_reg_fence(dk[e]);
            fbw80_issue_pv<DT>(dk, ads, fbw_lo(qbase, L::PANEL));
            FBW_TL(it, 10);
        }
        fa_fence_proxy_async();
        fa_bar_sync(1, 256);  // both consumers' dS panels are in shared memory
        FBW_TL(it, 11);

        float dq[NS];
#pragma unroll
        for (int e = 0; e < NS; ++e) asm volatile("" : "=f"(dq[e]));
        fbw80_issue_dq<DT>(dq, kdq, fbw_lo(dsbuf, 16));
        FBW_TL(it, 12);
        if constexpr (DQ_FIRST) {  // dK after dQ: the dQᵀ tile is drained under it
#pragma unroll
            for (int e = 0; e < NA; ++e) fa_reg_fence(dk[e]);
            fbw80_issue_pv<DT>(dk, ads, fbw_lo(qbase, L::PANEL));
            FBW_TL(it, 10);
            fa_wgmma_wait<1>();  // dV and dQᵀ done; dK still reads Q and its dS registers
        } else {
            fbw80_release<NA>(dv, dk, empty + 8 * s);
        }
        FBW_TL(it, 13);
#pragma unroll
        for (int e = 0; e < NS; ++e) fa_reg_fence(dq[e]);
        const long long chunk = (bh * nblk + i) * 2 + cw;
#ifdef FBW_TIMELINE
        if (ctid == 0) fb_bulk_wait_read<0>();  // fbw80_dq_bulk's own wait, stamped
        FBW_TL(it, 15);
#endif
        fbw80_dq_bulk(dq, dqbuf, ctid, 2 + cw, dQacc + chunk * (FBW80_BM * 64));
        FBW_TL(it, 14);
        if constexpr (DQ_FIRST) fbw80_release<NA>(dv, dk, empty + 8 * s);
        if constexpr (DQ_FIRST) FBW_TL(it, 16);
        if (++i == nb) {
            i = i0;
            ++gq;
        }
    }
    if (ctid == 0) fb_bulk_wait();
    fbw_store_rows<DT, 128>(dv, dV + bat * lay.dv_b + hk * lay.dv_h, lay.dv_r, row_k, Nk, t, 1.f);
    fbw_store_rows<DT, 128>(dk, dK + bat * lay.dk_b + hk * lay.dk_h, lay.dk_r, row_k, Nk, t,
                            scale);
    FBW_TL_END(items);
#else
    __trap();
#endif
}

// The causal kernel's preprocess: flash_bwd_pre_s's (one block per 64 padded rows, the same
// grid), with padded row r holding query row r - pad, pad = 80 ceil(N_q / 80) - N_q, so the
// end-aligned block i's L2 / D are at 80 i (the rows before pad padded as past N_q).
template <int DT>
__global__ void __launch_bounds__(256) flash_bwd_pre80_s(
    const u16* __restrict__ O, const u16* __restrict__ dO, const float* __restrict__ LSE,
    float* __restrict__ L2, float* __restrict__ Dsum, float* __restrict__ dQacc,
    int* __restrict__ tickets, int Nq, int Npad, const FbwLayout lay) {
    const int pad = (Nq + FBW80_BM - 1) / FBW80_BM * FBW80_BM - Nq;
    fbw_pre<DT, 128, true>(O, dO, LSE, L2, Dsum, dQacc, tickets, Nq, Npad, pad, lay);
}

// dQ from the 80-row accumulator (flash_bwd_ws80's chunks: chunk (bh * nblk + blk) * 2 + w
// holds columns 64 w.. of d x queries 80 blk.. in accumulator order: float4 j * 128 + c of
// thread c = 32 warp + 4 g + t is (d 16 warp + g, + 8) x (query 8 j + 2 t, + 1)), times the
// scale, into strided dQ. One block per chunk: the 20 KB chunk read in order into shared
// memory, then each thread writes 8 columns of one query row as one 16-byte store. ENDQ: the
// causal kernel's end-aligned blocks (query 80 blk + q - pad; the rows before 0 are skipped).
template <int DT, bool ENDQ = false>
__global__ void __launch_bounds__(256) flash_bwd_post_t80_s(
    const float* __restrict__ dQacc, u16* __restrict__ dQ, int Nq, int nblk, float scale,
    const FbwLayout lay) {
    __shared__ float4 tile[FBW80_BM * 16];
    const int tid = threadIdx.x;
    const int cid = static_cast<int>(blockIdx.x);  // over bh * ceil(Nq / 80) * 2
    const int nb = (Nq + FBW80_BM - 1) / FBW80_BM;
    const int pad = ENDQ ? nb * FBW80_BM - Nq : 0;
    const int w = cid & 1;
    const int bb = cid >> 1;
    const int bh = bb / nb;
    const int blk = bb - bh * nb;
    const float4* src = reinterpret_cast<const float4*>(dQacc) +
                        ((static_cast<long long>(bh) * nblk + blk) * 2 + w) * (FBW80_BM * 16);
    for (int f = tid; f < FBW80_BM * 16; f += 256) tile[f] = src[f];
    __syncthreads();
    const float* tf = reinterpret_cast<const float*>(tile);
    const int b = bh / lay.heads, h = bh - b * lay.heads;
    for (int u = tid; u < FBW80_BM * 8; u += 256) {
        const int c8 = u & 7, q = u >> 3;  // columns 8 c8.. of query q
        const int r = blk * FBW80_BM + q - pad;
        if (r >= Nq || (ENDQ && r < 0)) continue;
        // float index of (d 16 wp + g + 8 hh, query q): 4 (j 128 + 32 wp + 4 g + t) + 2 hh + p
        const int wp = c8 >> 1, hh = c8 & 1;
        const int at = 4 * ((q >> 3) * 128 + 32 * wp + ((q >> 1) & 3)) + 2 * hh + (q & 1);
        const float* x = tf + at;
        fbw_st16(dQ + b * lay.dq_b + h * lay.dq_h + r * lay.dq_r + w * 64 + 8 * c8,
                 fa_pack<DT>(x[0] * scale, x[16] * scale), fa_pack<DT>(x[32] * scale, x[48] * scale),
                 fa_pack<DT>(x[64] * scale, x[80] * scale),
                 fa_pack<DT>(x[96] * scale, x[112] * scale));
    }
}
