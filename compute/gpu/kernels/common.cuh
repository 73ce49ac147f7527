// Device helpers shared by flash_fwd_mma.cu and flash_fwd_wgmma.cu: 16-bit element types,
// cp.async copies into shared memory, exp2, fp16/bf16 packing and the XOR swizzle of a
// row-major tile. Included through NVRTC's include path (-I kernels/, see flash.py).
#pragma once

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#define FA_NEG_INF (__int_as_float(0xff800000))

__device__ __forceinline__ u32 fa_smem_addr(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; src_bytes = 0 zero-fills (rows past the end of a matrix).
__device__ __forceinline__ void fa_cp_async16(u32 dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void fa_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void fa_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Pack two floats into a 16-bit pair (DT = 0 fp16, 1 bf16): `lo` in the low half (lower column).
template <int DT>
__device__ __forceinline__ u32 fa_pack(float lo, float hi) {
    u32 r;
    if constexpr (DT == 0) {
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    } else {
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    }
    return r;
}

// Byte offset of 16-byte chunk `c` of row `r` in a swizzled tile whose rows are D halves long
// (chunk c stored at c ^ (r & 7), so ldmatrix / the epilogue's row reads avoid bank conflicts).
template <int D>
__device__ __forceinline__ u32 fa_swz(int r, int c) {
    return static_cast<u32>(r * (D * 2) + ((c ^ (r & 7)) << 4));
}
