// decode_attention.cu: one decode step (N_q new queries against a KV cache) with grouped-query
// heads, by split-KV (Flash-Decoding) and its combine, or by one block per K/V head.
//
// What it does
//   decode_stream  : one thread block per (split, K/V head). The G * N_q query rows of the head's
//                    group (G = H_q / H_kv) are staged once in shared memory, so every K/V byte
//                    the block reads serves the whole group. The block streams the keys of its
//                    split in chunks of BK keys through a ring of `stages` shared-memory buffers
//                    (cp.async: stages - 1 chunks are in flight while one is used, one barrier per
//                    chunk). Each of the NW warps takes its own quarter of every chunk and keeps
//                    its own m, l and a of every row by the online-softmax recurrence, with no
//                    block-wide step inside the loop; at the end the warps' states are merged
//                    (the combine's rescale, within the block) and the block writes either the
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
// row, so the block's job is to keep HBM busy: HBM needs tens of KB in flight per SM, so the
// ring keeps two 32 KB chunks in flight per block and two blocks fit one SM. A block that
// waits on three barriers per chunk, with one chunk in flight, streams at a few GB/s
// (DECODE_NOTES.md). With VEC the loads are 16-byte cp.async.cg (L2 only: the cache is read
// once) into rows padded by 16 bytes, which makes the 16-byte shared-memory reads of K and V
// conflict-free. Without VEC (a head size whose rows are not whole 16-byte vectors) the same
// loop runs on element loads. All arithmetic is float32; P~ stays float32 (no tensor cores
// read it, so rounding it would only add error).
//
// Template parameters: D, DV head sizes of Q/K and V; T = float, or 16-bit patterns of IEEE half
// (DT_F16) or bfloat16 (DT_BF16) in unsigned short, converted with cvt; VEC as above.
// Block: NT = 128 threads, NW = 4 warps. Scores: lane = (key, part of d), the parts summed with
// xor shuffles, so one score costs D / 32 * (keys per warp) FMAs per lane. Output: lane =
// (column group, key phase); P~ of a key comes from the score lane by a shuffle. Up to RB rows
// live in registers for the whole split; a larger group keeps each warp's state in shared
// memory and passes over the chunk RB rows at a time.
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

constexpr int NT = 128;  // threads per streaming block
constexpr int NW = NT / 32;
constexpr int RB = 8;     // query rows a lane carries in registers at a time
constexpr int CNT = 1024; // threads per combine block: all of a row's partials in flight at once
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
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }

__host__ __device__ constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }

