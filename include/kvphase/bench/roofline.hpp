#pragma once
/// \file bench/roofline.hpp
// In-process rooflines for kvphase benchmarks (benchmarks/, kvphase-bench, bench/gbench.hpp). The machine is noisy (clock 3.2-3.6 GHz, 2-thread
// DRAM bandwidth swinging 2x between runs), so every benchmark states its speed as a fraction of
// a limit measured in the same process, right next to the job:
//   - fma_peak_gflops<Real, Arch>(threads): FMA throughput (float by default, or double) with 16
//     independent vector accumulators per thread on the path the binary was compiled for
//     (Arch = xsimd::default_arch: AVX-512 with -march=native here, 2 x 16-lane float FMA per
//     cycle; AVX2 with -march=haswell, 2 x 8 lanes), or on a narrower compiled path (Arch =
//     xsimd::fma3<xsimd::avx2> in an AVX-512 build: the peak a kernel instantiated for AVX2 is
//     measured against in the same run), through kvphase::simd::fma, which is a hardware FMA
//     on every FMA path (xsimd 8.1's own fma is not one on AVX-512);
//   - read_seconds(x, n, threads): time to read n floats once (the compress roofline: any kernel
//     must at least read its input), split statically across threads, each thread's share read
//     as 8 streams at once (detail::read_once);
//   - read_bandwidth_gbs(bytes, threads): bytes/s of that read on a private buffer;
//   - read_write_seconds(x, n, y, m, threads): the same read that also writes m floats once
//     (non-temporal stores, spread over the read): the bound of a pass that writes its output,
//     which the read-only bound does not count (kvphase-bench's rw_frac).
// Each figure is the median of `reps` repetitions, so a roofline and a job measured with the
// same care give a ratio that is stable when absolute times are not.
#if defined(_OPENMP)
#include <omp.h>
#endif
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xsimd/xsimd.hpp>

#include <kvphase/core/simd.hpp>

