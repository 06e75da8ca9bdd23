// tma.cuh -- the bulk copies of the TMA unit (cp.async.bulk, sm_90 on), the mbarriers that
// count their bytes and the consumers' releases, and the thread-block cluster's rank and
// barrier: the producer / consumer pipeline of the Ozaki warpgroup GEMM.
//
// Included after common.cuh (it gives GD_DEV); the crate splices it in as it does common.cuh.
#ifndef GPU_DOT_TMA_CUH
#define GPU_DOT_TMA_CUH

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900

namespace gd {

// Initializes the mbarrier at shared address `bar` for `count` arrivals a phase.
GD_DEV void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// The helpers below that take `pred` act only where it is 1, by a predicate inside the asm
// and with no memory clobber: a branch on the lane, or a clobber, around them while wgmma
// groups are in flight makes ptxas serialize the wgmma pipeline. (Their order against the
// wgmma and barrier asm, all volatile, is kept.)

// Arrives on the barrier, first raising the bytes its phase waits for by `bytes`.
GD_DEV void mbar_arrive_expect(unsigned bar, unsigned bytes, unsigned pred) {
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, %2, 1;\n"
        " @p mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n}\n" ::"r"(bar),
        "r"(bytes), "r"(pred));
}
// Waits for the completion of the barrier's phase of this parity.
GD_DEV void mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n .reg .pred p;\n WAIT:\n"
        " mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        " @!p bra WAIT;\n}\n" ::"r"(bar),
        "r"(parity)
        : "memory");
}
// Arrives on the barrier at the same offset in block `rank` of the cluster. Release at CTA
// scope only: the arrival publishes no data (it tells that wgmma reads, already complete, are
// done), and a cluster-scope release would fence every arrival at a cost of half the GEMM.
GD_DEV void mbar_arrive_at(unsigned bar, unsigned rank, unsigned pred) {
    asm volatile(
        "{\n .reg .pred p;\n .reg .b32 ra;\n setp.eq.u32 p, %2, 1;\n"
        " @p mapa.shared::cluster.u32 ra, %0, %1;\n"
        " @p mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
        "r"(rank), "r"(pred));
}
// `bytes` from global src to this block's shared dst by the TMA unit, counted on `bar`.
template <class T>
GD_DEV void bulk_copy(unsigned dst, const T* src, unsigned bytes, unsigned bar, unsigned pred) {
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, %4, 1;\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n}\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "r"(pred));
}
// … to the same offsets in both blocks of the cluster, counted on each one's `bar`.
template <class T>
GD_DEV void bulk_copy_both(unsigned dst, const T* src, unsigned bytes, unsigned bar,
                           unsigned pred) {
    asm volatile(
        "{\n .reg .pred p;\n setp.eq.u32 p, %5, 1;\n"
        " @p cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1], %2, [%3], %4;\n}\n" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(bar), "h"((unsigned short)3), "r"(pred));
}
GD_DEV unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
GD_DEV void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
GD_DEV void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
// Makes the mbarrier initializations of this thread visible to the cluster (before the
// cluster barrier that lets other blocks arrive on them).
GD_DEV void fence_mbarrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

}  // namespace gd

#endif  // sm_90

#endif  // GPU_DOT_TMA_CUH
