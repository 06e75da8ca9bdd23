// A stand-alone harness that times GEMMul8's complex GEMM emulation (Ozaki scheme II on INT8,
// gemmul8::gemm<cuFloatComplex|cuDoubleComplex, gemmul8::Backend::INT8>, accurate mode unless
// --fast) against cuBLAS CGEMM / ZGEMM on the same device and operands, and measures both
// against a host reference. The crate never builds this file. GEMMul8 (MIT, UCHINO-Yuki/GEMMul8)
// is not vendored: tools/gemmul8-complex compiles the few GEMMul8 objects that complex gemm needs
// (sm_90 only) and links them with this file, cudart static, cuBLAS/cuBLASLt dynamic:
//
//     tools/gemmul8-complex build          # here, with the CUDA 13.0 pip-wheel toolkit
//         -> .carry/gemmul8/gemmul8_complex_bench (needs only libcublas.so.13, libcublasLt.so.13)
//     tools/gemmul8-complex device-build   # fallback, on the GPU machine with its own nvcc,
//                                          # from the copy of the sources in .carry/gemmul8/src
//
// The compile line for this file (see the script for the objects and the link line):
//     nvcc -std=c++20 -O3 -gencode arch=compute_90,code=sm_90 -Xcompiler -ffp-contract=off \
//         -I<GEMMul8>/include -c benches/cuda/gemmul8_complex_bench.cu
//
// Run (on an H100; every option is optional):
//     .carry/gemmul8/gemmul8_complex_bench [--dtype c32|c64|both] [--sizes 4096,8192,16384]
//         [--rounds 3] [--reps 5] [--moduli LIST] [--moduli-c32 LIST] [--moduli-c64 LIST]
//         [--json PATH] [--seed S] [--sample-rows 64] [--fast] [--dry-run] [--check-ref N]
//     LIST is e.g. 12..18 or 6,8,10 or 6..9,11. Defaults: c64 12..18, c32 6..11 (GEMMul8 accepts
//     2..20 moduli for FP64 output, 2..13 for FP32 output). --moduli applies to every dtype run.
//
// For each dtype and square size n (C = A B, all n x n, column-major, no transposes, alpha = 1,
// beta = 0): A and B are filled on the device with a hash of (seed, matrix, index), real and
// imaginary parts uniform in [-1, 1); the seed comes from the clock unless --seed and is printed.
// Accuracy: normwise relative error ||C - ref||_F / ||ref||_F over 64 sampled rows (all rows when
// n <= 1024), ref computed on the host from copies of A's sampled rows and all of B: for c64 a
// compensated dot product in double-double (TwoProd by FMA, or Dekker's split where the CPU has no
// FMA), for c32 in double (the products of floats are exact in double). Timing: CUDA events around
// each call on the handle's stream, after a warm-up call, --reps calls with the median taken, in
// --rounds rounds whose order alternates (even rounds cuBLAS first, odd rounds GEMMul8 first). The
// GEMMul8 workspace is sized for the largest moduli count that fits and allocated once per size,
// outside the timing; what does not fit in free device memory is skipped with a message.
// TFLOP/s count a complex n^3 product as 8 n^3 flops. Per (dtype, n, moduli) the table gives the
// GEMMul8 and cuBLAS medians, cuBLAS_ms / GEMMul8_ms per round and its median, and both errors,
// then the fewest moduli whose error is <= cuBLAS's with its ratio. --json writes a list of
// records (rewritten after every size, so a run cut short keeps what it measured).
// --dry-run touches no GPU: it prints the plan, the workspace sizes and the memory each case needs.
// --check-ref N tests the host reference on the CPU alone (n = N) against long double sums.
#include <cublas_v2.h>
#include <cuComplex.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gemm.hpp"     // GEMMul8 public API (include/ of the GEMMul8 tree)
#include "version.hpp"  // GEMMUL8_VERSION_STRING

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__,                 \
                   cudaGetErrorString(e_));                                                \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define CB(x)                                                                              \
    do {                                                                                   \
        cublasStatus_t s_ = (x);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            printf("cuBLAS error %s at %s:%d: %s\n", #x, __FILE__, __LINE__,               \
                   cublasGetStatusString(s_));                                             \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static const double GiB = 1024.0 * 1024.0 * 1024.0;

// ------------------------------------------------------------------------------------------
// Types
// ------------------------------------------------------------------------------------------
template <class T> struct Cx;
template <> struct Cx<cuFloatComplex> {
    using R = float;
    static constexpr const char *name = "c32", *blas = "CGEMM";
    static constexpr int max_moduli = 13;  // GEMMul8: 2..13 for FP32 output
    static cuFloatComplex make(float re, float im) { return make_cuFloatComplex(re, im); }
    static cublasStatus_t gemm(cublasHandle_t h, int n, const cuFloatComplex *A,
                               const cuFloatComplex *B, cuFloatComplex *C) {
        const cuFloatComplex one = make(1, 0), zero = make(0, 0);
        return cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
    }
};
template <> struct Cx<cuDoubleComplex> {
    using R = double;
    static constexpr const char *name = "c64", *blas = "ZGEMM";
    static constexpr int max_moduli = 20;  // GEMMul8: 2..20 for FP64 output
    static cuDoubleComplex make(double re, double im) { return make_cuDoubleComplex(re, im); }
    static cublasStatus_t gemm(cublasHandle_t h, int n, const cuDoubleComplex *A,
                               const cuDoubleComplex *B, cuDoubleComplex *C) {
        const cuDoubleComplex one = make(1, 0), zero = make(0, 0);
        return cublasZgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, A, n, B, n, &zero, C, n);
    }
};

