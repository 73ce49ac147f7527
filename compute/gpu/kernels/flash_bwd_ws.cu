// FlashAttention backward on Hopper with TMA and warp specialisation (sm_90a only).
//
// Same contract, preprocess and postprocess as flash_bwd_wgmma.cu (whose file comment gives
// the GEMMs and their layouts; flash_bwd_common.cuh holds the shared parts), the same tile
// (128 keys per CTA, 64-row query blocks) and the same dQ split; what changes is who loads:
//   * warpgroup 0 is the producer: after setmaxnreg drops it to 24 registers, one thread loads
//     K and V once (TMA, one mbarrier) and then streams Q + L2 and dO + D of every query block
//     into a ring of FBW_ST stages, each stage with two "full" mbarriers (Q's, so Sᵀ can start
//     before dO lands, and dO's) and one "empty" one the consumers release;
//   * warpgroups 1 and 2 (240 registers each) compute as before, waiting on the mbarriers
//     instead of cp.async groups and CTA barriers. The one barrier left per query block is
//     the dSᵀ hand-off between the two consumers (named barrier 1, 256 threads); dSᵀ is
//     double-buffered, so the next block's stores need no second barrier. Their per-block
//     steps are flash_bwd_ws_steps.cuh's (the same arithmetic as flash_bwd_common.cuh's, in
//     fewer instructions: uniform descriptors, a hoisted mask, stmatrix for dSᵀ), and
//     dV += Pᵀ dO is issued before the wait for dPᵀ, so the tensor cores run it while dSᵀ is
//     computed.
// The tensor maps (compute/gpu/tma.py) describe Q, dO with 64-row boxes and K, V with 128-row
// boxes, 64 columns and the 128-byte swizzle: the layout fa_load_panels writes, so every GEMM
// descriptor is the wgmma kernel's. Rows past N are zero-filled by the copy engine; L2, D are
// padded per head (flash_bwd_pre), so each block's 256 bytes of either are one bulk copy.
// dQ: flash_bwd_wgmma.cu's MODE 4, one bulk reduction per warpgroup's 64 x 64 tile kept in
// accumulator order; DET = true is its MODE 5 (the key blocks add each tile in a fixed order:
// the same tickets, order and grid reversal). Per-thread atomics and a third stage measured
// slower here (BACKWARD_NOTES.md) and were removed. DRAIN (with DET, flash_backward's mode
// 16): warps 1 and 2 of the producer warpgroup add consumer 0's and 1's tiles (fbw_drain),
// waiting for the tickets in their place; the consumer only stores its tile and arrives on a
// named barrier, so a ticket wait no longer stalls the tensor cores.
// A band (lay.lo, lay.hi: query row r sees keys r + lo <= c <= r + hi; causal is hi = N_k -
// N_q, no mask no bound): each key block streams only the query blocks whose band reaches it,
// and only tiles the band's edges or the key tail cross are masked.
// Strides and GQA (flash_bwd_layout.cuh): the maps are 4-D (column, row, head, batch), so Q,
// K, V, dO are read at their own strides; dK, dV are stored at theirs, and the pre / post
// kernels read O, dO and write dQ at theirs. One CTA per 128-key block of a K/V head: it
// streams the query blocks of every query head of its group in turn (head-major), so dK and
// dV are summed over the group in its registers; no atomics, no workspace, and the sum's
// order is fixed (GQA costs nothing in the deterministic mode). What it gives up: a grid of
// b * kv_heads rows, group times fewer CTAs than a per-query-head grid with an fp32
// reduction of dK, dV afterwards.
// Causal CTAs are unequal (key block kb streams (N_q - 128 kb) / 64 query blocks): the
// non-deterministic kernel launches them longest first within chunks of grid rows
// (fbw_longest_first), so the last wave holds short CTAs.
// At d = 128 without a band the default is flash_bwd_ws80.cuh's kernel instead (80-row query
// blocks, FlashAttention-4's tile there; included below).
// compile-check-arch: sm_90a

#include "flash_bwd_layout.cuh"
#include "flash_bwd_timeline.cuh"
#include "flash_bwd_ws_steps.cuh"
#include "ws_pipeline.cuh"

