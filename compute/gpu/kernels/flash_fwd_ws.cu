// FlashAttention forward on Hopper with TMA and warp specialisation (sm_90a only).
//
// Same contract as flash_fwd_wgmma.cu: Q (B, H, Nq, D), K/V (B, H, Nk, D), O like Q, contiguous,
// fp16 (DT = 0) or bf16 bits (DT = 1), fp32 accumulation; LSE (B, H, Nq) fp32 natural log,
// optional (nullptr), -inf for rows that see no key; bottom-right causal alignment.
//
// What is new against flash_fwd_wgmma.cu (FlashAttention-3's techniques, written afresh):
//   * TMA: Q, K and V tiles arrive through the bulk tensor copy engine
//     (cp.async.bulk.tensor.3d), described by three tensor maps that the host encodes with
//     cuTensorMapEncodeTiled (compute/gpu/tma.py) and passes by value as __grid_constant__
//     parameters. Each map is 3-D (D, N, batch*heads) with a box of 64 columns x ROWS x 1 and
//     the 128-byte swizzle, so one box is exactly one 64-column panel of the layout wgmma
//     reads (16-byte chunk c of row r at c ^ (r & 7), panels 1024-byte aligned), and rows
//     past N of a head are zero-filled by the copy engine instead of by per-thread guards.
//   * Warp specialisation: warpgroup 0 is the producer. One of its threads issues every TMA
//     copy into a ring of ST stages of K and ST stages of V; each stage has a "full" mbarrier
//     (the TMA completes its byte count on it) and an "empty" mbarrier (every consumer thread
//     arrives once it no longer reads the stage). K and V have separate barriers so that S_j
//     may start while V_j is still in flight and K_{j+1} may land while P_j V_j runs.
//   * setmaxnreg: the producer warpgroup drops to PRODUCER_REGS registers and the NC consumer
//     warpgroups (64 query rows each, BM = 64 NC) rise to CONSUMER_REGS, so S, P and O stay in
//     registers with 128-key tiles at d = 128.
//   * Intra-warpgroup overlap (MODE bit 0): iteration j issues S_j = Q K_j^T and then
//     O += P_{j-1} V_{j-1} back to back, waits for S_j only (wgmma.wait_group 1) and runs the
//     softmax of S_j while P_{j-1} V_{j-1} is still on the tensor cores.
//   * Scheduler barrier (MODE bit 1, FA3's inter-warpgroup ping-pong): named barriers make
//     the consumer warpgroups take turns issuing their GEMMs, so one warpgroup's softmax
//     runs while another's GEMMs do.
//   * Work order and epilogue switches (FLASH_NOTES.md v6): longest-processing-time-first
//     order of causal work items (MODE bit 3), a persistent grid drawing items from a global
//     ticket counter (bit 2), and O written by TMA store (bit 4); the tail split of the last
//     wave (bit 5, v7), K/V multicast in clusters of two (bit 6, flash_fwd_ws_mc) and a lazy
//     running max (bit 7), v8; Q's A fragments in registers (bit 8), one K/V release
//     per warpgroup (bit 9) and a narrow last key tile (bit 10), v9: all measured, off by
//     default but the persistent grid and LPT (see flash.default_config). Bit 11
//     (`:padrows`) only measures what skipping padded warpgroups bought; bit 12 (`:panelo`,
//     v10) stages O one panel at a time when persistent; bit 13 (`:wgalltiles`) measures
//     what stopping each warpgroup at its own diagonal bought; bits 14-16 narrow the first
//     key tile (v11, off); bit 17 (`:earlyq`, v12) releases Q after the last S GEMM (with
//     bit 8, v13: once Q's fragments are in registers); bit 18 (`:endq`, v13) ends causal
//     query blocks at Nq; bit 19 (`:trace`) records each item's clocks; bit 20
//     (`:qprefetch`, v13, off) prefetches the next items' Q into L2; bit 21 (`:sktail`,
//     v14, off, not yet run on a GPU) cuts the last wave into one equal slot per CTA; bit 22
//     (`:uniform`, v14, off, not yet run on a GPU) shows the compiler that the ticket and
//     the ring counter are warp-uniform (the persistent d = 64 loop's wgmma descriptors
//     then stay on the uniform datapath: lab/sass_loop.py).
// No block-wide barrier is executed after the roles split; the O epilogue goes through each
// consumer warpgroup's own (dead) rows of the Q tile (or a separate tile when persistent)
// and plain 16-byte stores, or a TMA store.
//
// Measured on the H200 (FLASH_NOTES.md v6; N >= 4096, batch*N = 16384, heads*d = 2048):
// d=128 (NC 2, MODE 3 or 11) 569-693 TFLOP/s, d=64 (NC 3, MODE 3 or 11) 431-560: 1.54-2.19x
// SDPA FA2, 0.97-1.19x SDPA cuDNN (>= 1.0x in 18 of 24 cases). Overlap +5-14%, three
// consumer warpgroups at d=64 +10-16%, scheduler barrier +0-7%, the LPT order for causal
// N = 4096-8192 about +2-5% (a loss at 16384); three stages, the persistent grid (static
// in v5, dynamic in v6) and the TMA store bought nothing. v8 (timed at the power-capped
// clock): 176-key tiles at d=128 +3% (the default from N = 4096 on), multicast -9%, lazy
// max -4%; 16 of 24 cases >= 1.0x cuDNN, the d=128 non-causal ones at 0.93-0.97x. v9 (each
// slice timed after its own path ran alone): 192-key tiles -3% to +6% between calls, Q in
// registers -4% to +2%, one release per warpgroup +-2%, a narrow last tile -1 to -4%, all
// off; at d=64 the warpgroups of the last query block whose rows all lie past Nq skip their
// GEMMs (+1.5-5% at N = 4096). v10: O staged one panel at a time lets the persistent grid
// take 176-key tiles at d = 128, the causal default at N = 4096-8192 (+2-7%); at d = 64 each
// causal warpgroup stops at its own diagonal (+0.9-3.2%); O stored straight from registers
// -4 to -5%. 20 of 24 cases >= 1.0x cuDNN (all of N = 8192-16384, 1.01-1.11x; misses at
// N = 4096, 0.97-0.99x), 1.45-1.93x FA2. v11: the first key tile narrow (S only, or S and
// P V) -3% to +2%, off; at N = 4096 the gap to cuDNN is the padding of 176-key tiles
// (Nsight Compute); the v11 record read 16 of 24 on a machine where cuDNN ran 10-12%
// faster than in v10's. v12: on the persistent grid each consumer warpgroup releases Q after
// its last S GEMM of an item (bit 17), so the next item's Q and first K/V tiles load under
// this item's tail; with 128-key tiles (no padding at N = 4096) that is the d = 128 default
// without a mask at N = 4096-8191 (+2.6-6.4% over the 176-key grid), and it rides on the
// causal persistent default (mean +1.5%); 19 of 24 cases >= 1.0x cuDNN in the v12 record.
// v13: a clock trace per item (bit 19) put 87-97% of the SMs' time in item bodies; causal
// at N = 4096-8191 now runs, at d = 64, the persistent grid with early Q and blocks ending at
// Nq (bit 18: the partial block is the one that sees one key tile, not all of them; +1.5% to
// +4.9%) and, at d = 128, 128-key persistent tiles with Q in registers released at the
// item's start (+2.8% to +5.7% in seven of eight pairs); Q prefetched into L2 lost (-3.4% to
// +1.4%); LPT sections of equal size (a host change, flash.lpt_section) cut the SMs'
// uneven finish from 5% to 2.5% at d = 128 causal (+2-7%), and d = 128 causal at N = 4096
// takes the LPT order again; 21 of 24 cases >= 1.0x cuDNN, every causal one among them.
//
// Under a plain sm_90 compile (no 'a' features) the kernel body is empty and traps, so the
// file still compiles with `nvcc -arch=sm_90 --ptx`; flash.py compiles it with -arch=sm_90a.
// compile-check-arch: sm_90a

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
// One box of a 3-D tensor map (coordinates innermost first: column, row, batch*head) into
// shared memory at dst; completion is counted in bytes on the mbarrier bar.
__device__ __forceinline__ void fa_tma_load(u32 dst, const FaTmap* map, int c0, int c1, int c2,
                                            u32 bar) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