// C = A B through GEMMul8. With work == nullptr nothing runs and t[0] is the workspace size in
// bytes. Otherwise it returns the four phase times in seconds (scaling, INT8 products, mod,
// CRT + undo scaling); it reports no error status, so the caller checks cudaGetLastError.
template <class T>
static std::vector<double> g8_gemm(cublasHandle_t h, int n, const T *A, const T *B, T *C,
                                   int moduli, bool fast, void *work) {
    const T one = Cx<T>::make(1, 0), zero = Cx<T>::make(0, 0);
    return gemmul8::gemm<T, gemmul8::Backend::INT8>(h, CUBLAS_OP_N, CUBLAS_OP_N, (size_t)n,
                                                    (size_t)n, (size_t)n, &one, A, (size_t)n, B,
                                                    (size_t)n, &zero, C, (size_t)n, moduli, fast,
                                                    work);
}

template <class T> static size_t g8_worksize(cublasHandle_t h, int n, int moduli, bool fast) {
    return (size_t)g8_gemm<T>(h, n, nullptr, nullptr, nullptr, moduli, fast, nullptr)[0];
}

// ------------------------------------------------------------------------------------------
// Inputs: a counter-based hash (splitmix64's finalizer), the same on host and device
// ------------------------------------------------------------------------------------------
__host__ __device__ inline uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// uniform in [-1, 1), exact: k * 2^-(p-1) - 1 for a p-bit integer k
__host__ __device__ inline double unit_r(uint64_t h, double) {
    return (double)(h >> 11) * 0x1p-52 - 1.0;
}
__host__ __device__ inline float unit_r(uint64_t h, float) {
    return (float)(h >> 40) * 0x1p-23f - 1.0f;
}

template <class T>
__host__ __device__ inline T gen_elem(uint64_t key, uint64_t i) {
    using R = decltype(T{}.x);
    T v;
    v.x = unit_r(mix64(key ^ (2 * i)), R{});
    v.y = unit_r(mix64(key ^ (2 * i + 1)), R{});
    return v;
}

template <class T> __global__ void fill_kernel(T *p, size_t count, uint64_t key) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = gen_elem<T>(key, i);
}

// out[s * n + k] = M[rows[s] + k * n]: the sampled rows of a column-major n x n matrix
template <class T>
__global__ void gather_rows_kernel(const T *M, int n, const int *rows, int S, T *out) {
    size_t total = (size_t)S * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t s = i / n, k = i % n;
        out[i] = M[(size_t)rows[s] + k * (size_t)n];
    }
}

static uint64_t matrix_key(uint64_t seed, const char *dtype, int n, int which) {
    uint64_t k = mix64(seed);
    k = mix64(k ^ (uint64_t)n);
    k = mix64(k ^ (uint64_t)(dtype[1] == '6' ? 64 : 32));
    return mix64(k ^ (uint64_t)(which + 1) * 0x5851f42d4c957f2dull);
}

// ------------------------------------------------------------------------------------------
// Host reference: ref(s, j) = sum_k A(rows[s], k) B(k, j), for the sampled rows and all j
// ------------------------------------------------------------------------------------------
struct Ref {
    int S = 0, n = 0;
    std::vector<double> re_hi, re_lo, im_hi, im_lo;  // [s * n + j]
};

#define ALWAYS_INLINE __attribute__((always_inline)) inline

ALWAYS_INLINE void two_sum(double a, double b, double &s, double &e) {
    s = a + b;
    double z = s - a;
    e = (a - (s - z)) + (b - z);
}
ALWAYS_INLINE void split(double a, double &hi, double &lo) {  // Veltkamp, for |a| < 2^996
    double t = 134217729.0 * a;
    hi = t - (t - a);
    lo = a - hi;
}
template <bool FMA> ALWAYS_INLINE void two_prod(double a, double b, double &p, double &e) {
    p = a * b;
    if constexpr (FMA) {
        e = __builtin_fma(a, b, -p);  // a hardware FMA: only instantiated under target("fma")
    } else {
        double ah, al, bh, bl;
        split(a, ah, al);
        split(b, bh, bl);
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    }
}
// (s, c) += a * b, compensated (Ogita-Rump-Oishi Dot2)
template <bool FMA> ALWAYS_INLINE void dd_madd(double a, double b, double &s, double &c) {
    double p, e, t;
    two_prod<FMA>(a, b, p, e);
    two_sum(s, p, s, t);
    c += t + e;
}

// RB sampled rows at once against one column of B (RB independent accumulator chains).
template <class T, bool DD, bool FMA, int RB>
ALWAYS_INLINE void ref_rows(const T *const *arow, const T *bj, int n, double *ore_hi,
                            double *ore_lo, double *oim_hi, double *oim_lo) {
    double sr[RB], cr[RB], si[RB], ci[RB];
    for (int r = 0; r < RB; ++r) sr[r] = cr[r] = si[r] = ci[r] = 0.0;
    for (int k = 0; k < n; ++k) {
        const double br = (double)bj[k].x, bi = (double)bj[k].y;
        for (int r = 0; r < RB; ++r) {
            const double ar = (double)arow[r][k].x, ai = (double)arow[r][k].y;
            if constexpr (DD) {
                dd_madd<FMA>(ar, br, sr[r], cr[r]);
                dd_madd<FMA>(-ai, bi, sr[r], cr[r]);
                dd_madd<FMA>(ar, bi, si[r], ci[r]);
                dd_madd<FMA>(ai, br, si[r], ci[r]);
            } else {  // float inputs: the products are exact in double
                sr[r] += ar * br;
                sr[r] -= ai * bi;
                si[r] += ar * bi;
                si[r] += ai * br;
            }
        }
    }
    for (int r = 0; r < RB; ++r) {
        double h, l;
        two_sum(sr[r], cr[r], h, l);
        ore_hi[r] = h, ore_lo[r] = l;
        two_sum(si[r], ci[r], h, l);
        oim_hi[r] = h, oim_lo[r] = l;
    }
}

template <class T> struct RefJob {
    const T *Arows;  // S x n, row s contiguous
    const T *B;      // n x n column-major
    Ref *out;
};

