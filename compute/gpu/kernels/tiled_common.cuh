// Device helpers shared by the two teaching kernels, tiled_attention.cu and
// tiled_backward.cu: the per-thread transfer counter (real under -DCOUNT_TRANSFERS, empty
// otherwise) and element IO between T (float, or IEEE half bits in unsigned short) and float.
// Included through NVRTC's include path (-I kernels/, see tiled.py and backward.py).
#pragma once

#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Elements moved per (tensor, direction) slot; each kernel names its N_SLOTS slots.
#ifdef COUNT_TRANSFERS
template <int N_SLOTS>
struct TransferCounter {
    unsigned long long c[N_SLOTS];
    __device__ TransferCounter() {
#pragma unroll
        for (int s = 0; s < N_SLOTS; ++s) c[s] = 0ull;
    }
    __device__ void add(int slot, int n) { c[slot] += (unsigned long long)n; }
    __device__ void flush(unsigned long long* out) const {
#pragma unroll
        for (int s = 0; s < N_SLOTS; ++s)
            if (c[s]) atomicAdd(out + s, c[s]);
    }
};
#else
template <int N_SLOTS>
struct TransferCounter {
    __device__ void add(int, int) {}
    __device__ void flush(unsigned long long*) const {}
};
#endif

// Element IO: float passes through; unsigned short holds IEEE half bits.
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ unsigned short from_f32<unsigned short>(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
// Round to T's precision and back (P~, and in the backward dS, are rounded to the input dtype
// before the matmuls that read them).
template <typename T> __device__ __forceinline__ float round_as(float x) {
    return to_f32(from_f32<T>(x));
}

// The attention mask (compute/mask.py), as both kernels take it: row r sees keys
// lo(r) <= c < hi(r), where [lo, hi) starts as all keys, or the row's packed sequence
// (ends[] = cumulative sequence lengths, n_seg of them; none when n_seg = 0), and is cut to
// the window [r + offset - left, r + offset + right] on each bounded side (-1 = unbounded;
// causal is right = 0; offset = n_k - n_q bottom-right, 0 top-left or packed). lo and hi are
// non-decreasing in r, so a query block's visible keys are one run and so are its tiles.
struct MaskArgs {
    int left, right, offset, n_seg;
    const int* ends;

    __device__ __forceinline__ bool none() const { return left < 0 && right < 0 && n_seg == 0; }

    __device__ __forceinline__ void bounds(int r, int n_k, int& lo, int& hi) const {
        lo = 0;
        hi = n_k;
        if (n_seg > 0) {  // the first sequence whose end is past r
            int a = 0, b = n_seg - 1;
            while (a < b) {
                const int mid = (a + b) / 2;
                if (ends[mid] > r) b = mid; else a = mid + 1;
            }
            hi = ends[a];
            lo = a > 0 ? ends[a - 1] : 0;
        }
        if (left >= 0) lo = max(lo, r + offset - left);
        if (right >= 0) hi = min(hi, r + offset + right + 1);
    }

    // The rows that see some key: [ra, rb). A packed row sees its own diagonal key (a window
    // always holds it); otherwise a row sees none only when its window ends before key 0
    // (r < -offset - right) or starts past the last (r >= n_k - offset + left).
    __device__ __forceinline__ void seeing_rows(int n_q, int n_k, int& ra, int& rb) const {
        ra = 0;
        rb = n_q;
        if (n_seg > 0) return;
        if (right >= 0) ra = max(ra, -offset - right);
        if (left >= 0) rb = min(rb, n_k - offset + left);
    }

    // The key tiles [j_lo, j_hi) that some row of [q0, q0 + rows) sees (j_lo = j_hi: none),
    // the span compute/mask.py's block_spans gives and the ledger counts. lo and hi are
    // non-decreasing, so the run is lo(first seeing row) .. hi(last seeing row): O(1).
    __device__ __forceinline__ void tile_span(int q0, int rows, int n_q, int n_k, int bk,
                                              int& j_lo, int& j_hi) const {
        if (none()) {
            j_lo = 0;
            j_hi = (n_k + bk - 1) / bk;
            return;
        }
        int ra, rb;
        seeing_rows(n_q, n_k, ra, rb);
        const int r0 = max(q0, ra), r1 = min(q0 + rows, rb) - 1;
        if (r0 > r1) {
            j_lo = j_hi = 0;
            return;
        }
        int first, last, lo, hi;
        bounds(r0, n_k, first, hi);
        bounds(r1, n_k, lo, last);
        j_lo = first / bk;
        j_hi = (last - 1) / bk + 1;
    }

    // Whether some query block of bq rows sees key tile j: the tiles a K/V-outer loop loads
    // (compute.schedule's seen_tiles); the others are skipped, never loaded. The same on
    // every thread, so a branch on it is uniform across the block.
    __device__ __forceinline__ bool tile_seen(int j, int n_q, int n_k, int bq, int bk) const {
        if (none()) return true;
        for (int q0 = 0; q0 < n_q; q0 += bq) {
            int j_lo, j_hi;
            tile_span(q0, min(bq, n_q - q0), n_q, n_k, bk, j_lo, j_hi);
            if (j_lo <= j && j < j_hi) return true;
        }
        return false;
    }
};

// Kernels take the mask as plain arguments (what a launcher passes most simply) and build
// their MaskArgs from them with MASK_FROM_PARAMS.
#define MASK_PARAMS \
    int mask_left, int mask_right, int mask_offset, const int* __restrict__ mask_ends, int mask_n_seg
#define MASK_FROM_PARAMS \
    const MaskArgs mask { mask_left, mask_right, mask_offset, mask_n_seg, mask_ends }