// Sizes of one block's shared memory (mirrored by compute/gpu/decode.py StreamShape): a ring of
// `stages` K + V chunks, the float Q rows, then each warp's float state (a, m, l of every row),
// which reuses the ring's bytes when all rows live in registers during the loop.
template <int D, int DV, int DT>
struct Shape {
    using T = typename Elem<DT>::T;
    static constexpr int SZ = sizeof(T);
    static constexpr int VE = 16 / SZ;                   // elements per 16-byte vector
    static constexpr int BK = DT == DT_F32 ? 32 : 64;    // keys per chunk: 16 KB of K and of V at d = 128
    static constexpr int KPW = BK / NW;                  // keys of a chunk per warp
    static constexpr int KLD = D + VE;                   // row strides in elements: 16 bytes of padding
    static constexpr int VLD = DV + VE;
    static constexpr int STAGE = BK * (KLD + VLD);       // elements of one K + V chunk
    __host__ __device__ static constexpr int ring_bytes(int stages) { return stages * STAGE * SZ; }
    __host__ __device__ static constexpr int state_bytes(int rows) { return 4 * NW * rows * (DV + 2); }
    __host__ __device__ static constexpr bool state_in_ring(int rows, int stages) {
        return rows <= RB && state_bytes(rows) <= ring_bytes(stages);
    }
    __host__ __device__ static constexpr int state_offset(int rows, int stages) {
        return state_in_ring(rows, stages) ? 0 : ring_bytes(stages) + 4 * rows * D;
    }
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

// Chunk c of a shared-memory row as float: one 16-byte vector (VEC) or one element.
template <int DT, bool VEC, int CW>
__device__ __forceinline__ void chunk_f32(const typename Elem<DT>::T* row, int c, float (&f)[CW]) {
    using T = typename Elem<DT>::T;
    if constexpr (VEC) {
        constexpr int VE = 16 / sizeof(T);
        static_assert(CW == VE, "a VEC chunk is one 16-byte vector");
        T vec[VE];
        *reinterpret_cast<uint4*>(vec) = *reinterpret_cast<const uint4*>(row + c * VE);
#pragma unroll
        for (int x = 0; x < VE; ++x) f[x] = load_f32<DT>(vec[x]);
    } else {
        f[0] = load_f32<DT>(row[c]);
    }
}

// One warp's pass over its keys of a chunk for rows [r0, r0 + nr) (nr <= RB): scores, the
// online-softmax update of m, l (log2 units) and a (this lane's columns, this lane's key phase).
template <int D, int DV, int DT, bool VEC, int NA>
__device__ __forceinline__ void warp_chunk(const typename Elem<DT>::T* ks, const typename Elem<DT>::T* vs,
                                           const float* qs, int r0, int nr, int nw, int key0, int n_q,
                                           int last_seen, float scale_log2, float (&acc)[RB][NA],
                                           float (&m)[RB], float (&l)[RB], int lane) {
    using S = Shape<D, DV, DT>;
    using T = typename S::T;
    constexpr int KPW = S::KPW, VE = S::VE;
    constexpr int DCH = VEC ? D / VE : D;     // chunks of d (vectors, or elements)
    constexpr int VCH = VEC ? DV / VE : DV;   // column groups of d_v
    constexpr int CW = VEC ? VE : 1;          // elements per chunk / column group
    constexpr int LPK = 32 / KPW;             // lanes per key in the scores
    constexpr int OCG = pow2_at_least(VCH) < 32 ? pow2_at_least(VCH) : 32;  // column groups per pass
    constexpr int KPL = 32 / OCG;             // key phases in the output
    constexpr int NCP = (VCH + OCG - 1) / OCG;
    static_assert(NA == NCP * CW, "accumulator width");

    // Scores: lane = (key kj, part); part p sums chunks p, p + LPK, ... of d.
    const int kj = lane % KPW, part = lane / KPW;
    float sc[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) sc[i] = 0.f;
    if (kj < nw) {
        const T* kr = ks + kj * S::KLD;
#pragma unroll 2
        for (int c = part; c < DCH; c += LPK) {
            float kf[CW];
            chunk_f32<DT, VEC>(kr, c, kf);
#pragma unroll
            for (int i = 0; i < RB; ++i) {
                if (i < nr) {
                    const float* qr = qs + (r0 + i) * D + c * CW;
                    if constexpr (VEC) {
#pragma unroll
                        for (int x = 0; x < CW; x += 4) {  // Q rows are float4-aligned when VEC
                            float4 qv = *reinterpret_cast<const float4*>(qr + x);
                            sc[i] += qv.x * kf[x] + qv.y * kf[x + 1] + qv.z * kf[x + 2] + qv.w * kf[x + 3];
                        }
                    } else {
                        sc[i] += qr[0] * kf[0];
                    }
                }
            }
        }
    }
    // Online softmax per row; every lane ends with the row's m, l and its key's P~.
    float p[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) {
        p[i] = 0.f;
        if (i < nr) {  // uniform across the warp
            float x = sc[i];
#pragma unroll
            for (int off = KPW; off < 32; off *= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
            const bool vis = kj < nw && key0 + kj <= ((r0 + i) % n_q) + last_seen;
            x = vis ? x * scale_log2 : -INFINITY;
            float mx = x;
#pragma unroll
            for (int off = 1; off < KPW; off *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m[i], mx);
            const float pi = exp2f(x - safe(m_new));  // exp2(-inf) = 0 for masked keys
            float sum = pi;
#pragma unroll
            for (int off = 1; off < KPW; off *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
            const float alpha = m[i] == -INFINITY ? 0.f : exp2f(m[i] - m_new);
            l[i] = l[i] * alpha + sum;
            m[i] = m_new;
#pragma unroll
            for (int x2 = 0; x2 < NA; ++x2) acc[i][x2] *= alpha;
            p[i] = pi;
        }
    }
    // a += P~ V: lane = (column group cg, key phase kp); key kk's P~ sits in lane kk.
    const int cg = lane % OCG, kp = lane / OCG;
    for (int k0 = 0; k0 < nw; k0 += KPL) {  // uniform across the warp
        const int kk = k0 + kp;
        float pk[RB];
#pragma unroll
        for (int i = 0; i < RB; ++i) pk[i] = i < nr ? __shfl_sync(0xffffffffu, p[i], kk & 31) : 0.f;
        if (kk < nw) {
            const T* vr = vs + kk * S::VLD;
#pragma unroll
            for (int ci = 0; ci < NCP; ++ci) {
                const int g = cg + ci * OCG;
                if (g < VCH) {
                    float vf[CW];
                    chunk_f32<DT, VEC>(vr, g, vf);
#pragma unroll
                    for (int i = 0; i < RB; ++i)
                        if (i < nr)
#pragma unroll
                            for (int x = 0; x < CW; ++x) acc[i][ci * CW + x] += pk[i] * vf[x];
                }
            }
        }
    }
}

// Sum a lane's accumulators over the key phases (lanes cg, cg + OCG, ...): lanes kp = 0 hold them.
template <int OCG, int NA>
__device__ __forceinline__ void reduce_phases(float (&acc)[RB][NA]) {
#pragma unroll
    for (int i = 0; i < RB; ++i)
#pragma unroll
        for (int x = 0; x < NA; ++x)
#pragma unroll
            for (int off = OCG; off < 32; off *= 2) acc[i][x] += __shfl_xor_sync(0xffffffffu, acc[i][x], off);
}

// The block's result from its warps' states st_m, st_l [NWS][srows] and st_a [NWS][srows][DV]
// (rows < srows used): merge the warps (m* = max_w m_w, weights 2^(m_w - m*)), then write
// O = a / l (0 for a row that saw no key) and L = m + log l in natural units: O and L in T
// (FINAL, the one-pass schedule) or the split's partials O_s, L_s in float32.
template <int DV, int DT, bool FINAL, int NWS, int NTH>
__device__ __forceinline__ void finish(const float* st_a, const float* st_m, const float* st_l, int srows,
                                       int rows, int split, int heads, int g, typename Elem<DT>::T* out,
                                       float* o_part, float* l_part, float* lse, int save_lse, Counter& counter) {
    const int tid = threadIdx.x;
    const size_t row0 = (size_t)g * rows;
    const size_t total_rows = (size_t)heads * rows;
    for (int i = tid; i < rows * DV; i += NTH) {
        const int r = i / DV, col = i - r * DV;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NWS; ++w) mx = fmaxf(mx, st_m[w * srows + r]);
        float lsum = 0.f, a = 0.f;
#pragma unroll
        for (int w = 0; w < NWS; ++w) {
            const float mw = st_m[w * srows + r];
            const float wt = mw == -INFINITY ? 0.f : exp2f(mw - mx);
            lsum += wt * st_l[w * srows + r];
            a += wt * st_a[(w * srows + r) * DV + col];
        }
        const float o = lsum > 0.f ? a / lsum : 0.f;
        if (FINAL) {
            out[row0 * DV + i] = store_as<DT>(o);
            counter.add(O_WRITE, 1);
        } else {
            o_part[((size_t)split * total_rows + row0) * DV + i] = o;
            counter.add(OS_WRITE, 1);
        }
    }
    for (int r = tid; r < rows; r += NTH) {
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < NWS; ++w) mx = fmaxf(mx, st_m[w * srows + r]);
        float lsum = 0.f;
#pragma unroll
        for (int w = 0; w < NWS; ++w) {
            const float mw = st_m[w * srows + r];
            lsum += mw == -INFINITY ? 0.f : exp2f(mw - mx) * st_l[w * srows + r];
        }
        const float L = lsum > 0.f ? (mx + log2f(lsum)) * LN2 : -INFINITY;
        if (FINAL) {
            if (save_lse) { lse[row0 + r] = L; counter.add(L_WRITE, 1); }
        } else {
            l_part[(size_t)split * total_rows + row0 + r] = L;
            counter.add(LS_WRITE, 1);
        }
    }
}

template <int D, int DV, int DT, bool VEC, bool FINAL>
__device__ void stream(const typename Elem<DT>::T* __restrict__ q, const typename Elem<DT>::T* __restrict__ k,
                       const typename Elem<DT>::T* __restrict__ v, typename Elem<DT>::T* __restrict__ out,
                       float* __restrict__ o_part, float* __restrict__ l_part, float* __restrict__ lse,
                       int n_q, int n_k, int rows, int block_k, int t_c, int splits, float scale_log2,
                       int save_lse, int stages, unsigned long long* counts) {
    using S = Shape<D, DV, DT>;
    using T = typename S::T;
    constexpr int BK = S::BK, KLD = S::KLD, VLD = S::VLD, VE = S::VE, KPW = S::KPW;
    constexpr int VCH = VEC ? DV / VE : DV;
    constexpr int CW = VEC ? VE : 1;
    constexpr int OCG = pow2_at_least(VCH) < 32 ? pow2_at_least(VCH) : 32;
    constexpr int NCP = (VCH + OCG - 1) / OCG;
    constexpr int NA = NCP * CW;
    extern __shared__ __align__(16) unsigned char smem[];
    T* kv = reinterpret_cast<T*>(smem);
    float* qs = reinterpret_cast<float*>(smem + S::ring_bytes(stages));
    float* st_a = reinterpret_cast<float*>(smem + S::state_offset(rows, stages));  // [NW][rows][DV]
    float* st_m = st_a + NW * rows * DV;                                              // [NW][rows]
    float* st_l = st_m + NW * rows;                                                   // [NW][rows]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int split = blockIdx.x, g = blockIdx.y, n_kv = n_k;
    const int t0 = (int)((long long)split * t_c / splits), t1 = (int)((long long)(split + 1) * t_c / splits);
    const int c_begin = t0 * block_k, c_end = min(n_k, t1 * block_k);
    const int n_chunks = c_end > c_begin ? (c_end - c_begin + BK - 1) / BK : 0;
    const bool in_regs = rows <= RB;
    Counter counter;

    const T* kg = k + (size_t)g * n_kv * D;
    const T* vg = v + (size_t)g * n_kv * DV;
    // Chunk t goes to ring stage t % stages; a chunk past the split commits an empty group so
    // that every thread's group count stays in step with the chunk index.
    auto issue = [&](int t) {
        if (t < n_chunks) {
            const int chunk_start = c_begin + t * BK, n = min(BK, c_end - chunk_start);
            T* ks = kv + (t % stages) * S::STAGE;
            load_rows<D, DT, VEC>(ks, kg + (size_t)chunk_start * D, n, KLD, tid);
            load_rows<DV, DT, VEC>(ks + BK * KLD, vg + (size_t)chunk_start * DV, n, VLD, tid);
            // Each element of the chunk is moved by exactly one thread: count this thread's share.
            int mine_k = 0, mine_v = 0;
            constexpr int KW = VEC ? D / VE : D, VW = VEC ? DV / VE : DV;
            for (int i = tid; i < n * KW; i += NT) mine_k += VEC ? VE : 1;
            for (int i = tid; i < n * VW; i += NT) mine_v += VEC ? VE : 1;
            counter.add(K_READ, mine_k);
            counter.add(V_READ, mine_v);
        }
        if (VEC) cp_async_commit();
    };

    // Start the first chunks, then stage the group's query rows (as float) and clear the state.
    for (int t = 0; t < stages - 1; ++t) issue(t);
    const T* qg = q + (size_t)g * rows * D;
    for (int i = tid; i < rows * D; i += NT) {
        qs[i] = load_f32<DT>(qg[i]);
        counter.add(Q_READ, 1);
    }
    if (!in_regs) {
        for (int i = tid; i < NW * rows * DV; i += NT) st_a[i] = 0.f;
        for (int i = tid; i < NW * rows; i += NT) { st_m[i] = -INFINITY; st_l[i] = 0.f; }
    }

    float acc[RB][NA], m[RB], l[RB];
#pragma unroll
    for (int i = 0; i < RB; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int x = 0; x < NA; ++x) acc[i][x] = 0.f;
    }
    const int cg = lane % OCG, kp = lane / OCG;
    const int last_seen = n_k - n_q;  // row r sees keys c <= r + last_seen

