// tiled_attention.cu: exact attention by the online-softmax recurrence, at any tile sizes.
//
// What it does
//   tiled_q_outer  : FlashAttention-2's forward order. One thread block per (query block,
//                    batch*head). Q_i is staged once in shared memory; every K/V tile the block
//                    can see passes through shared memory; m, l and the unnormalised numerator
//                    a stay in registers; one division per row at the end. Tiles that no row
//                    of the block can see under the mask (MaskArgs: causal either way, a
//                    window, packed sequences) are never loaded.
//   tiled_kv_outer : Algorithm 1 of the FlashAttention paper, literally. One thread block per
//                    batch*head. An init pass writes O = 0, l = 0, m = -inf to global memory; then
//                    for each K/V tile j (loaded once) and each query block i that can see it,
//                    Q_i, O_i, l_i, m_i are read from global memory, updated and written back.
//
// Template parameters: BQ = block_q (B_r), BK = block_k (B_c), D = head size of Q/K, DV = head
// size of V, T = float or unsigned short (IEEE half bits; converted with cvt, so no cuda_fp16.h
// is needed under NVRTC). Shared tiles and all arithmetic are float32; P~ is rounded to T before
// P~V as FlashAttention does. Scores are kept in log2 units (scale * log2 e folded into one
// multiply) so exp2f is the only transcendental; m buffers of the KV-outer kernel hold log2 units.
//
// Thread layout: 8 threads (TX) share each query row, TY = 16 (BQ < 128) or 32 rows of threads.
// Thread (ty, tx) owns score rows ty + TY*i and key columns tx + 8*j; row max and row sum are
// reduced with three xor shuffles inside the 8 lanes of a row. For P~V it owns the same rows and
// output columns in groups of four (4*(tx + 8*g) .. +3), so each float4 read of V by 8 lanes is
// 128 contiguous bytes. Rows of Q/K tiles are padded by 4 floats and P~ rows by 8 so the float4
// reads of the inner loops are free of bank conflicts. Tiles are padded with zeros to whole
// thread rows, so any BQ, BK, D, DV works (1, 7, larger than N).
//
// Instrumentation: compiled with -DCOUNT_TRANSFERS, every global load and store adds the number
// of elements it moved to a per-thread counter per (tensor, direction), flushed with atomicAdd at
// the end. Only the lane that owns a row's statistics loads or stores them (tx == 0), so every
// element moved is counted once per access, and the totals can be compared with compute.ledger.
//
// Q-outer is the fast order (one block per query tile); KV-outer is the teaching order, with
// one block per head and Q_i, O_i, l_i, m_i through HBM on every (j, i) visit. Timings and the
// tuning that kept this source as written: compute/gpu/TILED_NOTES.md.

#include "tiled_common.cuh"