template <class T, bool DD, bool FMA>
ALWAYS_INLINE void ref_columns(const RefJob<T> &J, int j0, int j1) {
    const int S = J.out->S, n = J.out->n;
    for (int j = j0; j < j1; ++j) {
        const T *bj = J.B + (size_t)j * n;
        int s = 0;
        for (; s + 4 <= S; s += 4) {
            const T *ar[4] = {J.Arows + (size_t)s * n, J.Arows + (size_t)(s + 1) * n,
                              J.Arows + (size_t)(s + 2) * n, J.Arows + (size_t)(s + 3) * n};
            double rh[4], rl[4], ih[4], il[4];
            ref_rows<T, DD, FMA, 4>(ar, bj, n, rh, rl, ih, il);
            for (int r = 0; r < 4; ++r) {
                size_t o = (size_t)(s + r) * n + j;
                J.out->re_hi[o] = rh[r], J.out->re_lo[o] = rl[r];
                J.out->im_hi[o] = ih[r], J.out->im_lo[o] = il[r];
            }
        }
        for (; s < S; ++s) {
            const T *ar[1] = {J.Arows + (size_t)s * n};
            double rh, rl, ih, il;
            ref_rows<T, DD, FMA, 1>(ar, bj, n, &rh, &rl, &ih, &il);
            size_t o = (size_t)s * n + j;
            J.out->re_hi[o] = rh, J.out->re_lo[o] = rl;
            J.out->im_hi[o] = ih, J.out->im_lo[o] = il;
        }
    }
}

__attribute__((target("fma"))) static void ref_cols_c64_fma(const RefJob<cuDoubleComplex> &J,
                                                             int j0, int j1) {
    ref_columns<cuDoubleComplex, true, true>(J, j0, j1);
}
static void ref_cols_c64_dekker(const RefJob<cuDoubleComplex> &J, int j0, int j1) {
    ref_columns<cuDoubleComplex, true, false>(J, j0, j1);
}
static void ref_cols_c32(const RefJob<cuFloatComplex> &J, int j0, int j1) {
    ref_columns<cuFloatComplex, false, false>(J, j0, j1);
}

static bool cpu_has_fma() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("fma");
}

// Fills out (out.S, out.n set by the caller) on all host threads; returns the method used.
template <class T>
static const char *host_reference(const T *Arows, const T *B, Ref &out, bool force_dekker = false) {
    const int n = out.n;
    const size_t cnt = (size_t)out.S * n;
    out.re_hi.assign(cnt, 0.0), out.re_lo.assign(cnt, 0.0);
    out.im_hi.assign(cnt, 0.0), out.im_lo.assign(cnt, 0.0);
    RefJob<T> J{Arows, B, &out};
    const bool fma = cpu_has_fma() && !force_dekker;
    const char *how;
    void (*fn)(const RefJob<T> &, int, int);
    if constexpr (std::is_same_v<T, cuDoubleComplex>) {
        fn = fma ? ref_cols_c64_fma : ref_cols_c64_dekker;
        how = fma ? "double-double (Dot2, FMA TwoProd)" : "double-double (Dot2, Dekker TwoProd)";
    } else {
        fn = ref_cols_c32;
        how = "double (exact products of floats)";
    }
    const int nt = std::max(1u, std::thread::hardware_concurrency());
    const int chunk = 8;
    std::atomic<int> next{0};
    std::vector<std::thread> th;
    for (int t = 0; t < nt; ++t)
        th.emplace_back([&]() {
            for (;;) {
                int j0 = next.fetch_add(chunk);
                if (j0 >= n) break;
                fn(J, j0, std::min(n, j0 + chunk));
            }
        });
    for (auto &x : th) x.join();
    return how;
}

// ||C - ref||_F / ||ref||_F over the sampled rows; Crows is S x n like the reference.
template <class T> static double rel_err(const std::vector<T> &Crows, const Ref &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < Crows.size(); ++i) {
        const double cr = (double)Crows[i].x, ci = (double)Crows[i].y;
        if (!std::isfinite(cr) || !std::isfinite(ci)) return INFINITY;
        const double dr = (cr - ref.re_hi[i]) - ref.re_lo[i];
        const double di = (ci - ref.im_hi[i]) - ref.im_lo[i];
        num += dr * dr + di * di;
        den += ref.re_hi[i] * ref.re_hi[i] + ref.im_hi[i] * ref.im_hi[i];
    }
    return std::sqrt(num / den);
}

// ------------------------------------------------------------------------------------------
// Options
// ------------------------------------------------------------------------------------------
struct Opts {
    bool c32 = true, c64 = true;
    std::vector<int> sizes{4096, 8192, 16384};
    int rounds = 3, reps = 5, sample_rows = 64;
    std::vector<int> mod_c32, mod_c64;  // empty: the defaults
    std::string json;
    uint64_t seed = 0;
    bool seed_given = false, fast = false, dry_run = false;
    int check_ref = 0;
};

static void usage(const char *argv0) {
    printf("usage: %s [--dtype c32|c64|both] [--sizes N,N,...] [--rounds R] [--reps K]\n"
           "       [--moduli LIST] [--moduli-c32 LIST] [--moduli-c64 LIST] [--json PATH]\n"
           "       [--seed S] [--sample-rows S] [--fast] [--dry-run] [--check-ref N]\n"
           "LIST: e.g. 12..18 or 6,8,10 or 6..9,11; defaults c64 12..18, c32 6..11\n",
           argv0);
}