    for (int t = 0; t < n_chunks; ++t) {
        if (VEC) {
            if (stages > 2) cp_async_wait_one(); else cp_async_wait_all();  // chunk t has landed
        }
        __syncthreads();  // everyone's copies of chunk t landed; chunk t - 1's stage is free
        issue(t + stages - 1);
        const int c0 = c_begin + t * BK, n = min(BK, c_end - c0);
        const int nw = max(0, min(KPW, n - warp * KPW));  // this warp's keys in the chunk
        if (nw == 0) continue;
        const T* ks = kv + (t % stages) * S::STAGE + warp * KPW * KLD;
        const T* vs = kv + (t % stages) * S::STAGE + BK * KLD + warp * KPW * VLD;
        const int key0 = c0 + warp * KPW;
        if (in_regs) {
            warp_chunk<D, DV, DT, VEC, NA>(ks, vs, qs, 0, rows, nw, key0, n_q, last_seen, scale_log2, acc, m, l, lane);
        } else {
            float* wa = st_a + warp * rows * DV;
            for (int r0 = 0; r0 < rows; r0 += RB) {
                const int nr = min(RB, rows - r0);
#pragma unroll
                for (int i = 0; i < RB; ++i) {
                    const int r = r0 + i;
                    m[i] = i < nr ? st_m[warp * rows + r] : -INFINITY;
                    l[i] = i < nr ? st_l[warp * rows + r] : 0.f;
#pragma unroll
                    for (int ci = 0; ci < NCP; ++ci)
#pragma unroll
                        for (int x = 0; x < CW; ++x) {
                            const int col = (cg + ci * OCG) * CW + x;
                            acc[i][ci * CW + x] = (i < nr && kp == 0 && col < DV) ? wa[r * DV + col] : 0.f;
                        }
                }
                warp_chunk<D, DV, DT, VEC, NA>(ks, vs, qs, r0, nr, nw, key0, n_q, last_seen, scale_log2, acc, m, l, lane);
                reduce_phases<OCG, NA>(acc);
#pragma unroll
                for (int i = 0; i < RB; ++i) {
                    const int r = r0 + i;
                    if (i < nr) {
                        if (lane == 0) { st_m[warp * rows + r] = m[i]; st_l[warp * rows + r] = l[i]; }
#pragma unroll
                        for (int ci = 0; ci < NCP; ++ci)
#pragma unroll
                            for (int x = 0; x < CW; ++x) {
                                const int col = (cg + ci * OCG) * CW + x;
                                if (kp == 0 && col < DV) wa[r * DV + col] = acc[i][ci * CW + x];
                            }
                    }
                }
                __syncwarp();
            }
        }
    }
    if (VEC) cp_async_wait_all();
    __syncthreads();  // the ring is no longer read: the warps' states may take its bytes

