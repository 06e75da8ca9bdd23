// dgemm_lab.cu -- correctness + speed harness for kernels/dgemm.cu (f64, FP64 tensor cores).
//
// Build (GPU machine): nvcc -O3 -std=c++17 -arch=sm_90 -I kernels -o lab \
//                          tools/dgemm-lab/dgemm_lab.cu -lcublas
// Run:  ./lab quick     correctness: odd shapes x 4 ops x aligned/unaligned x every GEMM kind
//                       (+ gemv, split-K with an extra empty slice, axpby, relu)
//       ./lab sanity    a small odd-shape pass per entry kind (for compute-sanitizer)
//       ./lab suite     timing suite vs cuBLAS DGEMM (+ rel errors vs a long double reference)
//       ./lab M,K,N[,op][,u] ...   time / check given shapes (op in nn,nt,tn,tt; u = unaligned)
// C is poisoned with NaN, surrounded by guard rows and ldc padding (all checked to stay poison);
// errors are ||C - ref|| / ||ref|| over sampled rows against a long double host reference.
// Exit status non-zero on any failure.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dgemm.cu"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__,    \
                    __LINE__, #x);                                                              \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)
#define CB(x)                                                                          \
    do {                                                                               \
        cublasStatus_t s_ = (x);                                                       \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                             \
            fprintf(stderr, "cuBLAS error %d at %s:%d\n", (int)s_, __FILE__, __LINE__); \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static int g_fail = 0;
static long long cdiv(long long a, long long b) { return (a + b - 1) / b; }

__global__ void fill_kernel(double* p, long long n, unsigned seed) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull;
        h ^= h >> 31; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 29; h *= 0x94D049BB133111EBull; h ^= h >> 32;
        p[i] = 2.0 * ((double)(h >> 11) + 0.5) / 9007199254740992.0 - 1.0;  // (-1, 1)
    }
}

// cnt[0]: non-finite inside the M x N result; cnt[1]: elements outside it that are not poison.
__global__ void check_kernel(const double* base, long long total, long long origin, long long ldc,
                             int M, int N, unsigned long long* cnt) {
    unsigned long long bad = 0, outside = 0;
    for (long long idx = blockIdx.x * (long long)blockDim.x + threadIdx.x; idx < total;
         idx += (long long)gridDim.x * blockDim.x) {
        const long long p = idx - origin;
        const bool in = p >= 0 && p / ldc < M && p % ldc < N;
        const double v = base[idx];
        if (in) bad += !isfinite(v);
        else outside += (__double_as_longlong(v) != -1ll);
    }
    atomicAdd(&cnt[0], bad);
    atomicAdd(&cnt[1], outside);
}

// ------------------------------------------------------------------------------------------
// kernel tables
// ------------------------------------------------------------------------------------------
typedef void (*GemmFn)(int, int, int, const double*, long long, const double*, long long, double*,
                       long long);
typedef void (*SplitFn)(int, int, int, const double*, long long, const double*, long long,
                        double*, long long, int);
