// Where the forward kernels' tensors live (flash_fwd_mma.cu, flash_fwd_wgmma.cu,
// flash_fwd_ws.cu): element strides of Q, K, V and O over (batch, head, row), the last
// dimension unit, so (batch, heads, N, d) tensors and SDPA's (batch, heads, N, d) views of
// (batch, N, heads, d) memory are read and written in place; and GQA / MQA: query head h of
// a batch reads K/V head h / group. LSE is always contiguous (batch * heads, Nq).
// The host fills it (compute/gpu/flash_launch.py, Layout) and passes it by value.
#pragma once

#include "common.cuh"

struct FaFwdLayout {
    long long q_b, q_h, q_r;  // Q's batch, head and row strides in elements
    long long k_b, k_h, k_r;
    long long v_b, v_h, v_r;
    long long o_b, o_h, o_r;
    int heads;  // query heads per batch (grid rows and work items run over batch * heads)
    int group;  // query heads per K/V head (1 without GQA)
    // The band of the ws kernel's FA_WS_BAND variants (a sliding window, its alignment
    // folded in): query row r sees keys c with r + lo <= c <= r + hi. Unread otherwise.
    int lo, hi;
};

// Batch b, query head h and K/V head hk of the flat query head bh = b * heads + h.
struct FaHead {
    int b, h, hk;
};
__device__ __forceinline__ FaHead fa_head(const FaFwdLayout& L, int bh) {
    FaHead r;
    r.b = bh / L.heads;
    r.h = bh - r.b * L.heads;
    r.hk = r.h / L.group;
    return r;
}