    if (in_regs) {
        reduce_phases<OCG, NA>(acc);
#pragma unroll
        for (int i = 0; i < RB; ++i) {
            if (i < rows) {
                if (lane == 0) { st_m[warp * rows + i] = m[i]; st_l[warp * rows + i] = l[i]; }
#pragma unroll
                for (int ci = 0; ci < NCP; ++ci)
#pragma unroll
                    for (int x = 0; x < CW; ++x) {
                        const int col = (cg + ci * OCG) * CW + x;
                        if (kp == 0 && col < DV) st_a[(warp * rows + i) * DV + col] = acc[i][ci * CW + x];
                    }
            }
        }
    }
    __syncthreads();

    finish<DV, DT, FINAL, NW, NT>(st_a, st_m, st_l, rows, rows, split, gridDim.y, g, out, o_part, l_part, lse,
                                  save_lse, counter);
    counter.flush(counts);
}

}  // namespace decode

#include "decode_mma.cuh"

// The same two schedules on the tensor-core block (decode_mma.cuh): 16-bit dtypes, d a multiple
// of 32, d_v of 64, at most 16 resident rows.
template <int D, int DV, int DT>
__global__ void __launch_bounds__(decode::MNT) decode_split_mma(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, float* o_part, float* l_part,
    int n_q, int n_k, int rows, int block_k, int t_c, int splits, float scale_log2, unsigned long long* counts) {
    decode::stream_mma<D, DV, DT, false>(q, k, v, nullptr, o_part, l_part, nullptr, n_q, n_k, rows, block_k,
                                         t_c, splits, scale_log2, 0, counts);
}

