// decode_mma.cuh: the streaming block of decode_attention.cu on tensor cores, for 16-bit K/V
// whose rows are whole 16-byte vectors (d a multiple of 32, d_v of 64) and groups of at most
// 16 resident rows: every decode step of a GQA model with N_q = 1.
//
// Why a second block: at N_q = 1 decode is memory-bound, so the block's job is to keep HBM
// busy, and the general block (decode::stream) cannot: its q.k and P~V products on CUDA cores
// cost two FMAs per K/V element per resident row plus the shuffles that sum a dot product
// across lanes, and a group of 8 rows made it wait on its arithmetic, not on memory
// (DECODE_NOTES.md, v3). Here one mma.sync m16n8k16 takes 16 rows (the group, padded with
// zero rows) x 8 keys x 16 of d, so the arithmetic of a 16-key step is 2 d / 16 + d_v / 8
// instructions per warp whatever the group.
//
// Layout. Each warp streams its own 16-key steps of the block's split (step i of the split
// goes to warp i % MNW) through a private ring of MST stages: stage = the 16 keys' K and V
// rows, moved by cp.async.cg (16 bytes, L2 only, 256-byte L2 prefetch) so that MST - 1 steps
// are in flight while one is used, with no block-wide barrier in the loop (one __syncwarp
// per step). The K rows are copied whole (each instruction moves full 128-byte lines) into
// the warp's stage, odd rows with their 64-byte halves swapped so that the fragment reads
// are conflict-free; the V vectors are copied by the lane that reads them, [slot][lane].
// The vectors a lane reads are those the mma fragments want in its registers:
//   q.k (A = Q rows, B = K^T): lane (g = lane / 4, t = lane % 4) reads key g of each 8-key
//     half, vectors t, t + 4, t + 8, ... of its row; k-step 2i + h of the mma takes the
//     pairs (2h, 2h + 1) of vector 4i + t. The same permutation of d is applied to Q's
//     fragment, so the dot products are exact sums over all of d.
//   P~V (A = P~, B = V): lane (g, t) holds keys 2t, 2t + 1, 2t + 8, 2t + 9 of the step, the
//     8 columns 8 g + 64 w of each (w < d_v / 64); output column tile c = 8 w + e takes
//     column 8 g + 64 w + e, and two byte_perms pack one column of two keys into B.
// The online softmax runs on the mma accumulators (rows g and g + 8 of the lane): the row max
// over the quad by two shuffles, each lane's own sum of P~ (summed over the quad at the end).
// P~ is rounded to the input dtype for the P~V product (as in FlashAttention-2).
//
// The warps' states go to shared memory at the end and decode::finish merges them, as for the
// general block; counted transfers are the same tensors and elements (zero-filled copies past
// the split are not counted: they read nothing).

