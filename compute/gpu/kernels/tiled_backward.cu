// tiled_backward.cu: FlashAttention-2's backward pass (Algorithm 2 of the FA2 paper) at any
// tile sizes, the teaching kernel beside tiled_attention.cu's forward.
//
// What it does (the schedule of compute/backward_schedule.py's tiled lane, K/V outer)
//   bwd_preprocess : one warp per query row: D_i = rowsum(dO_i ∘ O_i), and dQ_i = 0 written to
//                    the float32 dQ accumulator in global memory.
//   bwd_kv_outer   : one thread block per (key tile j, batch*head). K_j and V_j are staged once
//                    in shared memory; dK_j and dV_j accumulate there. Every query block i that
//                    can see tile j streams past: Q_i, dO_i, L_i, D_i are staged, S_ij and
//                    P_ij = exp(S_ij - L_i) are recomputed from the saved L (no m, no l), then
//                        dV_j += P~_ijᵀ dO_i,  dP_ij = dO_i V_jᵀ,  dS_ij = P_ij ∘ (dP_ij - D_i),
//                        dK_j += dS_ijᵀ Q_i · scale,  dQ_i += dS_ij K_j · scale,
//                    the last with atomicAdd into global memory: blocks of different key tiles
//                    update the same dQ_i concurrently, as FA2 does. After the query blocks,
//                    dK_j and dV_j are written once. S, P, dP and dS never leave the chip.
//   The mask (MaskArgs in tiled_common.cuh: causal either way, a window, packed sequences) says
//   which keys each row sees; a query block none of whose rows can see a key of tile j is
//   skipped (never loaded). Rows that see no key at all have L = -inf: their P is 0, so they
//   add nothing and get dQ = 0.
//
// Template parameters: BQ = block_q (B_r), BK = block_k (B_c), D = head size of Q/K, DV = head
// size of V, T = float or unsigned short (IEEE half bits, converted with cvt as in the forward).
// Shared tiles and all arithmetic are float32; as a GPU kernel does (and compute.attention_
// backward's dtype emulation models), P~ is rounded to T before P~ᵀ dO and dS is rounded to T
// before dSᵀ Q and dS K. dQ accumulates in float32 in global memory whatever T is (half atomics
// would round on every visit); the host casts it to T at the end.
//
// Thread layout: 256 threads; every phase is a loop over the elements of its output tile with a
// stride of 256, each thread forming whole dot products from shared memory. Consecutive threads
// take consecutive columns, so the operand indexed by the column is read contiguously (or, for
// K and V rows, with an odd row stride: no bank conflicts) and the other one is a broadcast.
// This is the plain FP32 version for teaching and counting, not a fast one.
//
// Instrumentation: compiled with -DCOUNT_TRANSFERS, every global load and store adds the number
// of elements it moved to a per-thread counter per (tensor, direction), flushed with atomicAdd
// at the end. An atomicAdd into dQ counts as one read and one write of that element (it is a
// read-modify-write in global memory). The totals equal compute.pass_ledger("backward", ...)'s
// tiled lane element for element.

#include "tiled_common.cuh"

