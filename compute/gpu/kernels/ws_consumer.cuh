// The ws kernel's consumer warpgroups (flash_fwd_ws.cu): for each work item the masking
// rules (which key tiles this warpgroup computes, which need the mask), S = Q K^T and the
// online softmax over the key tiles, O += P V, pipelined against the producer's rings (the
// intra-warpgroup overlap and the scheduler barrier), then the epilogue.
// The masking rules and the epilogue are sections of this function, not functions of their
// own: split out, they changed the kernel's PTX (register numbering and address arithmetic:
// the compiler optimises a function before inlining it, without what the caller knows of
// its arguments), and the PTX is kept byte-identical to the recorded build (FLASH_NOTES.md,
// "PTX of the shipped defaults"). For the same reason ctid is tid & 127 (not tid - 128 wg).
#pragma once

#include "flash_fwd_layout.cuh"
#include "ws_scheduler.cuh"
#include "ws_traits.cuh"

#if FA_HAVE_WGMMA
template <class K>
__device__ __forceinline__ void fa_ws_consumer(const FaWsAddrs& A, u16* __restrict__ O,
                                               float* __restrict__ LSE, int Nq, int Nk,
                                               float scale_log2, int causal, int num_qb,
                                               int BH, int section, int first, int total,
                                               int tid, int wg, const FaFwdLayout& lay) {
    constexpr int DT = K::DT, D = K::D, NC = K::NC, BN = K::BN, ST = K::ST;
    constexpr int BM = K::BM, NS = K::NS, NO = K::NO, NP = K::NP, SP = K::SP;
    constexpr bool OVERLAP = K::OVERLAP, SCHED = K::SCHED, PERSIST = K::PERSIST;
    constexpr bool LPT = K::LPT, QREG = K::QREG, EARLYQ = K::EARLYQ;
    constexpr bool QREG_EARLY = K::QREG_EARLY, ENDQ = K::ENDQ;
    constexpr bool SKIP_IDLE = K::SKIP_IDLE, WG_DIAG = K::WG_DIAG, BAND = K::BAND;
    using L = typename K::L;
    const u32 sQ = A.sQ, sK = A.sK, sV = A.sV, sO = A.sO, barQ = A.barQ, emptyQ = A.emptyQ;
    const u32 fullK = A.fullK, fullV = A.fullV, emptyK = A.emptyK, emptyV = A.emptyV;
    const u32 slot = A.slot;
    fa_setmaxnreg_inc<FaRegs<NC>::CONSUMER>();
    const int c = wg - 1;  // consumer index: rows [64c, 64c + 64) of the query block
    const int ctid = tid & 127;  // this thread within its warpgroup
    const int warp = ctid >> 5;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const u32 qwg = sQ + c * 64 * 128;  // this warpgroup's rows in each Q panel
    const u32 owg = (PERSIST ? sO : sQ) + c * 64 * 128;  // ... and in the O staging tile
    const int offset = Nk - Nq;

    float o[NO];
    float m[2];
    float l[2];
    float alpha[2];
    float s[NS];
    u32 a[BN / 16][4];
    u32 qa[QREG ? D / 16 : 1][4];

    // Scheduler barrier: consumer c waits on barrier 1 + c, then lets 1 + (c + 1) % NC go.
    // All consumers of a CTA work on the same items, so they pass the same points in one
    // stream: consumer 0's first wait is met by its own arrive here, and after the last item
    // it takes up the last consumer's final arrive, so every barrier ends with its counts
    // matched (no walk over the items beforehand, which a dynamic schedule cannot do).
    if constexpr (SCHED) {
        if (c == 0) fa_bar_arrive(1, 256);
    }
    auto sched_wait = [&]() {
        if constexpr (SCHED) fa_bar_sync(1 + c, 256);
    };
    auto sched_signal = [&]() {
        if constexpr (SCHED) fa_bar_arrive(1 + (c + 1) % NC, 256);
    };
    // A K or V stage is done with: every consumer thread arrives.
    auto release = [&](u32 bar) { fa_mbar_arrive(bar); };

    int it = 0;  // K/V tiles consumed so far, across items (ring slot it % ST)
    for (int k = 0; PERSIST || k == 0; ++k) {
        fa_mbar_wait(barQ, k & 1);
        int tt = first;
        if constexpr (PERSIST) {
            asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(tt) : "r"(slot) : "memory");
            if (tt >= total) break;
        }
        int qb, bh;
        fa_tile<LPT>(tt, num_qb, BH, causal, section, qb, bh);
        const int q0 = fa_q0<ENDQ, BM>(qb, num_qb, Nq, causal);
        int j0 = 0;  // the first key tile (a band's; else 0): tile j holds keys (j0 + j) BN...
        const int ntiles = BAND ? fa_band_tiles<BM, BN>(q0, Nk, lay, j0)
                                : fa_kv_tiles<BM, BN>(q0, Nq, Nk, causal);
        const int row_a = q0 + c * 64 + warp * 16 + g;  // this thread's first row
        if constexpr (QREG) fa_load_q_frags<D, BM>(qa, qwg, warp, g, t);
        if constexpr (QREG_EARLY) fa_mbar_arrive(emptyQ);  // (its arrive orders the loads)

#pragma unroll
        for (int i = 0; i < NO; ++i) o[i] = 0.f;
        m[0] = m[1] = FA_NEG_INF;
        l[0] = l[1] = 0.f;

        // S = Q K^T over the tile (A and B K-major in shared memory, or A = Q from
        // registers: QREG), and O += P V over it (A = P from registers, B = V MN-major).
        auto issue_s = [&](int slot) {
            const u32 kbase = sK + slot * L::KV_BYTES;
            if constexpr (QREG) {
                fa_issue_s_rk<DT, D, BN>(s, qa, kbase);
            } else {
                fa_issue_s<DT, D, BM, BN, BN>(s, qwg, kbase);
            }
        };
        auto issue_pv = [&](int slot) { fa_issue_pv<DT, D, BN, BN / 16>(o, a, sV + slot * L::KV_BYTES); };
        auto softmax_tile = [&](int j) {  // mask (diagonal / tail tiles only), then softmax
            const int n0 = (j0 + j) * BN;
            if constexpr (BAND) {  // tiles the tail or either edge of the band crosses
                const int r0 = q0 + c * 64;  // this warpgroup's first row
                if ((n0 + BN > Nk) || (n0 + BN - 1 > r0 + lay.hi) || (n0 < r0 + 63 + lay.lo))
                    fa_mask_band<NS>(s, n0, Nk, row_a, t, lay.lo, lay.hi);
            } else {
                if ((n0 + BN > Nk) || (causal && (n0 + BN - 1 > q0 + c * 64 + offset)))
                    fa_mask<NS>(s, n0, Nk, row_a, t, causal, offset);
            }
            fa_softmax<NS>(s, m, l, alpha, scale_log2);
        };

        bool q_released = QREG_EARLY;  // EARLYQ: this warpgroup has arrived on emptyQ already
        if (ntiles > 0) {
            // Key tiles this warpgroup computes; past them it only keeps the protocol (below).
            int nt = ntiles;
            if (SKIP_IDLE && (q0 + c * 64 >= Nq || (ENDQ && q0 + c * 64 + 64 <= 0))) nt = 0;
            if (WG_DIAG && (causal || BAND)) {  // up to its last row's diagonal (0: no key)
                const int kv_end = min(Nk, q0 + c * 64 + 64 + (BAND ? lay.hi : offset));
                nt = min(nt, max(0, (kv_end + BN - 1) / BN - j0));
            }
            // EARLYQ: Q is released after this warpgroup's last S GEMM (tile nt - 1), or at
            // once if it computes none (its rows past Nq, or causal past its diagonal).
            if constexpr (EARLYQ) {
                if (!QREG && nt == 0) fa_mbar_arrive(emptyQ);
                q_released = true;
            }
            if constexpr (OVERLAP) {
                // Tile 0: S_0, softmax, P_0 (O is still zero: no rescale).
                auto first = [&]() {
                    const int s0 = it % ST;
                    fa_mbar_wait(fullK + 8 * s0, (it / ST) & 1);
                    sched_wait();
                    issue_s(s0);
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NS; ++i) fa_reg_fence(s[i]);
                    if (EARLYQ && !QREG && nt == 1) fa_mbar_arrive(emptyQ);
                    release(emptyK + 8 * s0);
                    softmax_tile(0);
                    fa_to_a<DT, NS>(s, a);
                };
                // Step j: S_j issued beside P_{j-1} V_{j-1}, the softmax of S_j under it.
                auto step = [&](int j) {
                    const int ic = it + j, ip = it + j - 1;
                    const int sj = ic % ST, sp = ip % ST;
                    fa_mbar_wait(fullK + 8 * sj, (ic / ST) & 1);
                    fa_mbar_wait(fullV + 8 * sp, (ip / ST) & 1);
                    sched_wait();
                    issue_s(sj);   // S_j              (group 1)
                    issue_pv(sp);  // O += P_{j-1} V_{j-1} (group 2)
                    sched_signal();
                    fa_wgmma_wait<1>();  // S_j done; P_{j-1} V_{j-1} may still run
#pragma unroll
                    for (int i = 0; i < NS; ++i) fa_reg_fence(s[i]);
                    if (EARLYQ && !QREG && j == nt - 1) fa_mbar_arrive(emptyQ);
                    release(emptyK + 8 * sj);
                    softmax_tile(j);  // under the P V GEMM
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
                    release(emptyV + 8 * sp);
                    fa_rescale<NO>(o, alpha);
                    fa_to_a<DT, NS>(s, a);
                };
                // The last P V, of tile nt - 1.
                auto last_pv = [&]() {
                    const int il = it + nt - 1;
                    const int sl = il % ST;
                    fa_mbar_wait(fullV + 8 * sl, (il / ST) & 1);
                    sched_wait();
                    issue_pv(sl);
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
                    release(emptyV + 8 * sl);
                };
                if (nt > 0) {
                    first();
                    for (int j = 1; j < nt; ++j) step(j);
                    last_pv();
                }
                if (SKIP_IDLE || WG_DIAG) {
                    // Tiles [nt, ntiles) this warpgroup does not compute (all of them when its
                    // rows lie past Nq, those past its diagonal when causal): no GEMM and no
                    // softmax, only the protocol the others rely on, in their order: each
                    // stage released after it filled (an early arrival would count towards
                    // the stage's previous round) and every scheduler turn taken. Step j's
                    // turn covers K_j and V_{j-1}; with nt > 0 the last P V took turn nt.
                    for (int j = nt; j <= ntiles; ++j) {
                        const int ic = it + j, ip = it + j - 1;
                        if (j < ntiles) fa_mbar_wait(fullK + 8 * (ic % ST), (ic / ST) & 1);
                        if (j > nt) fa_mbar_wait(fullV + 8 * (ip % ST), (ip / ST) & 1);
                        if (j > nt || j == 0) {
                            sched_wait();
                            sched_signal();
                        }
                        if (j < ntiles) release(emptyK + 8 * (ic % ST));
                        if (j > nt) release(emptyV + 8 * (ip % ST));
                    }
                }
            } else {
                for (int j = 0; j < ntiles; ++j) {
                    const int ic = it + j;
                    const int sj = ic % ST;
                    const u32 par = (ic / ST) & 1;
                    fa_mbar_wait(fullK + 8 * sj, par);
                    sched_wait();
                    issue_s(sj);
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NS; ++i) fa_reg_fence(s[i]);
                    release(emptyK + 8 * sj);
                    softmax_tile(j);
                    fa_rescale<NO>(o, alpha);
                    fa_to_a<DT, NS>(s, a);
#pragma unroll
                    for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
                    fa_mbar_wait(fullV + 8 * sj, par);
                    sched_wait();
                    issue_pv(sj);
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
                    release(emptyV + 8 * sj);
                }
            }
            it += ntiles;
        }
        if constexpr (PERSIST) {
            // Every S GEMM of this item is complete (and `slot` read): the producer may load
            // the next Q now (EARLYQ: done already, in the last step).
            if (!q_released) fa_mbar_arrive(emptyQ);
            // The previous item's O in the staging tile has been read by the threads' loads.
            fa_bar_sync(1 + NC + c, 128);
        }
        // ---------------- epilogue ----------------
        // O_i = diag(l)^-1 O_i; LSE_i = m_i + log l_i. O is staged in this warpgroup's rows
        // of the staging tile (persistent) or of the Q panels (dead since its last S GEMM
        // completed), in the same swizzled layout, then written with coalesced 16-byte
        // stores (O's rows lay.o_r elements apart); rows past Nq are not written.
        const FaHead hd = fa_head(lay, bh);
        u16* Ob = O + hd.b * lay.o_b + hd.h * lay.o_h;
        // Each row's denominator (quad-reduced) and LSE once, then SP panels at a time (all
        // but with FA_WS_PANELO): stage, then copy out.
        float inv[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float lt = fa_quad_sum(l[h]);
            inv[h] = lt > 0.f ? 1.f / lt : 0.f;
            const int row = q0 + c * 64 + warp * 16 + g + 8 * h;
            if (LSE != nullptr && t == 0 && row < Nq && (!ENDQ || row >= 0)) {
                LSE[static_cast<long long>(bh) * Nq + row] =
                    lt > 0.f ? (m[h] + __log2f(lt)) * 0.69314718055994531f : FA_NEG_INF;
            }
        }