// One box from shared memory at src to a 3-D tensor map's coordinates (rows past the
// tensor's extent are not written), tracked by the issuing thread's bulk group.
__device__ __forceinline__ void fa_tma_store(const FaTmap* map, u32 src, int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
            reinterpret_cast<u64>(map)),
        "r"(src), "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}
__device__ __forceinline__ void fa_bulk_commit() {
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Wait until this thread's committed bulk stores have read their shared-memory source.
__device__ __forceinline__ void fa_bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
// The same box, multicast: it lands at offset dst of the shared memory of every CTA of the
// cluster named in cta_mask, and completes its bytes on the mbarrier at offset bar of each.
__device__ __forceinline__ void fa_tma_load_mc(u32 dst, const FaTmap* map, int c0, int c1, int c2,
                                               u32 bar, unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
        "l"(reinterpret_cast<u64>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar), "h"(cta_mask)
        : "memory");
}
// Arrive on the mbarrier at offset bar of cluster CTA `cta` (release at cluster scope).
__device__ __forceinline__ void fa_mbar_arrive_cta(u32 bar, u32 cta) {
    asm volatile(
        "{\n"
        ".reg .b32 remote;\n"
        "mapa.shared::cluster.u32 remote, %0, %1;\n"
        "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
        "}\n" ::"r"(bar),
        "r"(cta)
        : "memory");
}
// Every thread of every CTA of the cluster (mbarrier initialisation visible cluster-wide).
__device__ __forceinline__ void fa_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ u32 fa_cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Q's box of a 3-D tensor map into L2 only (no shared memory, no barrier): a hint that the
// item this ticket names will soon load it (MODE bit 20).
__device__ __forceinline__ void fa_tma_prefetch_l2(const FaTmap* map, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(
                     reinterpret_cast<u64>(map)),
                 "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
// Item trace (MODE bit 19, measurement only): the SM's cycle counter and the SM's index.
__device__ __forceinline__ u64 fa_clock() {
    u64 c;
    asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(c)::"memory");
    return c;
}
__device__ __forceinline__ u32 fa_smid() {
    u32 r;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(r));
    return r;
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

#endif  // FA_HAVE_WGMMA

#if FA_HAVE_WGMMA
// One K or V tile (BN rows, NP panels of 64 columns) into the ring stage at dst; with MCAST
// this CTA loads its half of the rows (rank 0 the first BN / 2) into both CTAs of the
// cluster (the tensor map's box is then BN / 2 rows).
template <bool MCAST, int NP, int BN>
__device__ __forceinline__ void fa_load_kv(u32 dst, const FaTmap* map, int row0, int bh, u32 bar,
                                           u32 rank) {
#pragma unroll
    for (int p = 0; p < NP; ++p) {
        if constexpr (MCAST) {
            const u32 half = rank * (BN / 2);
            fa_tma_load_mc(dst + p * BN * 128 + half * 128, map, 64 * p, row0 + half, bh, bar,
                           0x3);
        } else {
            fa_tma_load(dst + p * BN * 128, map, 64 * p, row0, bh, bar);
        }
    }
}
#endif

// A compile-time width as a type (a generic lambda's argument; NVRTC has no <type_traits>).
template <int W>
struct FaInt {
    static constexpr int value = W;
};

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
    // barQ, emptyQ, fullK[ST], fullV[ST], emptyK[ST], emptyV[ST], the ticket slot, then
    // (tail split) one word per consumer warpgroup for its combine flag
    static constexpr u32 BYTES = BAR_OFF + 8 * (2 + 4 * ST) + 8 + 16;
};

// Work item t of num_qb * BH. Default order: consecutive items are query blocks of one head
// (its K and V stay in L2 while they run), heaviest causal block first. LPT order (MODE bit 3,
// causal only; full attention keeps the default, its items are equal): longest processing
// time first over heads in sections of `section` heads (as many as share L2, chosen on the
// host): within a section every head's heaviest query block, then every head's next, ...,
// so the lightest blocks of the section come last and fill the tail of the schedule.
template <bool LPT>
__device__ __forceinline__ void fa_tile(int t, int num_qb, int BH, int causal, int section,
                                        int& qb, int& bh) {
    if (LPT && causal) {
        const int per = section * num_qb;  // items in a full section
        const int h0 = (t / per) * section;
        const int hs = min(section, BH - h0);  // the last section may hold fewer heads
        const int r = t - (h0 / section) * per;
        qb = num_qb - 1 - r / hs;
        bh = h0 + r % hs;
    } else {
        bh = t / num_qb;
        qb = num_qb - 1 - (t - bh * num_qb);
    }
}

// The first row of query block qb: qb BM, or (MODE bit 18, causal) qb BM - (num_qb BM - Nq),
// so the blocks end at Nq and the partial block is the first, whose rows see the fewest keys,
// instead of the last, which sees them all (v13). Rows before 0 are never stored.
template <bool ENDQ, int BM>
__device__ __forceinline__ int fa_q0(int qb, int num_qb, int Nq, int causal) {
    return ENDQ && causal ? qb * BM - (num_qb * BM - Nq) : qb * BM;
}

// Key tiles a query block needs: all of them, or with causal masking up to its last row's
// diagonal (bottom-right aligned: row r sees keys c <= r + Nk - Nq); 0 if it sees none.
template <int BM, int BN>
__device__ __forceinline__ int fa_kv_tiles(int q0, int Nq, int Nk, int causal) {
    const int kv_end = causal ? min(Nk, q0 + BM + Nk - Nq) : Nk;
    return kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
}

// Narrow first tile (MODE bit 14, v11): a block's keys [0, kv_end) are tiled so that the last
// tile ends at kv_end and the first holds the remainder, BN - sh keys, where
// sh = T BN - kv_end (T = fa_kv_tiles); this returns sh. Tile j >= 1 starts at key j BN - sh,
// tile 0 at key 0 with its keys from BN - sh on masked (they belong to tile 1), so tile 0's S
// GEMM need only be as wide as BN - sh, and no later tile holds a key past kv_end. (The host
// launches it without a mask only, where every item has the same remainder.)
template <int BM, int BN>
__device__ __forceinline__ int fa_first_shift(int q0, int Nq, int Nk, int causal) {
    const int kv_end = causal ? min(Nk, q0 + BM + Nk - Nq) : Nk;
    return kv_end > 0 ? (kv_end + BN - 1) / BN * BN - kv_end : 0;
}
// The first key of tile j: j BN, or with the narrow first tile (NF) j BN - sh from tile 1 on.
template <bool NF, int BN>
__device__ __forceinline__ int fa_tile_key(int j, int sh) {
    return NF && j > 0 ? j * BN - sh : j * BN;
}

