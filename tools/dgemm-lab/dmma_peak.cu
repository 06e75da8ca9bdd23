// dmma_peak.cu -- FP64 tensor-core ceiling: independent mma.m16n8k16.f64 from registers only,
// one block per SM (large dynamic smem), W warps per scheduler, NACC independent accumulators
// per warp. Prints TFLOP/s and the SM clock seen by block 0 (clock64 / globaltimer).
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -o dmma_peak tools/dgemm-lab/dmma_peak.cu
#include <cuda_runtime.h>

#include <cstdio>

__device__ __forceinline__ void mma(double (&d)[4], const double (&a)[8], const double (&b)[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, "
        "{%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, {%0,%1,%2,%3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(a[4]), "d"(a[5]), "d"(a[6]), "d"(a[7]),
          "d"(b[0]), "d"(b[1]), "d"(b[2]), "d"(b[3]));
}

template <int NACC, int NT>
__global__ void __launch_bounds__(NT, 1) peak(double* out, int iters, long long* clk) {
    double acc[NACC][4];
    double a[8], b[4];
#pragma unroll
    for (int v = 0; v < 8; ++v) a[v] = 1e-9 * (threadIdx.x + v);
#pragma unroll
    for (int v = 0; v < 4; ++v) b[v] = 1e-9 * (threadIdx.x - v);
#pragma unroll
    for (int n = 0; n < NACC; ++n)
#pragma unroll
        for (int v = 0; v < 4; ++v) acc[n][v] = 0.0;
    long long c0 = clock64();
    unsigned long long t0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int n = 0; n < NACC; ++n) mma(acc[n], a, b);
    }
    long long c1 = clock64();
    unsigned long long t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    double s = 0;
#pragma unroll
    for (int n = 0; n < NACC; ++n) s += acc[n][0] + acc[n][1] + acc[n][2] + acc[n][3];
    out[blockIdx.x * NT + threadIdx.x] = s;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        clk[0] = c1 - c0;
        clk[1] = (long long)(t1 - t0);
    }
}

template <int NACC, int NT>
static void run(int sms) {
    double* out;
    long long* clk;
    cudaMalloc(&out, sizeof(double) * sms * NT);
    cudaMalloc(&clk, 16);
    const int smem = 200 * 1024;
    cudaFuncSetAttribute(peak<NACC, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    const int warps_per_sched = NT / 128;
    const int iters = 24000 / (NACC * warps_per_sched) * 16;
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    peak<NACC, NT><<<sms, NT, smem>>>(out, iters / 8, clk);
    cudaEventRecord(e0);
    peak<NACC, NT><<<sms, NT, smem>>>(out, iters, clk);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    long long h[2];
    cudaMemcpy(h, clk, 16, cudaMemcpyDeviceToHost);
    const double flop = 2.0 * 16 * 8 * 16 * (double)NACC * iters * (NT / 32) * sms;
    printf("warps/sched %d  acc %2d  %7.3f ms  %6.2f TFLOP/s  clock %.3f GHz  %s\n",
           warps_per_sched, NACC, ms, flop / ms * 1e-9, (double)h[0] / h[1],
           cudaGetErrorString(cudaGetLastError()));
    cudaFree(out);
    cudaFree(clk);
}

int main() {
    int sms;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    run<16, 128>(sms);
    run<16, 256>(sms);
    run<8, 128>(sms);
    run<8, 256>(sms);
    run<8, 384>(sms);
    run<8, 512>(sms);
    run<4, 128>(sms);
    run<4, 512>(sms);
    run<16, 128>(sms);
    run<16, 256>(sms);
    return 0;
}
