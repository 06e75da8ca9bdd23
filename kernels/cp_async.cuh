// cp_async.cuh -- shared-memory addresses and the cp.async copies (sm_80 on) that fill the
// tiled GEMMs' shared-memory stages. The zero-filling form serves edge tiles: elements
// outside the operand are copied as zeros, from a valid dummy source address.
//
// Included after common.cuh (it gives GD_DEV); the crate splices it in as it does common.cuh.
#ifndef GPU_DOT_CP_ASYNC_CUH
#define GPU_DOT_CP_ASYNC_CUH

namespace gd {

// The 32-bit shared-window address of a generic pointer into shared memory.
GD_DEV unsigned smem_u32(const void* p) {
    unsigned r;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }\n"
                 : "=r"(r)
                 : "l"(p));
    return r;
}

// Copies BYTES (16, 8 or 4) from global src to shared dst: .cg (L2 only) for 16 bytes, .ca
// below.
template <int BYTES, class T>
GD_DEV void cp_async(unsigned dst, const T* src) {
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4, "a cp.async size");
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(src), "n"(BYTES)
                     : "memory");
}
// The same, copying only the first `bytes` (0 .. BYTES) of src and zero-filling the rest.
template <int BYTES, class T>
GD_DEV void cp_async_z(unsigned dst, const T* src, int bytes) {
    static_assert(BYTES == 16 || BYTES == 8 || BYTES == 4, "a cp.async size");
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src),
                     "n"(BYTES), "r"(bytes)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(dst), "l"(src),
                     "n"(BYTES), "r"(bytes)
                     : "memory");
}

// Closes the group of the copies issued since the last commit.
GD_DEV void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed groups are still in flight.
template <int N>
GD_DEV void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace gd

#endif  // GPU_DOT_CP_ASYNC_CUH
