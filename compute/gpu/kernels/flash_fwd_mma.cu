// FlashAttention forward, FA2 schedule on tensor cores with mma.sync (sm_80+ PTX, runs on sm_90).
//
// Layout: Q (B, H, Nq, D), K/V (B, H / group, Nk, D), O like Q, at any element strides over
// (batch, head, row) with a unit last dimension (flash_fwd_layout.cuh: FaFwdLayout; rows
// 16-byte aligned); query head h reads K/V head h / group (GQA). fp16 or bf16 bits (DT = 0
// fp16, DT = 1 bf16), fp32 accumulation and statistics. LSE (B, H, Nq) fp32 contiguous,
// natural log, optional (nullptr = not written); -inf for rows that see no key.
//
// Schedule (Q-outer, one CTA per (query block, batch*head)):
//   * BM = 16 * NWARPS query rows per CTA; each warp owns 16 rows, its Q fragments and its
//     O accumulator stay in registers for the whole KV loop.
//   * K/V tiles of BN keys stream through a 2-stage cp.async (16-byte, zero-fill for tails)
//     pipeline into XOR-swizzled shared memory (16-byte chunk c of row r stored at c ^ (r & 7)),
//     read back with ldmatrix.x4 (K) / ldmatrix.x4.trans (V) without bank conflicts.
//   * S = Q K^T and O += P V with mma.sync.m16n8k16 (f32 accumulate). The S accumulator is
//     converted to fp16/bf16 pairs in registers and used directly as the A operand of P V.
//   * Online softmax in the exp2 domain (scale * log2(e) folded into one FFMA), row max and
//     sum over the 4 threads of a quad with shuffles; the row sum is reduced once at the end.
//   * Causal (bottom-right aligned): key tiles past the block's last visible key are never
//     loaded; only tiles crossing the diagonal (or the Nk tail) take the masking path.
//     Query blocks are issued heaviest first. Fully masked rows produce zeros and LSE = -inf.
//
// The portable path for sm_80+ GPUs (on Hopper flash_select.py picks the wgmma kernels).
// Occupancy is the knob: 4 warps x 64 keys at d = 64, 8 warps x 128 keys at d = 128; two
// CTAs per SM at d = 128 spill. Measurements: compute/gpu/FLASH_NOTES.md, v1.

#include "common.cuh"
#include "flash_fwd_layout.cuh"

__device__ __forceinline__ void fa_ldsm_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}
__device__ __forceinline__ void fa_ldsm_x4_t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr));
}

template <int DT>
__device__ __forceinline__ void fa_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if constexpr (DT == 0) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Copy rows [row0, row0 + ROWS) of a (nrows, D) matrix whose rows lie `stride` elements
// apart into a swizzled tile; rows past nrows are zero-filled (cp.async with a source size
// of 0).
template <int D, int ROWS, int NT>
__device__ __forceinline__ void fa_load_tile(u32 dst, const u16* __restrict__ src, int row0,
                                             int nrows, long long stride, int tid) {
    constexpr int CPR = D / 8;  // 16-byte chunks per row
    constexpr int TOTAL = ROWS * CPR;
    static_assert(TOTAL % NT == 0, "tile chunks must divide evenly among threads");
#pragma unroll
    for (int i = 0; i < TOTAL / NT; ++i) {
        const int idx = tid + i * NT;
        const int r = idx / CPR;
        const int c = idx % CPR;
        const int grow = row0 + r;
        const bool ok = grow < nrows;
        const u16* g = src + (ok ? (grow * stride + c * 8) : 0);
        fa_cp_async16(dst + fa_swz<D>(r, c), g, ok ? 16 : 0);
    }
}