#define FBW_NT 384  // producer warpgroup + two consumer warpgroups
#define FBW_ST 2     // stages of the Q / dO ring (d = 128: 231,480 bytes of shared memory)

// Shared memory from the 1024-byte aligned base (FbwSmem<D>::BYTES + 1024 is the host's
// flash_backward.smem_bytes): K, V | ST stages of Q, of dO | two dSᵀ buffers | four fp32 dQ
// tiles | ST stages of L2 and D (256 bytes each) | mbarriers: KV, fullQ[ST], fulldO[ST],
// empty[ST].
template <int D>
struct FbwSmem {
    static constexpr int ST = FBW_ST;
    static constexpr u32 KV_BYTES = FB_BN * D * 2;
    static constexpr u32 QT_BYTES = FB_BM * D * 2;
    static constexpr u32 DS_BYTES = FB_BN * FB_BM * 2;
    static constexpr u32 K_OFF = 0;
    static constexpr u32 V_OFF = KV_BYTES;
    static constexpr u32 Q_OFF = 2 * KV_BYTES;
    static constexpr u32 DO_OFF = Q_OFF + ST * QT_BYTES;
    static constexpr u32 DS_OFF = DO_OFF + ST * QT_BYTES;
    static constexpr u32 DQ_OFF = DS_OFF + 2 * DS_BYTES;
    static constexpr u32 LD_OFF = DQ_OFF + 4 * 16384;
    static constexpr u32 BAR_OFF = LD_OFF + ST * 512;
    static constexpr u32 BYTES = BAR_OFF + 8 * (1 + 3 * ST);
};

#if FA_HAVE_WGMMA
// One plain bulk copy global -> shared (bytes a multiple of 16), completed on an mbarrier.
__device__ __forceinline__ void fbw_bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
#endif

// Causal key block kb streams (N_q - 128 kb) / 64 query blocks: the first is the longest. In
// launch order (blockIdx.x fastest) a grid row's CTAs run from its longest to its shortest,
// so the last row's longest CTA starts in the last wave and runs on while the other SMs go
// idle. This maps the launch index to (kb, row) key block-major within chunks of
// FBW_ROW_CHUNK grid rows: every chunk, the last included, starts with its longest CTAs and
// ends with its shortest. A chunk, not the whole grid, so the CTAs that run at one time
// stream the query blocks of a few heads, which stay in L2.
#define FBW_ROW_CHUNK 8
__device__ __forceinline__ void fbw_longest_first(int& kb, int& row) {
    const int nx = static_cast<int>(gridDim.x);
    const int lin = static_cast<int>(blockIdx.y) * nx + static_cast<int>(blockIdx.x);
    const int c0 = lin / (FBW_ROW_CHUNK * nx) * FBW_ROW_CHUNK;  // the chunk's first row
    const int rows = min(FBW_ROW_CHUNK, static_cast<int>(gridDim.y) - c0);
    const int r = lin - c0 * nx;
    kb = r / rows;
    row = c0 + r - kb * rows;
}

