// decode_attention.cu: one decode step (N_q new queries against a KV cache) with grouped-query
// heads, by split-KV (Flash-Decoding) and its combine, or by one block per K/V head.
//
// What it does
//   decode_stream  : one thread block per (split, K/V head). The G * N_q query rows of the head's
//                    group (G = H_q / H_kv) are staged once in shared memory, so every K/V byte
//                    the block reads serves the whole group. The block streams the keys of its
//                    split in chunks of BK through shared memory (cp.async, double buffered: the
//                    next chunk is in flight while this one is used), keeps m, l and a of every
//                    row by the online-softmax recurrence, and at the end writes either the
//                    split's partial O_s = a / l and L_s = m + log l (float32, FINAL = false) or,
//                    when one block covers the whole cache (the one-pass schedule), O in T.
//   decode_combine : one block per query row merges the S' partials: m* = max_s L_s,
//                    w_s = exp(L_s - m*), O = sum_s w_s O_s / sum_s w_s, L = m* + log sum_s w_s
//                    (the forward's alpha-rescale applied across splits).
//
// Splits follow compute/decode/problem.py: the cache is cut into T_c = ceil(N_k / block_k)
// tiles and split s of S' covers tiles [s T_c / S', (s+1) T_c / S'). block_k is the ledger's tile
// width (a run-time value); BK is only how many keys one pass through shared memory holds.
// The mask is causal with bottom-right alignment: resident row (h_local, r) sees keys
// c <= r + N_k - N_q, so every new token sees the whole cache before it.
//
// Why memory-bound code looks like this: at N_q = 1 each K/V element takes two FMAs per query
// row, so the block's job is to keep HBM busy. With VEC the loads are 16-byte cp.async.cg
// (L2 only: the cache is read once) into rows padded by 16 bytes, which also makes the 16-byte
// shared-memory reads of K conflict-free. Without VEC (a head size whose rows are not whole
// 16-byte vectors) the same loop runs on element loads. All arithmetic is float32; P~ stays
// float32 (no tensor cores read it, so rounding it would only add error).
//
// Template parameters: D, DV head sizes of Q/K and V; T = float, or 16-bit patterns of IEEE half
// (DT_F16) or bfloat16 (DT_BF16) in unsigned short, converted with cvt; VEC as above.
// Block: NT = 128 threads. Score (r, j) is computed by DS lanes each taking every DS-th chunk of
// d; output entry (r, column group) by KS lanes each taking every KS-th key; both reduced with
// xor shuffles, so a single query row still keeps all 128 threads busy. Each thread carries up
// to RPT rows at once, so one vector of K or V read from shared memory feeds several rows and
// the FMA chains of different rows run side by side.
//
// Instrumentation: with -DCOUNT_TRANSFERS every global load and store adds the elements it moved
// to a per-thread counter per (tensor, direction), flushed with atomicAdd; the totals equal
// compute/decode/ledger.py's (tests/compute/gpu/test_decode_kernel.py).

#include "tiled_common.cuh"