namespace tiled {

// Counter slots (keep in step with compute/gpu/tiled.py COUNTER_SLOTS).
enum Slot {
    Q_READ = 0, K_READ, V_READ, O_READ, O_WRITE, M_READ, M_WRITE, L_READ, L_WRITE, LSE_WRITE,
    N_SLOTS
};

using Counter = TransferCounter<N_SLOTS>;

template <int BQ, int BK, int D, int DV>
struct Shape {
    static constexpr int TX = 8;                       // threads per query row
    static constexpr int TY = BQ >= 128 ? 32 : 16;     // rows of threads
    static constexpr int NT = TX * TY;                 // threads per block
    static constexpr int RM = (BQ + TY - 1) / TY;      // query rows per thread
    static constexpr int RN = (BK + TX - 1) / TX;      // key columns per thread
    static constexpr int BQP = RM * TY;                // padded tile rows
    static constexpr int BKP = RN * TX;
    static constexpr int D4 = (D + 3) / 4 * 4;         // head sizes padded to float4
    static constexpr int DV4 = (DV + 3) / 4 * 4;
    static constexpr int G = (DV4 / 4 + TX - 1) / TX;  // output column groups per thread
    static constexpr int QLD = D4 + 4;                 // row stride of Qs, Ks (floats)
    static constexpr int VLD = G * TX * 4;             // row stride of Vs
    static constexpr int PLD = BKP + 8;                // row stride of Ps
    static constexpr int Q_OFF = 0;
    static constexpr int K_OFF = Q_OFF + BQP * QLD;
    static constexpr int V_OFF = K_OFF + BKP * QLD;
    static constexpr int P_OFF = V_OFF + BKP * VLD;
    static constexpr int SMEM_FLOATS = P_OFF + BQP * PLD;
};

__device__ __forceinline__ float safe_max(float m) { return m == -INFINITY ? 0.f : m; }

__device__ __forceinline__ float row_max8(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ float row_sum8(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

// Stage `rows` rows of a (n, width) global matrix starting at row r0 into a zero-padded
// (pad_rows, ld) float tile. Consecutive threads take consecutive columns (coalesced).
template <typename T, int PAD_ROWS, int PAD_COLS, int LD, int WIDTH, int NT>
__device__ __forceinline__ void stage(float* dst, const T* src, int rows, Counter& cnt, int slot) {
    int loaded = 0;
    for (int e = threadIdx.x; e < PAD_ROWS * PAD_COLS; e += NT) {
        const int r = e / PAD_COLS, c = e % PAD_COLS;
        float x = 0.f;
        if (r < rows && c < WIDTH) {
            x = to_f32(src[(size_t)r * WIDTH + c]);
            ++loaded;
        }
        dst[r * LD + c] = x;
    }
    cnt.add(slot, loaded);
}

// S = Q_i K_j^T for the thread's RM x RN scores, scaled to log2 units and masked.
template <int BQ, int BK, int D, int DV>
__device__ __forceinline__ void score_tile(float (&s)[Shape<BQ, BK, D, DV>::RM][Shape<BQ, BK, D, DV>::RN],
                                           const float* smem, int q0, int rows, int k0, int n_k,
                                           const MaskArgs& mask, float scale_log2) {
    using S = Shape<BQ, BK, D, DV>;
    const int tx = threadIdx.x % S::TX, ty = threadIdx.x / S::TX;
    const float* Qs = smem + S::Q_OFF;
    const float* Ks = smem + S::K_OFF;
#pragma unroll
    for (int i = 0; i < S::RM; ++i)
#pragma unroll
        for (int j = 0; j < S::RN; ++j) s[i][j] = 0.f;
#pragma unroll 4
    for (int c = 0; c < S::D4; c += 4) {
        float4 qf[S::RM];
#pragma unroll
        for (int i = 0; i < S::RM; ++i)
            qf[i] = *reinterpret_cast<const float4*>(Qs + (ty + S::TY * i) * S::QLD + c);
#pragma unroll
        for (int j = 0; j < S::RN; ++j) {
            const float4 kf = *reinterpret_cast<const float4*>(Ks + (tx + S::TX * j) * S::QLD + c);
#pragma unroll
            for (int i = 0; i < S::RM; ++i) {
                s[i][j] = fmaf(qf[i].x, kf.x, s[i][j]);
                s[i][j] = fmaf(qf[i].y, kf.y, s[i][j]);
                s[i][j] = fmaf(qf[i].z, kf.z, s[i][j]);
                s[i][j] = fmaf(qf[i].w, kf.w, s[i][j]);
            }
        }
    }
    // The mask: row r sees key c iff lo(r) <= c < hi(r) (MaskArgs, tiled_common.cuh).
#pragma unroll
    for (int i = 0; i < S::RM; ++i) {
        const int r = ty + S::TY * i;
        int lo = 0, hi = n_k;
        if (r < rows) mask.bounds(q0 + r, n_k, lo, hi);
#pragma unroll
        for (int j = 0; j < S::RN; ++j) {
            const int c = k0 + tx + S::TX * j;
            const bool ok = r < rows && tx + S::TX * j < BK && c >= lo && c < hi;
            s[i][j] = ok ? s[i][j] * scale_log2 : -INFINITY;
        }
    }
}

// pv[i][g] += P~_i V_j over the tile, reading P~ from Ps and V from Vs.
template <int BQ, int BK, int D, int DV>
__device__ __forceinline__ void pv_tile(float4 (&acc)[Shape<BQ, BK, D, DV>::RM][Shape<BQ, BK, D, DV>::G],
                                        const float* smem) {
    using S = Shape<BQ, BK, D, DV>;
    const int tx = threadIdx.x % S::TX, ty = threadIdx.x / S::TX;
    const float* Ps = smem + S::P_OFF;
    const float* Vs = smem + S::V_OFF;
#pragma unroll 2
    for (int k = 0; k < S::BKP; k += 4) {
        float4 pf[S::RM];
#pragma unroll
        for (int i = 0; i < S::RM; ++i)
            pf[i] = *reinterpret_cast<const float4*>(Ps + (ty + S::TY * i) * S::PLD + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int g = 0; g < S::G; ++g) {
                const float4 vf =
                    *reinterpret_cast<const float4*>(Vs + (k + kk) * S::VLD + 4 * (tx + S::TX * g));
#pragma unroll
                for (int i = 0; i < S::RM; ++i) {
                    const float p = kk == 0 ? pf[i].x : kk == 1 ? pf[i].y : kk == 2 ? pf[i].z : pf[i].w;
                    acc[i][g].x = fmaf(p, vf.x, acc[i][g].x);
                    acc[i][g].y = fmaf(p, vf.y, acc[i][g].y);
                    acc[i][g].z = fmaf(p, vf.z, acc[i][g].z);
                    acc[i][g].w = fmaf(p, vf.w, acc[i][g].w);
                }
            }
        }
    }
}

}  // namespace tiled

// ---------------------------------------------------------------------------------------------
// Q-outer (FlashAttention-2 order): grid (T_r, batch*heads), NT threads, SMEM_FLOATS*4 bytes.
template <int BQ, int BK, int D, int DV, typename T>
__global__ void __launch_bounds__(tiled::Shape<BQ, BK, D, DV>::NT)
tiled_q_outer(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
              T* __restrict__ O, float* __restrict__ LSE, int n_q, int n_k, float scale_log2,
              MASK_PARAMS, int save_lse, unsigned long long* counts) {
    using namespace tiled;
    using S = Shape<BQ, BK, D, DV>;
    MASK_FROM_PARAMS;
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    Counter cnt;
    const int tx = threadIdx.x % S::TX, ty = threadIdx.x / S::TX;
    const int t_r = (n_q + BQ - 1) / BQ;
    // Under a causal mask the last query blocks see the most tiles: start them first.
    const int qb = mask.right == 0 ? t_r - 1 - (int)blockIdx.x : (int)blockIdx.x;
    const size_t bh = blockIdx.y;
    const int q0 = qb * BQ, rows = min(BQ, n_q - q0);
    const T* Qb = Q + (bh * n_q + q0) * D;
    const T* Kb = K + bh * n_k * D;
    const T* Vb = V + bh * n_k * DV;

    stage<T, S::BQP, S::D4, S::QLD, D, S::NT>(smem + S::Q_OFF, Qb, rows, cnt, Q_READ);

    float m[S::RM], l[S::RM];  // running max (log2 units) and denominator per row
    float4 acc[S::RM][S::G];   // unnormalised numerator a
#pragma unroll
    for (int i = 0; i < S::RM; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int g = 0; g < S::G; ++g) acc[i][g] = make_float4(0.f, 0.f, 0.f, 0.f);
    }