// DVK (mode 25, d = 64; BACKWARD_NOTES.md, round 49), 0 for mode 7: dV's k-steps issued DVK
// to a commit group as the exponentials of their row pairs finish (fbw_probs_dv), so the
// tensor cores start dV during the exponentials (2: two groups; one k-step a group lost).
// dSᵀ then waits for dPᵀ past dV's 4 / DVK groups.
template <int DT, int D, bool DET, bool DRAIN = false, int DVK = 0>
__global__ void __launch_bounds__(FBW_NT, 1)
    flash_bwd_ws(const __grid_constant__ FaTmap tmQ, const __grid_constant__ FaTmap tmK,
                 const __grid_constant__ FaTmap tmV, const __grid_constant__ FaTmap tmdO,
                 const float* __restrict__ L2, const float* __restrict__ Dsum,
                 float* __restrict__ dQacc, u16* __restrict__ dK, u16* __restrict__ dV,
                 int* __restrict__ sems, int Nq, int Nk, int Npad, float scale,
                 float scale_log2, int causal, const FbwLayout lay) {
#if FA_HAVE_WGMMA
    using L = FbwSmem<D>;
    constexpr int ST = L::ST;
    constexpr int NS = FB_BM / 2;  // Sᵀ / dPᵀ accumulator registers (64 x 64 per warpgroup)
    constexpr int NA = D / 2;      // dK / dV accumulator registers (64 x D per warpgroup)
    constexpr int NP = D / 64;     // 64-column panels
    extern __shared__ __align__(128) unsigned char fb_smem[];
    const u32 base = (fa_smem_addr(fb_smem) + 1023u) & ~1023u;
    const u32 sK = base + L::K_OFF, sV = base + L::V_OFF, sQ = base + L::Q_OFF;
    const u32 sdO = base + L::DO_OFF, sdS = base + L::DS_OFF, sDQ = base + L::DQ_OFF;
    const u32 sLD = base + L::LD_OFF;
    const u32 barKV = base + L::BAR_OFF;
    const u32 fullQ = barKV + 8, fulldO = fullQ + 8 * ST, empty = fulldO + 8 * ST;

    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // 0: producer, 1, 2: consumers
    int kb, row;
    if (!DET && causal) {
        fbw_longest_first(kb, row);
    } else {
        // Deterministic causal: the shortest key block (the last) adds first, so it is
        // launched first.
        kb = DET && causal ? static_cast<int>(gridDim.x - 1 - blockIdx.x)
                           : static_cast<int>(blockIdx.x);
        row = static_cast<int>(blockIdx.y);
    }
    const int k0 = kb * FB_BN;
    const int kv_heads = lay.heads / lay.group;
    const int bat = row / kv_heads;
    const int hk = row - bat * kv_heads;
    const int bh0 = bat * lay.heads + hk * lay.group;  // the group's first flat query head
    const int offset = Nk - Nq;
    // Query rows r see keys r + lo <= c <= r + hi (lay.lo, lay.hi: a band; causal is hi =
    // offset and no, none no bound on either side). This key block's query blocks [i0, i1):
    // from the first whose last row reaches k0 to the last whose first row reaches k0 + 127.
    const int lo = lay.lo, hi = lay.hi;
    const int nblk = Npad / FB_BM;
    const int i0 = max(0, k0 - hi) / FB_BM;
    const int reach = k0 + FB_BN - 1 - lo;  // < 0: no row sees this block
    const int i1 = reach < 0 ? 0 : min(nblk, reach / FB_BM + 1);
    // Work item it: query block i = i0 + it % nb of the group's query head gq = it / nb.
    const int nb = i1 - i0;
    const int items = nb > 0 ? nb * lay.group : 0;

    if (tid == 0) {
        fa_mbar_init(barKV, 1);
        for (int s = 0; s < ST; ++s) {
            fa_mbar_init(fullQ + 8 * s, 1);
            fa_mbar_init(fulldO + 8 * s, 1);
            fa_mbar_init(empty + 8 * s, 2 * 128);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the only CTA-wide barrier: the roles split below
    FBW_TL_DECL
    FBW_TL_START;

    if (wg == 0) {
        fa_setmaxnreg_dec<24>();
        if (tid == 0) {
            fa_tma_prefetch(&tmQ);
            fa_tma_prefetch(&tmdO);
            fa_mbar_expect_tx(barKV, 2 * L::KV_BYTES);
            fa_load_kv<NP, FB_BN>(sK, &tmK, k0, hk, bat, barKV);
            fa_load_kv<NP, FB_BN>(sV, &tmV, k0, hk, bat, barKV);
            for (int it = 0, i = i0, gq = 0; it < items; ++it) {
                const int s = it % ST;
                const int h = hk * lay.group + gq;
                const long long bh = bh0 + gq;
                const float* L2b = L2 + bh * Npad;
                const float* Db = Dsum + bh * Npad;
                FBW_TL(it, 0);
                fa_mbar_wait(empty + 8 * s, ((it / ST) & 1) ^ 1);  // a fresh stage: at once
                FBW_TL(it, 1);
                fa_mbar_expect_tx(fullQ + 8 * s, L::QT_BYTES + 256);
                fa_load_kv<NP, FB_BM>(sQ + s * L::QT_BYTES, &tmQ, i * FB_BM, h, bat,
                                      fullQ + 8 * s);
                fbw_bulk_load(sLD + s * 512, L2b + i * FB_BM, 256, fullQ + 8 * s);
                fa_mbar_expect_tx(fulldO + 8 * s, L::QT_BYTES + 256);
                fa_load_kv<NP, FB_BM>(sdO + s * L::QT_BYTES, &tmdO, i * FB_BM, h, bat,
                                      fulldO + 8 * s);
                fbw_bulk_load(sLD + s * 512 + 256, Db + i * FB_BM, 256, fulldO + 8 * s);
                FBW_TL(it, 2);
                if (++i == i1) {
                    i = i0;
                    ++gq;
                }
            }
        }
        if constexpr (DRAIN) {  // warps 1 and 2 add consumer 0's and 1's dQ tiles
            const int w = tid >> 5;
            if (w == 1 || w == 2)
                fbw_drain<D, DET>(w - 1, tid & 31, sDQ, dQacc, sems, items, i0, i1, nblk, bh0, kb,
                                  causal, offset, lo);
        }
        FBW_TL_END(items);
        return;
    }

    fa_setmaxnreg_inc<240>();
    // The warpgroup index broadcast from lane 0: the compiler then sees it (and every tile
    // address and wgmma descriptor built from it) as warp-uniform and keeps those on the
    // uniform datapath instead of computing them per thread.
    const int cw = __shfl_sync(0xffffffffu, wg - 1, 0);  // keys [k0 + 64 cw, k0 + 64 cw + 64)
    const int ctid = tid & 127;    // thread within it
    const int warp = ctid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int kw0 = k0 + cw * 64;
    const int row_k = kw0 + warp * 16 + g;  // key row of accumulator elements with h = 0
    int ntile = 0;  // dQ tiles this warpgroup has written (its buffer is ntile & 1)
    const u32 klo = fbw_lo(sK + cw * 64 * 128, 16), vlo = fbw_lo(sV + cw * 64 * 128, 16);
    const u32 kdq = fbw_lo(sK + (D == 128 ? cw : 0) * (FB_BN * 128), FB_BN * 128);
    u32 dst_off[FB_BM / 16];
    fbw_dst_offsets(dst_off, cw * 64 + warp * 16, lane);

    float dv[NA], dk[NA];
#pragma unroll
    for (int e = 0; e < NA; ++e) dv[e] = dk[e] = 0.f;

    fa_mbar_wait(barKV, 0);
    for (int it = 0, i = i0, gq = 0; it < items; ++it) {
        if constexpr (DET) {  // the ticket's spin loop (one lane) hides that these are uniform
            it = __shfl_sync(0xffffffffu, it, 0);
            i = __shfl_sync(0xffffffffu, i, 0);
            gq = __shfl_sync(0xffffffffu, gq, 0);
        }
        const int s = it % ST;
        const long long bh = bh0 + gq;
        const u32 par = (it / ST) & 1;
        const u32 qbase = sQ + s * L::QT_BYTES;
        const u32 dobase = sdO + s * L::QT_BYTES;
        const u32 dsbuf = sdS + (it & 1) * L::DS_BYTES;
        const int q0 = i * FB_BM;
        const u32 lda = sLD + s * 512 + 8 * t;  // this thread's first L2 pair; D 256 bytes on

        float sv[NS], dp[NS];
        FBW_TL(it, 0);
        fa_mbar_wait(fullQ + 8 * s, par);
        FBW_TL(it, 1);
        fbw_issue_s<DT, D>(sv, klo, fbw_lo(qbase, 16));
        FBW_TL(it, 2);
        fa_mbar_wait(fulldO + 8 * s, par);
        FBW_TL(it, 3);
        fbw_issue_s<DT, D>(dp, vlo, fbw_lo(dobase, 16));
        FBW_TL(it, 4);
        // Pᵀ while dPᵀ is still on the tensor cores (Sᵀ is the older of the two groups).
        fa_wgmma_wait<1>();
        FBW_TL(it, 5);
#pragma unroll
        for (int e = 0; e < NS; ++e) fa_reg_fence(sv[e]);
        u32 ap[FB_BM / 16][4], ads[FB_BM / 16][4];
        if constexpr (DVK != 0) {
            // Pᵀ and dV's k-steps by pairs of rows, then the wait for dPᵀ (the oldest group;
            // dV's may still run under the dSᵀ arithmetic).
#pragma unroll
            for (int e = 0; e < NA; ++e) fa_reg_fence(dv[e]);
            const u32 dvb = fbw_lo(dobase, 8192);
            if ((kw0 + 64 > Nk) || (kw0 + 63 > q0 + hi) || (kw0 < q0 + FB_BM - 1 + lo))
                fbw_probs_dv<DT, D, NS, true, DVK>(sv, ap, dv, lda, scale_log2, row_k, q0, t, Nk,
                                                   lo, hi, dvb);
            else
                fbw_probs_dv<DT, D, NS, false, DVK>(sv, ap, dv, lda, scale_log2, row_k, q0, t,
                                                    Nk, lo, hi, dvb);
            FBW_TL(it, 6);
            fa_wgmma_wait<FB_BM / 16 / DVK>();
            FBW_TL(it, 8);
        } else {
            // Masked tiles: the key tail, and the band's (or the diagonal's) edges.
            if ((kw0 + 64 > Nk) || (kw0 + 63 > q0 + hi) || (kw0 < q0 + FB_BM - 1 + lo))
                fbw_probs<NS, true>(sv, lda, scale_log2, row_k, q0, t, Nk, lo, hi);
            else
                fbw_probs<NS, false>(sv, lda, scale_log2, row_k, q0, t, Nk, lo, hi);
            FBW_TL(it, 6);
            // dV += Pᵀ dO goes to the tensor cores before the wait for dPᵀ, so they have it
            // to run while this warpgroup computes dSᵀ (groups complete in order: dPᵀ, then
            // dV).
            fa_to_a<DT, NS>(sv, ap);
#pragma unroll
            for (int e = 0; e < NA; ++e) fa_reg_fence(dv[e]);
            fbw_issue_pv<DT, D>(dv, ap, fbw_lo(dobase, 8192));
            FBW_TL(it, 7);
            fa_wgmma_wait<1>();
            FBW_TL(it, 8);
        }
#pragma unroll
        for (int e = 0; e < NS; ++e) fa_reg_fence(dp[e]);
        fbw_dsoft<NS>(dp, sv, lda + 256);
        fa_to_a<DT, NS>(dp, ads);
        // Buffer it & 1 was last read by block it - 2's dQ GEMM, which both warpgroups
        // finished before block it - 1's barrier.
        fbw_store_dst(ads, dsbuf, dst_off);
        FBW_TL(it, 9);
#pragma unroll
        for (int e = 0; e < NA; ++e) fa_reg_fence(dk[e]);
        fbw_issue_pv<DT, D>(dk, ads, fbw_lo(qbase, 8192));
        FBW_TL(it, 10);
        fa_fence_proxy_async();
        fa_bar_sync(1, 256);  // both consumers' dSᵀ are in shared memory
        FBW_TL(it, 11);

        const bool dq_here = (D == 128) || (cw == (it & 1));
        float dq[32];
        if (dq_here) fbw_issue_dq<DT>(dq, fbw_lo(dsbuf, FB_BN * 128), kdq);
        if (dq_here) FBW_TL(it, 12);
        fa_wgmma_wait<0>();
        fa_mbar_arrive(empty + 8 * s);  // Q, dO, L2, D of this stage are no longer read
        FBW_TL(it, 13);
#pragma unroll
        for (int e = 0; e < NA; ++e) {
            fa_reg_fence(dv[e]);
            fa_reg_fence(dk[e]);
        }
        if (dq_here) {
#pragma unroll
            for (int e = 0; e < 32; ++e) fa_reg_fence(dq[e]);
            const int b = ntile & 1;
            const u32 buf = sDQ + static_cast<u32>(cw * 2 + b) * 16384u;
            if constexpr (DRAIN) {  // the drain warp adds it (fbw_drain)
                if (ntile >= 2) fa_bar_sync(fbw_free_bar(cw, b), 160);
                FBW_TL(it, 15);
                fb_dq_store(dq, buf, ctid);
                fbw_bar_arrive(fbw_full_bar(cw, b), 160);
            } else {
                const long long chunk = (bh * nblk + i) * (D / 64) + (D == 128 ? cw : 0);
                const int want = DET ? fbw_ticket(i, kb, causal, offset, lo) : 0;
#ifdef FBW_TIMELINE
                if (ctid == 0) fb_bulk_wait_read<1>();  // fb_dq_bulk's own wait, stamped
                FBW_TL(it, 15);
#endif
                fb_dq_bulk<DET>(dq, buf, ctid, cw + 1, dQacc, sems, chunk, want);
            }
            FBW_TL(it, 14);
            ++ntile;
        }
        if (++i == i1) {
            i = i0;
            ++gq;
        }
    }
    if (ctid == 0) fb_bulk_wait();  // shared memory stays until the reads are done
    fbw_store_rows<DT, D>(dv, dV + bat * lay.dv_b + hk * lay.dv_h, lay.dv_r, row_k, Nk, t, 1.f);
    fbw_store_rows<DT, D>(dk, dK + bat * lay.dk_b + hk * lay.dk_h, lay.dk_r, row_k, Nk, t,
                          scale);
    FBW_TL_END(items);
#else
    __trap();
#endif
}

// Mode 13 (BACKWARD_NOTES.md, rounds 46, 47): the 80-row query blocks at d = 128 without a
// band. After fbw_bulk_load and fbw_longest_first, which it uses.
#include "flash_bwd_ws80.cuh"

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK instantiates the variants flash_backward.py uses.
#define FBW_MAIN(DT, D, DET, DRAIN, DVK)                                                      \
    template __global__ void flash_bwd_ws<DT, D, DET, DRAIN, DVK>(                            \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap,                       \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap, const float*,         \
        const float*, float*, u16*, u16*, int*, int, int, int, float, float, int,          \
        const FbwLayout);
#define FBW_INST(DT, D)                                                                       \
    template __global__ void flash_bwd_pre_s<DT, D>(const u16*, const u16*, const float*,    \
                                                    float*, float*, float*, int*, int, int,  \
                                                    const FbwLayout);                        \
    template __global__ void flash_bwd_post_frag_s<DT, D>(const float*, u16*, int, int, float, \
                                                          const FbwLayout);                  \
    FBW_MAIN(DT, D, false, false, 0)                                                          \
    FBW_MAIN(DT, D, true, false, 0) FBW_MAIN(DT, D, true, true, 0)
FBW_INST(0, 64)
FBW_INST(1, 64)
FBW_MAIN(0, 64, false, false, 2)
FBW_MAIN(1, 64, false, false, 2)
FBW_INST(0, 128)
FBW_INST(1, 128)
#define FBW80_MAIN(DT, CAUSAL, DQ_FIRST)                                                      \
    template __global__ void flash_bwd_ws80<DT, CAUSAL, DQ_FIRST>(                            \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap,                       \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap, const float*,         \
        const float*, float*, u16*, u16*, int*, int, int, int, float, float, int,          \
        const FbwLayout);
#define FBW80_INST(DT, CAUSAL)                                                                \
    FBW80_MAIN(DT, CAUSAL, false) FBW80_MAIN(DT, CAUSAL, true)                                \
    template __global__ void flash_bwd_post_t80_s<DT, CAUSAL>(const float*, u16*, int, int,  \
                                                              float, const FbwLayout);
FBW80_INST(0, false)
FBW80_INST(1, false)
FBW80_INST(0, true)
FBW80_INST(1, true)
template __global__ void flash_bwd_pre80_s<0>(const u16*, const u16*, const float*, float*,
                                              float*, float*, int*, int, int, const FbwLayout);
template __global__ void flash_bwd_pre80_s<1>(const u16*, const u16*, const float*, float*,
                                              float*, float*, int*, int, int, const FbwLayout);
#endif
