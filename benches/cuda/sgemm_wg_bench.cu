// A stand-alone harness for kernels/sgemm_wg.cu against cuBLAS, built with nvcc on a device
// machine (the crate itself needs no CUDA toolkit and never builds this file):
//
//     nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -Ikernels \
//         benches/cuda/sgemm_wg_bench.cu -lcublas -o sgemm_wg_bench
//     ./sgemm_wg_bench M K N [ll [splits [reps]]]     (ll: nn, nt, tn, tt; e.g. 4096 4096 4096 nn)
//
// Prints, for 3xTF32 and TF32, the relative error against an f64 reference (products up to
// 4096^3) and the median time of the kernel alone and with the two pack launches, then of the
// direct kernels in both orientations (split partials summed on the host, the time without
// the reduction), then cuBLAS SGEMM in FP32 and with TF32 on the same operands.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "../../kernels/sgemm_wg.cu"

#define CK(x)                                                                  \
    do {                                                                       \
        cudaError_t e = (x);                                                   \
        if (e != cudaSuccess) {                                                \
            printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e)); \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

__global__ void ref_kernel(int M, int N, int K, const float* A, long long sam, long long sak,
                           const float* B, long long sbk, long long sbn, double* C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N) return;
    double s = 0;
    for (int k = 0; k < K; ++k) s += (double)A[m * sam + k * sak] * (double)B[k * sbk + n * sbn];
    C[(long long)m * N + n] = s;
}

static double rel_err(const std::vector<float>& c, const std::vector<double>& r) {
    double num = 0, den = 0;
    for (size_t i = 0; i < c.size(); ++i) {
        double d = c[i] - r[i];
        if (!std::isfinite(c[i])) return INFINITY;
        num += d * d;
        den += r[i] * r[i];
    }
    return std::sqrt(num / den);
}