template <int D, int DV, int DT>
__global__ void __launch_bounds__(decode::MNT) decode_one_pass_mma(
    const unsigned short* q, const unsigned short* k, const unsigned short* v, unsigned short* out, float* lse,
    int n_q, int n_k, int rows, int block_k, int t_c, float scale_log2, int save_lse, unsigned long long* counts) {
    decode::stream_mma<D, DV, DT, true>(q, k, v, out, nullptr, nullptr, lse, n_q, n_k, rows, block_k, t_c, 1,
                                        scale_log2, save_lse, counts);
}

// Split-KV: each block writes its split's partial O_s (S', H_q N_q, DV) and L_s (S', H_q N_q).
template <int D, int DV, int DT, bool VEC>
__global__ void __launch_bounds__(decode::NT) decode_split(
    const typename decode::Elem<DT>::T* q, const typename decode::Elem<DT>::T* k,
    const typename decode::Elem<DT>::T* v, float* o_part, float* l_part, int n_q, int n_k, int rows,
    int block_k, int t_c, int splits, float scale_log2, int stages, unsigned long long* counts) {
    decode::stream<D, DV, DT, VEC, false>(q, k, v, nullptr, o_part, l_part, nullptr, n_q, n_k, rows,
                                          block_k, t_c, splits, scale_log2, 0, stages, counts);
}

