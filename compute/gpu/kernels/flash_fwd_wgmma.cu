// FlashAttention forward on Hopper tensor cores with wgmma (sm_90a only).
//
// Same contract as flash_fwd_mma.cu: Q (B, H, Nq, D), K/V (B, H / group, Nk, D), O like Q, at
// the element strides of FaFwdLayout (flash_fwd_layout.cuh), fp16 (DT = 0) or bf16 bits
// (DT = 1), fp32 accumulation; LSE (B, H, Nq) fp32 contiguous, natural log, optional
// (nullptr), -inf for rows that see no key; bottom-right causal alignment.
//
// Schedule: one CTA per (query block, batch*head); NWG warpgroups of 128 threads, each owns
// 64 query rows (BM = 64 * NWG) and keeps its O accumulator in registers.
//   * Q, K, V tiles live in shared memory in the canonical 128-byte-swizzled layout wgmma
//     reads (64-column panels of 128-byte rows, 16-byte chunk c of row r at c ^ (r & 7),
//     panel bases 1024-byte aligned), filled with 16-byte cp.async (zero-fill past the ends)
//     in a 2-stage pipeline, then fence.proxy.async + barrier before wgmma reads them.
//   * S = Q K^T: wgmma.m64nBNk16, A = Q and B = K both K-major from shared memory.
//   * O += P V: wgmma.m64nDk16 with A = P from registers (the S accumulator converted to
//     fp16/bf16 pairs in place: the accumulator and A-fragment layouts coincide) and B = V
//     MN-major from shared memory (transpose bit set).
//   * Online softmax in the exp2 domain (scale * log2 e folded into one FFMA), quad shuffles
//     for the row max, row sum reduced once at the end; causal tiles past the diagonal are
//     never loaded, only diagonal / tail tiles are masked, heaviest query blocks first.
//
// Since v5 flash_fwd_ws.cu is the sm_90 default; this kernel is the fallback (and the default
// for d = 64 below 2048 query rows), as <64,2,128,2> and <128,2,64,2>: two CTAs per SM (a
// small spill accepted), no ping-pong (it wins at one CTA per SM only). What each technique
// bought: compute/gpu/FLASH_NOTES.md, v2-v4 and "Variants removed from the production kernel".
//
// Under a plain sm_90 compile (no 'a' features) the kernel body is empty and traps, so the
// file still compiles with `nvcc -arch=sm_90 --ptx`; flash.py compiles it with -arch=sm_90a.
// compile-check-arch: sm_90a

#include "common.cuh"
#include "flash_fwd_layout.cuh"

#if FA_HAVE_WGMMA
// Named barriers 1 and 2 (0 is __syncthreads) over the CTA's two warpgroups (256 threads).
// (Immediate ids, so ptxas reserves 3 barriers rather than all 16.)
__device__ __forceinline__ void fa_named_sync(int id) {
    if (id == 1) asm volatile("bar.sync 1, 256;\n" ::: "memory");
    else asm volatile("bar.sync 2, 256;\n" ::: "memory");
}
__device__ __forceinline__ void fa_named_arrive(int id) {
    if (id == 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
    else asm volatile("bar.arrive 2, 256;\n" ::: "memory");
}

#endif  // FA_HAVE_WGMMA

// Normalise O, write LSE, stage O through shared memory at sbuf and store 16-byte chunks
// (O's rows o_r elements apart).
// Callers synchronise the block before (sbuf free) ; this function synchronises inside.
template <int DT, int D, int BM, int NT>
__device__ __forceinline__ void fa_epilogue(const float* o, const float* m, const float* l,
                                            u32 sbuf, u16* __restrict__ Ob,
                                            float* __restrict__ LSE, long long bh, int Nq,
                                            long long o_r, int q0, int rl0, int t, int tid) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float lt = fa_quad_sum(l[h]);
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        const int rl = rl0 + 8 * h;
#pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
            const u32 pk = fa_pack<DT>(o[4 * dn + 2 * h] * inv, o[4 * dn + 2 * h + 1] * inv);
            const u32 addr = sbuf + fa_swz<D>(rl, dn) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pk));
        }
        if (LSE != nullptr && t == 0) {
            const int row = q0 + rl;
            if (row < Nq) {
                LSE[bh * Nq + row] =
                    lt > 0.f ? (m[h] + __log2f(lt)) * 0.69314718055994531f : FA_NEG_INF;
            }
        }
    }
    __syncthreads();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int i = 0; i < (BM * CPR + NT - 1) / NT; ++i) {
        const int idx = tid + i * NT;
        if ((BM * CPR) % NT != 0 && idx >= BM * CPR) break;
        const int r = idx / CPR;
        const int c = idx % CPR;
        if (q0 + r < Nq) {
            uint4 val;
            const u32 addr = sbuf + fa_swz<D>(r, c);
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                         : "r"(addr));
            *reinterpret_cast<uint4*>(Ob + (q0 + r) * o_r + c * 8) = val;
        }
    }
}