// Tail split (MODE bit 5, FLASH_NOTES.md v7): tickets [0, split_from) are whole items; the
// last total - split_from items are each cut into nsplit pieces along the keys (piece p of
// T key tiles: tiles [p T / nsplit, (p + 1) T / nsplit), possibly none), tickets split_from +
// nsplit * i + p, so the pieces of one item are drawn one after another by different SMs.
// Without the split (or for an unsplit ticket) si = -1 and the range is [0, T).
//
// Stream-K tail (MODE bit 21, v14; full attention, persistent): the R = total - split_from
// items of the last, partial wave are one run of R T key tiles (every item has T), cut into
// S = nsplit slots of nearly equal length, slot s holding tiles [b_s, b_s+1), b_s = s R T / S,
// so every SM's share of the whole launch differs by at most one tile. A slot shorter than
// an item (R < S) crosses at most one item boundary, so it is at most two pieces: the part
// of the item where it starts (virtual ticket split_from + 2 s) and, if it runs on, the first
// tiles of the next item (split_from + 2 s + 1). The producer draws slot s from the counter
// and hands both pieces to its own consumers, so the slot's length is one SM's work. A
// piece's partial goes to workspace slot 2 s + p (`piece`); si is its item's index in the
// tail.
// 32-bit arithmetic (the host keeps slots R T below 2^31): a 64-bit division is a call,
// whose results the compiler no longer knows to be warp-uniform.
__device__ __forceinline__ int fa_sk_bound(int s, int rt, int slots) {
    return s * rt / slots;  // b_s, the first tail tile of slot s
}
// The slot that holds tail tile x: the last s with b_s <= x.
__device__ __forceinline__ int fa_sk_slot(int x, int rt, int slots) {
    return ((x + 1) * slots - 1) / rt;
}
// Whether slot s runs past the end of the item it starts in (then it has a second piece).
__device__ __forceinline__ bool fa_sk_second(int s, int rt, int slots, int T) {
    return fa_sk_bound(s + 1, rt, slots) > (fa_sk_bound(s, rt, slots) / T + 1) * T;
}

template <bool LPT, bool SPLIT, bool SK, bool ENDQ, int BM, int BN>
__device__ __forceinline__ void fa_work(int tt, int num_qb, int BH, int causal, int section,
                                        int split_from, int nsplit, int Nq, int Nk, int& qb,
                                        int& bh, int& j0, int& j1, int& si, int& piece) {
    int item = tt;
    si = -1;
    piece = 0;
    if (SK && tt >= split_from) {
        const int T = fa_kv_tiles<BM, BN>(0, Nq, Nk, 0);
        const int rt = (num_qb * BH - split_from) * T;
        const int v = tt - split_from;
        const int s = v >> 1;
        const int b0 = fa_sk_bound(s, rt, nsplit);
        const int b1 = fa_sk_bound(s + 1, rt, nsplit);
        const int i0 = b0 / T;
        piece = v;
        if ((v & 1) == 0) {
            si = i0;
            j0 = b0 - i0 * T;
            j1 = min(b1, (i0 + 1) * T) - i0 * T;
        } else {
            si = i0 + 1;
            j0 = 0;
            j1 = b1 - (i0 + 1) * T;
        }
        fa_tile<LPT>(split_from + si, num_qb, BH, causal, section, qb, bh);
        return;
    }
    if (SPLIT && !SK && tt >= split_from) {
        si = (tt - split_from) / nsplit;
        piece = tt - split_from - si * nsplit;
        item = split_from + si;
    }
    fa_tile<LPT>(item, num_qb, BH, causal, section, qb, bh);
    const int nt = fa_kv_tiles<BM, BN>(fa_q0<ENDQ, BM>(qb, num_qb, Nq, causal), Nq, Nk, causal);
    j0 = si < 0 ? 0 : piece * nt / nsplit;
    j1 = si < 0 ? nt : (piece + 1) * nt / nsplit;
}

// MODE bit 0: intra-warpgroup overlap; bit 1: scheduler barrier; bit 2: persistent (gridDim.x
// CTAs, one per SM; the producer draws each next work item from a global ticket counter
// with atomicAdd, so an SM that finishes early takes the next item at once, and hands it to
// the consumers through shared memory; K/V rings and mbarrier phases run on across items,
// so the next item's loads overlap this one's tail); bit 3: LPT item order (fa_tile);
// bit 4: O leaves through a TMA store of the staged tile instead of per-thread stores;
// bit 5: tail split (fa_work): a piece of a split item writes its unnormalised fp32 O and
// its (m, l) per consumer thread into `ws`, and the warpgroup that finishes last (a counter
// per item and warpgroup, `tickets[1 + NC si + c]`, zeroed by the host) combines them and
// writes O and LSE as usual. Bit 6: K/V multicast across a cluster of two CTAs (see `rank`);
// bit 7: lazy running max (fa_softmax_lazy). Bit 8: Q's A fragments in registers for the S
// GEMM (fa_issue_s_rk); bit 9: one empty-barrier arrival per consumer warpgroup; bit 10: the
// last key tile's GEMMs only as wide as the keys left before Nk; bit 11: padded warpgroups
// compute (v9; without it a warpgroup whose rows all lie past Nq skips its GEMMs); bit 12:
// persistent, O staged one 64-column panel at a time in a tile one panel wide (v10); bit 13:
// causal, three consumers: every warpgroup computes all of its block's key tiles (v10;
// without it each stops at its own last row's diagonal); bit 14: the first key tile holds
// the remainder of the keys (fa_first_shift) and its S GEMM is only 64 keys wide, or 128
// with bit 15; the host sets them only where every item's remainder fits; bit 16: its P V
// GEMM as narrow, in a peeled step 1 (v11); bit 17: persistent, Q released after the
// item's last S GEMM instead of its last P V (v12); bit 18: causal query blocks aligned to
// end at Nq (fa_q0, v13); bit 19: the item trace (TRACE, measurement only); bit 20:
// persistent, the Q of the item one grid ahead prefetched into L2 (QPREF, v13); bit 21:
// persistent, full attention, the stream-K tail (SK, fa_work; v14); bit 22: the ticket and
// ring counter shuffled from lane 0 at each item's start (UNIFORM, v14; implied by a split).
// 64-bit words per item and consumer warpgroup that the item trace (MODE bit 19) writes.
#define FA_TRACE_WORDS 8