// One-pass: one block per K/V head streams the whole cache and writes O in T (and L if asked).
template <int D, int DV, int DT, bool VEC>
__global__ void __launch_bounds__(decode::NT) decode_one_pass(
    const typename decode::Elem<DT>::T* q, const typename decode::Elem<DT>::T* k,
    const typename decode::Elem<DT>::T* v, typename decode::Elem<DT>::T* out, float* lse, int n_q,
    int n_k, int rows, int block_k, int t_c, float scale_log2, int save_lse, int stages,
    unsigned long long* counts) {
    decode::stream<D, DV, DT, VEC, true>(q, k, v, out, nullptr, nullptr, lse, n_q, n_k, rows, block_k,
                                         t_c, 1, scale_log2, save_lse, stages, counts);
}

// Block-wide max or sum of one value per thread (CNT threads); every thread gets the result.
template <bool MAX>
__device__ __forceinline__ float block_reduce(float x, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int off = 16; off; off >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, off);
        x = MAX ? fmaxf(x, y) : x + y;
    }
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    x = lane < decode::CNT / 32 ? scratch[lane] : (MAX ? -INFINITY : 0.f);
#pragma unroll
    for (int off = 16; off; off >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, off);
        x = MAX ? fmaxf(x, y) : x + y;
    }
    return x;
}

