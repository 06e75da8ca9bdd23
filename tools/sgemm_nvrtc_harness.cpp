// sgemm_nvrtc_harness.cpp -- times one entry of kernels/sgemm_fast.cu compiled the crate's way
// (NVRTC to a CUBIN, loaded through the driver API) against cuBLAS SGEMM in the same process,
// row-major C = A * B, the two interleaved rep by rep (median of each); prints the kernel's
// registers and resident blocks, and the relative difference from cuBLAS's product.
// nvcc-built harnesses (tools/sgemm_harness.cu) can differ from the crate's NVRTC build by a
// few percent for the same source, so figures that stand for the crate come from this one.
//
// Build (on the GPU machine): nvcc -O2 -std=c++17 -o nvh tools/sgemm_nvrtc_harness.cpp \
//                                 -lnvrtc -lcuda -lcublas
// Run:  ./nvh kernels/sgemm_fast.cu kernels/common.cuh "--gpu-architecture=sm_90;--std=c++17" \
//           "#define SGF_BIG_VARIANT 1" sgemm_fast_64x128_nn BM BN THREADS SMEM  M,K,N ...
//   (the fourth argument is prepended to the source; BM BN THREADS SMEM describe the entry's
//    configuration: 64 128 128 51200 for the default large tile. SGF_BIG_VARIANT keeps the
//    entry names: 1 is the former 128 x 128 tile, 128 128 256 50688; 2 the 64 x 128 tile with
//    three stages, 64 128 128 38400; 3 the 128 x 128 tile with a 32-wide K tile, 128 128 256
//    101376)
// Env: NVH_PTX=path writes the PTX, NVH_DUMP=path the CUBIN.
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#define CK(x) do { auto e_ = (x); if ((int)e_ != 0) { fprintf(stderr, "err %d at %s:%d %s\n", (int)e_, __FILE__, __LINE__, #x); exit(1);} } while (0)
static std::string slurp(const char* p) { std::ifstream f(p); std::stringstream s; s << f.rdbuf(); return s.str(); }
int main(int argc, char** argv) {
    std::string src = slurp(argv[1]), common = slurp(argv[2]);
    auto pos = src.find("#include \"common.cuh\"");
    src.replace(pos, strlen("#include \"common.cuh\""), common);
    src = std::string(argv[4]) + "\n" + src;
    std::vector<std::string> opts; { std::stringstream ss(argv[3]); std::string o; while (std::getline(ss, o, ';')) if (!o.empty()) opts.push_back(o); }
    const char* entry = argv[5];
    int BM = atoi(argv[6]), BN = atoi(argv[7]), NT = atoi(argv[8]), SMEM = atoi(argv[9]);
    nvrtcProgram prog; CK(nvrtcCreateProgram(&prog, src.c_str(), "k.cu", 0, nullptr, nullptr));
    std::vector<const char*> o; for (auto& s : opts) o.push_back(s.c_str());
    nvrtcResult r = nvrtcCompileProgram(prog, (int)o.size(), o.data());
    size_t ls; nvrtcGetProgramLogSize(prog, &ls); std::string log(ls, 0); nvrtcGetProgramLog(prog, &log[0]);
    if (r != NVRTC_SUCCESS) { fprintf(stderr, "compile failed: %s\n", log.c_str()); return 1; }
    size_t cs; CK(nvrtcGetCUBINSize(prog, &cs)); std::vector<char> cubin(cs); CK(nvrtcGetCUBIN(prog, cubin.data()));
    if (getenv("NVH_PTX")) { size_t ps; nvrtcGetPTXSize(prog, &ps); std::string ptx(ps, 0); nvrtcGetPTX(prog, &ptx[0]); std::ofstream f(getenv("NVH_PTX")); f << ptx.c_str(); }
    if (getenv("NVH_DUMP")) { std::ofstream f(getenv("NVH_DUMP"), std::ios::binary); f.write(cubin.data(), cs); }
    CK(cudaFree(0));
    CUmodule mod; CK(cuModuleLoadData(&mod, cubin.data()));
    CUfunction fn; CK(cuModuleGetFunction(&fn, mod, entry));
    CK(cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, SMEM));
    int regs; cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn);
    int occ; CK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fn, NT, SMEM));
    printf("# %s regs %d blocks/SM %d opts [%s] defs [%s]\n", entry, regs, occ, argv[3], argv[4]);
    cublasHandle_t h; CK(cublasCreate(&h)); CK(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int a = 10; a < argc; ++a) {
        int M, K, N; sscanf(argv[a], "%d,%d,%d", &M, &K, &N);
        std::vector<float> hA((size_t)M * K), hB((size_t)K * N);
        srand(1); for (auto& x : hA) x = rand() / (float)RAND_MAX * 2 - 1; for (auto& x : hB) x = rand() / (float)RAND_MAX * 2 - 1;
        float *A, *B, *C, *R; CK(cudaMalloc(&A, hA.size() * 4)); CK(cudaMalloc(&B, hB.size() * 4));
        CK(cudaMalloc(&C, (size_t)M * N * 4)); CK(cudaMalloc(&R, (size_t)M * N * 4));
        CK(cudaMemcpy(A, hA.data(), hA.size() * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(B, hB.data(), hB.size() * 4, cudaMemcpyHostToDevice));
        long long lda = K, ldb = N, ldc = N; float one = 1, zero = 0;
        unsigned grid = (unsigned)(((M + BM - 1) / BM) * ((N + BN - 1) / BN));
        void* args[] = {&M, &N, &K, &A, &lda, &B, &ldb, &C, &ldc};
        auto ours = [&] { CK(cuLaunchKernel(fn, grid, 1, 1, NT, 1, 1, SMEM, 0, args, nullptr)); };
        auto cub = [&] { CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, R, N)); };
        ours(); cub(); CK(cudaDeviceSynchronize());
        std::vector<float> c((size_t)M * N), rr((size_t)M * N);
        CK(cudaMemcpy(c.data(), C, c.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(rr.data(), R, rr.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0; for (size_t i = 0; i < c.size(); ++i) { double d = (double)c[i] - rr[i]; num += d * d; den += (double)rr[i] * rr[i]; }
        double flop = 2.0 * M * N * K; int reps = flop > 2e11 ? 10 : (flop > 1e10 ? 30 : 100);
        std::vector<float> to, tc;
        for (int i = 0; i < 3; ++i) { ours(); cub(); }
        for (int i = 0; i < reps; ++i) {  // interleaved
            float ms; CK(cudaEventRecord(e0)); ours(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1)); to.push_back(ms);
            CK(cudaEventRecord(e0)); cub(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaEventElapsedTime(&ms, e0, e1)); tc.push_back(ms);
        }
        std::sort(to.begin(), to.end()); std::sort(tc.begin(), tc.end());
        double mo = to[to.size() / 2], mc = tc[tc.size() / 2];
        printf("%5d %5d %5d ours %8.4f ms %6.2f TF  cublas %8.4f ms %6.2f TF  ratio %.3f  diff %.1e\n", M, K, N, mo, flop / mo / 1e9, mc, flop / mc / 1e9, mc / mo, std::sqrt(num / den));
        cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(R);
    }
}