#pragma unroll
        for (int p0 = 0; p0 < NP; p0 += SP) {
            if (p0 > 0) fa_bar_sync(1 + NC + c, 128);  // the previous panel has been read
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp * 16 + g + 8 * h;  // row within this warpgroup's 64
#pragma unroll
                for (int dn = 8 * p0; dn < 8 * (p0 + SP); ++dn) {
                    // 8-column group dn: staged panel dn / 8 - p0, 16-byte chunk
                    // (dn % 8) ^ (r % 8), 4 bytes per t.
                    const u32 pk = fa_pack<DT>(o[4 * dn + 2 * h] * inv[h],
                                               o[4 * dn + 2 * h + 1] * inv[h]);
                    const u32 addr = owg + ((dn >> 3) - p0) * (BM * 128) + r * 128 +
                                     (((dn & 7) ^ (r & 7)) << 4) + 4 * t;
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pk) : "memory");
                }
            }
            fa_bar_sync(1 + NC + c, 128);  // this warpgroup's O rows are staged
            constexpr int CPR = 8 * SP;    // 16-byte chunks per row in the staged panels
#pragma unroll
            for (int i = 0; i < 64 * CPR / 128; ++i) {
                const int idx = ctid + i * 128;
                const int r = idx / CPR;
                const int ch = idx % CPR;
                const int row = q0 + c * 64 + r;
                if (row < Nq && (!ENDQ || row >= 0)) {
                    uint4 val;
                    const u32 addr = owg + (ch >> 3) * (BM * 128) + r * 128 +
                                     (((ch & 7) ^ (r & 7)) << 4);
                    asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                                 : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                                 : "r"(addr)
                                 : "memory");
                    *reinterpret_cast<uint4*>(Ob + row * lay.o_r + (8 * p0 + ch) * 8) = val;
                }
            }
        }
    }
    if constexpr (SCHED) {
        if (c == 0) fa_bar_sync(1, 256);  // the last consumer's final arrive (see above)
    }
}
#endif  // FA_HAVE_WGMMA