namespace tiled_bwd {

// Counter slots (keep in step with compute/gpu/backward.py COUNTER_SLOTS).
enum Slot {
    Q_READ = 0, K_READ, V_READ, O_READ, DO_READ, L_READ, D_READ, D_WRITE, DQ_READ, DQ_WRITE,
    DK_WRITE, DV_WRITE, N_SLOTS
};

using Counter = TransferCounter<N_SLOTS>;

constexpr float LOG2E = 1.4426950408889634f;

// Shared-memory layout of bwd_kv_outer (floats). Keep in step with BackwardShape in backward.py.
template <int BQ, int BK, int D, int DV>
struct BwdShape {
    static constexpr int NT = 256;
    static constexpr int QLD = D + 1;   // row stride of Ks and Qs: odd, so column-wise reads of
    static constexpr int VLD = DV + 1;  // K or V rows by consecutive threads hit distinct banks
    static constexpr int K_OFF = 0;
    static constexpr int V_OFF = K_OFF + BK * QLD;
    static constexpr int DK_OFF = V_OFF + BK * VLD;   // dK_j accumulator (BK x D)
    static constexpr int DV_OFF = DK_OFF + BK * D;    // dV_j accumulator (BK x DV)
    static constexpr int Q_OFF = DV_OFF + BK * DV;
    static constexpr int DO_OFF = Q_OFF + BQ * QLD;
    static constexpr int P_OFF = DO_OFF + BQ * VLD;   // P_ij, then dS_ij in place (BQ x BK)
    static constexpr int L_OFF = P_OFF + BQ * BK;     // L_i in log2 units
    static constexpr int D_OFF = L_OFF + BQ;          // D_i
    static constexpr int SMEM_FLOATS = D_OFF + BQ;
};

// Copy `rows` rows of a (., width) global matrix into a shared tile of row stride LD.
template <typename T, int WIDTH, int LD, int NT>
__device__ __forceinline__ void stage(float* dst, const T* src, int rows, Counter& cnt, int slot) {
    int loaded = 0;
    for (int e = threadIdx.x; e < rows * WIDTH; e += NT) {
        dst[(e / WIDTH) * LD + e % WIDTH] = to_f32(src[e]);
        ++loaded;
    }
    cnt.add(slot, loaded);
}

}  // namespace tiled_bwd

// ---------------------------------------------------------------------------------------------
// Preprocessing: grid (ceil(n_q / 8), batch*heads), 256 threads = 8 warps, one query row each.
// Dvec is (batch*heads, n_q) float32; dQacc is (batch*heads, n_q, D) float32.
template <int D, int DV, typename T>
__global__ void __launch_bounds__(256)
bwd_preprocess(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ Dvec,
               float* __restrict__ dQacc, int n_q, unsigned long long* counts) {
    using namespace tiled_bwd;
    Counter cnt;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * 8 + threadIdx.x / 32;
    const size_t bh = blockIdx.y;
    if (row < n_q) {
        const size_t r = bh * n_q + row;
        float sum = 0.f;
        int reads = 0;
        for (int x = lane; x < DV; x += 32) {
            sum = fmaf(to_f32(dO[r * DV + x]), to_f32(O[r * DV + x]), sum);
            ++reads;
        }
#pragma unroll
        for (int w = 16; w > 0; w >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, w);
        cnt.add(O_READ, reads);
        cnt.add(DO_READ, reads);
        if (lane == 0) {
            Dvec[r] = sum;  // D_i = rowsum(dO_i ∘ O_i)
            cnt.add(D_WRITE, 1);
        }
        int zeros = 0;
        for (int x = lane; x < D; x += 32) {
            dQacc[r * D + x] = 0.f;  // dQ = 0 before any key tile adds to it
            ++zeros;
        }
        cnt.add(DQ_WRITE, zeros);
    }
    cnt.flush(counts);
}

