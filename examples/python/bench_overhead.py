#!/usr/bin/env python3
"""Cost of the Python layer, measured beside the C++ figures of the same build.

1. compress: one kvphase.compress call on a 16 x 8 float32 array (W = 8, S = 4 mean), median of
   many calls, beside bench_compress's row BM_compress_call_16x8 (the same allocating C++ call).
   The difference is the binding's overhead (argument checks, the output array).
2. sweep: trials per second of kvphase.sweep(...) and of the kvphase-sweep program on the same
   config (both include computing the statistics and writing the CSV text), alternating runs,
   median of each.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/bench_overhead.py \\
        --build build/release

Figures are wall-clock times: on a loaded machine report them with the load, and compare the two
columns of one run only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import kvphase


def compress_python_us(calls=100, repeats=2000):
    """(Python call, the same C++ call timed inside this process), interleaved so that both see
    the same machine load: medians over `repeats` batches of `calls` calls, in microseconds.
    Batches are short (~1 ms), so on a loaded machine most of them run without being preempted
    and the median is the undisturbed cost (a long loop's total would include the other
    processes' time slices)."""
    spec = kvphase.operator_spec(window=8, stride=4, pool="mean")
    x = (np.arange(128, dtype=np.float32) % 7 - 3).reshape(16, 8)
    f = kvphase.compress
    py, cpp = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            f(spec, x)
        py.append((time.perf_counter() - t0) / calls)
        cpp.append(kvphase._kvphase._time_compress(spec, x, calls, 1))
    return statistics.median(py) * 1e6, statistics.median(cpp) * 1e6


def compress_cpp_us(bench):
    out = subprocess.run([bench, "--benchmark_filter=BM_compress_call_16x8", "--benchmark_format=json",
                          "--benchmark_repetitions=5", "--benchmark_min_time=0.2"],
                         check=True, capture_output=True, text=True).stdout
    rows = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    return statistics.median(b["median_us"] for b in rows), statistics.median(b["roofline_frac"] for b in rows)


SWEEP = dict(preset="gated", gate_bias=[3, 0, 0, 0], context=8192, trials=4000, seed=1, threads=2)
SWEEP_FLAGS = ["--preset", "gated", "--gate-bias", "3,0,0,0", "--context", "8192", "--trials", "4000",
               "--seed", "1", "--threads", "2", "--quiet"]


def sweep_rates(cli, runs=3):
    """Median trials/s of the program and of kvphase.sweep, runs interleaved."""
    groups = 4
    total = SWEEP["trials"] * groups
    py, c = [], []
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "cli.csv")
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([cli, *SWEEP_FLAGS, "--out", out], check=True)
            c.append(total / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            r = kvphase.sweep(**SWEEP)
            r.to_csv()
            py.append(total / (time.perf_counter() - t0))
    return statistics.median(py), statistics.median(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build/release", help="build directory with benchmarks/ and examples/")
    ap.add_argument("--runs", type=int, default=3, help="sweep runs per side")
    a = ap.parse_args()
    bench = os.path.join(a.build, "benchmarks", "bench_compress")
    cli = os.path.join(a.build, "examples", "kvphase-sweep")
    print(f"kvphase {kvphase.__version__} ({kvphase.compiled_isa}), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    py_us, inproc_us = compress_python_us()
    print(f"compress 16x8 float32: Python {py_us:.3f} us/call, the C++ call in the same process "
          f"{inproc_us:.3f} us/call, overhead {py_us - inproc_us:.3f} us")
    if os.access(bench, os.X_OK):
        cpp_us, roof = compress_cpp_us(bench)
        print(f"  bench_compress BM_compress_call_16x8: {cpp_us:.3f} us/call (roofline_frac {roof:.3f}); "
              f"Python - bench row {py_us - cpp_us:.3f} us")
    else:
        print(f"  ({bench} not built)")
    if os.access(cli, os.X_OK):
        py, c = sweep_rates(cli, a.runs)
        print(f"sweep ({' '.join(SWEEP_FLAGS[:-1])}): kvphase-sweep {c:,.0f} trials/s, "
              f"kvphase.sweep {py:,.0f} trials/s, ratio {py / c:.3f}")
    else:
        print(f"sweep: {cli} not built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