int main(int argc, char** argv) {
    int M = atoi(argv[1]), K = atoi(argv[2]), N = atoi(argv[3]);
    bool ta = argc > 4 && argv[4][0] == 't', tb = argc > 4 && argv[4][1] == 't';
    int splits = argc > 5 ? atoi(argv[5]) : 1;
    int reps = argc > 6 ? atoi(argv[6]) : 20;
    bool do_ref = (double)M * N * K <= 4096.0 * 4096 * 4096 * 1.01;
    long long lda = ta ? M : K, ldb = tb ? K : N;
    std::vector<float> hA((size_t)M * K), hB((size_t)K * N);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> U(-1, 1);
    for (auto& x : hA) x = U(rng);
    for (auto& x : hB) x = U(rng);
    float *dA, *dB, *dC, *PA, *PB;
    double* dR;
    int Mp = (M + 127) / 128 * 128, Np = (N + 255) / 256 * 256, Kp = (K + 31) / 32 * 32;
    CK(cudaMalloc(&dA, hA.size() * 4));
    CK(cudaMalloc(&dB, hB.size() * 4));
    CK(cudaMalloc(&dC, (size_t)M * N * 4 * splits));
    CK(cudaMalloc(&PA, (size_t)Mp * Kp * 8));
    CK(cudaMalloc(&PB, (size_t)Np * Kp * 8));
    CK(cudaMemcpy(dA, hA.data(), hA.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, hB.data(), hB.size() * 4, cudaMemcpyHostToDevice));
    long long sam = ta ? 1 : lda, sak = ta ? lda : 1;   // A(m,k)
    long long sbk = tb ? 1 : ldb, sbn = tb ? ldb : 1;   // B(k,n)
    std::vector<double> ref((size_t)M * N);
    if (do_ref) {
        CK(cudaMalloc(&dR, (size_t)M * N * 8));
        ref_kernel<<<dim3((N + 127) / 128, M), 128>>>(M, N, K, dA, sam, sak, dB, sbk, sbn, dR);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ref.data(), dR, ref.size() * 8, cudaMemcpyDeviceToHost));
    }
    CK(cudaFuncSetAttribute(sgemm_wg_tf32x3_128x128, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            sgw::SMEM_BYTES));
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, sgemm_wg_tf32x3_128x128));
    printf("tf32x3 regs %d local %zu | ", fa.numRegs, fa.localSizeBytes);
    CK(cudaFuncSetAttribute(sgemm_wg_tf32_128x256, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            sgw::SMEM_BYTES));
    CK(cudaFuncGetAttributes(&fa, sgemm_wg_tf32_128x256));
    printf("tf32 regs %d local %zu\n", fa.numRegs, fa.localSizeBytes);

    int tiles = (M + 127) / 128 * ((N + 127) / 128);
    int kt = Kp / 32, ktps = (kt + splits - 1) / splits;
    cudaEvent_t e0, e1, e2;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaEventCreate(&e2);
    std::vector<float> hC((size_t)M * N);
    double flops = 2.0 * M * N * K;
    for (int variant = 0; variant < 3; variant += 2) {  // 0: 3xTF32, 2: TF32
        int x3 = variant == 0;
        auto run = [&]() {
            sgemm_wg_pack<<<dim3(Kp / 32, std::min(Mp / 32, 65535)), dim3(32, 8)>>>(
                M, K, dA, sam, sak, PA, Mp, Kp, x3);
            int npv = variant == 2 ? Np : (N + 127) / 128 * 128;
            sgemm_wg_pack<<<dim3(Kp / 32, std::min(npv / 32, 65535)), dim3(32, 8)>>>(
                N, K, dB, sbn, sbk, PB, npv, Kp, x3);
            cudaEventRecord(e1);
            if (x3)
                sgemm_wg_tf32x3_128x128<<<dim3(tiles, 1, splits), 256, sgw::SMEM_BYTES>>>(
                    M, N, K, PA, PB, Kp, dC, N, ktps);
            else
                sgemm_wg_tf32_128x256<<<dim3((M + 127) / 128 * ((N + 255) / 256), 1, splits), 256,
                                        sgw::SMEM_BYTES>>>(M, N, K, PA, PB, Kp, dC, N, ktps);
        };
        CK(cudaMemset(dC, 0xFF, (size_t)M * N * 4 * splits));
        run();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<float> part((size_t)M * N * splits);
        CK(cudaMemcpy(part.data(), dC, part.size() * 4, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < hC.size(); ++i) {
            float s = 0;
            for (int z = 0; z < splits; ++z) s += part[z * hC.size() + i];
            hC[i] = s;
        }
        double err = do_ref ? rel_err(hC, ref) : -1;
        std::vector<float> tall, tk;
        for (int r = 0; r < reps; ++r) {
            cudaEventRecord(e0);
            run();
            cudaEventRecord(e2);
            cudaEventSynchronize(e2);
            float a, b;
            cudaEventElapsedTime(&a, e0, e2);
            cudaEventElapsedTime(&b, e1, e2);
            tall.push_back(a);
            tk.push_back(b);
        }
        std::sort(tall.begin(), tall.end());
        std::sort(tk.begin(), tk.end());
        printf("%s %dx%dx%d %c%c splits %d: err %.3e  kernel %.3f ms %.1f TF  with pack %.3f ms %.1f TF\n",
               variant == 0 ? "tf32x3" : "tf32  ", M, K, N, ta ? 't' : 'n', tb ? 't' : 'n', splits, err,
               tk[reps / 2], flops / tk[reps / 2] / 1e9, tall[reps / 2], flops / tall[reps / 2] / 1e9);
    }
    // The direct kernels (no packs), both orientations: X = op(A), Y = op(B)^T, or the
    // transposed problem X = op(B)^T, Y = op(A) writing C^T.
    for (int x3 = 1; x3 >= 0; --x3) {
        auto kern = x3 ? sgemm_wg_tf32x3_128x64 : sgemm_wg_tf32_128x64;
        const int dsmem = x3 ? sgw::dsmem<true>() : sgw::dsmem<false>();
        CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, dsmem));
        CK(cudaFuncGetAttributes(&fa, kern));
        printf("direct %s regs %d local %zu\n", x3 ? "tf32x3" : "tf32", fa.numRegs,
               fa.localSizeBytes);
        for (int tr = 0; tr < 2; ++tr) {
            int Mx = tr ? N : M, Ny = tr ? M : N;
            const float *X = tr ? dB : dA, *Y = tr ? dA : dB;
            long long xr = tr ? sbn : sam, xk = tr ? sbk : sak;
            long long yr = tr ? sam : sbn, yk = tr ? sak : sbk;
            long long crs = tr ? 1 : N, ccs = tr ? N : 1;
            int dtiles = (Mx + 127) / 128 * ((Ny + 63) / 64);
            auto run = [&]() {
                kern<<<dim3(dtiles, 1, splits), 256, dsmem>>>(Mx, Ny, K, X, xr, xk, Y, yr, yk, dC,
                                                              crs, ccs, (long long)M * N, ktps);
            };
            CK(cudaMemset(dC, 0xFF, (size_t)M * N * 4 * splits));
            run();
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            std::vector<float> part((size_t)M * N * splits);
            CK(cudaMemcpy(part.data(), dC, part.size() * 4, cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < hC.size(); ++i) {
                float s = 0;
                for (int z = 0; z < splits; ++z) s += part[z * hC.size() + i];
                hC[i] = s;
            }
            double err = do_ref ? rel_err(hC, ref) : -1;
            std::vector<float> t;
            for (int r = 0; r < reps; ++r) {
                cudaEventRecord(e0);
                run();
                cudaEventRecord(e2);
                cudaEventSynchronize(e2);
                float a;
                cudaEventElapsedTime(&a, e0, e2);
                t.push_back(a);
            }
            std::sort(t.begin(), t.end());
            printf("direct %s %s %dx%dx%d %c%c splits %d: err %.3e  %.3f ms %.1f TF\n",
                   x3 ? "tf32x3" : "tf32  ", tr ? "C^T" : "C  ", M, K, N, ta ? 't' : 'n',
                   tb ? 't' : 'n', splits, err, t[reps / 2], flops / t[reps / 2] / 1e9);
        }
    }
    // cuBLAS: row-major C = A B  <=>  col-major C^T = B^T A^T.
    cublasHandle_t h;
    cublasCreate(&h);
    for (int tf = 0; tf < 2; ++tf) {
        cublasSetMathMode(h, tf ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        float one = 1, zero = 0;
        auto run = [&]() {
            cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                        &one, dB, ldb, dA, lda, &zero, dC, N);
        };
        run();
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(hC.data(), dC, hC.size() * 4, cudaMemcpyDeviceToHost));
        double err = do_ref ? rel_err(hC, ref) : -1;
        std::vector<float> t;
        for (int r = 0; r < reps; ++r) {
            cudaEventRecord(e0);
            run();
            cudaEventRecord(e2);
            cudaEventSynchronize(e2);
            float a;
            cudaEventElapsedTime(&a, e0, e2);
            t.push_back(a);
        }
        std::sort(t.begin(), t.end());
        printf("cublas %s: err %.3e  %.3f ms %.1f TF\n", tf ? "tf32" : "fp32", err, t[reps / 2],
               flops / t[reps / 2] / 1e9);
    }
    return 0;
}