template <int DT, int D, int NC, int BN, int ST, int MODE>
__device__ __forceinline__ void fa_ws_body(const FaTmap& tmQ, const FaTmap& tmK,
                                           const FaTmap& tmV, const FaTmap& tmO,
                                           u16* __restrict__ O, float* __restrict__ LSE, int Nq,
                                           int Nk, float scale_log2, int causal, int num_qb,
                                           int BH, int* __restrict__ tickets, int section,
                                           float* __restrict__ ws, int split_from, int nsplit) {
#if FA_HAVE_WGMMA
    static_assert(D == 64 || D == 128, "head dim");
    static_assert(BN == 64 || BN == 128 || BN == 176 || BN == 192,
                  "key tile (a multiple of 16 with a wrapper)");
    static_assert(NC == 2 || NC == 3, "consumer warpgroups");
    constexpr bool OVERLAP = (MODE & 1) != 0;
    constexpr bool SCHED = (MODE & 2) != 0;
    constexpr bool PERSIST = (MODE & 4) != 0;
    constexpr bool LPT = (MODE & 8) != 0;
    constexpr bool TMA_STORE = (MODE & 16) != 0;
    // The tail split (bit 5, v7) or the stream-K tail (bit 21, v14; fa_work): both publish a
    // piece's partial and let the last piece's warpgroup combine.
    constexpr bool SK = (MODE & 2097152) != 0;
    constexpr bool SPLIT = (MODE & 32) != 0 || SK;
    static_assert(!SK || ((MODE & 32) == 0 && (MODE & 4) != 0),
                  "the stream-K tail: the persistent grid, not with the tail split");
    constexpr bool MCAST = (MODE & 64) != 0;
    constexpr bool LAZY = (MODE & 128) != 0;  // fa_softmax_lazy: O rescaled only when m moves
    constexpr bool QREG = (MODE & 256) != 0;  // Q's A fragments in registers (fa_issue_s_rk)
    constexpr bool WGREL = (MODE & 512) != 0;  // one K/V release per warpgroup, not per thread
    // the last key tile's GEMMs 64 or 128 keys wide when the keys left before Nk fit, in a
    // final step peeled out of the pipelined loop (v9)
    // (not with PERSIST or SPLIT: ptxas runs out of registers for the wgmma pipeline there)
    constexpr bool NARROW = (MODE & 1024) != 0 && !QREG && !PERSIST && !SPLIT && BN > 64;
    // A warpgroup whose rows all lie past Nq only keeps the pipeline's protocol (v9). With
    // three consumers (BM = 192, d = 64) a power-of-two N leaves 64 or 128 such rows in the
    // last block (at N = 4096 causal, 6% of the work); with two (d = 128) only an N_q tail
    // does, and there the extra branch costs registers (serialised wgmmas with :narrowtail),
    // so it is off. MODE bit 11 (measurement only) computes the padded rows as before.
    constexpr bool SKIP_IDLE = NC == 3 && !NARROW && (MODE & 2048) == 0;
    // Causal (v10): a warpgroup stops computing at its own last row's diagonal instead of the
    // block's and only keeps the protocol for the block's later key tiles (192-row blocks
    // and 128-key tiles at d = 64: 1 and 0.5 tiles of the first two warpgroups' work per
    // block; +2% at N = 4096). With two consumers (d = 128) it cost 4-7% (registers, as
    // SKIP_IDLE's branch), so it is off there. MODE bit 13 (`:wgalltiles`, measurement
    // only) computes them as before.
    constexpr bool WG_DIAG = NC == 3 && !NARROW && (MODE & 8192) == 0;
    // The first key tile narrow (v11): the last tile ends at the block's last key and the
    // first takes the remainder, so the padding of a key count that BN does not divide
    // becomes a narrower first S GEMM, FW keys wide. The first step is outside the pipelined
    // loop already, so no step is peeled (v9's narrow last tile peeled one and lost to the
    // larger code). FW is fixed at compile time: the host launches this only where every
    // item's remainder fits in FW (full attention, one N_k); chosen at run time per item
    // (causal items differ) it cost 20% (v11, call 1), and with three consumers (d = 64) or
    // on the persistent grid ptxas serialises every wgmma for want of registers (C7511).
    constexpr bool NFIRST = (MODE & 16384) != 0;
    constexpr int FW = !NFIRST ? BN : ((MODE & 32768) != 0 ? 128 : 64);
    static_assert(!NFIRST || (NC == 2 && FW < BN && !PERSIST && !QREG && !SPLIT && !MCAST &&
                              !NARROW),
                  "narrow first tile: two consumers on the grid, S from shared memory");
    // ... and its P V GEMM FW keys wide too (MODE bit 16, v11): step 1, where it runs, is
    // peeled out of the loop (one more copy of a step, not v9's three).
    constexpr bool NFPV = NFIRST && (MODE & 65536) != 0;
    // Persistent (MODE bit 17, v12): each consumer warpgroup releases Q as soon as its last
    // S GEMM of the item has completed, not after the item's last P V, so the producer loads
    // the next item's Q, and its first K and V into the stages this item frees, under this
    // item's last softmax, P V and epilogue (O is staged in its own tile).
    constexpr bool EARLYQ = (MODE & 131072) != 0;
    // With Q's fragments in registers (QREG, v13) Q's tile is dead once they are loaded, at
    // the item's start, so each warpgroup releases it there instead.
    constexpr bool QREG_EARLY = EARLYQ && QREG;
    static_assert(!EARLYQ || (PERSIST && OVERLAP && !NARROW),
                  "early Q release: the persistent grid with the intra-warpgroup overlap");
    // Query blocks end-aligned when causal (MODE bit 18, v13; fa_q0): the partial block
    // is the first. Rows before 0 are masked like rows that see no key and never stored; a
    // TMA store would write them, so not with bit 4.
    constexpr bool ENDQ = (MODE & 262144) != 0;
    static_assert(!(ENDQ && TMA_STORE), "end-aligned blocks store O with guarded stores");
    // Item trace (MODE bit 19, measurement only, v13): thread 0 of each consumer warpgroup
    // writes FA_TRACE_WORDS 64-bit words per item into `ws` (as u64, at (ticket NC + c) *
    // FA_TRACE_WORDS): the SM, its clock before the wait for Q, after it, after the first S
    // GEMM, after the last P V, after the epilogue, and the key tiles it computed.
    constexpr bool TRACE = (MODE & 524288) != 0;
    static_assert(!(TRACE && SPLIT), "the trace indexes whole items");
    // Persistent (MODE bit 20, v13): on drawing ticket t, the producer prefetches into L2
    // the Q of ticket t + gridDim.x, which some SM draws about one item later, so the Q load
    // that an item waits for at its start (3.5-5.8% of the SMs' time at N = 4096, causal;
    // lab/item_trace.py) reads L2, not HBM.
    constexpr bool QPREF = (MODE & 1048576) != 0;
    // The item's ticket and the K/V ring counter shuffled from lane 0 at each item's start
    // (MODE bit 22, v14; always with a split). Both are the same in every lane, but the
    // compiler cannot prove it for a ticket read from shared memory or a counter carried
    // across items, and then computes the pipelined loop's stage addresses and wgmma
    // descriptors per thread and moves them to uniform registers (R2UR) at every key tile:
    // lab/sass_loop.py counts 32 R2UR and 4-5 uniform-datapath instructions per tile in the
    // persistent d = 64 loop against 9 and 74 on the grid, 48 and 1-2 with the tail split.
    constexpr bool UNIFORM = (MODE & 4194304) != 0 || SPLIT;
    static_assert(!QPREF || (PERSIST && !SPLIT), "Q prefetch: the persistent grid, whole items");
    constexpr int NP = D / 64;  // 64-column panels per row
    // Panels of O staged at a time: all of them, or (MODE bit 12, persistent) one, in a
    // staging tile one panel wide, so 176-key tiles fit beside it at d = 128 (v10).
    constexpr int SP = (MODE & 4096) != 0 && PERSIST ? 1 : NP;
    static_assert(!(SP < NP && TMA_STORE), "the TMA store reads every panel staged at once");
    static_assert(!(MCAST && (PERSIST || SPLIT)), "multicast pairs two grid CTAs of one head");
    using L = FaSmem<D, NC, BN, ST, PERSIST ? SP : 0>;
    constexpr int BM = L::BM;
    constexpr int NS = BN / 2;  // S accumulator registers per thread
    constexpr int NO = D / 2;   // O accumulator registers per thread
    constexpr int NCT = NC * 128;  // consumer threads

    extern __shared__ __align__(128) unsigned char fa_smem[];
    const u32 base = (fa_smem_addr(fa_smem) + 1023u) & ~1023u;
    const u32 sQ = base;
    const u32 sK = base + L::K_OFF;
    const u32 sV = base + L::V_OFF;
    const u32 sO = base + L::O_OFF;
    const u32 barQ = base + L::BAR_OFF;
    const u32 emptyQ = barQ + 8;
    const u32 fullK = emptyQ + 8;
    const u32 fullV = fullK + 8 * ST;
    const u32 emptyK = fullV + 8 * ST;
    const u32 emptyV = emptyK + 8 * ST;
    const u32 slot = emptyV + 8 * ST;  // persistent: the current item's ticket
    const u32 flags = slot + 8;        // tail split: each warpgroup's combine flag

    const int tid = threadIdx.x;
    const int wg = tid >> 7;  // 0: producer, 1..NC: consumers
    // Tickets: whole items, plus nsplit - 1 more per split item; stream-K, two virtual
    // tickets per slot (the producer draws slots from the counter: see below).
    const int total = SK      ? split_from + 2 * nsplit
                      : SPLIT ? split_from + (num_qb * BH - split_from) * nsplit
                              : num_qb * BH;
    // The grid's item (ignored when persistent): blocks are dispatched in linear order (a
    // 1-D grid of `total` tickets with the tail split).
    const int first = blockIdx.y * num_qb + blockIdx.x;
    // Multicast (MODE bit 6): the cluster's two CTAs are query blocks 2i and 2i + 1 of one
    // head, which read the same K and V tiles; each producer loads half of every tile's
    // rows into both CTAs, and a stage is free once both CTAs' consumers are done with it.
    const u32 rank = MCAST ? fa_cluster_rank() : 0;
    // MCAST: one arrival per warpgroup and CTA; WGREL: one per warpgroup
    constexpr u32 EMPTY_COUNT = MCAST ? 2 * NC : (WGREL ? NC : NCT);

    if (tid == 0) {
        fa_mbar_init(barQ, 1);
        fa_mbar_init(emptyQ, NCT);
        for (int s = 0; s < ST; ++s) {
            fa_mbar_init(fullK + 8 * s, 1);
            fa_mbar_init(fullV + 8 * s, 1);
            fa_mbar_init(emptyK + 8 * s, EMPTY_COUNT);
            fa_mbar_init(emptyV + 8 * s, EMPTY_COUNT);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (MCAST) {
        fa_cluster_sync();  // both CTAs' barriers exist before either loads into or arrives on them
    } else {
        __syncthreads();  // the last block-wide barrier: roles split below
    }

    if (wg == 0) {
        // ---------------- producer ----------------
        fa_setmaxnreg_dec<FaRegs<NC>::PRODUCER>();
        if (tid == 0) {
            fa_tma_prefetch(&tmQ);
            fa_tma_prefetch(&tmK);
            fa_tma_prefetch(&tmV);
            int it = 0;  // K/V tiles issued so far (ring slot it % ST, round it / ST)
            int pending = -1;  // SK: the second piece of the slot drawn last, if it has one
            // SK: key tiles per item and in the tail (R items of T)
            const int sk_T = SK ? fa_kv_tiles<BM, BN>(0, Nq, Nk, 0) : 0;
            const int sk_rt = (num_qb * BH - split_from) * sk_T;
            // Item k: Q lands on barQ phase k; persistent, the consumers learn the item from
            // `slot`, written before that phase's arrive (release; their wait acquires), and
            // a ticket past the end still completes the phase, with no bytes, to stop them.
            for (int k = 0; PERSIST || k == 0; ++k) {
                int tt = first;
                if constexpr (SK) {
                    if (pending >= 0) {
                        tt = pending;
                        pending = -1;
                    } else {
                        tt = atomicAdd(tickets, 1);
                        const int sl = tt - split_from;  // a slot of the tail, or past it
                        if (sl >= 0) {
                            tt = sl < nsplit ? split_from + 2 * sl : total;
                            if (sl < nsplit && fa_sk_second(sl, sk_rt, nsplit, sk_T))
                                pending = tt + 1;
                        }
                    }
                } else if constexpr (PERSIST) {
                    tt = atomicAdd(tickets, 1);
                }
                if constexpr (QPREF) {
                    const int ahead = tt + static_cast<int>(gridDim.x);
                    if (ahead < total) {
                        int qa, ba;  // (no split with QPREF: tickets are items)
                        fa_tile<LPT>(ahead, num_qb, BH, causal, section, qa, ba);
                        const int qrow = fa_q0<ENDQ, BM>(qa, num_qb, Nq, causal);
#pragma unroll
                        for (int p = 0; p < NP; ++p) fa_tma_prefetch_l2(&tmQ, 64 * p, qrow, ba);
                    }
                }
                // Q's buffer (and `slot`) are free once every consumer is done with item k-1.
                fa_mbar_wait(emptyQ, (k & 1) ^ 1);
                if constexpr (PERSIST) {
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(slot), "r"(tt) : "memory");
                    if (tt >= total) {
                        fa_mbar_arrive(barQ);
                        break;
                    }
                }
                int qb, bh, j0, j1, si, piece;
                fa_work<LPT, SPLIT, SK, ENDQ, BM, BN>(tt, num_qb, BH, causal, section,
                                                      split_from, nsplit, Nq, Nk, qb, bh, j0, j1,
                                                      si, piece);
                const int q0 = fa_q0<ENDQ, BM>(qb, num_qb, Nq, causal);
                const int ntiles = j1 - j0;
                const int sh = NFIRST ? fa_first_shift<BM, BN>(q0, Nq, Nk, causal) : 0;
                fa_mbar_expect_tx(barQ, L::Q_BYTES);  // also when no key is seen: one protocol
#pragma unroll
                for (int p = 0; p < NP; ++p)
                    fa_tma_load(sQ + p * BM * 128, &tmQ, 64 * p, q0, bh, barQ);
                for (int j = 0; j < ntiles; ++j, ++it) {
                    const int s = it % ST;
                    const u32 round_parity = ((it / ST) & 1) ^ 1;
                    fa_mbar_wait(emptyK + 8 * s, round_parity);
                    fa_mbar_expect_tx(fullK + 8 * s, L::KV_BYTES);  // MCAST: both halves
                    const int key0 = fa_tile_key<NFIRST, BN>(j0 + j, sh);
                    fa_load_kv<MCAST, NP, BN>(sK + s * L::KV_BYTES, &tmK, key0, bh,
                                              fullK + 8 * s, rank);
                    fa_mbar_wait(emptyV + 8 * s, round_parity);
                    fa_mbar_expect_tx(fullV + 8 * s, L::KV_BYTES);
                    fa_load_kv<MCAST, NP, BN>(sV + s * L::KV_BYTES, &tmV, key0, bh,
                                              fullV + 8 * s, rank);
                }
            }
            if constexpr (MCAST) {
                // Stay until both CTAs' consumers have released the last ST stages: the
                // other CTA's arrivals land on this CTA's barriers, which must outlive them.
                for (int i = 0; i < ST; ++i, ++it) {
                    const u32 round_parity = ((it / ST) & 1) ^ 1;
                    fa_mbar_wait(emptyK + 8 * (it % ST), round_parity);
                    fa_mbar_wait(emptyV + 8 * (it % ST), round_parity);
                }
            }
        }
        return;
    }

    // ---------------- consumers ----------------
    fa_setmaxnreg_inc<FaRegs<NC>::CONSUMER>();
    const int c = wg - 1;  // consumer index: rows [64c, 64c + 64) of the query block
    const int ctid = tid - 128 * wg;
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

    // A K or V stage is done with: every consumer thread arrives, or (WGREL) one thread per
    // warpgroup, or (MCAST) one per warpgroup on this CTA's barrier and one on the other
    // CTA's (a warpgroup's wgmma completes as a whole, so one thread past its wait speaks for
    // all 128).
    auto release = [&](u32 bar) {
        if constexpr (MCAST) {
            if (ctid == 0) fa_mbar_arrive(bar);
            if (ctid == 32) fa_mbar_arrive_cta(bar, rank ^ 1);
        } else if constexpr (WGREL) {
            if (ctid == 0) fa_mbar_arrive(bar);
        } else {
            fa_mbar_arrive(bar);
        }
    };

    int it = 0;  // K/V tiles consumed so far, across items (ring slot it % ST)
    u64 tr[5] = {0, 0, 0, 0, 0};  // TRACE: the clock at the item's five points
    int tr_nt = 0;                // TRACE: key tiles this warpgroup computed
    for (int k = 0; PERSIST || k == 0; ++k) {
        if constexpr (TRACE) {
            tr[0] = fa_clock();
            tr[2] = 0;  // stays 0 for a warpgroup that computes no tile of the item
            tr_nt = 0;
        }
        fa_mbar_wait(barQ, k & 1);
        if constexpr (TRACE) tr[1] = fa_clock();
        int tt = first;
        if constexpr (PERSIST) {
            asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(tt) : "r"(slot) : "memory");
            if constexpr (UNIFORM) tt = __shfl_sync(0xffffffffu, tt, 0);
            if (tt >= total) break;
        }
        int qb, bh, j0, j1, si, piece;
        fa_work<LPT, SPLIT, SK, ENDQ, BM, BN>(tt, num_qb, BH, causal, section, split_from,
                                              nsplit, Nq, Nk, qb, bh, j0, j1, si, piece);
        const int q0 = fa_q0<ENDQ, BM>(qb, num_qb, Nq, causal);
        const int ntiles = j1 - j0;
        if constexpr (UNIFORM) it = __shfl_sync(0xffffffffu, it, 0);
        const int row_a = q0 + c * 64 + warp * 16 + g;  // this thread's first row
        const int sh = NFIRST ? fa_first_shift<BM, BN>(q0, Nq, Nk, causal) : 0;
        if constexpr (QREG) fa_load_q_frags<D, BM>(qa, qwg, warp, g, t);
        if constexpr (QREG_EARLY) fa_mbar_arrive(emptyQ);  // (its arrive orders the loads)

#pragma unroll
        for (int i = 0; i < NO; ++i) o[i] = 0.f;
        m[0] = m[1] = FA_NEG_INF;
        l[0] = l[1] = 0.f;

        // S = Q K^T over the tile's first W keys (A and B K-major in shared memory, or A = Q
        // from registers: QREG, never narrow), and O += P V over them (A = P from registers,
        // B = V MN-major); W = BN but in NARROW's last step (below).
        auto issue_s_w = [&](int slot, auto width) {
            const u32 kbase = sK + slot * L::KV_BYTES;
            if constexpr (QREG) {
                fa_issue_s_rk<DT, D, BN>(s, qa, kbase);
            } else {
                fa_issue_s<DT, D, BM, BN, decltype(width)::value>(s, qwg, kbase);
            }
        };
        auto issue_pv_w = [&](int slot, auto width) {
            constexpr int W = decltype(width)::value;
            fa_issue_pv<DT, D, BN, W / 16>(o, a, sV + slot * L::KV_BYTES);
        };
        auto issue_s = [&](int slot) { issue_s_w(slot, FaInt<BN>{}); };
        auto issue_pv = [&](int slot) { issue_pv_w(slot, FaInt<BN>{}); };
        // NARROW: keys of this piece's last tile that exist (>= BN: no tail). Past them P = 0
        // and V's rows are zero-filled, so GEMMs over the first W = 64 or 128 keys are exact;
        // the mask sets the S registers a narrow S GEMM leaves to -inf. Each width runs its
        // whole step, waits included, in its own branch: a shape chosen at run time between
        // a wgmma and its wait makes ptxas serialise every wgmma of the kernel (v9).
        const int tail_keys = Nk - (j0 + ntiles - 1) * BN;
        // f(FaInt<W>{}) with W the narrowest width that holds the last tile's keys.
        auto by_tail_width = [&](auto f) {
            if constexpr (NARROW) {
                if (tail_keys <= 64) return f(FaInt<64>{});
                if constexpr (BN > 128) {
                    if (tail_keys <= 128) return f(FaInt<128>{});
                }
            }
            f(FaInt<BN>{});
        };
        bool moved = true;  // whether the last softmax moved m (always, unless LAZY)
        auto softmax_tile = [&](int j) {  // mask (diagonal / tail tiles only), then softmax
            const int n0 = fa_tile_key<NFIRST, BN>(j0 + j, sh);  // j counts this piece's tiles
            // Keys from `lim` on are masked: those past Nk, or (NFIRST) tile 0's past its own.
            const int lim = NFIRST && j == 0 ? BN - sh : Nk;
            // Warpgroup-uniform test: the tile runs past lim, or past the diagonal of this
            // warpgroup's first row (q0 + 64 c); other tiles need no mask.
            if ((n0 + BN > lim) || (causal && (n0 + BN - 1 > q0 + c * 64 + offset)))
                fa_mask<NS>(s, n0, lim, row_a, t, causal, offset);
            if constexpr (LAZY) {
                moved = fa_softmax_lazy<NS>(s, m, l, alpha, scale_log2);
            } else {
                fa_softmax<NS>(s, m, l, alpha, scale_log2);
            }
        };

        bool q_released = QREG_EARLY;  // EARLYQ: this warpgroup has arrived on emptyQ already
        if (ntiles > 0) {
            // Key tiles this warpgroup computes; past them it only keeps the protocol (below).
            int nt = ntiles;
            if (SKIP_IDLE && (q0 + c * 64 >= Nq || (ENDQ && q0 + c * 64 + 64 <= 0))) nt = 0;
            if (WG_DIAG && causal) {  // up to its last row's diagonal (0 if it sees no key)
                const int kv_end = min(Nk, q0 + c * 64 + 64 + offset);
                nt = min(nt, max(0, (kv_end + BN - 1) / BN - j0));
            }
            // EARLYQ: Q is released after this warpgroup's last S GEMM (tile nt - 1), or at
            // once if it computes none (its rows past Nq, or causal past its diagonal).
            if constexpr (EARLYQ) {
                if (!QREG && nt == 0) fa_mbar_arrive(emptyQ);
                q_released = true;
            }
            if constexpr (TRACE) tr_nt = nt;
            if constexpr (OVERLAP) {
                // Tile 0: S_0, softmax, P_0 (O is still zero: no rescale).
                auto first = [&](auto width) {
                    const int s0 = it % ST;
                    fa_mbar_wait(fullK + 8 * s0, (it / ST) & 1);
                    sched_wait();
                    // NFIRST: tile 0 holds BN - sh <= FW keys; the mask sets the registers
                    // past FW to -inf.
                    if constexpr (NFIRST) {
                        issue_s_w(s0, FaInt<FW>{});
                    } else {
                        issue_s_w(s0, width);
                    }
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NS; ++i) fa_reg_fence(s[i]);
                    if constexpr (TRACE) tr[2] = fa_clock();
                    if (EARLYQ && !QREG && nt == 1) fa_mbar_arrive(emptyQ);
                    release(emptyK + 8 * s0);
                    softmax_tile(0);
                    fa_to_a<DT, NS>(s, a);
                };
                // Step j: S_j issued beside P_{j-1} V_{j-1}, the softmax of S_j under it.
                // (pv_width: P_{j-1} V_{j-1} over its first pv_width keys, BN but in NFPV's
                // step 1.)
                auto step_w = [&](int j, auto width, auto pv_width) {
                    const int ic = it + j, ip = it + j - 1;
                    const int sj = ic % ST, sp = ip % ST;
                    fa_mbar_wait(fullK + 8 * sj, (ic / ST) & 1);
                    fa_mbar_wait(fullV + 8 * sp, (ip / ST) & 1);
                    sched_wait();
                    issue_s_w(sj, width);  // S_j              (group 1)
                    issue_pv_w(sp, pv_width);  // O += P_{j-1} V_{j-1} (group 2)
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
                    if (moved) fa_rescale<NO>(o, alpha);
                    fa_to_a<DT, NS>(s, a);
                };
                auto step = [&](int j, auto width) { step_w(j, width, FaInt<BN>{}); };
                // The last P V (only as many k-steps as the last tile's width), of tile nt - 1.
                auto last_pv = [&](auto width) {
                    const int il = it + nt - 1;
                    const int sl = il % ST;
                    fa_mbar_wait(fullV + 8 * sl, (il / ST) & 1);
                    sched_wait();
                    issue_pv_w(sl, width);
                    sched_signal();
                    fa_wgmma_wait<0>();
#pragma unroll
                    for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
                    release(emptyV + 8 * sl);
                };
                if (nt > 0) {
                    if (NARROW && ntiles == 1) {
                        by_tail_width(first);
                    } else {
                        first(FaInt<BN>{});
                    }
                    const int full_steps = NARROW ? ntiles - 1 : nt;
                    int j1 = 1;  // the first step of the loop
                    if constexpr (NFPV) {
                        if (nt > 1) {
                            step_w(1, FaInt<BN>{}, FaInt<FW>{});
                            j1 = 2;
                        }
                    }
                    for (int j = j1; j < full_steps; ++j) step(j, FaInt<BN>{});
                    if constexpr (NARROW) {
                        if (ntiles > 1) by_tail_width([&](auto w) { step(ntiles - 1, w); });
                        by_tail_width(last_pv);
                    } else if constexpr (NFPV) {
                        if (nt == 1) {
                            last_pv(FaInt<FW>{});
                        } else {
                            last_pv(FaInt<BN>{});
                        }
                    } else {
                        last_pv(FaInt<BN>{});
                    }
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
                    if (moved) fa_rescale<NO>(o, alpha);
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
        if constexpr (TRACE) tr[3] = fa_clock();
        if constexpr (PERSIST) {
            // Every S GEMM of this item is complete (and `slot` read): the producer may load
            // the next Q now (EARLYQ: done already, in the last step).
            if (!q_released) fa_mbar_arrive(emptyQ);
            // The previous item's O in the staging tile has been read, by the threads' loads
            // or by the TMA store (its issuing thread waits for that before this barrier).
            if constexpr (TMA_STORE) {
                if (ctid == 0) fa_bulk_wait_read();
            }
            fa_bar_sync(1 + NC + c, 128);
        }

        if constexpr (SPLIT) {
            if (si >= 0) {
                // A piece of a split item: publish this thread's partial O, m and l (l not yet
                // quad-reduced; every piece's layout is the same thread for thread), then the
                // warpgroup that arrives last combines all pieces; the others are done.
                constexpr int WS = (NO + 4) * 128;  // floats per piece and warpgroup
                // The item's pieces and the workspace slot of its q-th: nsplit consecutive
                // ones, or (SK) one per slot from the slot holding its first tile to the one
                // holding its last, the first one that slot's second piece unless the slot
                // starts with the item.
                int npieces = nsplit, s_lo = 0, p_lo = 0;
                if constexpr (SK) {
                    const int T = fa_kv_tiles<BM, BN>(0, Nq, Nk, 0);
                    const int rt = (num_qb * BH - split_from) * T;
                    const int x0 = si * T;
                    s_lo = fa_sk_slot(x0, rt, nsplit);
                    npieces = fa_sk_slot(x0 + T - 1, rt, nsplit) - s_lo + 1;
                    p_lo = fa_sk_bound(s_lo, rt, nsplit) < x0 ? 1 : 0;
                }
                auto part = [&](int q) {
                    const int idx = SK ? 2 * (s_lo + q) + (q == 0 ? p_lo : 0) : si * nsplit + q;
                    return ws + (static_cast<long long>(idx) * NC + c) * WS;
                };
                float* mine = ws + (static_cast<long long>(SK ? piece : si * nsplit + piece) * NC +
                                    c) * WS;
#pragma unroll
                for (int i = 0; i < NO; ++i) mine[i * 128 + ctid] = o[i];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    mine[(NO + h) * 128 + ctid] = m[h];
                    mine[(NO + 2 + h) * 128 + ctid] = l[h];
                }
                __threadfence();  // the partials are visible before the counter moves
                fa_bar_sync(1 + NC + c, 128);
                if (ctid == 0) {
                    const int before = atomicAdd(tickets + 1 + si * NC + c, 1);
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(flags + 4 * c), "r"(before)
                                 : "memory");
                }
                fa_bar_sync(1 + NC + c, 128);
                int before;
                asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(before) : "r"(flags + 4 * c)
                             : "memory");
                if (before != npieces - 1) continue;  // another piece's warpgroup combines
                __threadfence();
                // O = sum_p 2^(m_p - M) O_p, l = sum_p 2^(m_p - M) l_p, M = max_p m_p (the
                // exp2 domain of fa_softmax); a piece that saw no key (m_p = -inf) weighs 0.
                float mx[2] = {FA_NEG_INF, FA_NEG_INF};
                for (int p = 0; p < npieces; ++p) {
#pragma unroll
                    for (int h = 0; h < 2; ++h)
                        mx[h] = fmaxf(mx[h], __ldcg(part(p) + (NO + h) * 128 + ctid));
                }
#pragma unroll
                for (int i = 0; i < NO; ++i) o[i] = 0.f;
                l[0] = l[1] = 0.f;
                for (int p = 0; p < npieces; ++p) {
                    const float* pp = part(p);
                    float w[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const float mp = __ldcg(pp + (NO + h) * 128 + ctid);
                        w[h] = mp == FA_NEG_INF ? 0.f : fa_exp2(mp - mx[h]);
                        l[h] += w[h] * __ldcg(pp + (NO + 2 + h) * 128 + ctid);
                    }
#pragma unroll
                    for (int i = 0; i < NO; ++i)
                        o[i] += w[(i >> 1) & 1] * __ldcg(pp + i * 128 + ctid);
                }
                m[0] = mx[0];
                m[1] = mx[1];
            }
        }

        // ---------------- epilogue ----------------
        // O_i = diag(l)^-1 O_i; LSE_i = m_i + log l_i. O is staged in this warpgroup's rows
        // of the staging tile (persistent) or of the Q panels (dead since its last S GEMM
        // completed), in the same swizzled layout, then written with coalesced 16-byte
        // stores or one TMA store per panel; rows past Nq are not written.
        u16* Ob = O + static_cast<long long>(bh) * Nq * D;
        // Each row's denominator (quad-reduced) and LSE once, then SP panels at a time (all
        // but with ':panelo'): stage, then copy out.
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
            if constexpr (TMA_STORE) {
                // The copy engine reads what these threads wrote: fence the generic-proxy
                // stores before the barrier; one thread then stores the warpgroup's 64 rows,
                // one box per 64-column panel (the copy engine clips rows past Nq).
                fa_fence_proxy_async();
                fa_bar_sync(1 + NC + c, 128);
                if (ctid == 0) {
#pragma unroll
                    for (int p = 0; p < NP; ++p)
                        fa_tma_store(&tmO, owg + p * (BM * 128), 64 * p, q0 + c * 64, bh);
                    fa_bulk_commit();
                }
            } else {
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
                        *reinterpret_cast<uint4*>(Ob + static_cast<long long>(row) * D +
                                                  (8 * p0 + ch) * 8) = val;
                    }
                }
            }
        }
        if constexpr (TRACE) {
            tr[4] = fa_clock();
            if (ctid == 0) {
                u64* rec = reinterpret_cast<u64*>(ws) +
                           (static_cast<long long>(tt) * NC + c) * FA_TRACE_WORDS;
                rec[0] = fa_smid();
#pragma unroll
                for (int i = 0; i < 5; ++i) rec[1 + i] = tr[i];
                rec[6] = static_cast<u64>(tr_nt);
            }
        }
    }
    if constexpr (SCHED) {
        if (c == 0) fa_bar_sync(1, 256);  // the last consumer's final arrive (see above)
    }
    if constexpr (TMA_STORE) {
        if (ctid == 0) fa_bulk_wait_read();  // shared memory must outlive the store's reads
    }
