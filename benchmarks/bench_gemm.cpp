// The compressor's matrix-product kernel (compress/detail/gemm.hpp, gemm_rows_fma) against the
// system BLAS's sgemm on the products the projected pool kinds run, 1 thread, float, warm:
//   nsa_2048:   NSA's first MLP layer at 2048 tokens, d = 512 (W = 32, S = 16): m = 126
//               entries × k = W·d = 16384 times 16384 × n = 1024 hidden units (W1, 64 MiB);
//               A's rows are x viewed S·d apart, as mlp_entries reads them in place;
//   nsa_2048_half: the same with n = 512 columns of W1 (one thread's share at 2 threads,
//               mlp_entries_shared), its rows 1024 apart;
//   nsa_16384:  the same layer at 16384 tokens (m = 1022);
//   proj_4096:  a projection at V4's real shape, 4092 tokens × 4096 channels times 4096 × 512.
// The BLAS is whatever libblas.so.3 Debian's alternatives point at (OpenBLAS when
// libopenblas0-openmp is installed, as scripts/setup.sh --with-libtorch does; the reference BLAS
// otherwise), loaded at run time: nothing here links it. Its sgemm needs lda ≥ k, so it reads a
// contiguous copy of A (same values). The BLAS rows are skipped when no libblas.so.3 is found.
// Counters: GFLOPs (median of the repetitions), peak_frac = GFLOPs / the float FMA peak of one
// thread measured in the same process (roofline.hpp), max_rel_diff (BLAS rows: the largest
// |C_blas − C_kvphase| / Σ_k |a||b| over a grid of C's elements; float rounding bounds it by
// about 2·k·2^−24).
//
//   build/<dir>/benchmarks/bench_gemm --benchmark_filter=-smoke
#include <benchmark/benchmark.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <kvphase/compress/detail/gemm.hpp>
#include <kvphase/core/rng.hpp>
#include <kvphase/lm/blas.hpp>

#include "roofline.hpp"

using kvphase::index_t;

namespace {

struct shape {
  index_t m, k, n, lda, ldb;
};

shape shape_of(int id) {
  switch (id) {
    case 0: return {126, 16384, 1024, 8192, 1024};    // nsa_2048
    case 1: return {126, 16384, 512, 8192, 1024};     // nsa_2048_half
    case 2: return {1022, 16384, 1024, 8192, 1024};   // nsa_16384
    case 3: return {4092, 4096, 512, 4096, 512};      // proj_4096
    default: return {30, 256, 96, 128, 96};           // smoke
  }
}

/// The operands of one shape: A as the kernel reads it (rows lda apart, possibly overlapping),
/// its contiguous copy for sgemm, B (k × n, rows ldb apart), filled from a counter-based stream.
struct operands {
  shape s;
  std::vector<float> x, a, b;
  explicit operands(const shape& sh) : s(sh) {
    x.resize(static_cast<std::size_t>((s.m - 1) * s.lda + s.k));
    b.resize(static_cast<std::size_t>(s.k * s.ldb));
    kvphase::rng::philox_stream r(20261208);
    for (auto& v : x) v = static_cast<float>(r.normal());
    for (auto& v : b) v = static_cast<float>(r.normal());
    a.resize(static_cast<std::size_t>(s.m * s.k));
    for (index_t i = 0; i < s.m; ++i) std::copy_n(x.data() + i * s.lda, s.k, a.data() + i * s.k);
  }
};

double peak_gflops() {
  static const double g = kvphase::bench::fma_peak_gflops<float>(1);
  return g;
}

using sgemm_fn = void (*)(const char*, const char*, const int*, const int*, const int*, const float*, const float*,
                          const int*, const float*, const int*, const float*, float*, const int*);

/// sgemm_ of the system BLAS (libblas.so.3, loaded once, RTLD_GLOBAL so that
/// lm::blas_backend names it), single-threaded where the library says how; null if absent.
sgemm_fn system_sgemm() {
  static const sgemm_fn f = [] {
    void* lib = ::dlopen("libblas.so.3", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) return sgemm_fn{nullptr};
    if (auto set = reinterpret_cast<void (*)(int)>(::dlsym(lib, "openblas_set_num_threads"))) set(1);
    return reinterpret_cast<sgemm_fn>(::dlsym(lib, "sgemm_"));
  }();
  return f;
}

template <class Call>
void run(benchmark::State& st, const shape& s, Call&& call) {
  std::vector<double> secs;
  call();  // warm: W1 and A in the caches they fit, pages touched
  for (auto _ : st) {
    const auto t0 = kvphase::bench::clock_type::now();
    call();
    const double t = std::chrono::duration<double>(kvphase::bench::clock_type::now() - t0).count();
    st.SetIterationTime(t);
    secs.push_back(t);
  }
  const double g = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.k) * static_cast<double>(s.n) /
                   kvphase::bench::median(secs) / 1e9;
  st.counters["GFLOPs"] = g;
  st.counters["peak_frac"] = g / peak_gflops();
}