namespace decode {

constexpr int MNT = 128;  // threads of a tensor-core streaming block
constexpr int MNW = MNT / 32;
constexpr int MST = 3;    // ring stages per warp: two 16-key steps in flight while one is used
constexpr int MKEYS = 16; // keys per warp step
constexpr int MROWS = 16; // rows of the mma tile: resident rows at most

template <int D, int DV>
struct MmaShape {
    static_assert(D % 32 == 0 && DV % 64 == 0, "whole 16-byte vectors per lane");
    static constexpr int KV = D / 32;              // K vectors per lane per 8-key half
    static constexpr int VV = DV / 64;             // V vectors per lane per key
    static constexpr int SLOTS = 2 * KV + 4 * VV;  // 16-byte vectors per lane per stage
    static constexpr int OT = DV / 8;              // output column tiles
    static constexpr int RING = MNW * MST * SLOTS * 32 * 16;
    static constexpr int Q_BYTES = MROWS * D * 2;
    static constexpr int STATE = 4 * MNW * MROWS * (DV + 2);
    static constexpr int SMEM = (RING > STATE ? RING : STATE) + Q_BYTES;
};

__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool ok) {
    unsigned int s = (unsigned int)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(ok ? 16 : 0));
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int DT>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned int (&a)[4], unsigned int b0,
                                         unsigned int b1) {
    if constexpr (DT == DT_BF16) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats as one register of two 16-bit values: lo in the low half.
template <int DT>
__device__ __forceinline__ unsigned int pack2(float lo, float hi) {
    unsigned int r;
    if constexpr (DT == DT_BF16) {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

__device__ __forceinline__ unsigned int word(const uint4& v, int i) {
    return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int D, int DV, int DT, bool FINAL>
__device__ void stream_mma(const unsigned short* __restrict__ q, const unsigned short* __restrict__ k,
                           const unsigned short* __restrict__ v, unsigned short* __restrict__ out,
                           float* __restrict__ o_part, float* __restrict__ l_part, float* __restrict__ lse,
                           int n_q, int n_k, int rows, int block_k, int t_c, int splits, float scale_log2,
                           int save_lse, unsigned long long* counts) {
    using S = MmaShape<D, DV>;
    constexpr int KV = S::KV, VV = S::VV, SLOTS = S::SLOTS, OT = S::OT;
    constexpr int KR = D / 8;  // 16-byte vectors of a K row
    // Rows a multiple of 128 bytes apart would put the fragment reads of rows g and g + 1 (one
    // quarter-warp) on the same banks: odd rows swap their 64-byte halves of each 128 bytes.
    auto kswz = [](int r) { return D % 64 == 0 ? 4 * (r & 1) : 0; };
    extern __shared__ __align__(16) unsigned char smem[];
    uint4* ring = reinterpret_cast<uint4*>(smem);
    unsigned short* qs = reinterpret_cast<unsigned short*>(smem + (S::RING > S::STATE ? S::RING : S::STATE));
    float* st_a = reinterpret_cast<float*>(smem);  // [MNW][MROWS][DV], after the loop
    float* st_m = st_a + MNW * MROWS * DV;         // [MNW][MROWS]
    float* st_l = st_m + MNW * MROWS;              // [MNW][MROWS]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t = lane & 3;
    const int split = blockIdx.x, head = blockIdx.y;
    const int t0 = (int)((long long)split * t_c / splits), t1 = (int)((long long)(split + 1) * t_c / splits);
    const int c_begin = t0 * block_k, c_end = min(n_k, t1 * block_k);
    const int n_steps = c_end > c_begin ? (c_end - c_begin + MKEYS - 1) / MKEYS : 0;
    const int mine = n_steps > warp ? (n_steps - warp + MNW - 1) / MNW : 0;  // this warp's steps
    Counter counter;

    const unsigned short* kg = k + (size_t)head * n_k * D;
    const unsigned short* vg = v + (size_t)head * n_k * DV;
    uint4* wring = ring + warp * MST * SLOTS * 32;
    // Step j of this warp goes to stage j % MST; a step past the end commits an empty group so
    // that the group count stays in step with j. A stage holds the 16 K rows (KR vectors each,
    // shared by the warp, vector v of row r at v ^ kswz(r)), then the lane-private V vectors.
    auto issue = [&](int j) {
        if (j < mine) {
            const int kb = c_begin + (warp + MNW * j) * MKEYS;
            uint4* st = wring + (j % MST) * SLOTS * 32;
#pragma unroll
            for (int c = 0; c < 2 * KV; ++c) {  // whole rows per instruction: full 128-byte lines
                const int id = c * 32 + lane, r = id / KR, vec = id % KR;
                const int key = kb + r;
                const bool ok = key < c_end;
                cp_async16_zfill(st + r * KR + (vec ^ kswz(r)), kg + (size_t)(ok ? key : c_begin) * D + 8 * vec, ok);
                if (ok) counter.add(K_READ, 8);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = kb + 2 * t + (e & 1) + 8 * (e >> 1);
                const bool ok = key < c_end;
                const unsigned short* src = vg + (size_t)(ok ? key : c_begin) * DV + 8 * g;
#pragma unroll
                for (int w = 0; w < VV; ++w)
                    cp_async16_zfill(st + (2 * KV + e * VV + w) * 32 + lane, src + 64 * w, ok);
                if (ok) counter.add(V_READ, 8 * VV);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int j = 0; j < MST - 1; ++j) issue(j);

    // The group's rows, once per block, padded with zero rows to the mma's 16.
    const unsigned short* qg = q + (size_t)head * rows * D;
    for (int i = tid; i < MROWS * D; i += MNT) {
        const int r = i / D;
        qs[i] = r < rows ? qg[i] : (unsigned short)0;
        if (r < rows) counter.add(Q_READ, 1);
    }
    __syncthreads();
    unsigned int qa[D / 16][4];  // A fragments of Q, k-step 2i + h
#pragma unroll
    for (int i = 0; i < KV; ++i) {
        const uint4 lo = *reinterpret_cast<const uint4*>(qs + g * D + 8 * (4 * i + t));
        const uint4 hi = *reinterpret_cast<const uint4*>(qs + (g + 8) * D + 8 * (4 * i + t));
        qa[2 * i][0] = lo.x; qa[2 * i][1] = hi.x; qa[2 * i][2] = lo.y; qa[2 * i][3] = hi.y;
        qa[2 * i + 1][0] = lo.z; qa[2 * i + 1][1] = hi.z; qa[2 * i + 1][2] = lo.w; qa[2 * i + 1][3] = hi.w;
    }

    float acc[OT][4];
#pragma unroll
    for (int c = 0; c < OT; ++c) acc[c][0] = acc[c][1] = acc[c][2] = acc[c][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8
    const int last_seen = n_k - n_q;                            // row r sees keys c <= r % n_q + last_seen
    const int seen[2] = {g % n_q + last_seen, (g + 8) % n_q + last_seen};

    for (int j = 0; j < mine; ++j) {
        cp_async_wait<MST - 2>();  // this lane's copies of step j have landed
        __syncwarp();  // and every lane's (the K rows are shared); step j - 1's stage is free
        issue(j + MST - 1);
        const uint4* st = wring + (j % MST) * SLOTS * 32;
        const int kb = c_begin + (warp + MNW * j) * MKEYS;
        float s[2][4];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            s[half][0] = s[half][1] = s[half][2] = s[half][3] = 0.f;
            const int r = 8 * half + g;
#pragma unroll
            for (int i = 0; i < KV; ++i) {
                const uint4 kv = st[r * KR + ((4 * i + t) ^ kswz(r))];
                mma16816<DT>(s[half], qa[2 * i], kv.x, kv.y);
                mma16816<DT>(s[half], qa[2 * i + 1], kv.z, kv.w);
            }
        }
        // s[half][e]: row g (e < 2) or g + 8, key kb + 8 half + 2 t + (e & 1).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int key = kb + 8 * half + 2 * t + (e & 1), r = e >> 1;
                const bool vis = key < c_end && key <= seen[r];
                s[half][e] = vis ? s[half][e] * scale_log2 : -INFINITY;
                mx[r] = fmaxf(mx[r], s[half][e]);
            }
        float alpha[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m[r], mx[r]);
            alpha[r] = m[r] == -INFINITY ? 0.f : exp2f(m[r] - m_new);
            m[r] = m_new;
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int half = 0; half < 2; ++half)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int r = e >> 1;
                s[half][e] = exp2f(s[half][e] - safe(m[r]));  // exp2(-inf) = 0 for masked keys
                l[r] += s[half][e];
            }
#pragma unroll
        for (int c = 0; c < OT; ++c) {
            acc[c][0] *= alpha[0]; acc[c][1] *= alpha[0];
            acc[c][2] *= alpha[1]; acc[c][3] *= alpha[1];
        }
        const unsigned int pa[4] = {pack2<DT>(s[0][0], s[0][1]), pack2<DT>(s[0][2], s[0][3]),
                                    pack2<DT>(s[1][0], s[1][1]), pack2<DT>(s[1][2], s[1][3])};
#pragma unroll
        for (int w = 0; w < VV; ++w) {
            const uint4* sv = st + lane;
            const uint4 v0 = sv[(2 * KV + 0 * VV + w) * 32], v1 = sv[(2 * KV + 1 * VV + w) * 32];
            const uint4 v2 = sv[(2 * KV + 2 * VV + w) * 32], v3 = sv[(2 * KV + 3 * VV + w) * 32];
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                const unsigned int sel = e & 1 ? 0x7632u : 0x5410u;
                const unsigned int b0 = __byte_perm(word(v0, e >> 1), word(v1, e >> 1), sel);
                const unsigned int b1 = __byte_perm(word(v2, e >> 1), word(v3, e >> 1), sel);
                mma16816<DT>(acc[8 * w + e], pa, b0, b1);
            }
        }
    }
    cp_async_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // each lane summed its own keys' P~: sum over the quad
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    __syncthreads();  // the ring is no longer read: the warps' states take its bytes
    float* wa = st_a + warp * MROWS * DV;
#pragma unroll
    for (int c = 0; c < OT; ++c) {
        const int col = 64 * (c >> 3) + (c & 7) + 16 * t;  // columns 8 (2t) + .. and 8 (2t + 1) + ..
        wa[g * DV + col] = acc[c][0];
        wa[g * DV + col + 8] = acc[c][1];
        wa[(g + 8) * DV + col] = acc[c][2];
        wa[(g + 8) * DV + col + 8] = acc[c][3];
    }
    if (t == 0) {
        st_m[warp * MROWS + g] = m[0]; st_l[warp * MROWS + g] = l[0];
        st_m[warp * MROWS + g + 8] = m[1]; st_l[warp * MROWS + g + 8] = l[1];
    }
    __syncthreads();
    finish<DV, DT, FINAL, MNW, MNT>(st_a, st_m, st_l, MROWS, rows, split, gridDim.y, head, out, o_part, l_part,
                                    lse, save_lse, counter);
    counter.flush(counts);
}

}  // namespace decode