#else
    __trap();
#endif
}

#define FA_WS_PARAMS                                                                          \
    const __grid_constant__ FaTmap tmQ, const __grid_constant__ FaTmap tmK,                  \
        const __grid_constant__ FaTmap tmV, const __grid_constant__ FaTmap tmO,              \
        u16 *__restrict__ O, float *__restrict__ LSE, int Nq, int Nk, float scale_log2,      \
        int causal, int num_qb, int BH, int *__restrict__ tickets, int section,              \
        float *__restrict__ ws, int split_from, int nsplit
#define FA_WS_ARGS                                                                            \
    tmQ, tmK, tmV, tmO, O, LSE, Nq, Nk, scale_log2, causal, num_qb, BH, tickets, section, ws, \
        split_from, nsplit

template <int DT, int D, int NC, int BN, int ST, int MODE>
__global__ void __launch_bounds__((NC + 1) * 128, 1) flash_fwd_ws(FA_WS_PARAMS) {
    static_assert((MODE & 64) == 0, "multicast variants are flash_fwd_ws_mc");
    fa_ws_body<DT, D, NC, BN, ST, MODE>(FA_WS_ARGS);
}

// The multicast variant (MODE bit 6 set): clusters of two CTAs along the query blocks.
template <int DT, int D, int NC, int BN, int ST, int MODE>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__((NC + 1) * 128, 1)
    flash_fwd_ws_mc(FA_WS_PARAMS) {
    static_assert((MODE & 64) != 0, "flash_fwd_ws_mc runs the multicast mode");
    fa_ws_body<DT, D, NC, BN, ST, MODE>(FA_WS_ARGS);
}

