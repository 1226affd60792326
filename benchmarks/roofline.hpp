#pragma once
// In-process rooflines for kvphase benchmarks. The machine is noisy (clock 3.2-3.6 GHz, 2-thread
// DRAM bandwidth swinging 2x between runs), so every benchmark states its speed as a fraction of
// a limit measured in the same process, right next to the job:
//   - fma_peak_gflops(threads): float FMA throughput with 16 independent vector accumulators per
//     thread on the widest compiled path (AVX-512 here: 2 x 16-lane FMA per cycle);
//   - read_seconds(x, n, threads): time to read n floats once (the compress roofline: any kernel
//     must at least read its input), split statically across threads;
//   - read_bandwidth_gbs(bytes, threads): bytes/s of that read on a private buffer.
// Each figure is the median of `reps` repetitions, so a roofline and a job measured with the
// same care give a ratio that is stable when absolute times are not.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xsimd/xsimd.hpp>

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
// 16 independent FMA chains of one vector each: throughput-bound, not latency-bound.
[[gnu::noinline]] inline float fma_chains(std::int64_t iters) {
  using B = xsimd::batch<float>;
  B a0(1.0f), a1(1.1f), a2(1.2f), a3(1.3f), a4(1.4f), a5(1.5f), a6(1.6f), a7(1.7f);
  B a8(1.8f), a9(1.9f), a10(2.0f), a11(2.1f), a12(2.2f), a13(2.3f), a14(2.4f), a15(2.5f);
  const B m(0.999999f), c(1e-7f);
  for (std::int64_t i = 0; i < iters; ++i) {
    a0 = xsimd::fma(a0, m, c); a1 = xsimd::fma(a1, m, c); a2 = xsimd::fma(a2, m, c); a3 = xsimd::fma(a3, m, c);
    a4 = xsimd::fma(a4, m, c); a5 = xsimd::fma(a5, m, c); a6 = xsimd::fma(a6, m, c); a7 = xsimd::fma(a7, m, c);
    a8 = xsimd::fma(a8, m, c); a9 = xsimd::fma(a9, m, c); a10 = xsimd::fma(a10, m, c); a11 = xsimd::fma(a11, m, c);
    a12 = xsimd::fma(a12, m, c); a13 = xsimd::fma(a13, m, c); a14 = xsimd::fma(a14, m, c); a15 = xsimd::fma(a15, m, c);
    asm volatile("" ::: "memory");
  }
  B s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11)) + ((a12 + a13) + (a14 + a15));
  return xsimd::hadd(s);
}

// Sum of n floats with 4 vector accumulators: one pass over the input.
[[gnu::noinline]] inline float read_once(const float* x, std::size_t n) {
  using B = xsimd::batch<float>;
  constexpr std::size_t L = B::size;
  B s0(0.0f), s1(0.0f), s2(0.0f), s3(0.0f);
  std::size_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    s0 += B::load_unaligned(x + i);
    s1 += B::load_unaligned(x + i + L);
    s2 += B::load_unaligned(x + i + 2 * L);
    s3 += B::load_unaligned(x + i + 3 * L);
  }
  float s = xsimd::hadd((s0 + s1) + (s2 + s3));
  for (; i < n; ++i) s += x[i];
  return s;
}
}  // namespace detail

/// Float FMA peak in GFLOP/s with `threads` threads (median of reps runs of ~20 ms each).
inline double fma_peak_gflops(int threads, int reps = 7) {
  using B = xsimd::batch<float>;
  const std::int64_t iters = 4'000'000;
  const double flops_per_thread = double(iters) * 16.0 * 2.0 * double(B::size);
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
    { keep(detail::fma_chains(iters)); }
    secs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return flops_per_thread * threads / median(secs) * 1e-9;
}

/// Median time (s) to read x[0..n) once with `threads` threads (static contiguous split).
inline double read_seconds(const float* x, std::size_t n, int threads, int reps = 11) {
  std::vector<double> secs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
#pragma omp parallel num_threads(threads)
    {
      const std::size_t t = static_cast<std::size_t>(omp_get_thread_num());
      const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
      const std::size_t lo = n * t / nt, hi = n * (t + 1) / nt;
      keep(detail::read_once(x + lo, hi - lo));
    }
    secs.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return median(secs);
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