namespace decode {

// Counter slots (keep in step with compute/gpu/decode.py COUNTER_SLOTS).
enum Slot { Q_READ = 0, K_READ, V_READ, O_WRITE, OS_READ, OS_WRITE, LS_READ, LS_WRITE, L_WRITE, N_SLOTS };
using Counter = TransferCounter<N_SLOTS>;

enum DType { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };

constexpr int NT = 128;  // threads per block
constexpr int RPT = 4;   // query rows one thread carries at a time
constexpr float LN2 = 0.6931471805599453f;

template <int DT> struct Elem { using T = unsigned short; };
template <> struct Elem<DT_F32> { using T = float; };

template <int DT> __device__ __forceinline__ float load_f32(const typename Elem<DT>::T x);
template <> __device__ __forceinline__ float load_f32<DT_F32>(const float x) { return x; }
template <> __device__ __forceinline__ float load_f32<DT_F16>(const unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
template <> __device__ __forceinline__ float load_f32<DT_BF16>(const unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}
template <int DT> __device__ __forceinline__ typename Elem<DT>::T store_as(float x);
template <> __device__ __forceinline__ float store_as<DT_F32>(float x) { return x; }
template <> __device__ __forceinline__ unsigned short store_as<DT_F16>(float x) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
template <> __device__ __forceinline__ unsigned short store_as<DT_BF16>(float x) {
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Sizes of one block's shared memory (mirrored by compute/gpu/decode.py StreamShape).
template <int D, int DV, int DT>
struct Shape {
    using T = typename Elem<DT>::T;
    static constexpr int SZ = sizeof(T);
    static constexpr int VE = 16 / SZ;                   // elements per 16-byte vector
    static constexpr int BK = DT == DT_F32 ? 32 : 64;    // keys per chunk: 16 KB of K and of V at d = 128
    static constexpr int KLD = D + VE;                   // row strides in elements: 16 bytes of padding
    static constexpr int VLD = DV + VE;
    static constexpr int STAGE = BK * (KLD + VLD);       // elements of one K + V chunk
    // Bytes: 2 stages of K/V in T, then float Q (R x D), P (R x BK), a (R x DV), m, l, alpha (R).
    __host__ __device__ static constexpr int kv_bytes() { return 2 * STAGE * SZ; }
    __host__ __device__ static constexpr int float_per_row() { return D + BK + DV + 3; }
};

__device__ __forceinline__ float safe(float m) { return m == -INFINITY ? 0.f : m; }

// Largest power of two <= x, at most cap (x >= 1).
__device__ __forceinline__ int lanes_for(int x, int cap) {
    int p = 1;
    while (p * 2 <= x && p * 2 <= cap) p *= 2;
    return p;
}

// Copy `n` keys starting at key `c0` of one head's K (or V) rows into shared rows of stride ld.
template <int W, int DT, bool VEC>
__device__ __forceinline__ void load_rows(typename Elem<DT>::T* dst, const typename Elem<DT>::T* src,
                                          int n, int ld, int tid) {
    using T = typename Elem<DT>::T;
    if constexpr (VEC) {
        constexpr int VE = 16 / sizeof(T);
        constexpr int VPR = W / VE;  // vectors per row
        for (int i = tid; i < n * VPR; i += NT) {
            int row = i / VPR, col = (i - row * VPR) * VE;
            cp_async16(dst + row * ld + col, src + (size_t)row * W + col);
        }
    } else {
        for (int i = tid; i < n * W; i += NT) {
            int row = i / W, col = i - row * W;
            dst[row * ld + col] = src[(size_t)row * W + col];
        }
    }
}

template <int D, int DV, int DT, bool VEC, bool FINAL>
__device__ void stream(const typename Elem<DT>::T* __restrict__ q, const typename Elem<DT>::T* __restrict__ k,
                       const typename Elem<DT>::T* __restrict__ v, typename Elem<DT>::T* __restrict__ out,
                       float* __restrict__ o_part, float* __restrict__ l_part, float* __restrict__ lse,
                       int n_q, int n_k, int rows, int block_k, int t_c, int splits, float scale_log2,
                       int save_lse, unsigned long long* counts) {
    using S = Shape<D, DV, DT>;
    using T = typename S::T;
    constexpr int BK = S::BK, KLD = S::KLD, VLD = S::VLD, VE = S::VE;
    extern __shared__ __align__(16) unsigned char smem[];
    T* kv = reinterpret_cast<T*>(smem);
    float* qs = reinterpret_cast<float*>(smem + S::kv_bytes());
    float* ps = qs + rows * D;
    float* as = ps + rows * BK;
    float* ms = as + rows * DV;
    float* ls = ms + rows;
    float* alphas = ls + rows;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, g = blockIdx.y, n_kv = n_k;
    const int t0 = (int)((long long)split * t_c / splits), t1 = (int)((long long)(split + 1) * t_c / splits);
    const int c_begin = t0 * block_k, c_end = min(n_k, t1 * block_k);
    Counter counter;

    const T* kg = k + (size_t)g * n_kv * D;
    const T* vg = v + (size_t)g * n_kv * DV;
    auto issue = [&](int chunk_start, int stage) {
        int n = min(BK, c_end - chunk_start);
        T* ks = kv + stage * S::STAGE;
        load_rows<D, DT, VEC>(ks, kg + (size_t)chunk_start * D, n, KLD, tid);
        load_rows<DV, DT, VEC>(ks + BK * KLD, vg + (size_t)chunk_start * DV, n, VLD, tid);
        if (VEC) cp_async_commit();
        // Each element of the chunk is moved by exactly one thread: count this thread's share.
        int mine_k = 0, mine_v = 0;
        constexpr int KW = VEC ? D / VE : D, VW = VEC ? DV / VE : DV;
        for (int i = tid; i < n * KW; i += NT) mine_k += VEC ? VE : 1;
        for (int i = tid; i < n * VW; i += NT) mine_v += VEC ? VE : 1;
        counter.add(K_READ, mine_k);
        counter.add(V_READ, mine_v);
    };

    // Start the first chunk, then stage the group's query rows (as float) and clear the state.
    if (c_begin < c_end) issue(c_begin, 0);
    const T* qg = q + (size_t)g * rows * D;
    for (int i = tid; i < rows * D; i += NT) {
        qs[i] = load_f32<DT>(qg[i]);
        counter.add(Q_READ, 1);
    }
    for (int i = tid; i < rows * DV; i += NT) as[i] = 0.f;
    for (int i = tid; i < rows; i += NT) { ms[i] = -INFINITY; ls[i] = 0.f; }

    // Thread layouts. Scores: thread = (row batch rb, key j, part p of d): DS lanes share
    // one score, NRB_S row batches split the rows (rows rb, rb + NRB_S, ... up to RPT of them at
    // a time), so one K vector read from shared memory feeds RPT rows. Output: thread = (row
    // batch, column group cg, key part): KS lanes split the keys of one (rows, cg) entry and one
    // V vector feeds RPT rows. The parts are neighbouring lanes, summed with xor shuffles.
    constexpr int DCH = VEC ? D / VE : D;        // chunks of d (vectors, or elements)
    constexpr int VCH = VEC ? DV / VE : DV;      // column groups of d_v
    constexpr int CW = VEC ? VE : 1;             // elements per chunk / columns per group
    const int ds = lanes_for(max(1, NT / (rows * BK)), min(8, DCH));
    const int nrb_s = max(1, NT / (BK * ds));
    constexpr int CG_SPAN = VCH < NT ? VCH : NT;  // column groups one pass covers
    constexpr int O_SLOTS = NT / CG_SPAN;         // threads per column group
    const int nrb_o = lanes_for(min(O_SLOTS, (rows + RPT - 1) / RPT), O_SLOTS);
    const int ks_lanes = lanes_for(O_SLOTS / nrb_o, 8);
    const int last_seen = n_k - n_q;              // row r sees keys c <= r + last_seen

    int stage = 0;
    for (int c0 = c_begin; c0 < c_end; c0 += BK, stage ^= 1) {
        const int n = min(BK, c_end - c0);
        if (VEC) cp_async_wait_all();
        __syncthreads();  // chunk `stage` has landed; the other stage's readers are done
        if (c0 + BK < c_end) issue(c0 + BK, stage ^ 1);
        const T* ks = kv + stage * S::STAGE;
        const T* vs = ks + BK * KLD;

        // S = Q K^T * scale * log2(e), masked: ps[r][j].
        {
            const int j = (tid % (BK * ds)) / ds, part = tid % ds, rb = tid / (BK * ds);
            const T* kr = ks + j * KLD;
            for (int r0 = 0; r0 < rows; r0 += nrb_s * RPT) {  // uniform across the block
                float acc[RPT][2];
#pragma unroll
                for (int i = 0; i < RPT; ++i) acc[i][0] = acc[i][1] = 0.f;
                if (rb < nrb_s && j < n) {
#pragma unroll 2
                    for (int c = part; c < DCH; c += ds) {
                        float kf[CW];
                        if constexpr (VEC) {
                            T kvec[VE];
                            *reinterpret_cast<uint4*>(kvec) = *reinterpret_cast<const uint4*>(kr + c * VE);
#pragma unroll
                            for (int x = 0; x < VE; ++x) kf[x] = load_f32<DT>(kvec[x]);
                        } else {
                            kf[0] = load_f32<DT>(kr[c]);
                        }
#pragma unroll
                        for (int i = 0; i < RPT; ++i) {
                            const int r = r0 + rb + nrb_s * i;
                            if (r < rows) {
                                const float* qr = qs + r * D + c * CW;
                                if constexpr (VEC) {
#pragma unroll
                                    for (int x = 0; x < VE; x += 4) {  // Q rows are float4-aligned when VEC
                                        float4 qv = *reinterpret_cast<const float4*>(qr + x);
                                        acc[i][(x / 4) & 1] += qv.x * kf[x] + qv.y * kf[x + 1] + qv.z * kf[x + 2] + qv.w * kf[x + 3];
                                    }
                                } else {
                                    acc[i][0] += qr[0] * kf[0];
                                }
                            }
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < RPT; ++i) {
                    float sum = acc[i][0] + acc[i][1];
                    for (int off = 1; off < ds; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
                    const int r = r0 + rb + nrb_s * i;
                    if (rb < nrb_s && r < rows && part == 0) {
                        bool visible = j < n && c0 + j <= (r % n_q) + last_seen;
                        ps[r * BK + j] = visible ? sum * scale_log2 : -INFINITY;
                    }
                }
            }
        }
        __syncthreads();

        // Online softmax, one warp per row: m, l rescaled by alpha; P~ = exp2(s - m).
        for (int r = warp; r < rows; r += NT / 32) {
            float* pr = ps + r * BK;
            float mx = -INFINITY;
            for (int j = lane; j < BK; j += 32) mx = fmaxf(mx, pr[j]);
            for (int off = 16; off; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            float m_old = ms[r], m_new = fmaxf(m_old, mx);
            float sum = 0.f;
            for (int j = lane; j < BK; j += 32) {
                float p = exp2f(pr[j] - safe(m_new));  // exp2(-inf) = 0 for masked keys
                pr[j] = p;
                sum += p;
            }
            for (int off = 16; off; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            __syncwarp();
            if (lane == 0) {
                float alpha = exp2f(safe(m_old) - safe(m_new));
                alpha = m_old == -INFINITY ? 0.f : alpha;
                alphas[r] = alpha;
                ls[r] = ls[r] * alpha + sum;
                ms[r] = m_new;
            }
        }
        __syncthreads();

        // a = alpha a + P~ V: (rows, column group) by ks_lanes lanes over every ks-th key.
        {
            const int part = tid % ks_lanes, rb = tid / (ks_lanes * CG_SPAN);
            for (int cg0 = 0; cg0 < VCH; cg0 += CG_SPAN)  // uniform across the block
            for (int r0 = 0; r0 < rows; r0 += nrb_o * RPT) {
                const int cg = cg0 + (tid / ks_lanes) % CG_SPAN;
                const bool mine = rb < nrb_o && cg < VCH;
                float acc[RPT][CW];
#pragma unroll
                for (int i = 0; i < RPT; ++i)
#pragma unroll
                    for (int x = 0; x < CW; ++x) acc[i][x] = 0.f;
                if (mine) {
#pragma unroll 2
                    for (int j = part; j < n; j += ks_lanes) {
                        float vf[CW];
                        if constexpr (VEC) {
                            T vvec[VE];
                            *reinterpret_cast<uint4*>(vvec) = *reinterpret_cast<const uint4*>(vs + j * VLD + cg * VE);
#pragma unroll
                            for (int x = 0; x < VE; ++x) vf[x] = load_f32<DT>(vvec[x]);
                        } else {
                            vf[0] = load_f32<DT>(vs[j * VLD + cg]);
                        }
#pragma unroll
                        for (int i = 0; i < RPT; ++i) {
                            const int r = r0 + rb + nrb_o * i;
                            if (r < rows) {
                                const float p = ps[r * BK + j];
#pragma unroll
                                for (int x = 0; x < CW; ++x) acc[i][x] += p * vf[x];
                            }
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < RPT; ++i) {
                    const int r = r0 + rb + nrb_o * i;
#pragma unroll
                    for (int x = 0; x < CW; ++x)
                        for (int off = 1; off < ks_lanes; off *= 2) acc[i][x] += __shfl_xor_sync(0xffffffffu, acc[i][x], off);
                    if (mine && r < rows && part == 0) {
                        const float alpha = alphas[r];
#pragma unroll
                        for (int x = 0; x < CW; ++x) {
                            float* o = as + r * DV + cg * CW + x;
                            *o = *o * alpha + acc[i][x];
                        }
                    }
                }
            }
        }
    }
    __syncthreads();

    // The block's result: O = a / l (0 for a row that saw no key), L = m + log l in natural units.
    const size_t row0 = (size_t)g * rows;
    for (int i = tid; i < rows * DV; i += NT) {
        int r = i / DV;
        float l = ls[r], o = l > 0.f ? as[i] / l : 0.f;
        if (FINAL) {
            out[row0 * DV + i] = store_as<DT>(o);
            counter.add(O_WRITE, 1);
        } else {
            size_t total_rows = (size_t)gridDim.y * rows;
            o_part[((size_t)split * total_rows + row0) * DV + i] = o;
            counter.add(OS_WRITE, 1);
        }
    }
    for (int r = tid; r < rows; r += NT) {
        float l = ls[r], L = l > 0.f ? (ms[r] + log2f(l)) * LN2 : -INFINITY;
        if (FINAL) {
            if (save_lse) { lse[row0 + r] = L; counter.add(L_WRITE, 1); }
        } else {
            size_t total_rows = (size_t)gridDim.y * rows;
            l_part[(size_t)split * total_rows + row0 + r] = L;
            counter.add(LS_WRITE, 1);
        }
    }
    counter.flush(counts);
}

}  // namespace decode

// Split-KV: each block writes its split's partial O_s (S', H_q N_q, DV) and L_s (S', H_q N_q).
template <int D, int DV, int DT, bool VEC>
__global__ void __launch_bounds__(decode::NT) decode_split(
    const typename decode::Elem<DT>::T* q, const typename decode::Elem<DT>::T* k,
    const typename decode::Elem<DT>::T* v, float* o_part, float* l_part, int n_q, int n_k, int rows,
    int block_k, int t_c, int splits, float scale_log2, unsigned long long* counts) {
    decode::stream<D, DV, DT, VEC, false>(q, k, v, nullptr, o_part, l_part, nullptr, n_q, n_k, rows,
                                          block_k, t_c, splits, scale_log2, 0, counts);
}

// One-pass: one block per K/V head streams the whole cache and writes O in T (and L if asked).
template <int D, int DV, int DT, bool VEC>
__global__ void __launch_bounds__(decode::NT) decode_one_pass(
    const typename decode::Elem<DT>::T* q, const typename decode::Elem<DT>::T* k,
    const typename decode::Elem<DT>::T* v, typename decode::Elem<DT>::T* out, float* lse, int n_q,
    int n_k, int rows, int block_k, int t_c, float scale_log2, int save_lse, unsigned long long* counts) {
    decode::stream<D, DV, DT, VEC, true>(q, k, v, out, nullptr, nullptr, lse, n_q, n_k, rows, block_k,
                                         t_c, 1, scale_log2, save_lse, counts);
}

// Combine: one block per query row (H_q N_q of them); L_s staged once in shared memory, then
// NT threads as (split slice, column) pairs sum w_s O_s and reduce the slices in shared memory.
// Every partial is read, even one whose weight is 0 (a split that saw no key), as the ledger counts.
template <int DV, int DT>
__global__ void __launch_bounds__(decode::NT) decode_combine(
    const float* __restrict__ o_part, const float* __restrict__ l_part,
    typename decode::Elem<DT>::T* __restrict__ out, float* __restrict__ lse, int total_rows, int splits,
    int save_lse, unsigned long long* counts) {
    using namespace decode;
    extern __shared__ __align__(16) float cs[];  // splits weights, then NT partial sums
    float* w = cs;
    float* red = cs + splits;
    __shared__ float m_star, l_sum;
    const int row = blockIdx.x, tid = threadIdx.x;
    Counter counter;
    for (int s = tid; s < splits; s += NT) {
        w[s] = l_part[(size_t)s * total_rows + row];
        counter.add(LS_READ, 1);
    }
    __syncthreads();
    if (tid == 0) {
        float m = -INFINITY;
        for (int s = 0; s < splits; ++s) m = fmaxf(m, w[s]);
        m_star = m;
    }
    __syncthreads();
    for (int s = tid; s < splits; s += NT) w[s] = w[s] == -INFINITY ? 0.f : expf(w[s] - m_star);
    __syncthreads();
    if (tid == 0) {
        float l = 0.f;
        for (int s = 0; s < splits; ++s) l += w[s];
        l_sum = l;
    }
    __syncthreads();
    // 32 columns (one warp's worth, coalesced) by NT / 32 split slices per pass over the columns.
    constexpr int COLS = DV < 32 ? DV : 32;
    constexpr int SLICES = NT / COLS;
    const int slice = tid / COLS, col = tid % COLS;
    for (int c0 = 0; c0 < DV; c0 += COLS) {
        const int c = c0 + col;
        float acc = 0.f;
        if (slice < SLICES && c < DV) {
            for (int s = slice; s < splits; s += SLICES) {
                acc += w[s] * o_part[((size_t)s * total_rows + row) * DV + c];
                counter.add(OS_READ, 1);
            }
        }
        red[tid] = acc;
        __syncthreads();
        if (tid < COLS && c < DV) {
            float sum = 0.f;
            for (int x = 0; x < SLICES; ++x) sum += red[x * COLS + tid];
            out[(size_t)row * DV + c] = store_as<DT>(l_sum > 0.f ? sum / l_sum : 0.f);
            counter.add(O_WRITE, 1);
        }
        __syncthreads();
    }
    if (save_lse && tid == 0) {
        lse[row] = l_sum > 0.f ? m_star + logf(l_sum) : -INFINITY;
        counter.add(L_WRITE, 1);
    }
    counter.flush(counts);
}

#ifdef COMPILE_CHECK
template __global__ void decode_split<128, 128, decode::DT_F16, true>(
    const unsigned short*, const unsigned short*, const unsigned short*, float*, float*, int, int, int,
    int, int, int, float, unsigned long long*);
template __global__ void decode_split<5, 3, decode::DT_F32, false>(
    const float*, const float*, const float*, float*, float*, int, int, int, int, int, int, float,
    unsigned long long*);
template __global__ void decode_one_pass<128, 128, decode::DT_BF16, true>(
    const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*, int,
    int, int, int, int, float, int, unsigned long long*);
template __global__ void decode_combine<128, decode::DT_BF16>(const float*, const float*, unsigned short*,
                                                              float*, int, int, int, unsigned long long*);
#endif