// Explicit instantiation of one variant (the COMPILE_CHECK list below; lab/sass_loop.py).
#define FA_WS_INST(DT, D, NC, BN, ST, MODE)                                                  \
    template __global__ void flash_fwd_ws<DT, D, NC, BN, ST, MODE>(                          \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap,                      \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap, u16*, float*, int,   \
        int, float, int, int, int, int*, int, float*, int, int);
#define FA_WS_MC_INST(DT, D, NC, BN, ST, MODE)                                               \
    template __global__ void flash_fwd_ws_mc<DT, D, NC, BN, ST, MODE>(                       \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap,                      \
        const __grid_constant__ FaTmap, const __grid_constant__ FaTmap, u16*, float*, int,   \
        int, float, int, int, int, int*, int, float*, int, int);

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK instantiates the variants flash.py uses, so CI type-checks them.
FA_WS_MC_INST(0, 128, 2, 176, 2, 67)
FA_WS_MC_INST(1, 128, 2, 128, 2, 67)
FA_WS_MC_INST(0, 64, 3, 128, 2, 67)
FA_WS_INST(0, 128, 2, 176, 2, 131)
FA_WS_INST(1, 64, 3, 128, 2, 139)
FA_WS_INST(0, 128, 2, 128, 2, 1)
FA_WS_INST(1, 128, 2, 128, 2, 3)
FA_WS_INST(0, 64, 3, 128, 2, 3)
FA_WS_INST(1, 64, 2, 128, 2, 0)
FA_WS_INST(0, 128, 2, 176, 2, 3)
FA_WS_INST(0, 128, 2, 128, 3, 1)
FA_WS_INST(1, 128, 2, 128, 2, 7)
FA_WS_INST(0, 64, 3, 128, 2, 15)
FA_WS_INST(0, 64, 3, 128, 2, 11)
FA_WS_INST(1, 128, 2, 128, 2, 19)
FA_WS_INST(0, 64, 3, 128, 2, 31)
FA_WS_INST(0, 128, 2, 128, 2, 35)
FA_WS_INST(1, 128, 2, 128, 2, 39)
FA_WS_INST(0, 64, 3, 128, 2, 35)
FA_WS_INST(1, 64, 3, 128, 2, 39)
FA_WS_INST(0, 128, 2, 128, 2, 33)
FA_WS_INST(1, 128, 2, 192, 2, 3)
FA_WS_INST(0, 128, 2, 128, 2, 259)
FA_WS_INST(0, 128, 2, 176, 2, 515)
FA_WS_INST(0, 128, 2, 176, 2, 1027)
FA_WS_INST(1, 64, 3, 128, 2, 1035)
FA_WS_INST(0, 64, 3, 128, 2, 2051)
FA_WS_INST(1, 128, 2, 176, 2, 4103)
FA_WS_INST(0, 128, 2, 176, 2, 4111)
FA_WS_INST(1, 64, 3, 128, 2, 8203)
FA_WS_INST(0, 128, 2, 176, 2, 16387)
FA_WS_INST(1, 128, 2, 176, 2, 49155)
FA_WS_INST(0, 128, 2, 176, 2, 81923)
FA_WS_INST(1, 128, 2, 176, 2, 135183)
FA_WS_INST(0, 64, 3, 128, 2, 131087)
FA_WS_INST(0, 128, 2, 128, 2, 131079)
FA_WS_INST(0, 64, 3, 128, 2, 262155)
FA_WS_INST(1, 64, 3, 128, 2, 786447)
FA_WS_INST(0, 128, 2, 176, 2, 659471)
FA_WS_INST(1, 128, 2, 176, 2, 1183759)
FA_WS_INST(0, 128, 2, 128, 2, 2228231)
FA_WS_INST(1, 128, 2, 176, 2, 2232327)
FA_WS_INST(0, 64, 3, 128, 2, 4587535)
#endif