namespace kvphase::bench {

using clock_type = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Keeps the optimiser from deleting a computed value.
template <class T>
inline void keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

namespace detail {
inline int thread_num() noexcept {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}
inline int num_threads() noexcept {
#if defined(_OPENMP)
  return omp_get_num_threads();
#else
  return 1;
#endif
}

// Independent FMA chains of one vector each: throughput-bound, not latency-bound. 16 where the
// ISA has 32 vector registers (AVX-512); 12 where it has 16 (AVX2: 16 chains plus the two
// constants do not fit, and GCC spilled three chains through the stack every iteration, which
// under-measured the AVX2 peak by about a tenth). 12 still exceed latency × FMA ports (4 × 2).
template <class Real, class Arch = xsimd::default_arch>
constexpr int fma_chain_count() {
  return sizeof(xsimd::batch<Real, Arch>) >= 64 ? 16 : 12;
}
template <class Real, class Arch = xsimd::default_arch>
[[gnu::noinline]] inline Real fma_chains(std::int64_t iters) {
  using B = xsimd::batch<Real, Arch>;
  using A = Arch;
  B a0(Real(1.0)), a1(Real(1.1)), a2(Real(1.2)), a3(Real(1.3)), a4(Real(1.4)), a5(Real(1.5)), a6(Real(1.6)),
      a7(Real(1.7));
  B a8(Real(1.8)), a9(Real(1.9)), a10(Real(2.0)), a11(Real(2.1)), a12(Real(2.2)), a13(Real(2.3)), a14(Real(2.4)),
      a15(Real(2.5));
  const B m(Real(0.999999)), c(Real(1e-7));
  auto f = [&](B& a) { a = kvphase::simd::fma<Real, A>(a, m, c); };
  for (std::int64_t i = 0; i < iters; ++i) {
    f(a0); f(a1); f(a2); f(a3); f(a4); f(a5); f(a6); f(a7);
    f(a8); f(a9); f(a10); f(a11);
    if constexpr (fma_chain_count<Real, Arch>() == 16) { f(a12); f(a13); f(a14); f(a15); }
    asm volatile("" ::: "memory");
  }
  B s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
  if constexpr (fma_chain_count<Real, Arch>() == 16) {
    s += (a12 + a13) + (a14 + a15);
  } else {
    (void)a12, (void)a13, (void)a14, (void)a15;
  }
  return xsimd::hadd(s);
}

// Sum of n floats in one pass over the input, read as 8 contiguous sub-ranges walked in
// lockstep (256 bytes of each in turn): 8 sequential streams at once. A core's hardware
// prefetchers follow each stream only within a 4 KiB page, so one stream leaves most of the
// bandwidth unused: on the Xeon the benchmarks run on, one stream read 9.6-10.4 GB/s and 8
// streams 12.3-13.5 GB/s (a 268 MB buffer, the same run), and the mean pool, which reads 4 rows
// at once, beat a one-stream probe by 18 %. A roofline a kernel can beat is not one.
/// The probes' pass: 8 streams of x read in 4-batch blocks; with Write, y[0 … m) written too.
template <bool Write>
inline float read_pass(const float* x, std::size_t n, float* y, std::size_t m) {
  using B = xsimd::batch<float>;
  constexpr std::size_t L = B::size, Q = 8, blk = 4 * L;
  const std::size_t step = n / Q / blk * blk;  // floats per sub-range, a multiple of the block
  const std::size_t blocks = step / blk;
  B s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
  std::size_t w = 0;  // y written up to here; first to the batch alignment, one value at a time
  if constexpr (Write)
    while (w < m && reinterpret_cast<std::uintptr_t>(y + w) % sizeof(B) != 0) y[w++] = 0.0f;
  for (std::size_t k = 0; k < blocks; ++k) {
    const std::size_t i = k * blk;
    for (std::size_t q = 0; q < Q; ++q) {
      const float* p = x + q * step + i;
      s0 += B::load_unaligned(p);
      s1 += B::load_unaligned(p + L);
      s2 += B::load_unaligned(p + 2 * L);
      s3 += B::load_unaligned(p + 3 * L);
    }
    if constexpr (Write) {
      const auto upto =
          static_cast<std::size_t>(static_cast<double>(m) * static_cast<double>(k + 1) / static_cast<double>(blocks));
      for (; w + L <= upto; w += L) simd::stream_store<float, xsimd::default_arch>(y + w, s0);
    }
  }
  if constexpr (Write) simd::store_fence();
  float s = xsimd::hadd((s0 + s1) + (s2 + s3));
  for (std::size_t i = Q * step; i < n; ++i) s += x[i];
  if constexpr (Write)
    for (; w < m; ++w) y[w] = s;
  return s;
}

[[gnu::noinline]] inline float read_once(const float* x, std::size_t n) { return read_pass<false>(x, n, nullptr, 0); }

/// read_once's 8-stream read of x[0 … n) that also writes y[0 … m) once, spread evenly over the
/// read (after each block of the read, y up to the same fraction), with non-temporal stores where
/// y is aligned to the batch: the traffic of a memory-bound pass that reads n floats and writes m,
/// as the compressor's passes store their entries (store_mode::stream).
[[gnu::noinline]] inline float read_write_once(const float* x, std::size_t n, float* y, std::size_t m) {
  return read_pass<true>(x, n, y, m);
}
}  // namespace detail

/// CPU seconds used so far by every thread of this process. On a machine shared with other jobs
/// the wall-clock ratio of two measurements taken a second apart moves with the other jobs'
/// load; the ratio of FLOP per CPU-second (job against roofline) does not count the time the
/// process was not running, so it is the steadier figure under load (and equal to the wall-clock
/// ratio on an idle machine, up to OpenMP threads that spin while waiting).
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

namespace detail {
/// Iterations of one FMA-peak probe run (~10 ms on one core).
inline constexpr std::int64_t fma_probe_iters = 4'000'000;

/// FLOP one call of fma_chains<Real, Arch>(iters) performs on one thread (2 per lane of each FMA).
template <class Real, class Arch = xsimd::default_arch>
constexpr double fma_chains_flops(std::int64_t iters) {
  return double(iters) * fma_chain_count<Real, Arch>() * 2.0 * double(xsimd::batch<Real, Arch>::size);
}
}  // namespace detail

/// One run of the FMA chains (~10 ms) on `threads` threads, timed on both clocks at once: the
/// float peak in GFLOP per wall second and per CPU-second of the process. kvphase-bench takes
/// one between a job's repetitions; the two functions below take the median of several.
struct peak_sample {
  double wall_gflops = 0, cpu_gflops = 0;
};
template <class Real = float, class Arch = xsimd::default_arch>
inline peak_sample fma_peak_sample(int threads) {
  const std::int64_t iters = detail::fma_probe_iters;
  const double flops = detail::fma_chains_flops<Real, Arch>(iters) * threads;
  const double c0 = process_cpu_seconds();
  const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
  { keep(detail::fma_chains<Real, Arch>(iters)); }
  const double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  const double cpu = process_cpu_seconds() - c0;
  return {flops / wall * 1e-9, flops / cpu * 1e-9};
}

/// FMA peak in GFLOP/s of Real (float or double) with `threads` threads on the compiled path
/// Arch (median of reps runs of ~10 ms each).
template <class Real = float, class Arch = xsimd::default_arch>
inline double fma_peak_gflops(int threads, int reps = 7) {
  std::vector<double> g;
  for (int r = 0; r < reps; ++r) g.push_back(fma_peak_sample<Real, Arch>(threads).wall_gflops);
  return median(g);
}

/// FMA peak of Real in GFLOP per CPU-second of `threads` threads (median of reps runs):
/// the per-core throughput while running, whatever share of the machine the process gets.
template <class Real = float, class Arch = xsimd::default_arch>
inline double fma_peak_gflops_per_cpu_second(int threads, int reps = 7) {
  std::vector<double> g;
  for (int r = 0; r < reps; ++r) g.push_back(fma_peak_sample<Real, Arch>(threads).cpu_gflops);
  return median(g);
}

namespace detail {
/// Median over reps of the wall time of one parallel region of `threads` threads in which
/// thread t of nt runs pass(t, nt) (a static contiguous share of the probe's buffers).
template <class Pass>
inline double median_parallel_seconds(int threads, int reps, Pass&& pass) {
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
    pass(static_cast<std::size_t>(thread_num()), static_cast<std::size_t>(num_threads()));
    secs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(secs);
}
}  // namespace detail

/// Median time (s) to read x[0..n) once with `threads` threads (static contiguous split).
inline double read_seconds(const float* x, std::size_t n, int threads, int reps = 11) {
  return detail::median_parallel_seconds(threads, reps, [&](std::size_t t, std::size_t nt) {
    const std::size_t lo = n * t / nt, hi = n * (t + 1) / nt;
    keep(detail::read_once(x + lo, hi - lo));
  });
}

/// Median time (s) to read x[0..n) and write y[0..m) once (detail::read_write_once) with
/// `threads` threads, each reading and writing its static share of both: the bound of a
/// memory-bound pass that writes as well as reads (a read-only bound leaves the writes out).
inline double read_write_seconds(const float* x, std::size_t n, float* y, std::size_t m, int threads, int reps = 11) {
  return detail::median_parallel_seconds(threads, reps, [&](std::size_t t, std::size_t nt) {
    const std::size_t lo = n * t / nt, hi = n * (t + 1) / nt, wlo = m * t / nt, whi = m * (t + 1) / nt;
    keep(detail::read_write_once(x + lo, hi - lo, y + wlo, whi - wlo));
  });
}

/// Read bandwidth (GB/s) over a private buffer of `bytes` bytes, first-touched in parallel.
inline double read_bandwidth_gbs(std::size_t bytes, int threads, int reps = 11) {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> buf(n);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < n; ++i) buf[i] = float(i & 1023) * 1e-3f;
  return double(n * sizeof(float)) / read_seconds(buf.data(), n, threads, reps) * 1e-9;
}

/// Evicts caches by streaming through a 512 MiB buffer (for "cold" measurements).
inline void evict_caches() {
  static std::vector<char> junk(std::size_t(512) << 20, 1);
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < junk.size(); i += 64) s += static_cast<unsigned char>(junk[i]++);
  keep(s);
}

/// Name of the SIMD path the benchmarks were compiled for.
inline const char* isa_name() { return xsimd::default_arch::name(); }

}  // namespace kvphase::bench