void BM_gemm_kvphase(benchmark::State& st) {
  const operands o(shape_of(static_cast<int>(st.range(0))));
  const shape& s = o.s;
  std::vector<float> c(static_cast<std::size_t>(s.m * s.n)), pack;
  run(st, s, [&] {
    kvphase::compress::detail::gemm_rows_on<float, xsimd::default_arch>(o.x.data(), s.lda, o.b.data(), s.ldb, s.m, s.k,
                                                                        s.n, c.data(), s.n, pack);
  });
}

void BM_gemm_blas(benchmark::State& st) {
  const sgemm_fn sgemm = system_sgemm();
  if (!sgemm) {
    st.SkipWithError("no libblas.so.3 with sgemm_ on this machine");
    for (auto _ : st) {}
    return;
  }
  const operands o(shape_of(static_cast<int>(st.range(0))));
  const shape& s = o.s;
  std::vector<float> c(static_cast<std::size_t>(s.m * s.n)), ref(c.size()), pack;
  // row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ: sgemm("N", "N", n, m, k, B, ldb, A, k, C, n)
  const int M = static_cast<int>(s.n), N = static_cast<int>(s.m), K = static_cast<int>(s.k);
  const int lb = static_cast<int>(s.ldb), la = static_cast<int>(s.k), lc = static_cast<int>(s.n);
  const float one = 1.f, zero = 0.f;
  run(st, s, [&] { sgemm("N", "N", &M, &N, &K, &one, o.b.data(), &lb, o.a.data(), &la, &zero, c.data(), &lc); });
  kvphase::compress::detail::gemm_rows_on<float, xsimd::default_arch>(o.x.data(), s.lda, o.b.data(), s.ldb, s.m, s.k,
                                                                      s.n, ref.data(), s.n, pack);
  double worst = 0;  // on a grid of ≤ 32 × 64 elements of C (every one at the smoke shape)
  for (index_t i = 0; i < s.m; i += std::max<index_t>(1, s.m / 32))
    for (index_t j = 0; j < s.n; j += std::max<index_t>(1, s.n / 64)) {
      double mag = 0;
      for (index_t p = 0; p < s.k; ++p) mag += std::abs(double(o.a[i * s.k + p]) * double(o.b[p * s.ldb + j]));
      worst = std::max(worst, std::abs(double(c[i * s.n + j]) - double(ref[i * s.n + j])) / std::max(mag, 1e-30));
    }
  st.counters["max_rel_diff"] = worst;
  st.SetLabel(kvphase::lm::blas_backend().name);
}

const char* const names[] = {"nsa_2048", "nsa_2048_half", "nsa_16384", "proj_4096"};

void register_all() {
  for (int id = 0; id < 4; ++id) {
    benchmark::RegisterBenchmark((std::string("BM_gemm_kvphase/") + names[id]).c_str(), BM_gemm_kvphase)
        ->Arg(id)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(7);
    benchmark::RegisterBenchmark((std::string("BM_gemm_blas/") + names[id]).c_str(), BM_gemm_blas)
        ->Arg(id)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(7);
  }
  benchmark::RegisterBenchmark("BM_gemm_kvphase/smoke", BM_gemm_kvphase)->Arg(9)->UseManualTime()->Iterations(2);
  benchmark::RegisterBenchmark("BM_gemm_blas/smoke", BM_gemm_blas)->Arg(9)->UseManualTime()->Iterations(2);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