static bool parse_list(const char *s, std::vector<int> &out) {
    out.clear();
    std::string str(s);
    size_t p = 0;
    while (p <= str.size()) {
        size_t q = str.find(',', p);
        if (q == std::string::npos) q = str.size();
        std::string tok = str.substr(p, q - p);
        if (tok.empty()) return false;
        size_t dots = tok.find("..");
        char *end;
        if (dots != std::string::npos) {
            long a = strtol(tok.substr(0, dots).c_str(), &end, 10);
            if (*end) return false;
            long b = strtol(tok.substr(dots + 2).c_str(), &end, 10);
            if (*end || b < a) return false;
            for (long v = a; v <= b; ++v) out.push_back((int)v);
        } else {
            long v = strtol(tok.c_str(), &end, 10);
            if (*end) return false;
            out.push_back((int)v);
        }
        p = q + 1;
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return !out.empty();
}

static Opts parse_args(int argc, char **argv) {
    Opts o;
    auto need = [&](int &i) -> const char * {
        if (i + 1 >= argc) {
            printf("%s needs a value\n", argv[i]);
            usage(argv[0]);
            exit(2);
        }
        return argv[++i];
    };
    auto bad = [&](const char *opt, const char *v) {
        printf("bad value for %s: '%s'\n", opt, v);
        usage(argv[0]);
        exit(2);
    };
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--dtype") {
            std::string v = need(i);
            if (v == "c32") o.c32 = true, o.c64 = false;
            else if (v == "c64") o.c32 = false, o.c64 = true;
            else if (v == "both" || v == "c32,c64" || v == "c64,c32") o.c32 = o.c64 = true;
            else bad("--dtype", v.c_str());
        } else if (a == "--sizes") {
            const char *v = need(i);
            if (!parse_list(v, o.sizes)) bad("--sizes", v);
            for (int n : o.sizes)
                if (n < 1 || n > 46340) bad("--sizes", v);  // n*n must fit cuBLAS's int
        } else if (a == "--rounds") {
            const char *v = need(i);
            o.rounds = atoi(v);
            if (o.rounds < 1) bad("--rounds", v);
        } else if (a == "--reps") {
            const char *v = need(i);
            o.reps = atoi(v);
            if (o.reps < 1) bad("--reps", v);
        } else if (a == "--moduli" || a == "--moduli-c32" || a == "--moduli-c64") {
            const char *v = need(i);
            std::vector<int> l;
            if (!parse_list(v, l)) bad(a.c_str(), v);
            if (a != "--moduli-c64") o.mod_c32 = l;
            if (a != "--moduli-c32") o.mod_c64 = l;
        } else if (a == "--json") {
            o.json = need(i);
        } else if (a == "--seed") {
            const char *v = need(i);
            char *end;
            o.seed = strtoull(v, &end, 0);
            if (*end) bad("--seed", v);
            o.seed_given = true;
        } else if (a == "--sample-rows") {
            const char *v = need(i);
            o.sample_rows = atoi(v);
            if (o.sample_rows < 1) bad("--sample-rows", v);
        } else if (a == "--fast") {
            o.fast = true;
        } else if (a == "--dry-run") {
            o.dry_run = true;
        } else if (a == "--check-ref") {
            const char *v = need(i);
            o.check_ref = atoi(v);
            if (o.check_ref < 1) bad("--check-ref", v);
        } else if (a == "-h" || a == "--help") {
            usage(argv[0]);
            exit(0);
        } else {
            printf("unknown option %s\n", argv[i]);
            usage(argv[0]);
            exit(2);
        }
    }
    if (o.mod_c32.empty())
        for (int m = 6; m <= 11; ++m) o.mod_c32.push_back(m);
    if (o.mod_c64.empty())
        for (int m = 12; m <= 18; ++m) o.mod_c64.push_back(m);
    for (int m : o.mod_c32)
        if (o.c32 && (m < 2 || m > Cx<cuFloatComplex>::max_moduli)) {
            printf("c32: %d moduli is outside GEMMul8's range 2..%d\n", m,
                   Cx<cuFloatComplex>::max_moduli);
            exit(2);
        }
    for (int m : o.mod_c64)
        if (o.c64 && (m < 2 || m > Cx<cuDoubleComplex>::max_moduli)) {
            printf("c64: %d moduli is outside GEMMul8's range 2..%d\n", m,
                   Cx<cuDoubleComplex>::max_moduli);
            exit(2);
        }
    if (!o.seed_given) {
        uint64_t t = (uint64_t)std::chrono::system_clock::now().time_since_epoch().count();
        o.seed = mix64(t ^ ((uint64_t)getpid() << 32));
    }
    o.seed &= (1ull << 53) - 1;  // exact as a JSON number
    return o;
}

// ------------------------------------------------------------------------------------------
// Records, statistics, JSON
// ------------------------------------------------------------------------------------------
static double median(std::vector<double> v) {
    if (v.empty()) return NAN;
    std::sort(v.begin(), v.end());
    size_t m = v.size() / 2;
    return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Record {
    std::string dtype;
    int n = 0, moduli = 0, sample_rows = 0;
    bool fast = false, fewest_ok = false;
    double ms = 0, cublas_ms = 0, ratio_median = 0, rel_err = 0, cublas_rel_err = 0;
    double tflops = 0, cublas_tflops = 0;
    std::vector<double> ms_rounds, cublas_ms_rounds, ratio_rounds, phases_ms;
    size_t workspace_bytes = 0;
};

struct Ctx {
    Opts o;
    std::string device = "(dry run)";
    int cublas_version = 0, runtime_version = 0, driver_version = 0;
    std::vector<Record> recs;
};

static std::string json_str(const std::string &s) {
    std::string r = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') r += '\\', r += c;
        else if ((unsigned char)c < 0x20) r += ' ';
        else r += c;
    }
    return r + "\"";
}
static std::string json_num(double v) {
    if (!std::isfinite(v)) return "null";
    char b[64];
    snprintf(b, sizeof b, "%.9g", v);
    return b;
}
static std::string json_arr(const std::vector<double> &v) {
    std::string r = "[";
    for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + json_num(v[i]);
    return r + "]";
}