    int j_lo, j_hi;  // the key tiles this block sees; the others are never loaded
    mask.tile_span(q0, rows, n_q, n_k, BK, j_lo, j_hi);
    for (int j = j_lo; j < j_hi; ++j) {
        const int k0 = j * BK, kr = min(BK, n_k - k0);
        __syncthreads();  // previous tile's Ks, Vs, Ps are no longer read
        stage<T, S::BKP, S::D4, S::QLD, D, S::NT>(smem + S::K_OFF, Kb + (size_t)k0 * D, kr, cnt, K_READ);
        stage<T, S::BKP, S::VLD, S::VLD, DV, S::NT>(smem + S::V_OFF, Vb + (size_t)k0 * DV, kr, cnt, V_READ);
        __syncthreads();

        float s[S::RM][S::RN];
        score_tile<BQ, BK, D, DV>(s, smem, q0, rows, k0, n_k, mask, scale_log2);  // S_ij
        float* Ps = smem + S::P_OFF;
#pragma unroll
        for (int i = 0; i < S::RM; ++i) {
            float mx = -INFINITY;
#pragma unroll
            for (int j2 = 0; j2 < S::RN; ++j2) mx = fmaxf(mx, s[i][j2]);
            const float m_new = fmaxf(m[i], row_max8(mx));  // m_new = max(m, rowmax(S_ij))
            const float ref = safe_max(m_new);               // no -inf - -inf for unseen rows
            const float alpha = exp2f(m[i] - ref);           // alpha = exp(m - m_new); 0 at start
            float sum = 0.f;
#pragma unroll
            for (int j2 = 0; j2 < S::RN; ++j2) {
                const float p = exp2f(s[i][j2] - ref);  // P~_ij = exp(S_ij - m_new)
                sum += p;
                Ps[(ty + S::TY * i) * S::PLD + tx + S::TX * j2] = round_as<T>(p);
            }
            l[i] = alpha * l[i] + row_sum8(sum);  // l = alpha l + rowsum(P~_ij)
            m[i] = m_new;
#pragma unroll
            for (int g = 0; g < S::G; ++g) {  // a = alpha a (+ P~_ij V_j below)
                acc[i][g].x *= alpha;
                acc[i][g].y *= alpha;
                acc[i][g].z *= alpha;
                acc[i][g].w *= alpha;
            }
        }
        __syncthreads();
        pv_tile<BQ, BK, D, DV>(acc, smem);
    }