// Combine: one block of CNT threads per query row (H_q N_q of them); L_s staged once in shared
// memory, then the threads as (split slice, column vector) pairs sum w_s O_s with float4 loads
// (several in flight per thread) and the slices are summed in shared memory. Every partial is
// read, even one whose weight is 0 (a split that saw no key), as the ledger counts.
template <int DV, int DT>
__global__ void __launch_bounds__(decode::CNT) decode_combine(
    const float* __restrict__ o_part, const float* __restrict__ l_part,
    typename decode::Elem<DT>::T* __restrict__ out, float* __restrict__ lse, int total_rows, int splits,
    int save_lse, unsigned long long* counts) {
    using namespace decode;
    constexpr int CW = DV % 4 == 0 ? 4 : 1;      // floats per load
    constexpr int NCV = DV / CW;                  // column vectors of a row
    constexpr int COLT = NCV < CNT ? NCV : CNT;   // column vectors per pass
    constexpr int SLICES = CNT / COLT;
    extern __shared__ __align__(16) float cs[];  // SLICES x COLT x CW partial sums, then the weights
    float* red = cs;
    float* w = cs + SLICES * COLT * CW;
    __shared__ float scratch[CNT / 32];
    const int row = blockIdx.x, tid = threadIdx.x;
    Counter counter;
    float mx = -INFINITY;
    for (int s = tid; s < splits; s += CNT) {
        const float x = l_part[(size_t)s * total_rows + row];
        w[s] = x;
        mx = fmaxf(mx, x);
        counter.add(LS_READ, 1);
    }
    const float m_star = block_reduce<true>(mx, scratch);
    float lsum = 0.f;
    for (int s = tid; s < splits; s += CNT) {
        const float x = w[s] == -INFINITY ? 0.f : expf(w[s] - m_star);
        w[s] = x;
        lsum += x;
    }
    const float l_sum = block_reduce<false>(lsum, scratch);  // its barriers also publish w
    const int slice = tid / COLT, cv = tid % COLT;
    for (int v0 = 0; v0 < NCV; v0 += COLT) {
        const int vi = v0 + cv;
        float acc[CW];
#pragma unroll
        for (int x = 0; x < CW; ++x) acc[x] = 0.f;
        if (slice < SLICES && vi < NCV) {
            const float* src = o_part + (size_t)row * DV + vi * CW;
#pragma unroll 8
            for (int s = slice; s < splits; s += SLICES) {
                const float ws = w[s];
                if constexpr (CW == 4) {
                    const float4 o = *reinterpret_cast<const float4*>(src + (size_t)s * total_rows * DV);
                    acc[0] += ws * o.x; acc[1] += ws * o.y; acc[2] += ws * o.z; acc[3] += ws * o.w;
                } else {
                    acc[0] += ws * src[(size_t)s * total_rows * DV];
                }
                counter.add(OS_READ, CW);
            }
        }
        if (slice < SLICES)
#pragma unroll
            for (int x = 0; x < CW; ++x) red[(slice * COLT + cv) * CW + x] = acc[x];
        __syncthreads();
        for (int c = tid; c < COLT * CW; c += CNT) {
            const int col = v0 * CW + c;
            if (col < DV) {
                float sum = 0.f;
                for (int x = 0; x < SLICES; ++x) sum += red[x * COLT * CW + c];
                out[(size_t)row * DV + col] = store_as<DT>(l_sum > 0.f ? sum / l_sum : 0.f);
                counter.add(O_WRITE, 1);
            }
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
template __global__ void decode_split_mma<128, 128, decode::DT_BF16>(
    const unsigned short*, const unsigned short*, const unsigned short*, float*, float*, int, int, int, int, int,
    int, float, unsigned long long*);
template __global__ void decode_split_mma<64, 64, decode::DT_F16>(
    const unsigned short*, const unsigned short*, const unsigned short*, float*, float*, int, int, int, int, int,
    int, float, unsigned long long*);
template __global__ void decode_one_pass_mma<128, 128, decode::DT_F16>(
    const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*, int, int, int,
    int, int, float, int, unsigned long long*);
template __global__ void decode_split<128, 128, decode::DT_F16, true>(
    const unsigned short*, const unsigned short*, const unsigned short*, float*, float*, int, int, int,
    int, int, int, float, int, unsigned long long*);
template __global__ void decode_split<128, 128, decode::DT_BF16, true>(
    const unsigned short*, const unsigned short*, const unsigned short*, float*, float*, int, int, int,
    int, int, int, float, int, unsigned long long*);
template __global__ void decode_split<5, 3, decode::DT_F32, false>(
    const float*, const float*, const float*, float*, float*, int, int, int, int, int, int, float,
    int, unsigned long long*);
template __global__ void decode_one_pass<128, 128, decode::DT_BF16, true>(
    const unsigned short*, const unsigned short*, const unsigned short*, unsigned short*, float*, int,
    int, int, int, int, float, int, int, unsigned long long*);
template __global__ void decode_combine<128, decode::DT_BF16>(const float*, const float*, unsigned short*,
                                                              float*, int, int, int, unsigned long long*);
#endif
