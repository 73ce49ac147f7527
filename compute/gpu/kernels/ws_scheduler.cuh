// The ws kernel's work scheduler (flash_fwd_ws.cu): which query block of which head a
// work item is, where its rows start, and how many key tiles it needs.
#pragma once

#include "flash_fwd_layout.cuh"

// Work item t of num_qb * BH. Default order: consecutive items are query blocks of one head
// (its K and V stay in L2 while they run), heaviest causal block first. LPT order (FA_WS_LPT,
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

// The first row of query block qb: qb BM, or (FA_WS_ENDQ, causal) qb BM - (num_qb BM - Nq),
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

// FA_WS_BAND: the key tiles [j0, j0 + n) of the query block of rows [q0, q0 + BM) (rows
// see keys r + lay.lo <= c <= r + lay.hi, both bounds rising with r): from its first row's
// first key to its last row's last; n (0 if no row sees a key) is returned, j0 set.
template <int BM, int BN>
__device__ __forceinline__ int fa_band_tiles(int q0, int Nk, const FaFwdLayout& lay, int& j0) {
    const int first = max(0, q0 + lay.lo);
    const int end = min(Nk, q0 + BM + lay.hi);  // one past the last row's last key
    j0 = first / BN;
    return end > first ? (end + BN - 1) / BN - j0 : 0;
}
