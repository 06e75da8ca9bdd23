// sgemm_harness.cu -- standalone correctness + speed harness for kernels/sgemm_fast.cu.
//
// Build (on the GPU machine):  nvcc -O3 -arch=sm_90 -o h tools/sgemm_harness.cu -lcublas
// Run:  ./h                 built-in suite (correctness + timing vs cuBLAS)
//       ./h --quick         correctness only, small odd shapes, all TA/TB, aligned + unaligned
//       ./h M,K,N[,xy][,u][,fV] ...   given shapes; xy in {nn,nt,tn,tt} (TA,TB), 'u' = unaligned
//                            fV forces a kernel: f0 64x128, f1 64x64, f2 64x64 split-K, f5 64x128 split-K
//                            (lda/ldb = row length + 1, A and B base pointers offset by 1 float)
// Output: one row per case: M K N op variant ms TFLOP/s cublas_TFLOP/s ratio rel_err cublas_err
// Exit status non-zero if any check fails (rel_err > max(1e-5, 4*cublas_err), NaN left in C,
// or any element of C's allocation outside the M x N result written).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../kernels/sgemm_fast.cu"

static int g_fail = 0;

#define CK(x)                                                                            \
    do {                                                                                 \
        cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                         \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                    __LINE__, #x);                                                       \
            exit(2);                                                                     \
        }                                                                                \
    } while (0)
#define CB(x)                                                                                 \
    do {                                                                                      \
        cublasStatus_t s_ = (x);                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", (int)s_, __FILE__, __LINE__, #x); \
            exit(2);                                                                          \
        }                                                                                     \
    } while (0)

// ------------------------------------------------------------------------------------------
// helper kernels
// ------------------------------------------------------------------------------------------
__global__ void fill_kernel(float* p, long long n, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
        h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29; h *= 0x94D049BB133111EBull; h ^= h >> 32;
        unsigned u = (unsigned)(h & 0xFFFFFFu);            // 24 bits
        p[i] = (float)(2.0 * ((u + 0.5) / 16777216.0) - 1.0);  // in (-1, 1), never 0
    }
}

// Double-precision reference: R[i*N + j] = sum_k op(A)(i,k) * op(B)(k,j). 64x64 tile, 256 threads,
// 4x4 outputs per thread.
__global__ void ref_kernel(int M, int N, int K, const float* A, long long lda, int ta,
                           const float* B, long long ldb, int tb, double* R) {
    __shared__ double As[16][64], Bs[16][64];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const long long m0 = (long long)blockIdx.y * 64, n0 = (long long)blockIdx.x * 64;
    double acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = threadIdx.x; e < 16 * 64; e += 256) {
            const int kk = e / 64, xx = e % 64;
            const long long k = k0 + kk, m = m0 + xx, n = n0 + xx;
            As[kk][xx] = (k < K && m < M) ? (double)(ta ? A[k * lda + m] : A[m * lda + k]) : 0.0;
            Bs[kk][xx] = (k < K && n < N) ? (double)(tb ? B[n * ldb + k] : B[k * ldb + n]) : 0.0;
        }
        __syncthreads();
        for (int kk = 0; kk < 16; ++kk)
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) acc[i][j] += As[kk][ty + 16 * i] * Bs[kk][tx + 16 * j];
        __syncthreads();
    }
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            const long long m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N) R[m * N + n] = acc[i][j];
        }
}

// stats[0] += sum (C-R)^2, stats[1] += sum R^2 ; cnt[0] = NaN/Inf inside, cnt[1] = non-NaN outside
__global__ void check_kernel(const float* C, long long total, long long ldc, int M, int N,
                             const double* R, double* stats, unsigned long long* cnt) {
    double e = 0, r2 = 0;
    unsigned long long bad = 0, outside = 0;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long i = idx / ldc, j = idx % ldc;
        const float c = C[idx];
        if (i < M && j < N) {
            if (!isfinite(c)) { ++bad; continue; }
            const double r = R[i * N + j], d = (double)c - r;
            e += d * d;
            r2 += r * r;
        } else if (!isnan(c)) {
            ++outside;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        e += __shfl_xor_sync(0xffffffffu, e, o);
        r2 += __shfl_xor_sync(0xffffffffu, r2, o);
        bad += __shfl_xor_sync(0xffffffffu, bad, o);
        outside += __shfl_xor_sync(0xffffffffu, outside, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&stats[0], e);
        atomicAdd(&stats[1], r2);
        atomicAdd(&cnt[0], bad);
        atomicAdd(&cnt[1], outside);
    }
}

