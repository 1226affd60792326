#pragma once
/// \file sim/shard.hpp
/// A shard i of n of a sweep: trials [⌊i·T/n⌋, ⌊(i+1)·T/n⌋) of every group, so the n shards
/// partition the trials exactly and their merged counts equal one unsharded run.
///
/// Two ways to name a shard, one parser each:
///  - the text "i/n" (shard_spec::parse; io::parse_shard calls it for provenance files);
///  - the environment of the launcher that started the process (shard_from_environment):
///    a Slurm job array (SLURM_ARRAY_TASK_ID with SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_MAX
///    or SLURM_ARRAY_TASK_COUNT, optional SLURM_ARRAY_TASK_STEP), a Slurm job step started by
///    srun (SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS) or Open MPI's mpirun
///    (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE). An array task that itself runs several
///    ranks (mpirun or srun inside an array task) is shard task·ranks + rank of tasks·ranks.
///    Environment values are untrusted text: each must be a plain decimal integer (no sign,
///    blank or other character) within the shard limits, and an inconsistent set is refused
///    naming the variable.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

#include "kvphase/core/error.hpp"
#include "kvphase/io/text.hpp"

namespace kvphase {
/// The index type of core/types.hpp, declared again here so that this header (which
/// io/provenance.hpp includes for the one shard parser) does not pull in Eigen.
using index_t = std::ptrdiff_t;
}  // namespace kvphase

namespace kvphase::sim {

/// Largest shard count (and largest launcher index or size read from the environment).
inline constexpr index_t max_shard_count = index_t(1) << 20;

struct shard_spec {
  index_t index = 0;  ///< i ∈ [0, count)
  index_t count = 1;  ///< n ≥ 1