static void write_json(const Ctx &c) {
    if (c.o.json.empty()) return;
    std::string tmp = c.o.json + ".tmp";
    FILE *f = fopen(tmp.c_str(), "w");
    if (!f) {
        printf("cannot write %s: %s\n", tmp.c_str(), strerror(errno));
        return;
    }
    fprintf(f, "[\n");
    for (size_t i = 0; i < c.recs.size(); ++i) {
        const Record &r = c.recs[i];
        fprintf(f,
                "  {\"dtype\": %s, \"n\": %d, \"moduli\": %d, \"ms\": %s, \"cublas_ms\": %s, "
                "\"ratio_rounds\": %s, \"ratio_median\": %s, \"rel_err\": %s, "
                "\"cublas_rel_err\": %s, \"seed\": %llu, \"device\": %s, "
                "\"fewest_moduli_within_cublas_err\": %s, \"mode\": %s, \"ms_rounds\": %s, "
                "\"cublas_ms_rounds\": %s, \"tflops\": %s, \"cublas_tflops\": %s, "
                "\"phases_ms\": %s, \"workspace_bytes\": %zu, \"rounds\": %d, \"reps\": %d, "
                "\"sample_rows\": %d, \"gemmul8_version\": %s, \"cublas_version\": %d, "
                "\"cuda_runtime\": %d, \"cuda_driver\": %d}%s\n",
                json_str(r.dtype).c_str(), r.n, r.moduli, json_num(r.ms).c_str(),
                json_num(r.cublas_ms).c_str(), json_arr(r.ratio_rounds).c_str(),
                json_num(r.ratio_median).c_str(), json_num(r.rel_err).c_str(),
                json_num(r.cublas_rel_err).c_str(), (unsigned long long)c.o.seed,
                json_str(c.device).c_str(), r.fewest_ok ? "true" : "false",
                json_str(r.fast ? "fast" : "accurate").c_str(), json_arr(r.ms_rounds).c_str(),
                json_arr(r.cublas_ms_rounds).c_str(), json_num(r.tflops).c_str(),
                json_num(r.cublas_tflops).c_str(), json_arr(r.phases_ms).c_str(),
                r.workspace_bytes, c.o.rounds, c.o.reps,
                r.sample_rows, json_str(GEMMUL8_VERSION_STRING).c_str(),
                c.cublas_version, c.runtime_version, c.driver_version,
                i + 1 < c.recs.size() ? "," : "");
    }
    fprintf(f, "]\n");
    fclose(f);
    if (rename(tmp.c_str(), c.o.json.c_str()) != 0)
        printf("cannot rename %s to %s: %s\n", tmp.c_str(), c.o.json.c_str(), strerror(errno));
}

static std::vector<int> sample_rows_for(int n, int want) {
    std::vector<int> rows;
    if (n <= 1024 || want >= n) {
        for (int i = 0; i < n; ++i) rows.push_back(i);
    } else {  // evenly spread, deterministic
        for (int s = 0; s < want; ++s) rows.push_back((int)(((2.0 * s + 1) * n) / (2.0 * want)));
    }
    return rows;
}

// ------------------------------------------------------------------------------------------
// One dtype, one size
// ------------------------------------------------------------------------------------------
template <class T> struct Dev {
    cublasHandle_t h;
    cudaStream_t st;
    cudaEvent_t e0, e1;
};

