#pragma once
/// \file core/parallel.hpp
/// OpenMP helpers whose results do not depend on the thread count: every thread accumulates
/// into its own local state and the locals are merged with an operation the caller guarantees
/// to be order-free (integer sums), so any schedule gives the same bits.
/// Without OpenMP everything runs on the calling thread.

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>

#include "kvphase/core/error.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace kvphase::parallel {

/// Threads to use for a request (0: all available; otherwise the request).
inline int thread_count(int requested) noexcept {
#ifdef _OPENMP
  return requested > 0 ? requested : omp_get_max_threads();
#else
  (void)requested;
  return 1;
#endif
}

/// Calls body(local, i) for i in [0, total) on `threads` threads (dynamic schedule). Each
/// thread builds its local state with make_local() and hands it to merge(local) once at the end
/// (serialised). tick() runs on the calling thread about every `interval` seconds, for
/// progress reports. The first exception thrown by body is rethrown after the loop.
/// Throws kvphase::error unless total >= 0 and threads >= 0 (0 or 1: the calling thread).
template <class Body, class MakeLocal, class Merge, class Tick>
void for_each_index(std::int64_t total, int threads, Body&& body, MakeLocal&& make_local, Merge&& merge, Tick&& tick,
                    double interval = 0.5) {
  require(total >= 0, "total", total, "must be >= 0");
  require(threads >= 0, "threads", threads, "must be >= 0");
  std::exception_ptr error;
  std::mutex mu;
  using clock = std::chrono::steady_clock;
  auto run = [&](auto& local, std::int64_t i, clock::time_point& last, bool master) {
    try {
      body(local, i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      if (!error) error = std::current_exception();
    }
    if (master) {
      const auto now = clock::now();
      if (std::chrono::duration<double>(now - last).count() >= interval) {
        tick();
        last = now;
      }
    }
  };
#ifdef _OPENMP
  if (threads > 1) {
#pragma omp parallel num_threads(threads)
    {
      auto local = make_local();
      auto last = clock::now();
      const bool master = omp_get_thread_num() == 0;
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t i = 0; i < total; ++i) run(local, i, last, master);
      {
        std::lock_guard<std::mutex> lock(mu);
        try {
          merge(local);
        } catch (...) {
          if (!error) error = std::current_exception();
        }
      }
    }
  } else
#endif
  {
    (void)threads;
#ifdef _OPENMP
    // One thread means one thread: nested library code (Eigen's GEMM) sizes its own OpenMP teams
    // by omp_get_max_threads() when it is not inside an active parallel region, and its idle
    // workers would spin on the other cores. The setting is this thread's own and is restored.
    struct one_thread_guard {
      int saved = omp_get_max_threads();
      one_thread_guard() noexcept { omp_set_num_threads(1); }
      ~one_thread_guard() { omp_set_num_threads(saved); }
    } guard;
#endif
    auto local = make_local();
    auto last = clock::now();
    for (std::int64_t i = 0; i < total; ++i) run(local, i, last, true);
    merge(local);
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kvphase::parallel