// S and P V issued back to back, each waited for in full (no overlap inside a warpgroup).
// PP = 1 (two warpgroups only): ping-pong the tensor cores between the warpgroups with two
// named barriers (FA3's inter-warpgroup overlap), so one warpgroup's softmax runs while the
// other's GEMM does: the issue order is WG0 S, WG1 S, WG0 PV, WG1 PV in every iteration.
template <int DT, int D, int NWG, int BN, int MINB, int PP>
__global__ void __launch_bounds__(NWG * 128, MINB)
    flash_fwd_wgmma(const u16* __restrict__ Q, const u16* __restrict__ K,
                    const u16* __restrict__ V, u16* __restrict__ O, float* __restrict__ LSE,
                    int Nq, int Nk, float scale_log2, int causal,
                    const __grid_constant__ FaFwdLayout lay) {
#if FA_HAVE_WGMMA
    static_assert(PP == 0 || NWG == 2, "ping-pong needs exactly two warpgroups");
    constexpr int BM = NWG * 64;
    constexpr int NT = NWG * 128;
    constexpr int NS = BN / 2;  // S accumulator registers per thread
    constexpr int NO = D / 2;  // O accumulator registers per thread
    constexpr u32 Q_BYTES = BM * D * 2;
    constexpr u32 KV_BYTES = BN * D * 2;
    extern __shared__ __align__(128) unsigned char fa_smem[];
    const u32 sQ = (fa_smem_addr(fa_smem) + 1023u) & ~1023u;
    const u32 sK = sQ + Q_BYTES;
    const u32 sV = sK + 2 * KV_BYTES;
    const int tid = threadIdx.x;
    const int wg = tid >> 7;
    const int warp = (tid >> 5) & 3;
    const int lane = tid & 31;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int qb = gridDim.x - 1 - blockIdx.x;  // heaviest causal blocks first
    const int q0 = qb * BM;
    const long long bh = blockIdx.y;
    const FaHead hd = fa_head(lay, blockIdx.y);
    const u16* Qb = Q + hd.b * lay.q_b + hd.h * lay.q_h;
    const u16* Kb = K + hd.b * lay.k_b + hd.hk * lay.k_h;
    const u16* Vb = V + hd.b * lay.v_b + hd.hk * lay.v_h;
    u16* Ob = O + hd.b * lay.o_b + hd.h * lay.o_h;
    const int offset = Nk - Nq;
    int kv_end = Nk;
    if (causal) kv_end = min(Nk, q0 + BM + offset);
    const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;
    const int rl0 = wg * 64 + warp * 16 + g;
    const int row_a = q0 + rl0;
    const u32 qwg = sQ + wg * 64 * 128;  // this warpgroup's rows in each Q panel
    float o[NO];
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i] = 0.f;
    float m[2] = {FA_NEG_INF, FA_NEG_INF};
    float l[2] = {0.f, 0.f};
    float alpha[2];
    float s[NS];
    u32 a[BN / 16][4];

    fa_load_panels<D, BM, NT>(sQ, Qb, q0, Nq, tid, lay.q_r);
    if (ntiles > 0) {
        fa_load_panels<D, BN, NT>(sK, Kb, 0, Nk, tid, lay.k_r);
        fa_load_panels<D, BN, NT>(sV, Vb, 0, Nk, tid, lay.v_r);
    }
    fa_cp_async_commit();

    for (int j = 0; j < ntiles; ++j) {
        const int buf = j & 1;
        if (j + 1 < ntiles) {
            fa_load_panels<D, BN, NT>(sK + (buf ^ 1) * KV_BYTES, Kb, (j + 1) * BN, Nk, tid,
                                      lay.k_r);
            fa_load_panels<D, BN, NT>(sV + (buf ^ 1) * KV_BYTES, Vb, (j + 1) * BN, Nk, tid,
                                      lay.v_r);
            fa_cp_async_commit();
            fa_cp_async_wait<1>();
        } else {
            fa_cp_async_wait<0>();
        }
        fa_fence_proxy_async();
        __syncthreads();
        const u32 kbase = sK + buf * KV_BYTES;
        const u32 vbase = sV + buf * KV_BYTES;

        // Ping-pong: each named-barrier wait pairs with exactly one arrive of the other
        // warpgroup (WG0 skips its first wait, WG1 its last arrive, so the counts match).
        if constexpr (PP) {
            if (!(wg == 0 && j == 0)) fa_named_sync(1 + wg);
        }
        fa_issue_s<DT, D, BM, BN>(s, qwg, kbase);
        if constexpr (PP) fa_named_arrive(2 - wg);
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < NS; ++i) fa_reg_fence(s[i]);

        const int n0 = j * BN;
        if ((n0 + BN > Nk) || (causal && (n0 + BN - 1 > q0 + offset)))
            fa_mask<NS>(s, n0, Nk, row_a, t, causal, offset);
        fa_softmax<NS>(s, m, l, alpha, scale_log2);
        fa_rescale<NO>(o, alpha);
        fa_to_a<DT, NS>(s, a);

#pragma unroll
        for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
        if constexpr (PP) fa_named_sync(1 + wg);
        fa_issue_pv<DT, D, BN>(o, a, vbase);
        if constexpr (PP) {
            if (!(wg == 1 && j == ntiles - 1)) fa_named_arrive(2 - wg);
        }
        fa_wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < NO; ++i) fa_reg_fence(o[i]);
        __syncthreads();  // this stage is overwritten by the loads issued next iteration
    }
    if (ntiles == 0) {
        fa_cp_async_wait<0>();
        __syncthreads();
    }
    fa_epilogue<DT, D, BM, NT>(o, m, l, sQ, Ob, LSE, bh, Nq, lay.o_r, q0, rl0, t, tid);
#else
    __trap();
#endif
}