template <class T>
static void bench_size(Ctx &c, Dev<T> &d, int n, const std::vector<int> &moduli_req) {
    const Opts &o = c.o;
    const char *dt = Cx<T>::name;
    const size_t elems = (size_t)n * n, bytes = elems * sizeof(T);
    const double flops = 8.0 * n * (double)n * n;
    const size_t reserve = size_t(512) << 20;  // left free for the context, cuBLAS, GEMMul8
    printf("\n== %s n=%d: C = A B (%s vs GEMMul8 %s mode), A, B, C %.2f GiB each\n", dt, n,
           Cx<T>::blas, o.fast ? "fast" : "accurate", bytes / GiB);

    std::vector<size_t> ws(moduli_req.size());
    for (size_t i = 0; i < moduli_req.size(); ++i)
        ws[i] = g8_worksize<T>(d.h, n, moduli_req[i], o.fast);

    const std::vector<int> rows = sample_rows_for(n, o.sample_rows);
    const int S = (int)rows.size();
    size_t free_b, total_b;
    CK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need_abc = 3 * bytes + (size_t)S * n * sizeof(T) + S * sizeof(int);
    if (need_abc + reserve > free_b) {
        printf("   SKIP %s n=%d: A, B, C need %.2f GiB, %.2f GiB free\n", dt, n, need_abc / GiB,
               free_b / GiB);
        return;
    }
    T *dA, *dB, *dC, *dRows;
    int *dRowIdx;
    CK(cudaMalloc(&dA, bytes));
    CK(cudaMalloc(&dB, bytes));
    CK(cudaMalloc(&dC, bytes));
    CK(cudaMalloc(&dRows, (size_t)S * n * sizeof(T)));
    CK(cudaMalloc(&dRowIdx, S * sizeof(int)));
    CK(cudaMemcpyAsync(dRowIdx, rows.data(), S * sizeof(int), cudaMemcpyHostToDevice, d.st));
    const int fill_blocks = 132 * 16;
    fill_kernel<T><<<fill_blocks, 256, 0, d.st>>>(dA, elems, matrix_key(o.seed, dt, n, 0));
    CK(cudaGetLastError());
    fill_kernel<T><<<fill_blocks, 256, 0, d.st>>>(dB, elems, matrix_key(o.seed, dt, n, 1));
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(d.st));

    // The moduli whose workspace fits what is left; one buffer for the largest of them.
    CK(cudaMemGetInfo(&free_b, &total_b));
    const size_t avail = free_b > reserve ? free_b - reserve : 0;
    std::vector<int> moduli;
    std::vector<size_t> mws;
    size_t ws_max = 0;
    for (size_t i = 0; i < moduli_req.size(); ++i) {
        if (ws[i] <= avail) {
            moduli.push_back(moduli_req[i]);
            mws.push_back(ws[i]);
            ws_max = std::max(ws_max, ws[i]);
        } else {
            printf("   SKIP %s n=%d moduli %d: workspace %.2f GiB, %.2f GiB free after A, B, C\n",
                   dt, n, moduli_req[i], ws[i] / GiB, free_b / GiB);
        }
    }
    if (moduli.empty()) {
        printf("   SKIP %s n=%d: no moduli count fits\n", dt, n);
        for (void *p : {(void *)dA, (void *)dB, (void *)dC, (void *)dRows, (void *)dRowIdx})
            CK(cudaFree(p));
        return;
    }
    void *work;
    CK(cudaMalloc(&work, ws_max));
    printf("   workspace: %.2f GiB allocated (moduli %d); per moduli:", ws_max / GiB,
           moduli.back());
    for (size_t i = 0; i < moduli.size(); ++i) printf(" %d:%.2f", moduli[i], mws[i] / GiB);
    printf(" GiB\n");

    auto gather = [&](const T *M, std::vector<T> &hrows) {
        gather_rows_kernel<T><<<256, 256, 0, d.st>>>(M, n, dRowIdx, S, dRows);
        CK(cudaGetLastError());
        hrows.resize((size_t)S * n);
        CK(cudaMemcpyAsync(hrows.data(), dRows, hrows.size() * sizeof(T), cudaMemcpyDeviceToHost,
                           d.st));
        CK(cudaStreamSynchronize(d.st));
    };

    // Host reference from copies of A's sampled rows and all of B.
    Ref ref;
    ref.S = S, ref.n = n;
    {
        auto t0 = std::chrono::steady_clock::now();
        std::vector<T> hArows, hB(elems);
        gather(dA, hArows);
        CK(cudaMemcpyAsync(hB.data(), dB, bytes, cudaMemcpyDeviceToHost, d.st));
        CK(cudaStreamSynchronize(d.st));
        const char *how = host_reference<T>(hArows.data(), hB.data(), ref);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        printf("   reference: %d of %d rows x %d columns, %s, %u host threads, %.1f s\n", S, n, n,
               how, std::max(1u, std::thread::hardware_concurrency()), s);
    }

    auto run_cublas = [&]() { CB(Cx<T>::gemm(d.h, n, dA, dB, dC)); };
    std::vector<double> last_phases(4, 0.0);
    auto run_g8 = [&](int m) {
        last_phases = g8_gemm<T>(d.h, n, dA, dB, dC, m, o.fast, work);
        CK(cudaGetLastError());
    };
    auto error_of = [&](auto &&run) {
        CK(cudaMemsetAsync(dC, 0xFF, bytes, d.st));  // NaN: a call that writes nothing shows
        run();
        CK(cudaStreamSynchronize(d.st));
        std::vector<T> hC;
        gather(dC, hC);
        return rel_err(hC, ref);
    };

    // Accuracy (also the first, untimed call of each method).
    const double cublas_err = error_of(run_cublas);
    std::vector<double> g8_err(moduli.size());
    printf("   rel. error (Frobenius, %d sampled rows): cuBLAS %s %.3e |", S, Cx<T>::blas,
           cublas_err);
    for (size_t i = 0; i < moduli.size(); ++i) {
        g8_err[i] = error_of([&]() { run_g8(moduli[i]); });
        printf(" m%d %.3e", moduli[i], g8_err[i]);
    }
    printf("\n");

    // Timing rounds.
    auto time_calls = [&](auto &&run, std::vector<double> *phases) {
        run();  // warm-up
        CK(cudaStreamSynchronize(d.st));
        std::vector<double> t;
        std::vector<std::vector<double>> ph(4);
        for (int r = 0; r < o.reps; ++r) {
            CK(cudaEventRecord(d.e0, d.st));
            run();
            CK(cudaEventRecord(d.e1, d.st));
            CK(cudaEventSynchronize(d.e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, d.e0, d.e1));
            t.push_back(ms);
            if (phases)
                for (int p = 0; p < 4; ++p) ph[p].push_back(last_phases[p] * 1e3);
        }
        if (phases)
            for (int p = 0; p < 4; ++p)
                phases[p].insert(phases[p].end(), ph[p].begin(), ph[p].end());
        return median(t);
    };
    std::vector<double> cub_ms(o.rounds);
    std::vector<std::vector<double>> g8_ms(moduli.size(), std::vector<double>(o.rounds));
    std::vector<std::vector<std::vector<double>>> g8_ph(moduli.size(),
                                                        std::vector<std::vector<double>>(4));
    for (int r = 0; r < o.rounds; ++r) {
        const bool cublas_first = r % 2 == 0;
        if (cublas_first) cub_ms[r] = time_calls(run_cublas, nullptr);
        for (size_t i = 0; i < moduli.size(); ++i)
            g8_ms[i][r] = time_calls([&]() { run_g8(moduli[i]); }, g8_ph[i].data());
        if (!cublas_first) cub_ms[r] = time_calls(run_cublas, nullptr);
        printf("   round %d (%s first): cuBLAS %.3f ms |", r + 1,
               cublas_first ? "cuBLAS" : "GEMMul8", cub_ms[r]);
        for (size_t i = 0; i < moduli.size(); ++i)
            printf(" m%d %.3f ms (%.2fx)", moduli[i], g8_ms[i][r], cub_ms[r] / g8_ms[i][r]);
        printf("\n");
    }

    // Table and records.
    const double cub_med = median(cub_ms);
    printf("   %-6s %11s %8s %11s %8s  %-*s %9s %10s %10s\n", "moduli", "GEMMul8 ms", "TFLOP/s",
           "cuBLAS ms", "TFLOP/s", 6 * o.rounds, "ratio/round", "ratio med", "rel_err",
           "cuBLAS err");
    int fewest = -1;
    for (size_t i = 0; i < moduli.size(); ++i)
        if (fewest < 0 && g8_err[i] <= cublas_err) fewest = (int)i;
    for (size_t i = 0; i < moduli.size(); ++i) {
        Record rec;
        rec.dtype = dt, rec.n = n, rec.moduli = moduli[i], rec.fast = o.fast, rec.sample_rows = S;
        rec.ms_rounds = g8_ms[i], rec.cublas_ms_rounds = cub_ms;
        rec.ms = median(g8_ms[i]), rec.cublas_ms = cub_med;
        for (int r = 0; r < o.rounds; ++r) rec.ratio_rounds.push_back(cub_ms[r] / g8_ms[i][r]);
        rec.ratio_median = median(rec.ratio_rounds);
        rec.rel_err = g8_err[i], rec.cublas_rel_err = cublas_err;
        rec.tflops = flops / (rec.ms * 1e9), rec.cublas_tflops = flops / (cub_med * 1e9);
        for (int p = 0; p < 4; ++p) rec.phases_ms.push_back(median(g8_ph[i][p]));
        rec.workspace_bytes = mws[i];
        rec.fewest_ok = (int)i == fewest;
        std::string rr;
        for (double x : rec.ratio_rounds) {
            char b[32];
            snprintf(b, sizeof b, "%5.2f ", x);
            rr += b;
        }
        printf("   %-6d %11.3f %8.1f %11.3f %8.1f  %-*s %9.2f %10.3e %10.3e%s\n", rec.moduli,
               rec.ms, rec.tflops, rec.cublas_ms, rec.cublas_tflops, 6 * o.rounds, rr.c_str(),
               rec.ratio_median, rec.rel_err, rec.cublas_rel_err,
               rec.fewest_ok ? "  <- fewest" : "");
        c.recs.push_back(rec);
    }
    printf("   GEMMul8 phases (median ms: scaling, INT8 products, mod, CRT+undo):");
    for (size_t i = 0; i < moduli.size(); ++i) {
        const Record &rec = c.recs[c.recs.size() - moduli.size() + i];
        printf(" m%d %.2f/%.2f/%.2f/%.2f", moduli[i], rec.phases_ms[0], rec.phases_ms[1],
               rec.phases_ms[2], rec.phases_ms[3]);
    }
    printf("\n");
    if (fewest >= 0) {
        const Record &rec = c.recs[c.recs.size() - moduli.size() + fewest];
        printf("   %s n=%d: fewest moduli with error <= cuBLAS's: %d (%.3e vs %.3e), cuBLAS_ms / "
               "GEMMul8_ms = %.2f (median of rounds)\n",
               dt, n, rec.moduli, rec.rel_err, cublas_err, rec.ratio_median);
    } else {
        printf("   %s n=%d: fewest moduli with error <= cuBLAS's: none of %d..%d (best %.3e vs "
               "%.3e)\n",
               dt, n, moduli.front(), moduli.back(),
               *std::min_element(g8_err.begin(), g8_err.end()), cublas_err);
    }
    write_json(c);

    CK(cudaFree(work));
    for (void *p : {(void *)dA, (void *)dB, (void *)dC, (void *)dRows, (void *)dRowIdx})
        CK(cudaFree(p));
}

