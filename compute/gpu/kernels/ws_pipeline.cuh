// The ws kernel's pipeline (flash_fwd_ws.cu): the tensor maps, mbarriers and TMA copies
// that feed the K and V rings, the named barriers and register split between the producer
// and consumer warpgroups, and the shared-memory layout.
#pragma once

#include "common.cuh"

// The driver's CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h is not on NVRTC's path).
struct __align__(64) FaTmap {
    unsigned long long opaque[16];
};

#if FA_HAVE_WGMMA
// ---- mbarrier and TMA (PTX ISA 8.0, sm_90) ----
__device__ __forceinline__ void fa_mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// The producer announces how many bytes the TMA copies will complete on this phase.
__device__ __forceinline__ void fa_mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void fa_mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Block until the phase with the given parity has completed (a fresh barrier is in phase 0,
// so waiting for parity 1 returns at once: the producer's first pass over the ring).
__device__ __forceinline__ void fa_mbar_wait(u32 bar, u32 parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "FA_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra FA_WAIT;\n"
        "}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// One box of a 4-D tensor map (coordinates innermost first: column, row, head, batch; the
// map carries the tensor's strides, compute/gpu/tma.py) into shared memory at dst;
// completion is counted in bytes on the mbarrier bar.
__device__ __forceinline__ void fa_tma_load(u32 dst, const FaTmap* map, int c0, int c1, int c2,
                                            int c3, u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
        : "memory");
}
__device__ __forceinline__ void fa_tma_prefetch(const FaTmap* map) {
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}
// Named barriers over `count` threads (id 0 is __syncthreads, never used after the split).
__device__ __forceinline__ void fa_bar_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
__device__ __forceinline__ void fa_bar_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}
template <int R>
__device__ __forceinline__ void fa_setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void fa_setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}


// One K or V tile (BN rows, NP panels of 64 columns) of K/V head hk of batch b into the
// ring stage at dst.
template <int NP, int BN>
__device__ __forceinline__ void fa_load_kv(u32 dst, const FaTmap* map, int row0, int hk, int b,
                                           u32 bar) {
#pragma unroll
    for (int p = 0; p < NP; ++p) fa_tma_load(dst + p * BN * 128, map, 64 * p, row0, hk, b, bar);
}
#endif  // FA_HAVE_WGMMA

// Register split between the roles (65536 registers per SM, one CTA per SM): FA3's values.
template <int NC>
struct FaRegs {
    static constexpr int PRODUCER = NC == 2 ? 24 : 32;
    static constexpr int CONSUMER = NC == 2 ? 240 : 160;
};

// Shared memory, from a 1024-byte aligned base: Q (BM rows), ST stages of K, ST of V (BN
// rows each, D / 64 panels of 128-byte rows), a separate O staging tile of OP panels when
// persistent (so the next tile's Q can land during this tile's epilogue; OP = 0: O is staged
// in Q's rows), then the mbarriers.
template <int D, int NC, int BN, int ST, int OP>
struct FaSmem {
    static constexpr u32 BM = NC * 64;
    static constexpr u32 Q_BYTES = BM * D * 2;
    static constexpr u32 KV_BYTES = BN * D * 2;
    static constexpr u32 K_OFF = Q_BYTES;
    static constexpr u32 V_OFF = K_OFF + ST * KV_BYTES;
    static constexpr u32 O_OFF = OP > 0 ? V_OFF + ST * KV_BYTES : 0;  // 0: O reuses Q's rows
    static constexpr u32 BAR_OFF = V_OFF + ST * KV_BYTES + OP * BM * 128;
    // barQ, emptyQ, fullK[ST], fullV[ST], emptyK[ST], emptyV[ST], the ticket slot, 16
    // spare bytes (the host's Config.smem_bytes counts the same)
    static constexpr u32 BYTES = BAR_OFF + 8 * (2 + 4 * ST) + 8 + 16;
};

// The shared-memory addresses of one CTA (from the 1024-byte aligned base, layout L).
struct FaWsAddrs {
    u32 sQ, sK, sV, sO, barQ, emptyQ, fullK, fullV, emptyK, emptyV, slot;
};
template <class L, int ST>
__device__ __forceinline__ FaWsAddrs fa_ws_addrs(u32 base) {
    FaWsAddrs a;
    a.sQ = base;
    a.sK = base + L::K_OFF;
    a.sV = base + L::V_OFF;
    a.sO = base + L::O_OFF;
    a.barQ = base + L::BAR_OFF;
    a.emptyQ = a.barQ + 8;
    a.fullK = a.emptyQ + 8;
    a.fullV = a.fullK + 8 * ST;
    a.emptyK = a.fullV + 8 * ST;
    a.emptyV = a.emptyK + 8 * ST;
    a.slot = a.emptyV + 8 * ST;  // persistent: the current item's ticket
    return a;
}
