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