  void validate() const {
    require(count >= 1 && count <= max_shard_count, "shard", std::to_string(index) + "/" + std::to_string(count),
            "count must be in [1, 2^20]");
    require(index >= 0 && index < count, "shard", std::to_string(index) + "/" + std::to_string(count),
            "index must be in [0, count)");
  }
  /// Trial range [first, last) of this shard for T trials per group.
  /// Throws kvphase::error unless the shard is valid (validate()) and trials >= 0.
  [[nodiscard]] std::pair<index_t, index_t> range(index_t trials) const {
    validate();
    require(trials >= 0, "trials", trials, "must be >= 0");
    const auto at = [&](index_t i) {
      return static_cast<index_t>((static_cast<__int128_t>(i) * trials) / count);
    };
    return {at(index), at(index + 1)};
  }
  /// Parses "i/n": decimal digits only, 0 <= i < n <= 2^20. Throws kvphase::error naming
  /// `parameter` (and quoting at most 60 bytes of `text`) otherwise.
  static shard_spec parse(std::string_view text, std::string_view parameter = "shard") {
    auto bad = [&] { fail(parameter, io::detail::excerpt(text), "must be i/N with integers 0 <= i < N, 1 <= N <= 2^20"); };
    const auto slash = text.find('/');
    if (text.size() > 40 || slash == std::string_view::npos) bad();
    auto num = [&](std::string_view s) {
      if (s.empty() || s.size() > 18) bad();
      index_t v = 0;
      for (char ch : s) {
        if (ch < '0' || ch > '9') bad();
        v = v * 10 + (ch - '0');
      }
      return v;
    };
    const shard_spec s{num(text.substr(0, slash)), num(text.substr(slash + 1))};
    if (s.count < 1 || s.count > max_shard_count || s.index >= s.count) bad();
    return s;
  }
  template <class V>
  void visit_fields(V&& v) {
    v("index", index);
    v("count", count);
  }
  friend std::ostream& operator<<(std::ostream& os, const shard_spec& s) { return os << s.index << "/" << s.count; }
  friend bool operator==(const shard_spec&, const shard_spec&) = default;
};

/// A shard read from a launcher's environment, with what the provenance records about it.
struct launched_shard {
  shard_spec shard;
  std::string launcher;  ///< "slurm-array", "slurm-step", "openmpi", or two joined by '+'
  std::string job;       ///< the launcher's ids, e.g. "SLURM_ARRAY_JOB_ID=41 SLURM_ARRAY_TASK_ID=3"
};

namespace detail {
/// Strict decimal integer in [lo, hi] from an environment value; throws naming the variable.
inline index_t env_integer(std::string_view name, std::string_view value, index_t lo, index_t hi) {
  bool ok = !value.empty() && value.size() <= 18;
  index_t v = 0;
  for (char ch : value) {
    if (!ok) break;
    if (ch < '0' || ch > '9') ok = false;
    else v = v * 10 + (ch - '0');
  }
  if (!ok || v < lo || v > hi)
    fail(name, io::detail::excerpt(value),
         "must be a decimal integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "] (environment variable)");
  return v;
}
}  // namespace detail

/// The shard of this process from its launcher's environment (see the file comment).
/// `getenv` maps a variable name (const char*) to its value or nullptr (pass ::getenv, or a
/// table in tests). Throws kvphase::error naming `parameter` when no launcher is found, and
/// naming the variable when a value is malformed or the set is inconsistent.
template <class Getenv>
[[nodiscard]] launched_shard shard_from_environment(Getenv&& getenv, std::string_view parameter = "shard") {
  auto get = [&](const char* name) -> const char* { return getenv(name); };
  auto value = [&](const char* name, index_t lo, index_t hi) {
    return detail::env_integer(name, get(name), lo, hi);
  };
  launched_shard out;
  auto note = [&](const char* name) {
    if (const char* v = get(name)) {
      if (!out.job.empty()) out.job += ' ';
      out.job += std::string(name) + "=" + io::detail::excerpt(v, 24);
    }
  };
  const index_t big = max_shard_count;
  // outer: a Slurm job array
  index_t outer_index = 0, outer_count = 1;
  if (get("SLURM_ARRAY_TASK_ID")) {
    const index_t id = value("SLURM_ARRAY_TASK_ID", 0, 1 << 30);
    require(get("SLURM_ARRAY_TASK_MIN") != nullptr, "SLURM_ARRAY_TASK_MIN", "(unset)",
            "is needed with SLURM_ARRAY_TASK_ID (a job array sets both)");
    const index_t lo = value("SLURM_ARRAY_TASK_MIN", 0, 1 << 30);
    const index_t step = get("SLURM_ARRAY_TASK_STEP") ? value("SLURM_ARRAY_TASK_STEP", 1, 1 << 30) : 1;
    index_t count = 0;
    if (get("SLURM_ARRAY_TASK_MAX")) {
      const index_t hi = value("SLURM_ARRAY_TASK_MAX", lo, 1 << 30);
      count = (hi - lo) / step + 1;
      require(count <= big, "SLURM_ARRAY_TASK_MAX", hi, "gives more than 2^20 array tasks");
      if (get("SLURM_ARRAY_TASK_COUNT"))
        require(value("SLURM_ARRAY_TASK_COUNT", 1, big) == count, "SLURM_ARRAY_TASK_COUNT", get("SLURM_ARRAY_TASK_COUNT"),
                "must equal (MAX - MIN) / STEP + 1 = " + std::to_string(count) +
                    " (an array with gaps, e.g. --array=0,2,5, cannot be sharded: use 0-N)");
    } else {
      require(get("SLURM_ARRAY_TASK_COUNT") != nullptr, "SLURM_ARRAY_TASK_MAX", "(unset)",
              "or SLURM_ARRAY_TASK_COUNT is needed with SLURM_ARRAY_TASK_ID");
      count = value("SLURM_ARRAY_TASK_COUNT", 1, big);
    }
    require(id >= lo && (id - lo) % step == 0 && (id - lo) / step < count, "SLURM_ARRAY_TASK_ID", id,
            "must be MIN + k * STEP with 0 <= k < " + std::to_string(count) + " (MIN = " + std::to_string(lo) +
                ", STEP = " + std::to_string(step) + ")");
    outer_index = (id - lo) / step;
    outer_count = count;
    out.launcher = "slurm-array";
    note("SLURM_ARRAY_JOB_ID");
    note("SLURM_ARRAY_TASK_ID");
    note("SLURM_JOB_ID");
  }
  // inner: ranks of mpirun, else of an srun job step (the batch script itself is no step)
  index_t inner_index = 0, inner_count = 1;
  const char* launcher = nullptr;
  if (get("OMPI_COMM_WORLD_RANK") || get("OMPI_COMM_WORLD_SIZE")) {
    require(get("OMPI_COMM_WORLD_RANK") && get("OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_RANK", "(one unset)",
            "needs OMPI_COMM_WORLD_SIZE too (mpirun sets both)");
    inner_count = value("OMPI_COMM_WORLD_SIZE", 1, big);
    inner_index = value("OMPI_COMM_WORLD_RANK", 0, big);
    launcher = "openmpi";
    note("OMPI_COMM_WORLD_RANK");
    note("OMPI_COMM_WORLD_SIZE");
    if (out.launcher.empty()) note("SLURM_JOB_ID");
  } else if (get("SLURM_STEP_ID") && get("SLURM_PROCID")) {
    require(get("SLURM_NTASKS") != nullptr, "SLURM_NTASKS", "(unset)", "is needed with SLURM_PROCID (srun sets both)");
    inner_count = value("SLURM_NTASKS", 1, big);
    inner_index = value("SLURM_PROCID", 0, big);
    if (inner_count > 1 || out.launcher.empty()) {
      launcher = "slurm-step";
      if (out.launcher.empty()) note("SLURM_JOB_ID");
      note("SLURM_STEP_ID");
      note("SLURM_PROCID");
      note("SLURM_NTASKS");
    }
  }
  if (launcher) {
    require(inner_index < inner_count, launcher == std::string_view("openmpi") ? "OMPI_COMM_WORLD_RANK" : "SLURM_PROCID",
            inner_index, "must be < the number of ranks " + std::to_string(inner_count));
    if (!out.launcher.empty()) out.launcher += '+';
    out.launcher += launcher;
  }
  if (out.launcher.empty())
    fail(parameter, "auto",
         "found no launcher in the environment: run under sbatch --array, srun or mpirun (SLURM_ARRAY_TASK_ID, "
         "SLURM_PROCID with SLURM_STEP_ID, or OMPI_COMM_WORLD_RANK), or give --shard i/N");
  require(outer_count * inner_count <= big, parameter, std::to_string(outer_count) + " x " + std::to_string(inner_count),
          "array tasks x ranks must be <= 2^20 shards");
  out.shard = {outer_index * inner_count + inner_index, outer_count * inner_count};
  out.shard.validate();
  return out;
}

}  // namespace kvphase::sim