// ---------------------------------------------------------------------------------------------
// Main loop, K/V outer: grid (T_c, batch*heads), 256 threads, SMEM_FLOATS*4 bytes.
// LSE holds L = m + log l per query row (natural units, -inf for rows that see no key), as the
// forward kernel saves it; Dvec is the preprocessing's D.
template <int BQ, int BK, int D, int DV, typename T>
__global__ void __launch_bounds__(256)
bwd_kv_outer(const T* __restrict__ Q, const T* __restrict__ K, const T* __restrict__ V,
             const T* __restrict__ dO, const float* __restrict__ LSE,
             const float* __restrict__ Dvec, float* dQacc, T* __restrict__ dK,
             T* __restrict__ dV, int n_q, int n_k, float scale, MASK_PARAMS,
             unsigned long long* counts) {
    using namespace tiled_bwd;
    using S = BwdShape<BQ, BK, D, DV>;
    MASK_FROM_PARAMS;
    extern __shared__ float smem[];
    float* Ks = smem + S::K_OFF;
    float* Vs = smem + S::V_OFF;
    float* dKs = smem + S::DK_OFF;
    float* dVs = smem + S::DV_OFF;
    float* Qs = smem + S::Q_OFF;
    float* dOs = smem + S::DO_OFF;
    float* Ps = smem + S::P_OFF;
    float* Ls = smem + S::L_OFF;
    float* Ds = smem + S::D_OFF;
    Counter cnt;
    const int tid = threadIdx.x;
    const size_t bh = blockIdx.y;
    const int k0 = blockIdx.x * BK, kr = min(BK, n_k - k0);
    const int t_r = (n_q + BQ - 1) / BQ;
    const float scale_log2 = scale * LOG2E;

    // Load K_j, V_j (unless no query row sees tile j: then no block is visited below and
    // dK_j = dV_j = 0 are written without K_j, V_j ever being loaded); dK_j = dV_j = 0 on chip.
    if (mask.tile_seen(blockIdx.x, n_q, n_k, BQ, BK)) {
        stage<T, D, S::QLD, S::NT>(Ks, K + (bh * n_k + k0) * D, kr, cnt, K_READ);
        stage<T, DV, S::VLD, S::NT>(Vs, V + (bh * n_k + k0) * DV, kr, cnt, V_READ);
    }
    for (int e = tid; e < kr * D; e += S::NT) dKs[e] = 0.f;
    for (int e = tid; e < kr * DV; e += S::NT) dVs[e] = 0.f;

    for (int qb = 0; qb < t_r; ++qb) {
        const int q0 = qb * BQ, rows = min(BQ, n_q - q0);
        // Skip block i if none of its rows sees a key of tile j (compute.mask's tile span).
        int j_lo, j_hi;
        mask.tile_span(q0, rows, n_q, n_k, BK, j_lo, j_hi);
        if ((int)blockIdx.x < j_lo || (int)blockIdx.x >= j_hi) continue;
        __syncthreads();  // the previous visit's reads of Qs, dOs, Ps, Ls, Ds are done
        const size_t row0 = bh * n_q + q0;
        stage<T, D, S::QLD, S::NT>(Qs, Q + row0 * D, rows, cnt, Q_READ);
        stage<T, DV, S::VLD, S::NT>(dOs, dO + row0 * DV, rows, cnt, DO_READ);
        int stat_reads = 0;
        for (int r = tid; r < rows; r += S::NT, ++stat_reads) {
            const float L = LSE[row0 + r];
            // L in log2 units; a row that sees no key (L = -inf) has only -inf scores, so any
            // finite stand-in gives P = exp(-inf) = 0 (never -inf - -inf = NaN).
            Ls[r] = L == -INFINITY ? 0.f : L * LOG2E;
            Ds[r] = Dvec[row0 + r];
        }
        cnt.add(L_READ, stat_reads);
        cnt.add(D_READ, stat_reads);
        __syncthreads();

        // S_ij = Q_i K_jᵀ · scale (masked), P_ij = exp(S_ij - L_i), recomputed from the saved L.
        for (int e = tid; e < rows * BK; e += S::NT) {
            const int r = e / BK, c = e % BK;
            float p = 0.f;
            int lo, hi;  // the row's visible keys
            mask.bounds(q0 + r, n_k, lo, hi);
            if (c < kr && k0 + c >= lo && k0 + c < hi) {
                const float* qr = Qs + r * S::QLD;
                const float* kc = Ks + c * S::QLD;
                float s = 0.f;
#pragma unroll 8
                for (int x = 0; x < D; ++x) s = fmaf(qr[x], kc[x], s);
                p = exp2f(s * scale_log2 - Ls[r]);
            }
            Ps[r * BK + c] = p;
        }
        __syncthreads();

        // dV_j ← dV_j + P~_ijᵀ dO_i, with P~ rounded to the input dtype.
        for (int e = tid; e < kr * DV; e += S::NT) {
            const int c = e / DV, x = e % DV;
            float acc = 0.f;
            for (int r = 0; r < rows; ++r)
                acc = fmaf(round_as<T>(Ps[r * BK + c]), dOs[r * S::VLD + x], acc);
            dVs[e] += acc;
        }
        __syncthreads();  // P~ is read; dS may overwrite it

        // dP_ij = dO_i V_jᵀ, dS_ij = P_ij ∘ (dP_ij - D_i), in place of P_ij, rounded to the dtype.
        for (int e = tid; e < rows * BK; e += S::NT) {
            const int r = e / BK, c = e % BK;
            const float p = Ps[r * BK + c];
            float ds = 0.f;
            if (p != 0.f) {  // masked or padded entries have P = 0, hence dS = 0
                const float* dor = dOs + r * S::VLD;
                const float* vc = Vs + c * S::VLD;
                float dp = 0.f;
#pragma unroll 8
                for (int x = 0; x < DV; ++x) dp = fmaf(dor[x], vc[x], dp);
                ds = round_as<T>(p * (dp - Ds[r]));
            }
            Ps[r * BK + c] = ds;
        }
        __syncthreads();

        // dK_j ← dK_j + dS_ijᵀ Q_i · scale (on chip).
        for (int e = tid; e < kr * D; e += S::NT) {
            const int c = e / D, x = e % D;
            float acc = 0.f;
            for (int r = 0; r < rows; ++r) acc = fmaf(Ps[r * BK + c], Qs[r * S::QLD + x], acc);
            dKs[e] = fmaf(acc, scale, dKs[e]);
        }
        // dQ_i ← dQ_i + dS_ij K_j · scale (in global memory, atomically: other key tiles'
        // blocks add to the same dQ_i).
        int dq_moves = 0;
        for (int e = tid; e < rows * D; e += S::NT) {
            const int r = e / D, x = e % D;
            float acc = 0.f;
            for (int c = 0; c < kr; ++c) acc = fmaf(Ps[r * BK + c], Ks[c * S::QLD + x], acc);
            atomicAdd(dQacc + (row0 + r) * D + x, acc * scale);
            ++dq_moves;
        }
        cnt.add(DQ_READ, dq_moves);
        cnt.add(DQ_WRITE, dq_moves);
    }
    __syncthreads();

    // dK_j and dV_j are complete: written to global memory once.
    int k_writes = 0, v_writes = 0;
    for (int e = tid; e < kr * D; e += S::NT, ++k_writes)
        dK[(bh * n_k + k0) * D + e] = from_f32<T>(dKs[e]);
    for (int e = tid; e < kr * DV; e += S::NT, ++v_writes)
        dV[(bh * n_k + k0) * DV + e] = from_f32<T>(dVs[e]);
    cnt.add(DK_WRITE, k_writes);
    cnt.add(DV_WRITE, v_writes);
    cnt.flush(counts);
}

#ifdef COMPILE_CHECK
// nvcc --ptx -DCOMPILE_CHECK instantiates a few variants so CI type-checks the templates.
template __global__ void bwd_preprocess<64, 64, float>(const float*, const float*, float*, float*,
                                                       int, unsigned long long*);
template __global__ void bwd_preprocess<20, 12, unsigned short>(
    const unsigned short*, const unsigned short*, float*, float*, int, unsigned long long*);
template __global__ void bwd_kv_outer<64, 64, 64, 64, float>(
    const float*, const float*, const float*, const float*, const float*, const float*, float*,
    float*, float*, int, int, float, int, int, int, const int*, int, unsigned long long*);
template __global__ void bwd_kv_outer<7, 1, 20, 12, unsigned short>(
    const unsigned short*, const unsigned short*, const unsigned short*, const unsigned short*,
    const float*, const float*, float*, unsigned short*, unsigned short*, int, int, float,
    int, int, int, const int*, int, unsigned long long*);
#endif