template <class T> static void bench_dtype(Ctx &c, const std::vector<int> &moduli) {
    Dev<T> d;
    CK(cudaStreamCreateWithFlags(&d.st, cudaStreamNonBlocking));
    CB(cublasCreate(&d.h));
    CB(cublasSetStream(d.h, d.st));
    CB(cublasSetMathMode(d.h, CUBLAS_DEFAULT_MATH));  // native CGEMM/ZGEMM, no cuBLAS emulation
    void *blas_ws;
    const size_t blas_ws_bytes = size_t(32) << 20;  // as GEMMul8's notes advise, for both
    CK(cudaMalloc(&blas_ws, blas_ws_bytes));
    CB(cublasSetWorkspace(d.h, blas_ws, blas_ws_bytes));
    CK(cudaEventCreate(&d.e0));
    CK(cudaEventCreate(&d.e1));
    for (int n : c.o.sizes) bench_size<T>(c, d, n, moduli);
    CK(cudaEventDestroy(d.e0));
    CK(cudaEventDestroy(d.e1));
    CB(cublasDestroy(d.h));
    CK(cudaFree(blas_ws));
    CK(cudaStreamDestroy(d.st));
}

// ------------------------------------------------------------------------------------------
// CPU-only modes
// ------------------------------------------------------------------------------------------
template <class T> static void dry_run_dtype(const Opts &o, const std::vector<int> &moduli) {
    for (int n : o.sizes) {
        const double abc = 3.0 * n * (double)n * sizeof(T);
        printf("%s n=%d: A, B, C %.2f GiB in all; GEMMul8 workspace (GiB) / total:", Cx<T>::name,
               n, abc / GiB);
        for (int m : moduli) {
            // no handle: GEMMul8's size query asks cuBLAS for the stream (which fails harmlessly)
            // and computes the size on the host
            size_t w = g8_worksize<T>(nullptr, n, m, o.fast);
            printf(" m%d %.2f/%.2f", m, w / GiB, (w + abc) / GiB);
        }
        printf("\n");
    }
}

template <class T> static double check_ref_dtype(int n, uint64_t seed, bool dekker) {
    // random A, B on the host with the device generator; all rows; vs long double sums
    std::vector<T> A((size_t)n * n), B((size_t)n * n), Arows((size_t)n * n);
    const uint64_t ka = matrix_key(seed, Cx<T>::name, n, 0);
    const uint64_t kb = matrix_key(seed, Cx<T>::name, n, 1);
    for (size_t i = 0; i < A.size(); ++i) A[i] = gen_elem<T>(ka, i), B[i] = gen_elem<T>(kb, i);
    for (int s = 0; s < n; ++s)
        for (int k = 0; k < n; ++k) Arows[(size_t)s * n + k] = A[(size_t)s + (size_t)k * n];
    Ref ref;
    ref.S = n, ref.n = n;
    const char *how = host_reference<T>(Arows.data(), B.data(), ref, dekker);
    // long double with Kahan summation, and plain double: their distances to the reference
    double num_ld = 0, num_d = 0, den = 0;
    for (int s = 0; s < n; ++s)
        for (int j = 0; j < n; ++j) {
            long double sr = 0, si = 0, cr = 0, ci = 0;
            double dr = 0, di = 0;
            for (int k = 0; k < n; ++k) {
                const T a = Arows[(size_t)s * n + k], b = B[(size_t)j * n + k];
                long double pr = (long double)a.x * b.x - (long double)a.y * b.y;
                long double pi = (long double)a.x * b.y + (long double)a.y * b.x;
                long double y = pr - cr, t = sr + y;
                cr = (t - sr) - y, sr = t;
                y = pi - ci, t = si + y;
                ci = (t - si) - y, si = t;
                dr += (double)a.x * b.x - (double)a.y * b.y;
                di += (double)a.x * b.y + (double)a.y * b.x;
            }
            const size_t i = (size_t)s * n + j;
            const long double rr = (long double)ref.re_hi[i] + ref.re_lo[i];
            const long double ri = (long double)ref.im_hi[i] + ref.im_lo[i];
            num_ld += (double)((sr - rr) * (sr - rr) + (si - ri) * (si - ri));
            num_d += (double)((dr - rr) * (dr - rr) + (di - ri) * (di - ri));
            den += (double)(rr * rr + ri * ri);
        }
    printf("check-ref %s n=%d (%s): ||long double Kahan - ref|| / ||ref|| = %.3e, "
           "||plain double - ref|| / ||ref|| = %.3e\n",
           Cx<T>::name, n, how, std::sqrt(num_ld / den), std::sqrt(num_d / den));
    return std::sqrt(num_ld / den);
}

