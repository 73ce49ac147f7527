// The ws kernel's producer warpgroup (flash_fwd_ws.cu): one thread draws the work items and
// issues every TMA copy of Q and of the K and V rings, waiting for each stage to be free.
#pragma once

#include "flash_fwd_layout.cuh"
#include "ws_scheduler.cuh"
#include "ws_traits.cuh"

#if FA_HAVE_WGMMA
// Item k: Q lands on barQ phase k; persistent, the consumers learn the item from `slot`,
// written before that phase's arrive (release; their wait acquires), and a ticket past the
// end still completes the phase, with no bytes, to stop them.
template <class K>
__device__ __forceinline__ void fa_ws_producer(const FaWsAddrs& A, const FaTmap& tmQ,
                                               const FaTmap& tmK, const FaTmap& tmV, int tid,
                                               int first, int total, int* __restrict__ tickets,
                                               int num_qb, int BH, int causal, int section,
                                               int Nq, int Nk, const FaFwdLayout& lay) {
    constexpr int NC = K::NC, BN = K::BN, ST = K::ST, NP = K::NP, BM = K::BM;
    constexpr bool PERSIST = K::PERSIST, LPT = K::LPT, ENDQ = K::ENDQ, BAND = K::BAND;
    using L = typename K::L;
    const u32 sQ = A.sQ, sK = A.sK, sV = A.sV, barQ = A.barQ, emptyQ = A.emptyQ;
    const u32 fullK = A.fullK, fullV = A.fullV, emptyK = A.emptyK, emptyV = A.emptyV;
    const u32 slot = A.slot;
    fa_setmaxnreg_dec<FaRegs<NC>::PRODUCER>();
    if (tid == 0) {
        fa_tma_prefetch(&tmQ);
        fa_tma_prefetch(&tmK);
        fa_tma_prefetch(&tmV);
        int it = 0;  // K/V tiles issued so far (ring slot it % ST, round it / ST)
        for (int k = 0; PERSIST || k == 0; ++k) {
            int tt = first;
            if constexpr (PERSIST) tt = atomicAdd(tickets, 1);
            // Q's buffer (and `slot`) are free once every consumer is done with item k-1.
            fa_mbar_wait(emptyQ, (k & 1) ^ 1);
            if constexpr (PERSIST) {
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(slot), "r"(tt) : "memory");
                if (tt >= total) {
                    fa_mbar_arrive(barQ);
                    break;
                }
            }
            int qb, bh;
            fa_tile<LPT>(tt, num_qb, BH, causal, section, qb, bh);
            const int q0 = fa_q0<ENDQ, BM>(qb, num_qb, Nq, causal);
            int j0 = 0;  // the first key tile (a band's; else 0)
            const int ntiles = BAND ? fa_band_tiles<BM, BN>(q0, Nk, lay, j0)
                                    : fa_kv_tiles<BM, BN>(q0, Nq, Nk, causal);
            const FaHead hd = fa_head(lay, bh);  // GQA: K/V head hd.hk
            fa_mbar_expect_tx(barQ, L::Q_BYTES);  // also when no key is seen: one protocol
#pragma unroll
            for (int p = 0; p < NP; ++p)
                fa_tma_load(sQ + p * BM * 128, &tmQ, 64 * p, q0, hd.h, hd.b, barQ);
            for (int j = 0; j < ntiles; ++j, ++it) {
                const int s = it % ST;
                const u32 round_parity = ((it / ST) & 1) ^ 1;
                fa_mbar_wait(emptyK + 8 * s, round_parity);
                fa_mbar_expect_tx(fullK + 8 * s, L::KV_BYTES);
                const int key0 = (j0 + j) * BN;
                fa_load_kv<NP, BN>(sK + s * L::KV_BYTES, &tmK, key0, hd.hk, hd.b, fullK + 8 * s);
                fa_mbar_wait(emptyV + 8 * s, round_parity);
                fa_mbar_expect_tx(fullV + 8 * s, L::KV_BYTES);
                fa_load_kv<NP, BN>(sV + s * L::KV_BYTES, &tmV, key0, hd.hk, hd.b, fullV + 8 * s);
            }
        }
    }
}
#endif  // FA_HAVE_WGMMA
