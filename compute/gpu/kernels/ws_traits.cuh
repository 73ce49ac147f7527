// The ws kernel's compile-time traits (flash_fwd_ws.cu): named booleans decoded from the
// kernel's MODE template argument, one bit per trait. The host (flash_variants.py) builds
// MODE from the same names; the bit values are those the variants were measured with, so
// the mangled kernel names, and the PTX, stay as they were. Variants whose traits were
// removed, with what each measured: FLASH_NOTES.md, "Removed variants".
#pragma once

#include "ws_pipeline.cuh"

enum : int {
    FA_WS_OVERLAP = 1,        // S_{j+1} issued before the softmax of tile j (intra-warpgroup)
    FA_WS_PINGPONG = 2,       // consumer warpgroups take turns at the tensor cores
    FA_WS_PERSIST = 4,        // one CTA per SM drawing work items from a ticket counter
    FA_WS_LPT = 8,            // causal items longest first, in sections of heads
    FA_WS_QREG = 256,         // Q's A fragments held in registers for the S GEMM
    FA_WS_PANELO = 4096,      // persistent: O staged one 64-column panel at a time
    FA_WS_EARLYQ = 131072,    // persistent: Q released after the item's last S GEMM
    FA_WS_ENDQ = 262144,      // causal query blocks end at Nq (the partial block is first)
    FA_WS_BAND = 524288,      // the layout's band (a sliding window) instead of `causal`
    FA_WS_ALL = FA_WS_OVERLAP | FA_WS_PINGPONG | FA_WS_PERSIST | FA_WS_LPT | FA_WS_QREG |
                FA_WS_PANELO | FA_WS_EARLYQ | FA_WS_ENDQ | FA_WS_BAND,
};

template <int D, int NC, int BN, int MODE>
struct FaWsTraits {
    static_assert((MODE & ~FA_WS_ALL) == 0, "a MODE bit that names no trait");
    static_assert(D == 64 || D == 128, "head dim");
    static_assert(BN == 64 || BN == 128 || BN == 176 || BN == 192,
                  "key tile (a multiple of 16 with a wrapper)");
    static_assert(NC == 2 || NC == 3, "consumer warpgroups");
    static constexpr bool OVERLAP = (MODE & FA_WS_OVERLAP) != 0;
    static constexpr bool SCHED = (MODE & FA_WS_PINGPONG) != 0;
    static constexpr bool PERSIST = (MODE & FA_WS_PERSIST) != 0;
    static constexpr bool LPT = (MODE & FA_WS_LPT) != 0;
    static constexpr bool QREG = (MODE & FA_WS_QREG) != 0;
    // Q's tile is dead once its fragments are in registers: released at the item's start.
    static constexpr bool EARLYQ = (MODE & FA_WS_EARLYQ) != 0;
    static constexpr bool QREG_EARLY = EARLYQ && QREG;
    static_assert(!EARLYQ || (PERSIST && OVERLAP),
                  "early Q release: the persistent grid with the intra-warpgroup overlap");
    static constexpr bool ENDQ = (MODE & FA_WS_ENDQ) != 0;
    // A band (FaFwdLayout lo, hi): each query block reads only the key tiles its rows' band
    // touches, and masks the tiles the band's edges cross. The LPT order and ENDQ are
    // causal's orderings; a band keeps the default order.
    static constexpr bool BAND = (MODE & FA_WS_BAND) != 0;
    static_assert(!BAND || (!LPT && !ENDQ), "a band takes the default work order");
    // Three consumers (d = 64): a warpgroup whose rows all lie past Nq skips its GEMMs, and
    // a causal warpgroup stops at its own last row's diagonal; with two (d = 128) the extra
    // branches cost registers and lost (FLASH_NOTES v9, v10).
    static constexpr bool SKIP_IDLE = NC == 3;
    static constexpr bool WG_DIAG = NC == 3;
    static constexpr int NP = D / 64;  // 64-column panels per row
    // Panels of O staged at a time: all, or one in a tile one panel wide (FA_WS_PANELO).
    static constexpr int SP = (MODE & FA_WS_PANELO) != 0 && PERSIST ? 1 : NP;
};

// Everything a part of the kernel knows at compile time: element type, shape, traits, the
// shared-memory layout and the accumulator sizes.
template <int DT_, int D_, int NC_, int BN_, int ST_, int MODE>
struct FaWsKernel : FaWsTraits<D_, NC_, BN_, MODE> {
    using T = FaWsTraits<D_, NC_, BN_, MODE>;
    static constexpr int DT = DT_, D = D_, NC = NC_, BN = BN_, ST = ST_;
    using L = FaSmem<D, NC, BN, ST, T::PERSIST ? T::SP : 0>;
    static constexpr int BM = L::BM;
    static constexpr int NS = BN / 2;      // S accumulator registers per thread
    static constexpr int NO = D / 2;       // O accumulator registers per thread
    static constexpr int NCT = NC * 128;  // consumer threads
};
