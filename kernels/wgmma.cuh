// wgmma.cuh -- Hopper's warpgroup tensor-core instructions (wgmma, sm_90a): the fences and
// waits around them, the shared-memory matrix descriptor of the 128-byte swizzle, and the
// accumulator operands of an instruction's inline PTX.
//
// Included after common.cuh (it gives GD_DEV); the crate splices it in as it does common.cuh.
// Its helpers exist only where wgmma does (the sm_90a target).
#ifndef GPU_DOT_WGMMA_CUH
#define GPU_DOT_WGMMA_CUH

#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)

namespace gd {

// Orders this thread's generic-proxy writes to shared memory before reads by the async proxy
// (wgmma operands, bulk copies) that follow a barrier.
GD_DEV void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
GD_DEV void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
GD_DEV void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
GD_DEV void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of `d` across the wgmma fences and waits.
template <int N>
GD_DEV void fence_regs(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int N>
GD_DEV void fence_regs(int (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Shared-memory matrix descriptor of a K-major tile in the 128-byte swizzle (16-byte chunk c of
// 128-byte row r at chunk c ^ (r % 8)) at shared address `addr` (the 8-row group's 1024-byte
// atom aligned): start address >> 4 (bits 0-13), leading byte offset 16 (unused in this mode),
// stride byte offset 1024 (next 8-row group, bits 32-45), layout type 1 = 128-byte swizzle
// (bits 62-63).
GD_DEV unsigned long long desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
           (1ull << 62);
}

}  // namespace gd

#endif  // sm_90a

// A wgmma's accumulators d[0 .. N) as the first N operands of its inline PTX: their text
// (GD_WG_D32: "%0, ..., %31"; 64; 128) and their read-write constraints C ("+f" or "+r"),
// from d[i] on.
#define GD_WG_D32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GD_WG_D64 GD_WG_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GD_WG_D128 GD_WG_D64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GD_WG_ACC8(C, d, i) \
    C(d[i]), C(d[i + 1]), C(d[i + 2]), C(d[i + 3]), C(d[i + 4]), C(d[i + 5]), C(d[i + 6]), C(d[i + 7])
#define GD_WG_ACC32(C, d, i) \
    GD_WG_ACC8(C, d, i), GD_WG_ACC8(C, d, i + 8), GD_WG_ACC8(C, d, i + 16), GD_WG_ACC8(C, d, i + 24)
#define GD_WG_ACC64(C, d, i) GD_WG_ACC32(C, d, i), GD_WG_ACC32(C, d, i + 32)
#define GD_WG_ACC128(C, d) GD_WG_ACC64(C, d, 0), GD_WG_ACC64(C, d, 64)

#endif  // GPU_DOT_WGMMA_CUH