template <int DT, int D, int NWARPS, int BN, int MINB>
__global__ void __launch_bounds__(NWARPS * 32, MINB)
    flash_fwd_mma(const u16* __restrict__ Q, const u16* __restrict__ K,
                  const u16* __restrict__ V, u16* __restrict__ O, float* __restrict__ LSE,
                  int Nq, int Nk, float scale_log2, int causal,
                  const __grid_constant__ FaFwdLayout lay) {
    constexpr int BM = NWARPS * 16;
    constexpr int NT = NWARPS * 32;
    constexpr int KT = D / 16;    // k-steps of Q K^T
    constexpr int NTS = BN / 8;   // 8-key column tiles of S
    constexpr int DTS = D / 8;    // 8-column tiles of O
    constexpr u32 Q_BYTES = BM * D * 2;
    constexpr u32 KV_BYTES = BN * D * 2;

    extern __shared__ __align__(128) unsigned char fa_smem[];
    const u32 sQ = fa_smem_addr(fa_smem);
    const u32 sK = sQ + Q_BYTES;           // 2 stages
    const u32 sV = sK + 2 * KV_BYTES;      // 2 stages

    const int tid = threadIdx.x;
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int qb = gridDim.x - 1 - blockIdx.x;  // heaviest causal blocks first
    const int q0 = qb * BM;
    const long long bh = blockIdx.y;
    const FaHead hd = fa_head(lay, blockIdx.y);
    const u16* Qb = Q + hd.b * lay.q_b + hd.h * lay.q_h;
    const u16* Kb = K + hd.b * lay.k_b + hd.hk * lay.k_h;
    const u16* Vb = V + hd.b * lay.v_b + hd.hk * lay.v_h;
    u16* Ob = O + hd.b * lay.o_b + hd.h * lay.o_h;

    const int offset = Nk - Nq;  // bottom-right causal alignment
    int kv_end = Nk;
    if (causal) kv_end = min(Nk, q0 + BM + offset);
    const int ntiles = kv_end > 0 ? (kv_end + BN - 1) / BN : 0;

    const int g = lane >> 2;   // row within 8
    const int t = lane & 3;    // column pair
    const int row_a = q0 + warp * 16 + g;  // this thread's rows: row_a and row_a + 8

    float o[DTS][4];
#pragma unroll
    for (int i = 0; i < DTS; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float m[2] = {FA_NEG_INF, FA_NEG_INF};
    float l[2] = {0.f, 0.f};
    u32 qf[KT][4];

    fa_load_tile<D, BM, NT>(sQ, Qb, q0, Nq, lay.q_r, tid);
    if (ntiles > 0) {
        fa_load_tile<D, BN, NT>(sK, Kb, 0, Nk, lay.k_r, tid);
        fa_load_tile<D, BN, NT>(sV, Vb, 0, Nk, lay.v_r, tid);
    }
    fa_cp_async_commit();

    for (int j = 0; j < ntiles; ++j) {
        const int buf = j & 1;
        if (j + 1 < ntiles) {
            fa_load_tile<D, BN, NT>(sK + (buf ^ 1) * KV_BYTES, Kb, (j + 1) * BN, Nk, lay.k_r,
                                    tid);
            fa_load_tile<D, BN, NT>(sV + (buf ^ 1) * KV_BYTES, Vb, (j + 1) * BN, Nk, lay.v_r,
                                    tid);
            fa_cp_async_commit();
            fa_cp_async_wait<1>();
        } else {
            fa_cp_async_wait<0>();
        }
        __syncthreads();
        if (j == 0) {
#pragma unroll
            for (int kk = 0; kk < KT; ++kk) {
                const int r = warp * 16 + (lane & 15);
                const int c = 2 * kk + (lane >> 4);
                fa_ldsm_x4(sQ + fa_swz<D>(r, c), qf[kk][0], qf[kk][1], qf[kk][2], qf[kk][3]);
            }
        }
        const u32 kbase = sK + buf * KV_BYTES;
        const u32 vbase = sV + buf * KV_BYTES;

        // S = Q K^T (16 x BN per warp)
        float s[NTS][4];
#pragma unroll
        for (int i = 0; i < NTS; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
            for (int jp = 0; jp < NTS / 2; ++jp) {
                const int r = jp * 16 + (lane & 7) + ((lane >> 4) << 3);
                const int c = 2 * kk + ((lane >> 3) & 1);
                u32 b0, b1, b2, b3;
                fa_ldsm_x4(kbase + fa_swz<D>(r, c), b0, b1, b2, b3);
                fa_mma<DT>(s[2 * jp], qf[kk], b0, b1);
                fa_mma<DT>(s[2 * jp + 1], qf[kk], b2, b3);
            }
        }

        // Mask the Nk tail and the causal diagonal (only on tiles that need it).
        const int n0 = j * BN;
        const bool need_mask = (n0 + BN > Nk) || (causal && (n0 + BN - 1 > q0 + offset));
        if (need_mask) {
#pragma unroll
            for (int jn = 0; jn < NTS; ++jn) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int col = n0 + jn * 8 + 2 * t + (e & 1);
                    const int row = row_a + ((e >> 1) << 3);
                    if (col >= Nk || (causal && col > row + offset)) s[jn][e] = FA_NEG_INF;
                }
            }
        }

        // Online softmax in the exp2 domain (the accumulator layout is the wgmma kernels':
        // s[jn][e] and o[dn][e] are their flat s[4 jn + e] and o[4 dn + e]).
        float alpha[2];
        fa_softmax<4 * NTS>(&s[0][0], m, l, alpha, scale_log2);
        fa_rescale<4 * DTS>(&o[0][0], alpha);

        // O += P V: P from registers (FA2 register trick), V via ldmatrix.trans.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            u32 a[4];
            a[0] = fa_pack<DT>(s[2 * kk][0], s[2 * kk][1]);
            a[1] = fa_pack<DT>(s[2 * kk][2], s[2 * kk][3]);
            a[2] = fa_pack<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = fa_pack<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int dp = 0; dp < DTS / 2; ++dp) {
                const int r = kk * 16 + (lane & 15);
                const int c = 2 * dp + (lane >> 4);
                u32 b0, b1, b2, b3;
                fa_ldsm_x4_t(vbase + fa_swz<D>(r, c), b0, b1, b2, b3);
                fa_mma<DT>(o[2 * dp], a, b0, b1);
                fa_mma<DT>(o[2 * dp + 1], a, b2, b3);
            }
        }
        __syncthreads();  // this stage is overwritten by the loads issued next iteration
    }
    if (ntiles == 0) {
        fa_cp_async_wait<0>();
        __syncthreads();
    }

    // Epilogue: normalise, stage through the (now free) Q tile, write 16-byte chunks.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float lt = fa_quad_sum(l[h]);
        const float inv = lt > 0.f ? 1.f / lt : 0.f;
        const int rl = warp * 16 + g + 8 * h;  // local row
#pragma unroll
        for (int dn = 0; dn < DTS; ++dn) {
            const u32 pk = fa_pack<DT>(o[dn][2 * h] * inv, o[dn][2 * h + 1] * inv);
            const u32 addr = sQ + fa_swz<D>(rl, dn) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pk));
        }
        if (LSE != nullptr && t == 0) {
            const int row = row_a + 8 * h;
            if (row < Nq) {
                LSE[bh * Nq + row] =
                    lt > 0.f ? (m[h] + __log2f(lt)) * 0.69314718055994531f : FA_NEG_INF;
            }
        }
    }
    __syncthreads();
    constexpr int CPR = D / 8;
#pragma unroll
    for (int i = 0; i < BM * CPR / NT; ++i) {
        const int idx = tid + i * NT;
        const int r = idx / CPR;
        const int c = idx % CPR;
        if (q0 + r < Nq) {
            uint4 val;
            const u32 addr = sQ + fa_swz<D>(r, c);
            asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(val.x), "=r"(val.y), "=r"(val.z), "=r"(val.w)
                         : "r"(addr));
            *reinterpret_cast<uint4*>(Ob + (q0 + r) * lay.o_r + c * 8) = val;
        }
    }
}