    // O = a / l: the one division, per row; rows that saw no key give zeros.
    T* Ob = O + (bh * n_q + q0) * DV;
    int stored = 0;
#pragma unroll
    for (int i = 0; i < S::RM; ++i) {
        const int r = ty + S::TY * i;
        if (r >= rows) continue;
        const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;
#pragma unroll
        for (int g = 0; g < S::G; ++g) {
            const int c = 4 * (tx + S::TX * g);
            const float v4[4] = {acc[i][g].x, acc[i][g].y, acc[i][g].z, acc[i][g].w};
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (c + e < DV) {
                    Ob[(size_t)r * DV + c + e] = from_f32<T>(v4[e] * inv);
                    ++stored;
                }
        }
        if (save_lse && tx == 0) {  // L = m + log l (natural units)
            LSE[bh * n_q + q0 + r] = l[i] > 0.f ? (m[i] + log2f(l[i])) * 0.6931471805599453f : -INFINITY;
            cnt.add(LSE_WRITE, 1);
        }
    }
    cnt.add(O_WRITE, stored);
    cnt.flush(counts);
}

// ---------------------------------------------------------------------------------------------
// KV-outer (Algorithm 1): grid (batch*heads), NT threads, SMEM_FLOATS*4 bytes.
// Mbuf and Lbuf are float32 (batch*heads, n_q) scratch rows holding m (log2 units) and l.
template <int BQ, int BK, int D, int DV, typename T>
__global__ void __launch_bounds__(tiled::Shape<BQ, BK, D, DV>::NT)
tiled_kv_outer(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
               T* O, float* LSE, float* Mbuf, float* Lbuf, int n_q, int n_k, float scale_log2,
               MASK_PARAMS, int save_lse, unsigned long long* counts) {
    using namespace tiled;
    using S = Shape<BQ, BK, D, DV>;
    MASK_FROM_PARAMS;
    extern __shared__ float4 smem4[];
    float* smem = reinterpret_cast<float*>(smem4);
    Counter cnt;
    const int tx = threadIdx.x % S::TX, ty = threadIdx.x / S::TX;
    const int lane = threadIdx.x % 32, row_lane = lane & ~(S::TX - 1);
    const size_t bh = blockIdx.x;
    const int t_r = (n_q + BQ - 1) / BQ, t_c = (n_k + BK - 1) / BK;
    const T* Kb = K + bh * n_k * D;
    const T* Vb = V + bh * n_k * DV;
    T* Ob = O + bh * n_q * DV;
    float* Mb = Mbuf + bh * n_q;
    float* Lb = Lbuf + bh * n_q;

    // Init pass: O = 0, l = 0, m = -inf; L = -inf for blocks that will never be visited.
    for (int e = threadIdx.x; e < n_q * DV; e += S::NT) Ob[e] = from_f32<T>(0.f);
    int inits = 0;
    for (int r = threadIdx.x; r < n_q; r += S::NT) {
        Lb[r] = 0.f;
        Mb[r] = -INFINITY;
        ++inits;
        const int qb = r / BQ;
        int j_lo, j_hi;
        if (save_lse) mask.tile_span(qb * BQ, min(BQ, n_q - qb * BQ), n_q, n_k, BK, j_lo, j_hi);
        if (save_lse && j_lo == j_hi) {
            LSE[bh * n_q + r] = -INFINITY;
            cnt.add(LSE_WRITE, 1);
        }
    }
    {
        int o_inits = 0;
        for (int e = threadIdx.x; e < n_q * DV; e += S::NT) ++o_inits;
        cnt.add(O_WRITE, o_inits);
        cnt.add(L_WRITE, inits);
        cnt.add(M_WRITE, inits);
    }

    for (int j = 0; j < t_c; ++j) {
        if (!mask.tile_seen(j, n_q, n_k, BQ, BK)) continue;  // no row sees tile j: not loaded
        const int k0 = j * BK, kr = min(BK, n_k - k0);
        __syncthreads();  // init pass done / previous tile's shared data no longer read
        stage<T, S::BKP, S::D4, S::QLD, D, S::NT>(smem + S::K_OFF, Kb + (size_t)k0 * D, kr, cnt, K_READ);
        stage<T, S::BKP, S::VLD, S::VLD, DV, S::NT>(smem + S::V_OFF, Vb + (size_t)k0 * DV, kr, cnt, V_READ);
        for (int qb = 0; qb < t_r; ++qb) {
            const int q0 = qb * BQ, rows = min(BQ, n_q - q0);
            int j_lo, j_hi;
            mask.tile_span(q0, rows, n_q, n_k, BK, j_lo, j_hi);
            if (j < j_lo || j >= j_hi) continue;  // block i sees no key of tile j: skipped
            __syncthreads();           // previous block's Qs, Ps no longer read; O_i writes visible
            stage<T, S::BQP, S::D4, S::QLD, D, S::NT>(smem + S::Q_OFF, Q + (bh * n_q + q0) * D, rows,
                                                      cnt, Q_READ);
            // Read O_i, l_i, m_i. One lane per row reads the statistics and shares them.
            float4 o[S::RM][S::G];
            float mi[S::RM], li[S::RM];
            int o_reads = 0, st_reads = 0;
#pragma unroll
            for (int i = 0; i < S::RM; ++i) {
                const int r = ty + S::TY * i;
                float mv = -INFINITY, lv = 0.f;
                if (r < rows && tx == 0) {
                    mv = Mb[q0 + r];
                    lv = Lb[q0 + r];
                    ++st_reads;
                }
                mi[i] = __shfl_sync(0xffffffffu, mv, row_lane);
                li[i] = __shfl_sync(0xffffffffu, lv, row_lane);
#pragma unroll
                for (int g = 0; g < S::G; ++g) {
                    float v4[4] = {0.f, 0.f, 0.f, 0.f};
                    const int c = 4 * (tx + S::TX * g);
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (r < rows && c + e < DV) {
                            v4[e] = to_f32(Ob[(size_t)(q0 + r) * DV + c + e]);
                            ++o_reads;
                        }
                    o[i][g] = make_float4(v4[0], v4[1], v4[2], v4[3]);
                }
            }
            cnt.add(O_READ, o_reads);
            cnt.add(M_READ, st_reads);
            cnt.add(L_READ, st_reads);
            __syncthreads();  // Qs staged

            float s[S::RM][S::RN];
            score_tile<BQ, BK, D, DV>(s, smem, q0, rows, k0, n_k, mask, scale_log2);
            float* Ps = smem + S::P_OFF;
            float a_scale[S::RM], b_scale[S::RM];
#pragma unroll
            for (int i = 0; i < S::RM; ++i) {
                float mx = -INFINITY;
#pragma unroll
                for (int j2 = 0; j2 < S::RN; ++j2) mx = fmaxf(mx, s[i][j2]);
                const float m_tile = row_max8(mx);  // m~_ij = rowmax(S_ij)
                float sum = 0.f;
#pragma unroll
                for (int j2 = 0; j2 < S::RN; ++j2) {
                    const float p = exp2f(s[i][j2] - safe_max(m_tile));  // P~_ij = exp(S_ij - m~_ij)
                    sum += p;
                    Ps[(ty + S::TY * i) * S::PLD + tx + S::TX * j2] = round_as<T>(p);
                }
                const float l_tile = row_sum8(sum);             // l~_ij = rowsum(P~_ij)
                const float m_new = fmaxf(mi[i], m_tile);       // m_new = max(m_i, m~_ij)
                const float ref = safe_max(m_new);
                const float alpha = exp2f(mi[i] - ref);         // e^{m_i - m_new}
                const float beta = exp2f(m_tile - ref);         // e^{m~_ij - m_new}
                const float l_new = alpha * li[i] + beta * l_tile;
                const float inv = l_new > 0.f ? 1.f / l_new : 0.f;
                // O_i = diag(l_new)^-1 (diag(l_i) e^{m_i - m_new} O_i + e^{m~_ij - m_new} P~_ij V_j)
                a_scale[i] = li[i] * alpha * inv;
                b_scale[i] = beta * inv;
                mi[i] = m_new;
                li[i] = l_new;
            }
            __syncthreads();
            float4 pv[S::RM][S::G];
#pragma unroll
            for (int i = 0; i < S::RM; ++i)
#pragma unroll
                for (int g = 0; g < S::G; ++g) pv[i][g] = make_float4(0.f, 0.f, 0.f, 0.f);
            pv_tile<BQ, BK, D, DV>(pv, smem);

            // Write O_i, l_i, m_i back; on the block's last visit also L = m + log l.
            int o_writes = 0, st_writes = 0, lse_writes = 0;
            const bool last_visit = j == j_hi - 1;
#pragma unroll
            for (int i = 0; i < S::RM; ++i) {
                const int r = ty + S::TY * i;
                if (r >= rows) continue;
#pragma unroll
                for (int g = 0; g < S::G; ++g) {
                    const int c = 4 * (tx + S::TX * g);
                    const float ov[4] = {o[i][g].x, o[i][g].y, o[i][g].z, o[i][g].w};
                    const float pw[4] = {pv[i][g].x, pv[i][g].y, pv[i][g].z, pv[i][g].w};
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (c + e < DV) {
                            Ob[(size_t)(q0 + r) * DV + c + e] =
                                from_f32<T>(a_scale[i] * ov[e] + b_scale[i] * pw[e]);
                            ++o_writes;
                        }
                }
                if (tx == 0) {
                    Mb[q0 + r] = mi[i];
                    Lb[q0 + r] = li[i];
                    ++st_writes;
                    if (save_lse && last_visit) {
                        LSE[bh * n_q + q0 + r] =
                            li[i] > 0.f ? (mi[i] + log2f(li[i])) * 0.6931471805599453f : -INFINITY;
                        ++lse_writes;
                    }
                }
            }
            cnt.add(O_WRITE, o_writes);
            cnt.add(M_WRITE, st_writes);
            cnt.add(L_WRITE, st_writes);
            cnt.add(LSE_WRITE, lse_writes);
        }
    }
    cnt.flush(counts);
}

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK instantiates a few variants so CI type-checks the templates.
template __global__ void tiled_q_outer<64, 64, 64, 64, float>(const float*, const float*, const float*,
                                                              float*, float*, int, int, float,
                                                              int, int, int, const int*, int, int, unsigned long long*);
template __global__ void tiled_q_outer<7, 1, 20, 12, unsigned short>(
    const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*,
    int, int, float, int, int, int, const int*, int, int, unsigned long long*);
template __global__ void tiled_kv_outer<128, 32, 64, 64, unsigned short>(
    const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*,
    float*, float*, int, int, float, int, int, int, const int*, int, int, unsigned long long*);
template __global__ void tiled_kv_outer<1, 7, 16, 16, float>(const float*, const float*, const float*,
                                                             float*, float*, float*, float*, int,
                                                             int, float, int, int, int, const int*, int, int,
                                                             unsigned long long*);
#endif