#define TAB(P, S)                                                     \
    {                                                                 \
        {{P##_nn_u##S, P##_nt_u##S}, {P##_tn_u##S, P##_tt_u##S}},     \
        {{P##_nn##S, P##_nt##S}, {P##_tn##S, P##_tt##S}},             \
    }
static GemmFn big_fn[2][2][2] = TAB(dgemm_tc_128x64, );
static GemmFn small_fn[2][2][2] = TAB(dgemm_tc_64x64, );
static SplitFn big_split_fn[2][2][2] = TAB(dgemm_tc_128x64, _splitk);
static SplitFn small_split_fn[2][2][2] = TAB(dgemm_tc_64x64, _splitk);
static GemmFn simt_fn[2][2] = {{dgemm_simt_nn, dgemm_simt_nt}, {dgemm_simt_tn, dgemm_simt_tt}};
static SplitFn simt_split_fn[2][2] = {{dgemm_simt_nn_splitk, dgemm_simt_nt_splitk},
                                      {dgemm_simt_tn_splitk, dgemm_simt_tt_splitk}};
static GemmFn m1_fn[2][2] = {{dgemv_m1_nn, dgemv_m1_nt}, {dgemv_m1_tn, dgemv_m1_tt}};
static GemmFn n1_fn[2][2] = {{dgemv_n1_nn, dgemv_n1_nt}, {dgemv_n1_tn, dgemv_n1_tt}};

enum Kind { BIG, SMALL, SIMT, GEMV, CUBLAS, BIG_SK1, BIG_CL2, BIG_CL4 };
static const char* kind_name[] = {"tc128x64", "tc64", "simt", "gemv", "cublas", "tc128x64_sk1", "tc128x64_cl2", "tc128x64_cl4"};

struct Plan {
    Kind kind;
    int splits = 1, kps = 0, extra = 0;  // extra: empty slices appended (tests the zero fill)
    std::string name() const {
        std::string s = kind_name[kind];
        if (splits > 1 || extra) s += "_sk" + std::to_string(splits + extra) + "x" + std::to_string(kps);
        return s;
    }
};

static void set_attrs() {
    for (int a = 0; a < 2; ++a)
        for (int x = 0; x < 2; ++x)
            for (int y = 0; y < 2; ++y) {
                CK(cudaFuncSetAttribute(big_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize, dgm::TcBig::SMEM_BYTES));
                CK(cudaFuncSetAttribute(big_split_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize, dgm::TcBig::SMEM_BYTES));
                CK(cudaFuncSetAttribute(small_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize, dgm::TcSmall::SMEM_BYTES));
                CK(cudaFuncSetAttribute(small_split_fn[a][x][y], cudaFuncAttributeMaxDynamicSharedMemorySize, dgm::TcSmall::SMEM_BYTES));
            }
}

struct Prob {
    int M, K, N, ta, tb, al;
    const double *A, *B;
    long long lda, ldb;
    double* C;
    long long ldc;
    double* W;  // split workspace
};

static cublasHandle_t g_h;

static void launch(const Plan& p, const Prob& q) {
    const int M = q.M, N = q.N, K = q.K, ta = q.ta, tb = q.tb, al = q.al;
    if (p.kind == CUBLAS) {
        const double one = 1.0, zero = 0.0;
        CB(cublasDgemm(g_h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                       &one, q.B, (int)q.ldb, q.A, (int)q.lda, &zero, q.C, (int)q.ldc));
        return;
    }
    if (p.kind == GEMV) {
        if (M == 1) m1_fn[ta][tb]<<<(unsigned)(tb ? cdiv(N, 8) : cdiv(N, 16)), 256>>>(M, N, K, q.A, q.lda, q.B, q.ldb, q.C, q.ldc);
        else n1_fn[ta][tb]<<<(unsigned)(ta ? cdiv(M, 16) : cdiv(M, 8)), 256>>>(M, N, K, q.A, q.lda, q.B, q.ldb, q.C, q.ldc);
        CK(cudaGetLastError());
        return;
    }
    if (p.kind == BIG_CL2 || p.kind == BIG_CL4) {  // clusters of consecutive tiles (co-scheduled)
        const int cl = p.kind == BIG_CL2 ? 2 : 4;
        const unsigned tiles = (unsigned)(cdiv(cdiv(M, dgm::TcBig::BM) * cdiv(N, dgm::TcBig::BN), cl) * cl);
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(tiles, 1, 1);
        cfg.blockDim = dim3(dgm::TcBig::NT, 1, 1);
        cfg.dynamicSmemBytes = dgm::TcBig::SMEM_BYTES;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeClusterDimension;
        at[0].val.clusterDim.x = cl; at[0].val.clusterDim.y = 1; at[0].val.clusterDim.z = 1;
        cfg.attrs = at; cfg.numAttrs = 1;
        CK(cudaLaunchKernelEx(&cfg, big_fn[al][ta][tb], M, N, K, q.A, q.lda, q.B, q.ldb, q.C, q.ldc));
        return;
    }
    if (p.kind == BIG_SK1) {  // the split-K entry as one split straight into C
        const unsigned tiles = (unsigned)(cdiv(M, dgm::TcBig::BM) * cdiv(N, dgm::TcBig::BN));
        big_split_fn[al][ta][tb]<<<tiles, dgm::TcBig::NT, dgm::TcBig::SMEM_BYTES>>>(
            M, N, K, q.A, q.lda, q.B, q.ldb, q.C, q.ldc, (int)(cdiv(K, 16) * 16));
        CK(cudaGetLastError());
        return;
    }
    const int bm = p.kind == BIG ? dgm::TcBig::BM : 64, bn = p.kind == BIG ? dgm::TcBig::BN : 64;
    const int nt = p.kind == BIG ? dgm::TcBig::NT : p.kind == SMALL ? dgm::TcSmall::NT : dgm::SimtCfg::NT;
    const int sm = p.kind == BIG ? dgm::TcBig::SMEM_BYTES : p.kind == SMALL ? dgm::TcSmall::SMEM_BYTES : dgm::SimtCfg::SMEM_BYTES;
    const unsigned tiles = (unsigned)(cdiv(M, bm) * cdiv(N, bn));
    if (p.splits == 1 && !p.extra) {
        GemmFn f = p.kind == BIG ? big_fn[al][ta][tb] : p.kind == SMALL ? small_fn[al][ta][tb] : simt_fn[ta][tb];
        f<<<tiles, nt, sm>>>(M, N, K, q.A, q.lda, q.B, q.ldb, q.C, q.ldc);
        CK(cudaGetLastError());
        return;
    }
    SplitFn f = p.kind == BIG ? big_split_fn[al][ta][tb] : p.kind == SMALL ? small_split_fn[al][ta][tb] : simt_split_fn[ta][tb];
    const int z = p.splits + p.extra;
    f<<<dim3(tiles, 1, z), nt, sm>>>(M, N, K, q.A, q.lda, q.B, q.ldb, q.W, N, p.kps);
    CK(cudaGetLastError());
    const long long mn = (long long)M * N;
    dgemm_splitk_reduce<<<(unsigned)std::min<long long>(cdiv(mn, 256), 8192), 256>>>(M, N, z, q.W, q.C, q.ldc);
    CK(cudaGetLastError());
}

static Plan split_plan(Kind k, int K, int splits) {
    Plan p{k};
    long long kps = cdiv(cdiv(K, splits), 16) * 16;
    p.kps = (int)kps;
    p.splits = (int)cdiv(K, kps);
    return p;
}

// ------------------------------------------------------------------------------------------
// one problem instance: buffers, host reference on sampled rows
// ------------------------------------------------------------------------------------------
struct Inst {
    Prob q;
    double *dA, *dB, *dCbase;
    long long a_el, b_el, c_total, c_origin;
    std::vector<int> rows;
    std::vector<long double> ref;  // rows.size() x N
    Inst(int M, int K, int N, int ta, int tb, bool unal, int cvar, long long ref_budget, unsigned seed) {
        q.M = M; q.K = K; q.N = N; q.ta = ta; q.tb = tb;
        const int off = unal ? 1 : 0;
        const long long arow = ta ? M : K, brow = tb ? K : N;
        // aligned: even leading dims (sometimes padded); unaligned: base 8 mod 16, any ld
        q.lda = unal ? arow + 1 + (cvar & 1) : cdiv(arow, 2) * 2 + 2 * (cvar & 1);
        q.ldb = unal ? brow + 1 : cdiv(brow, 2) * 2;
        q.al = unal ? 0 : 1;
        a_el = (ta ? (long long)K : M) * q.lda + 4;
        b_el = (tb ? (long long)N : K) * q.ldb + 4;
        q.ldc = N + (cvar % 3);                    // pad 0, 1 or 2
        const int coff = (cvar & 2) ? 1 : 0;       // C 8-byte (not 16-byte) aligned
        c_origin = q.ldc + coff;                   // one guard row before
        c_total = ((long long)M + 2) * q.ldc + 2;  // and one after
        CK(cudaMalloc(&dA, a_el * 8));
        CK(cudaMalloc(&dB, b_el * 8));
        CK(cudaMalloc(&dCbase, c_total * 8));
        fill_kernel<<<1024, 256>>>(dA, a_el, seed * 2 + 1);
        fill_kernel<<<1024, 256>>>(dB, b_el, seed * 2 + 2);
        CK(cudaGetLastError());
        q.A = dA + off; q.B = dB + off; q.C = dCbase + c_origin; q.W = nullptr;
        // sampled rows
        long long nr = std::max<long long>(1, std::min<long long>(M, ref_budget / std::max<long long>(1, (long long)K * N)));
        nr = std::max<long long>(nr, std::min(M, 2));
        for (long long i = 0; i < nr; ++i) rows.push_back((int)(nr == 1 ? 0 : i * (M - 1) / (nr - 1)));
        rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
        std::vector<double> hA(a_el), hB(b_el);
        CK(cudaMemcpy(hA.data(), dA, a_el * 8, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hB.data(), dB, b_el * 8, cudaMemcpyDeviceToHost));
        ref.assign(rows.size() * (size_t)N, 0.0L);
        const double* A = hA.data() + off;
        const double* B = hB.data() + off;
        const long long lda = q.lda, ldb = q.ldb;
        auto work = [&](size_t ri) {
            const long long r = rows[ri];
            std::vector<long double> a(K);
            for (int k = 0; k < K; ++k) a[k] = ta ? A[(long long)k * lda + r] : A[r * lda + k];
            long double* out = &ref[ri * N];
            if (!tb) {
                for (int k = 0; k < K; ++k) {
                    const long double ak = a[k];
                    const double* Bk = B + (long long)k * ldb;
                    for (int n = 0; n < N; ++n) out[n] += ak * (long double)Bk[n];
                }
            } else {
                for (int n = 0; n < N; ++n) {
                    const double* Bn = B + (long long)n * ldb;
                    long double s = 0;
                    for (int k = 0; k < K; ++k) s += a[k] * (long double)Bn[k];
                    out[n] = s;
                }
            }
        };
        std::vector<std::thread> th;
        const size_t nt = std::max(1u, std::thread::hardware_concurrency());
        for (size_t t0 = 0; t0 < nt; ++t0)
            th.emplace_back([&, t0]() { for (size_t ri = t0; ri < rows.size(); ri += nt) work(ri); });
        for (auto& t : th) t.join();
    }
    ~Inst() {
        cudaFree(dA); cudaFree(dB); cudaFree(dCbase);
        if (q.W) cudaFree(q.W);
    }
    void need_ws(const Plan& p) {
        if (p.splits + p.extra <= 1) return;
        if (q.W) cudaFree(q.W);
        CK(cudaMalloc(&q.W, (long long)(p.splits + p.extra) * q.M * q.N * 8));
        CK(cudaMemset(q.W, 0xFF, (long long)(p.splits + p.extra) * q.M * q.N * 8));  // NaN
    }
    // poison, run, check; returns rel error (or -1 on a structural failure)
    double run_check(const Plan& p, std::string& why) {
        need_ws(p);
        CK(cudaMemset(dCbase, 0xFF, c_total * 8));
        launch(p, q);
        CK(cudaDeviceSynchronize());
        return check(why);
    }
    double check(std::string& why) {
        unsigned long long* dc;
        CK(cudaMalloc(&dc, 16));
        CK(cudaMemset(dc, 0, 16));
        check_kernel<<<(unsigned)std::min<long long>(cdiv(c_total, 256), 4096), 256>>>(dCbase, c_total, c_origin, q.ldc, q.M, q.N, dc);
        unsigned long long cn[2];
        CK(cudaMemcpy(cn, dc, 16, cudaMemcpyDeviceToHost));
        cudaFree(dc);
        why.clear();
        if (cn[0]) why += " nonfinite=" + std::to_string(cn[0]);
        if (cn[1]) why += " outside_written=" + std::to_string(cn[1]);
        long double e = 0, r2 = 0;
        std::vector<double> row(q.N), all;
        const bool whole = rows.size() > 16;
        if (whole) {
            all.resize((size_t)q.M * q.ldc);
            CK(cudaMemcpy(all.data(), q.C, ((long long)(q.M - 1) * q.ldc + q.N) * 8, cudaMemcpyDeviceToHost));
        }
        for (size_t ri = 0; ri < rows.size(); ++ri) {
            if (whole) std::copy(all.begin() + (long long)rows[ri] * q.ldc, all.begin() + (long long)rows[ri] * q.ldc + q.N, row.begin());
            else CK(cudaMemcpy(row.data(), q.C + (long long)rows[ri] * q.ldc, q.N * 8, cudaMemcpyDeviceToHost));
            for (int n = 0; n < q.N; ++n) {
                const long double rv = ref[ri * q.N + n], d = (long double)row[n] - rv;
                e += d * d;
                r2 += rv * rv;
            }
        }
        const double rel = (double)(r2 > 0 ? sqrtl(e / r2) : sqrtl(e));
        if (!why.empty() || !(rel == rel)) return -1;
        return rel;
    }
};

static const char* opn[2][2] = {{"nn", "nt"}, {"tn", "tt"}};

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
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// ------------------------------------------------------------------------------------------
// correctness passes
// ------------------------------------------------------------------------------------------
static int g_cases = 0;
static void correctness(const std::vector<std::array<int, 3>>& shapes, bool full) {
    int cvar = 0;
    for (auto& s : shapes) {
        const int M = s[0], K = s[1], N = s[2];
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb)
                for (int u = 0; u < 2; ++u) {
                    Inst in(M, K, N, ta, tb, u, cvar++, 1ll << 40, 7 + cvar);
                    std::vector<Plan> plans;
                    plans.push_back(Plan{BIG});
                    plans.push_back(Plan{SMALL});
                    plans.push_back(Plan{SIMT});
                    for (Kind k : {BIG, SMALL, SIMT}) {
                        Plan p = split_plan(k, K, full ? 3 : 2);
                        p.extra = 1;  // one trailing empty slice
                        plans.push_back(p);
                    }
                    if (full) {
                        Plan p = split_plan(SMALL, K, 1);
                        p.kps = 16; p.splits = (int)cdiv(K, 16);
                        plans.push_back(p);
                    }
                    if (M == 1 || N == 1) plans.push_back(Plan{GEMV});
                    plans.push_back(Plan{CUBLAS});
                    double cub_err = 0;
                    std::vector<std::pair<std::string, double>> res;
                    for (auto& p : plans) {
                        std::string why;
                        const double e = in.run_check(p, why);
                        if (p.kind == CUBLAS) cub_err = e;
                        res.push_back({p.name() + why, e});
                    }
                    for (auto& r : res) {
                        ++g_cases;
                        const bool ok = r.second >= 0 && r.second <= std::max(1e-15, 2.0 * cub_err) + 1e-300;
                        if (!ok) {
                            g_fail = 1;
                            printf("FAIL %d,%d,%d %s%s ldc=%lld %s rel=%.3e cublas=%.3e\n", M, K, N, opn[ta][tb],
                                   u ? "u" : "", in.q.ldc, r.first.c_str(), r.second, cub_err);
                        }
                    }
                }
    }
}

static void test_elementwise() {
    const int M = 37, N = 53;
    const long long ldt = 60, ldc = 57;
    std::vector<double> hT(M * ldt), hC(M * ldc);
    for (size_t i = 0; i < hT.size(); ++i) hT[i] = std::sin(0.37 * i);
    for (size_t i = 0; i < hC.size(); ++i) hC[i] = std::cos(0.11 * i);
    double *dT, *dC;
    CK(cudaMalloc(&dT, hT.size() * 8));
    CK(cudaMalloc(&dC, hC.size() * 8));
    CK(cudaMemcpy(dT, hT.data(), hT.size() * 8, cudaMemcpyHostToDevice));
    auto run = [&](double alpha, bool tnull, double beta, bool poison) {
        std::vector<double> c0 = hC;
        if (poison) for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) c0[i * ldc + j] = NAN;
        CK(cudaMemcpy(dC, c0.data(), c0.size() * 8, cudaMemcpyHostToDevice));
        dgemm_axpby<<<3, 256>>>(M, N, alpha, tnull ? nullptr : dT, ldt, beta, dC, ldc);
        CK(cudaGetLastError());
        std::vector<double> out(c0.size());
        CK(cudaMemcpy(out.data(), dC, out.size() * 8, cudaMemcpyDeviceToHost));
        for (long long i = 0; i < M; ++i)
            for (long long j = 0; j < ldc; ++j) {
                double want = c0[i * ldc + j];
                if (j < N) {
                    const double t = tnull ? 0.0 : alpha * hT[i * ldt + j];
                    want = beta == 0.0 ? t : std::fma(beta, c0[i * ldc + j], t);
                }
                const double got = out[i * ldc + j];
                if (!(got == want || (std::isnan(got) && std::isnan(want)))) {
                    printf("FAIL axpby alpha=%g tnull=%d beta=%g (%lld,%lld) got %g want %g\n", alpha, tnull, beta, i, j, got, want);
                    g_fail = 1;
                    return;
                }
            }
        ++g_cases;
    };
    run(1.5, false, 0.0, true);
    run(-2.0, false, 0.5, false);
    run(0.0, true, 3.0, false);
    run(1.0, true, 0.0, true);
    // relu
    const long long n = 1001;
    std::vector<double> x(n), h(n);
    for (long long i = 0; i < n; ++i) { x[i] = std::sin(1.3 * i); h[i] = std::cos(0.7 * i); }
    x[5] = NAN; h[7] = NAN; x[9] = -0.0;
    double *dx, *dh;
    CK(cudaMalloc(&dx, n * 8));
    CK(cudaMalloc(&dh, n * 8));
    CK(cudaMemcpy(dx, x.data(), n * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dh, h.data(), n * 8, cudaMemcpyHostToDevice));
    delem_relu<<<2, 256>>>(n, dx);
    delem_relu_backward<<<1, 256>>>(n, dh, dT);  // G = h, H = T values
    std::vector<double> ox(n), oh(n);
    CK(cudaMemcpy(ox.data(), dx, n * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(oh.data(), dh, n * 8, cudaMemcpyDeviceToHost));
    for (long long i = 0; i < n; ++i) {
        const double wx = std::isnan(x[i]) ? 0.0 : std::max(x[i], 0.0);
        const double wh = hT[i] > 0 ? h[i] : 0.0;
        if (!(ox[i] == wx) || !(oh[i] == wh || (std::isnan(oh[i]) && std::isnan(wh)))) {
            printf("FAIL relu at %lld: %g/%g %g/%g\n", i, ox[i], wx, oh[i], wh);
            g_fail = 1;
            break;
        }
    }
    g_cases += 2;
    cudaFree(dT); cudaFree(dC); cudaFree(dx); cudaFree(dh);
}

// ------------------------------------------------------------------------------------------
// timing
// ------------------------------------------------------------------------------------------
struct Row { std::string shape, best; double tf, cub, ratio, err, cerr; };
static std::vector<Row> g_rows;

static void timed(int M, int K, int N, int ta, int tb, bool unal, bool all_kinds) {
    const long long budget = 1ll << 28;
    Inst in(M, K, N, ta, tb, unal, 0, budget, 11);
    const double flop = 2.0 * M * N * K;
    const int reps = flop > 2e11 ? 10 : (flop > 1e10 ? 20 : 50);
    std::vector<Plan> plans;
    if (M == 1 || N == 1) plans.push_back(Plan{GEMV});
    const long long t128 = cdiv(M, dgm::TcBig::BM) * cdiv(N, dgm::TcBig::BN), t64 = cdiv(M, 64) * cdiv(N, 64);
    if (M > 1 && N > 1) {
        plans.push_back(Plan{BIG});
        plans.push_back(Plan{SMALL});
        if (t64 < 400 && K >= 512) {
            for (int s : {2, 3, 4, 6, 8}) {
                if (s > K / 256) break;
                plans.push_back(split_plan(SMALL, K, s));
            }
            for (int s : {2, 4, 8}) {
                if (t128 * s > 2 * 132 || s > K / 256) break;
                plans.push_back(split_plan(BIG, K, s));
            }
        }
        if (all_kinds) plans.push_back(Plan{SIMT});
    }
    Plan cp{CUBLAS};
    std::string why;
    const double cerr = in.run_check(cp, why);
    const double cms = time_ms([&]() { launch(cp, in.q); }, reps);
    char shp[64];
    snprintf(shp, sizeof shp, "%dx%dx%d %s%s", M, K, N, opn[ta][tb], unal ? "u" : "");
    Row best{shp, "", 0, flop / cms * 1e-9, 0, 0, cerr};
    printf("%-22s cublas %8.4f ms %7.2f TF  err %.2e\n", shp, cms, flop / cms * 1e-9, cerr);
    for (auto& p : plans) {
        const double e = in.run_check(p, why);
        const double ms = time_ms([&]() { launch(p, in.q); }, reps);
        std::string w2;
        const double e2 = in.check(w2);  // still right after the timing loop
        const bool ok = e >= 0 && e <= 2.0 * cerr + 1e-300 && e2 == e;
        if (!ok) g_fail = 1;
        const double tf = flop / ms * 1e-9;
        printf("%-22s %-14s %8.4f ms %7.2f TF  x%5.3f  err %.2e%s%s\n", "", p.name().c_str(), ms, tf,
               tf / best.cub, e, why.c_str(), ok ? "" : "  FAIL");
        if (tf > best.tf) { best.tf = tf; best.best = p.name(); best.err = e; }
    }
    best.ratio = best.tf / best.cub;
    g_rows.push_back(best);
    fflush(stdout);
}

// Alternating timing rounds of cuBLAS and the 128x64 entries (plain, split-K entry as one
// split), per-round ratios and their medians.
static void rounds(int R, int M, int K, int N, int ta, int tb) {
    Inst in(M, K, N, ta, tb, false, 0, 1ll << 26, 17);
    const double flop = 2.0 * M * N * K;
    const int reps = flop > 2e11 ? 10 : (flop > 1e10 ? 20 : 50);
    std::vector<Plan> plans = {Plan{CUBLAS}, Plan{BIG}, Plan{BIG_SK1}, Plan{BIG_CL2}, Plan{BIG_CL4}};
    std::string why;
    const double cerr = in.run_check(plans[0], why);
    for (size_t i = 1; i < plans.size(); ++i) {
        const double e = in.run_check(plans[i], why);
        if (!(e >= 0 && e <= 2.0 * cerr + 1e-300)) { printf("FAIL %s err %g%s\n", plans[i].name().c_str(), e, why.c_str()); g_fail = 1; }
    }
    std::vector<std::vector<double>> ratio(plans.size());
    std::vector<std::vector<double>> tfs(plans.size());
    for (int r = 0; r < R; ++r) {
        double cub = 0;
        printf("%dx%dx%d %s round %d:", M, K, N, opn[ta][tb], r);
        for (size_t i = 0; i < plans.size(); ++i) {
            const double ms = time_ms([&]() { launch(plans[i], in.q); }, reps);
            const double tf = flop / ms * 1e-9;
            if (i == 0) cub = tf;
            ratio[i].push_back(tf / cub);
            tfs[i].push_back(tf);
            printf("  %s %.2f", plans[i].name().c_str(), tf);
        }
        printf("\n");
    }
    for (size_t i = 0; i < plans.size(); ++i) {
        std::sort(ratio[i].begin(), ratio[i].end());
        std::sort(tfs[i].begin(), tfs[i].end());
        printf("%dx%dx%d %s %-14s median %.2f TF  ratio median %.3f  [%.3f, %.3f]\n", M, K, N, opn[ta][tb], plans[i].name().c_str(),
               tfs[i][R / 2], ratio[i][R / 2], ratio[i][0], ratio[i][R - 1]);
    }
    std::string w2;
    if (in.check(w2) < 0) { printf("FAIL after timing%s\n", w2.c_str()); g_fail = 1; }
    fflush(stdout);
}

static void summary() {
    printf("\n%-22s %-14s %8s %8s %6s %10s %10s\n", "M x K x N op", "best", "TF", "cuBLAS", "ratio", "err", "cublas_err");
    double lg = 0;
    for (auto& r : g_rows) {
        printf("%-22s %-14s %8.2f %8.2f %6.3f %10.2e %10.2e\n", r.shape.c_str(), r.best.c_str(), r.tf, r.cub, r.ratio, r.err, r.cerr);
        lg += std::log(r.ratio);
    }
    if (!g_rows.empty()) printf("geomean ratio %.3f over %zu shapes\n", std::exp(lg / g_rows.size()), g_rows.size());
}

int main(int argc, char** argv) {
    CB(cublasCreate(&g_h));
    set_attrs();
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) args.push_back("quick");
    for (auto& a : args) {
        if (a == "quick") {
            correctness({{1, 1, 1}, {7, 13, 5}, {129, 67, 255}, {1000, 1, 1000}, {33, 100, 17}, {130, 33, 131},
                         {200, 300, 1}, {1, 300, 200}, {64, 64, 64}, {128, 48, 128}, {257, 129, 63}},
                        true);
            test_elementwise();
            printf("quick: %d checks, %s\n", g_cases, g_fail ? "FAILURES" : "all passed");
        } else if (a == "sanity") {
            correctness({{129, 37, 67}, {1, 37, 21}, {21, 37, 1}}, false);
            test_elementwise();
            printf("sanity: %d checks, %s\n", g_cases, g_fail ? "FAILURES" : "all passed");
        } else if (a == "mini") {  // tuning subset
            const int S[][5] = {{1024, 1024, 1024, 0, 0}, {2048, 2048, 2048, 0, 0}, {4096, 4096, 4096, 0, 0},
                                {4096, 4096, 4096, 0, 1}, {4096, 4096, 4096, 1, 1}, {8192, 8192, 8192, 0, 0},
                                {4096, 1024, 8192, 0, 0}, {8192, 64, 8192, 0, 0}};
            for (auto& s : S) timed(s[0], s[1], s[2], s[3], s[4], false, false);
        } else if (a.rfind("rounds", 0) == 0) {  // rounds:R:M,K,N[,op]
            int R, M, K, N;
            char op[8] = "nn";
            if (sscanf(a.c_str(), "rounds:%d:%d,%d,%d,%7s", &R, &M, &K, &N, op) < 4) { fprintf(stderr, "bad arg %s\n", a.c_str()); return 2; }
            const std::string o = op;
            rounds(R, M, K, N, o == "tn" || o == "tt", o == "nt" || o == "tt");
            continue;
        } else if (a == "suite") {
            const int S[][3] = {{256, 256, 256}, {512, 512, 512}, {1000, 1000, 1000}, {1024, 1024, 1024},
                                {2048, 2048, 2048}, {4096, 4096, 4096}, {4097, 4097, 4097}, {8192, 8192, 8192},
                                {4096, 1024, 8192}, {8192, 8192, 64}, {64, 8192, 8192}, {8192, 64, 8192},
                                {1, 4096, 4096}, {4096, 4096, 1}};
            for (auto& s : S) timed(s[0], s[1], s[2], 0, 0, false, false);
            summary();
            g_rows.clear();
            timed(4096, 4096, 4096, 0, 1, false, false);
            timed(4096, 4096, 4096, 1, 0, false, false);
            timed(4096, 4096, 4096, 1, 1, false, false);
            timed(4096, 4096, 4096, 0, 0, true, false);
            timed(4096, 4096, 4096, 1, 1, true, false);
            timed(1024, 1024, 1024, 0, 0, false, true);
            timed(1, 4096, 4096, 1, 1, false, false);
            timed(4096, 4096, 1, 1, 0, false, false);
            summary();
        } else {
            int M, K, N;
            char rest[32] = "";
            if (sscanf(a.c_str(), "%d,%d,%d%31s", &M, &K, &N, rest) < 3) { fprintf(stderr, "bad arg %s\n", a.c_str()); return 2; }
            std::string r = rest;
            int ta = r.find("tn") != std::string::npos || r.find("tt") != std::string::npos;
            int tb = r.find("nt") != std::string::npos || r.find("tt") != std::string::npos;
            timed(M, K, N, ta, tb, r.find(",u") != std::string::npos, true);
        }
    }
    if (!g_rows.empty()) summary();
    cublasDestroy(g_h);
    printf("%s\n", g_fail ? "RESULT: FAIL" : "RESULT: OK");
    return g_fail;
}