// ------------------------------------------------------------------------------------------
int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    Ctx c;
    c.o = parse_args(argc, argv);
    const Opts &o = c.o;

    if (o.check_ref) {
        printf("host CPU FMA: %s\n", cpu_has_fma() ? "yes" : "no");
        double e1 = check_ref_dtype<cuDoubleComplex>(o.check_ref, o.seed, false);
        double e2 = check_ref_dtype<cuDoubleComplex>(o.check_ref, o.seed, true);
        double e3 = check_ref_dtype<cuFloatComplex>(o.check_ref, o.seed, false);
        bool ok = e1 < 1e-17 && e2 < 1e-17 && e3 < 1e-15;
        printf("check-ref %s\n", ok ? "OK" : "FAILED");
        return ok ? 0 : 1;
    }

    std::string sizes;
    for (int n : o.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(n);
    auto list = [](const std::vector<int> &v) {
        std::string s;
        for (int m : v) s += (s.empty() ? "" : ",") + std::to_string(m);
        return s;
    };
    printf("gemmul8_complex_bench: GEMMul8 %s (Ozaki scheme II, INT8 backend, %s mode) vs cuBLAS\n",
           GEMMUL8_VERSION_STRING, o.fast ? "fast" : "accurate");
    printf("dtypes %s%s%s, sizes %s, rounds %d, reps %d (median), sample rows %d, seed %llu "
           "(--seed %llu repeats the inputs)\n",
           o.c32 ? "c32" : "", o.c32 && o.c64 ? "," : "", o.c64 ? "c64" : "", sizes.c_str(),
           o.rounds, o.reps, o.sample_rows, (unsigned long long)o.seed,
           (unsigned long long)o.seed);
    printf("moduli:%s%s%s%s\n", o.c32 ? " c32 " : "", o.c32 ? list(o.mod_c32).c_str() : "",
           o.c64 ? " c64 " : "", o.c64 ? list(o.mod_c64).c_str() : "");

    if (o.dry_run) {
        printf("dry run: no GPU used\n");
        if (o.c32) dry_run_dtype<cuFloatComplex>(o, o.mod_c32);
        if (o.c64) dry_run_dtype<cuDoubleComplex>(o, o.mod_c64);
        return 0;
    }

    int dev;
    CK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    c.device = prop.name;
    CK(cudaRuntimeGetVersion(&c.runtime_version));
    CK(cudaDriverGetVersion(&c.driver_version));
    {
        cublasHandle_t h;
        CB(cublasCreate(&h));
        CB(cublasGetVersion(h, &c.cublas_version));
        CB(cublasDestroy(h));
    }
    size_t free_b, total_b;
    CK(cudaMemGetInfo(&free_b, &total_b));
    printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB (%.1f GiB free); CUDA driver %d, runtime %d, "
           "cuBLAS %d\n",
           dev, prop.name, prop.major, prop.minor, prop.multiProcessorCount, total_b / GiB,
           free_b / GiB, c.driver_version, c.runtime_version, c.cublas_version);
    if (prop.major != 9 || prop.minor != 0)
        printf("warning: the GEMMul8 objects were built for sm_90 only; this is sm_%d%d\n",
               prop.major, prop.minor);

    auto t0 = std::chrono::steady_clock::now();
    if (o.c32) bench_dtype<cuFloatComplex>(c, o.mod_c32);
    if (o.c64) bench_dtype<cuDoubleComplex>(c, o.mod_c64);
    write_json(c);

    printf("\nsummary (cuBLAS_ms / GEMMul8_ms, median of rounds; the fewest moduli whose error is "
           "<= cuBLAS's):\n");
    for (size_t i = 0; i < c.recs.size();) {  // one group per (dtype, n)
        size_t j = i;
        const Record *best = nullptr;
        for (; j < c.recs.size() && c.recs[j].dtype == c.recs[i].dtype &&
               c.recs[j].n == c.recs[i].n;
             ++j)
            if (c.recs[j].fewest_ok) best = &c.recs[j];
        if (best)
            printf("   %s n=%-6d moduli %-3d ratio %.2f  GEMMul8 %.3f ms (%.1f TFLOP/s), cuBLAS "
                   "%.3f ms (%.1f TFLOP/s), err %.3e vs %.3e\n",
                   best->dtype.c_str(), best->n, best->moduli, best->ratio_median, best->ms,
                   best->tflops, best->cublas_ms, best->cublas_tflops, best->rel_err,
                   best->cublas_rel_err);
        else
            printf("   %s n=%-6d none of moduli %d..%d reaches cuBLAS's error %.3e\n",
                   c.recs[i].dtype.c_str(), c.recs[i].n, c.recs[i].moduli, c.recs[j - 1].moduli,
                   c.recs[i].cublas_rel_err);
        i = j;
    }
    printf("total %.1f s%s%s\n",
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
           o.json.empty() ? "" : ", JSON in ", o.json.c_str());
    return 0;
}