// ------------------------------------------------------------------------------------------
// kernel tables  [aligned][ta][tb]
// ------------------------------------------------------------------------------------------
typedef void (*GemmFn)(int, int, int, const float*, long long, const float*, long long, float*,
                       long long);
typedef void (*SplitFn)(int, int, int, const float*, long long, const float*, long long, float*,
                        long long, int);
#define TAB(P, S)                                                                     \
    {                                                                                 \
        {{P##_nn_u##S, P##_nt_u##S}, {P##_tn_u##S, P##_tt_u##S}},                     \
        {{P##_nn##S, P##_nt##S}, {P##_tn##S, P##_tt##S}},                             \
    }
static GemmFn big_fn[2][2][2] = TAB(sgemm_fast_64x128, );
static GemmFn small_fn[2][2][2] = TAB(sgemm_fast_64x64, );
static SplitFn big_split_fn[2][2][2] = TAB(sgemm_fast_64x128, _splitk);
static SplitFn small_split_fn[2][2][2] = TAB(sgemm_fast_64x64, _splitk);
static GemmFn m1_fn[2][2] = {{sgemv_m1_nn, sgemv_m1_nt}, {sgemv_m1_tn, sgemv_m1_tt}};
static GemmFn n1_fn[2][2] = {{sgemv_n1_nn, sgemv_n1_nt}, {sgemv_n1_tn, sgemv_n1_tt}};

static const int NUM_SMS_TARGET = 132;

struct Case {
    int M, K, N;
    int ta, tb;
    bool unaligned;
    int ldc_pad;
    bool timed;
    int force;  // -1: launcher heuristic; 0: 64x128; 1: 64x64; 2: 64x64 split-K; 5: 64x128 split-K
};

struct Plan {
    int kind;  // 0 gemm big, 1 gemm small, 2 split (small), 3 gemv m1, 4 gemv n1, 5 split (big)
    int splits, kps;
    bool aligned;
    std::string name;
};

static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

// The launcher logic (what the Rust side is expected to do).
static Plan plan_for(int M, int N, int K, int ta, int tb, const float* A, long long lda,
                     const float* B, long long ldb) {
    Plan p{};
    p.aligned = ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) && lda % 4 == 0 &&
                ldb % 4 == 0;
    const char* op[2][2] = {{"nn", "nt"}, {"tn", "tt"}};
    const std::string sfx = std::string(op[ta][tb]) + (p.aligned ? "" : "_u");
    p.splits = 1;
    if (M == 1) { p.kind = 3; p.name = std::string("gemv_m1_") + op[ta][tb]; return p; }
    if (N == 1) { p.kind = 4; p.name = std::string("gemv_n1_") + op[ta][tb]; return p; }
    const long long tbig = cdiv(M, sgf::CfgBig::BM) * cdiv(N, sgf::CfgBig::BN);
    if (tbig >= 480) { p.kind = 0; p.name = "64x128_" + sfx; return p; }
    const long long t64 = cdiv(M, 64) * cdiv(N, 64);
    // 64x64 kernel: 6 resident blocks per SM. Split K only when the tiles cannot fill the GPU,
    // and never beyond one wave of resident blocks.
    const long long slots = 6 * NUM_SMS_TARGET;
    int splits = 1;
    if (t64 < 200 && K >= 512) {
        long long s = std::min<long long>(slots / t64, K / 256);
        splits = (int)std::max<long long>(1, std::min<long long>(s, 64));
    }
    if (splits > 1) {
        long long kps = cdiv(cdiv(K, splits), 16) * 16;
        p.kps = (int)kps;
        p.splits = (int)cdiv(K, kps);
    }
    if (p.splits > 1) {
        p.kind = 2;
        p.name = "64x64_" + sfx + "_splitk" + std::to_string(p.splits);
    } else {
        p.kind = 1;
        p.name = "64x64_" + sfx;
    }
    return p;
}

static Plan forced_plan(int force, int K, const float* A, long long lda, const float* B,
                        long long ldb, int ta, int tb) {
    Plan p{};
    p.aligned = ((uintptr_t)A % 16 == 0) && ((uintptr_t)B % 16 == 0) && lda % 4 == 0 &&
                ldb % 4 == 0;
    const char* op[2][2] = {{"nn", "nt"}, {"tn", "tt"}};
    const std::string sfx = std::string(op[ta][tb]) + (p.aligned ? "" : "_u");
    p.kind = force;
    p.splits = 1;
    if (force == 2 || force == 5) {
        const int kps = (int)std::max<long long>(16, cdiv(cdiv(K, 3), 16) * 16);
        p.kps = kps;
        p.splits = (int)cdiv(K, kps);
    }
    p.name = std::string(force == 0 || force == 5 ? "F64x128_" : "F64x64_") + sfx +
             (force == 2 || force == 5 ? "_splitk" + std::to_string(p.splits) : "");
    return p;
}

static void launch(const Plan& p, int M, int N, int K, int ta, int tb, const float* A,
                   long long lda, const float* B, long long ldb, float* C, long long ldc,
                   float* W) {
    const int al = p.aligned ? 1 : 0;
    switch (p.kind) {
        case 0: {
            dim3 g((unsigned)(cdiv(M, sgf::CfgBig::BM) * cdiv(N, sgf::CfgBig::BN)));
            big_fn[al][ta][tb]<<<g, sgf::CfgBig::NT, sgf::CfgBig::SMEM_BYTES>>>(M, N, K, A, lda, B, ldb, C, ldc);
            break;
        }
        case 1: {
            dim3 g((unsigned)(cdiv(M, 64) * cdiv(N, 64)));
            small_fn[al][ta][tb]<<<g, sgf::CfgSmall::NT, sgf::CfgSmall::SMEM_BYTES>>>(M, N, K, A, lda, B, ldb, C, ldc);
            break;
        }
        case 2: {
            dim3 g((unsigned)(cdiv(M, 64) * cdiv(N, 64)), 1, p.splits);
            small_split_fn[al][ta][tb]<<<g, sgf::CfgSmall::NT, sgf::CfgSmall::SMEM_BYTES>>>(M, N, K, A, lda, B, ldb,
                                                                           W, N, p.kps);
            CK(cudaGetLastError());
            const long long mn = (long long)M * N;
            const unsigned rg = (unsigned)std::min<long long>(cdiv(mn, 256), 8192);
            sgemm_splitk_reduce<<<rg, 256>>>(M, N, p.splits, W, C, ldc);
            break;
        }
        case 5: {
            dim3 g((unsigned)(cdiv(M, sgf::CfgBig::BM) * cdiv(N, sgf::CfgBig::BN)), 1, p.splits);
            big_split_fn[al][ta][tb]<<<g, sgf::CfgBig::NT, sgf::CfgBig::SMEM_BYTES>>>(M, N, K, A, lda, B, ldb,
                                                                       W, N, p.kps);
            CK(cudaGetLastError());
            const long long mn = (long long)M * N;
            const unsigned rg = (unsigned)std::min<long long>(cdiv(mn, 256), 8192);
            sgemm_splitk_reduce<<<rg, 256>>>(M, N, p.splits, W, C, ldc);
            break;
        }
        case 3: {
            const unsigned g = (unsigned)(tb ? cdiv(N, 8) : cdiv(N, 16));
            m1_fn[ta][tb]<<<g, 256>>>(M, N, K, A, lda, B, ldb, C, ldc);
            break;
        }
        case 4: {
            const unsigned g = (unsigned)(ta ? cdiv(M, 16) : cdiv(M, 8));
            n1_fn[ta][tb]<<<g, 256>>>(M, N, K, A, lda, B, ldb, C, ldc);
            break;
        }
    }
    CK(cudaGetLastError());
}

static void set_attrs() {
    for (int a = 0; a < 2; ++a)
        for (int x = 0; x < 2; ++x)
            for (int y = 0; y < 2; ++y) {
                CK(cudaFuncSetAttribute(big_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        sgf::CfgBig::SMEM_BYTES));
                CK(cudaFuncSetAttribute(big_split_fn[a][x][y],
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        sgf::CfgBig::SMEM_BYTES));
                CK(cudaFuncSetAttribute(small_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        sgf::CfgSmall::SMEM_BYTES));
                CK(cudaFuncSetAttribute(small_split_fn[a][x][y],
                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        sgf::CfgSmall::SMEM_BYTES));
            }
}

// error of C (with NaN / outside-write counts) vs reference
struct Check {
    double rel;
    unsigned long long bad, outside;
};
static Check check(const float* C, long long total, long long ldc, int M, int N, const double* R,
                   double* d_stats, unsigned long long* d_cnt) {
    CK(cudaMemset(d_stats, 0, 2 * sizeof(double)));
    CK(cudaMemset(d_cnt, 0, 2 * sizeof(unsigned long long)));
    const unsigned g = (unsigned)std::min<long long>(cdiv(total, 256), 4096);
    check_kernel<<<g, 256>>>(C, total, ldc, M, N, R, d_stats, d_cnt);
    CK(cudaGetLastError());
    double st[2];
    unsigned long long cn[2];
    CK(cudaMemcpy(st, d_stats, sizeof(st), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(cn, d_cnt, sizeof(cn), cudaMemcpyDeviceToHost));
    Check c;
    c.rel = st[1] > 0 ? std::sqrt(st[0] / st[1]) : std::sqrt(st[0]);
    c.bad = cn[0];
    c.outside = cn[1];
    return c;
}

template <class F>
static double time_ms(F f, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; ++i) f();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(e0));
        f();
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static void run_case(cublasHandle_t h, const Case& cs, unsigned seed) {
    const int M = cs.M, K = cs.K, N = cs.N, ta = cs.ta, tb = cs.tb;
    const int off = cs.unaligned ? 1 : 0;
    // leading dimensions: >= row length; aligned: multiple of 4; unaligned: row length + 1
    const long long arow = ta ? M : K, brow = tb ? K : N;
    const long long lda = cs.unaligned ? arow + 1 : cdiv(arow, 4) * 4;
    const long long ldb = cs.unaligned ? brow + 1 : cdiv(brow, 4) * 4;
    const long long ldc = N + cs.ldc_pad;
    const long long a_elems = (ta ? (long long)K : (long long)M) * lda + 4;
    const long long b_elems = (tb ? (long long)N : (long long)K) * ldb + 4;
    const long long c_total = ((long long)M + 1) * ldc;  // one guard row after the result

    float *dA, *dB, *dC, *dC2, *dW = nullptr;
    double *dR, *d_stats;
    unsigned long long* d_cnt;
    CK(cudaMalloc(&dA, a_elems * sizeof(float)));
    CK(cudaMalloc(&dB, b_elems * sizeof(float)));
    CK(cudaMalloc(&dC, c_total * sizeof(float)));
    CK(cudaMalloc(&dC2, c_total * sizeof(float)));
    CK(cudaMalloc(&dR, (long long)M * N * sizeof(double)));
    CK(cudaMalloc(&d_stats, 2 * sizeof(double)));
    CK(cudaMalloc(&d_cnt, 2 * sizeof(unsigned long long)));
    fill_kernel<<<1024, 256>>>(dA, a_elems, seed * 2 + 1);
    fill_kernel<<<1024, 256>>>(dB, b_elems, seed * 2 + 2);
    CK(cudaGetLastError());
    const float* A = dA + off;
    const float* B = dB + off;

    {
        dim3 g((unsigned)cdiv(N, 64), (unsigned)cdiv(M, 64));
        ref_kernel<<<g, 256>>>(M, N, K, A, lda, ta, B, ldb, tb, dR);
        CK(cudaGetLastError());
    }
    const Plan p = cs.force < 0 ? plan_for(M, N, K, ta, tb, A, lda, B, ldb)
                                : forced_plan(cs.force, K, A, lda, B, ldb, ta, tb);
    if (p.kind == 2 || p.kind == 5) CK(cudaMalloc(&dW, (long long)p.splits * M * N * sizeof(float)));

    // ours
    CK(cudaMemset(dC, 0xFF, c_total * sizeof(float)));
    launch(p, M, N, K, ta, tb, A, lda, B, ldb, dC, ldc, dW);
    CK(cudaDeviceSynchronize());
    const Check co = check(dC, c_total, ldc, M, N, dR, d_stats, d_cnt);

    // cuBLAS (column-major): C^T (N x M) = op(B)^T (N x K) * op(A)^T (K x M)
    const float one = 1.f, zero = 0.f;
    auto cub = [&]() {
        CB(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                       &one, B, (int)ldb, A, (int)lda, &zero, dC2, (int)ldc));
    };
    CK(cudaMemset(dC2, 0xFF, c_total * sizeof(float)));
    cub();
    CK(cudaDeviceSynchronize());
    const Check cc = check(dC2, c_total, ldc, M, N, dR, d_stats, d_cnt);

    double ms = 0, cms = 0;
    if (cs.timed) {
        const double flop = 2.0 * M * N * K;
        const int reps = flop > 2e11 ? 10 : (flop > 1e10 ? 20 : 50);
        ms = time_ms([&]() { launch(p, M, N, K, ta, tb, A, lda, B, ldb, dC, ldc, dW); }, reps);
        cms = time_ms(cub, reps);
        // results must still be right after the timing loop
        const Check c2 = check(dC, c_total, ldc, M, N, dR, d_stats, d_cnt);
        if (c2.bad || c2.outside || c2.rel > co.rel * 1.0000001 + 1e-30) {
            fprintf(stderr, "  result changed during timing (rel %.3e)\n", c2.rel);
            g_fail = 1;
        }
    }
    const double thr = std::max(1e-5, 4.0 * cc.rel);
    const bool ok = co.rel <= thr && co.bad == 0 && co.outside == 0;
    if (!ok) g_fail = 1;
    const char* opn[2][2] = {{"nn", "nt"}, {"tn", "tt"}};
    const double flop = 2.0 * M * N * K;
    if (cs.timed)
        printf("%6d %6d %6d %s%s %-26s %9.4f %8.2f %8.2f %6.3f %10.3e %10.3e %s\n", M, K, N,
               opn[ta][tb], cs.unaligned ? "u" : " ", p.name.c_str(), ms, flop / ms * 1e-9,
               flop / cms * 1e-9, cms / ms, co.rel, cc.rel, ok ? "OK" : "FAIL");
    else
        printf("%6d %6d %6d %s%s %-26s %9s %8s %8s %6s %10.3e %10.3e %s\n", M, K, N, opn[ta][tb],
               cs.unaligned ? "u" : " ", p.name.c_str(), "-", "-", "-", "-", co.rel, cc.rel,
               ok ? "OK" : "FAIL");
    if (!ok)
        printf("   FAIL detail: rel %.3e (limit %.3e), non-finite %llu, outside writes %llu\n",
               co.rel, thr, co.bad, co.outside);
    if (cc.bad || cc.outside)
        printf("   note: cuBLAS result had %llu non-finite, %llu outside writes\n", cc.bad,
               cc.outside);
    fflush(stdout);
    CK(cudaFree(dA));
    CK(cudaFree(dB));
    CK(cudaFree(dC));
    CK(cudaFree(dC2));
    CK(cudaFree(dR));
    CK(cudaFree(d_stats));
    CK(cudaFree(d_cnt));
    if (dW) CK(cudaFree(dW));
}

static void add_all_ops(std::vector<Case>& v, int M, int K, int N, bool timed, bool both_align,
                        int pad, int force = -1) {
    for (int u = 0; u < (both_align ? 2 : 1); ++u)
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb) v.push_back({M, K, N, ta, tb, u == 1, pad, timed, force});
}

int main(int argc, char** argv) {
    bool quick = false;
    std::vector<Case> cases;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--quick")) { quick = true; continue; }
        Case c{0, 0, 0, 0, 0, false, 0, true, -1};
        std::string s = argv[i];
        std::vector<std::string> f;
        size_t pos = 0;
        while (true) {
            size_t q = s.find(',', pos);
            f.push_back(s.substr(pos, q == std::string::npos ? std::string::npos : q - pos));
            if (q == std::string::npos) break;
            pos = q + 1;
        }
        if (f.size() < 3) { fprintf(stderr, "bad shape '%s' (want M,K,N[,xy][,u])\n", argv[i]); return 2; }
        c.M = atoi(f[0].c_str()); c.K = atoi(f[1].c_str()); c.N = atoi(f[2].c_str());
        for (size_t j = 3; j < f.size(); ++j) {
            if (f[j] == "u") c.unaligned = true;
            else if (f[j].size() == 2 && f[j][0] == 'f') c.force = f[j][1] - '0';
            else if (f[j].size() == 2) { c.ta = f[j][0] == 't'; c.tb = f[j][1] == 't'; }
        }
        if (c.M < 1 || c.K < 1 || c.N < 1) { fprintf(stderr, "bad shape '%s'\n", argv[i]); return 2; }
        cases.push_back(c);
    }
    const int odd[][3] = {{1, 1, 1},      {7, 13, 5},    {63, 65, 67},  {127, 1, 129},
                          {1, 129, 127},  {129, 127, 1}, {1, 7, 1},     {33, 100, 1},
                          {1, 300, 70},   {130, 1025, 129}, {200, 3000, 170}, {65, 17, 63},
                          {129, 33, 131}, {3, 5000, 5},  {257, 2048, 255}};
    if (cases.empty()) {
        const int forces[] = {-1, 0, 1, 2, 5};
        for (int f : forces)
            for (auto& s : odd) add_all_ops(cases, s[0], s[1], s[2], false, true, 3, f);
        if (!quick) {
            const int big[][3] = {{256, 256, 256},   {512, 512, 512},    {1000, 1000, 1000},
                                  {1024, 1024, 1024}, {4097, 4097, 4097}, {8192, 8192, 8192},
                                  {4096, 1024, 8192}, {8192, 8192, 64},   {64, 8192, 8192},
                                  {8192, 64, 8192}};
            add_all_ops(cases, 2048, 2048, 2048, true, true, 0);
            add_all_ops(cases, 4096, 4096, 4096, true, false, 0);
            cases.push_back({4096, 4096, 4096, 0, 0, true, 0, true, -1});
            for (auto& s : big) cases.push_back({s[0], s[1], s[2], 0, 0, false, 0, true, -1});
            cases.push_back({1, 4096, 4096, 0, 0, false, 0, true, -1});
            cases.push_back({1, 4096, 4096, 0, 1, false, 0, true, -1});
            cases.push_back({4096, 4096, 1, 0, 0, false, 0, true, -1});
            cases.push_back({4096, 4096, 1, 1, 0, false, 0, true, -1});
        }
    }
    int dev = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("# device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    set_attrs();
    cublasHandle_t h;
    CB(cublasCreate(&h));
    CB(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // FP32, no TF32
    printf("%6s %6s %6s %-3s %-26s %9s %8s %8s %6s %10s %10s\n", "M", "K", "N", "op", "variant",
           "ms", "TFLOP/s", "cuBLAS", "ratio", "rel_err", "cublas_err");
    unsigned seed = 1;
    for (const Case& c : cases) run_case(h, c, seed++);
    CB(cublasDestroy(h));
    printf(g_fail ? "# SOME CHECKS FAILED\n" : "# all checks passed\n");
    return g_fail ? 1 : 0;
}
