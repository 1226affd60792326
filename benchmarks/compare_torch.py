#!/usr/bin/env python3
"""The key-space needle trial of bench_sweep (BM_key_space) written with PyTorch on the CPU,
timed in the same run as the library's, so the ratio is taken under the same machine load.

One trial, as the library runs it: N = 8192 keys of d = 64 iid N(0, 1) channels, a needle key
kappa ~ N(0, I) at a uniform position p in [0.1 N, 0.9 N], the query q = kappa; the compressed
model pools W = S = 4 consecutive keys by their mean and scores the N/4 entries with q, the full
model scores all N keys; a hit is an argmax at the needle (entry p // 4, token p). PyTorch runs it
in its best form on this machine: batches of 64 trials, every tensor preallocated (normal_,
out= for mean and bmm), no autograd.

Usage (Debian's python3 with python3-torch; not part of the default build or tests):
  /usr/bin/python3 benchmarks/compare_torch.py --bench build/release/benchmarks/bench_sweep \
      [--threads 1 2] [--rounds 3] [--seconds 3] [--out compare_torch.json]

Each round alternates: PyTorch for --seconds, then the library's BM_key_space/threads:T (the same
trial with the keys generated) and BM_score_space/threads:T (the exact score-space engine: the
same trial in distribution, one normal per token), then the two Gaussian generators alone
(PyTorch's normal_ into the key tensor for a third of --seconds, the library's BM_generator/threads:T);
the ratios are taken per round and the median (min-max) over rounds is printed, with the share of
each side's trial time that its generator alone would take (trials/s x normals per trial /
generator normals/s; the library's is its gen_frac).
PyTorch's hit rates are printed to check it runs the same task.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

N, D, S, BATCH = 8192, 64, 4, 64


def torch_rate(torch, threads, seconds, seed):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    keys = torch.empty(BATCH, N, D)
    kappa = torch.empty(BATCH, D)
    pooled = torch.empty(BATCH, N // S, D)
    s_full = torch.empty(BATCH, N, 1)
    s_comp = torch.empty(BATCH, N // S, 1)
    rows = torch.arange(BATCH)
    trials = hits_full = hits_comp = 0
    with torch.inference_mode():
        start = time.perf_counter()
        while True:
            keys.normal_(generator=g)
            kappa.normal_(generator=g)
            p = torch.randint(N // 10, 9 * N // 10 + 1, (BATCH,), generator=g)
            keys[rows, p] = kappa
            q = kappa.unsqueeze(2)  # the query is the needle key
            torch.bmm(keys, q, out=s_full)
            torch.mean(keys.view(BATCH, N // S, S, D), dim=2, out=pooled)
            torch.bmm(pooled, q, out=s_comp)
            hits_full += int((s_full.squeeze(2).argmax(1) == p).sum())
            hits_comp += int((s_comp.squeeze(2).argmax(1) == p // S).sum())
            trials += BATCH
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    return trials / elapsed, hits_comp / trials, hits_full / trials, trials


def torch_normal_rate(torch, threads, seconds, seed):
    """Normals/s of PyTorch's own generator alone (normal_ into the trial's key tensor)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(seed)
    keys = torch.empty(BATCH, N, D)
    n = 0
    with torch.inference_mode():
        start = time.perf_counter()
        while True:
            keys.normal_(generator=g)
            n += keys.numel()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
    return n / elapsed


def library_row(bench, name, threads):
    out = subprocess.run(
        [bench, f"--benchmark_filter={name}/threads:{threads}/", "--benchmark_format=json"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"][0]


def library_rate(bench, name, threads):
    row = library_row(bench, name, threads)
    return row["trials_per_s"], row["gen_frac"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="path to the bench_sweep program")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="PyTorch time per round")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write the figures and their provenance as JSON")
    args = ap.parse_args()
    if not os.access(args.bench, os.X_OK):
        print(f"compare_torch: --bench = {args.bench}: not an executable bench_sweep", file=sys.stderr)
        return 2
    if args.rounds < 1 or args.seconds <= 0 or any(t < 1 for t in args.threads):
        print("compare_torch: --rounds must be >= 1, --seconds > 0 and every --threads >= 1", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        print("compare_torch: PyTorch is not installed (Debian: apt-get install python3-torch; "
              "run with /usr/bin/python3)", file=sys.stderr)
        return 2

    print(f"needle trial N={N} d={D} W=S={S} mean, compressed + full; PyTorch {torch.__version__}, "
          f"batches of {BATCH}")
    results = []
    for t in args.threads:
        ratios, score_ratios, gen_ratios, rows = [], [], [], []
        for r in range(args.rounds):
            tr, hc, hf, n = torch_rate(torch, t, args.seconds, args.seed + 1000 * r + t)
            lr, gen_frac = library_rate(args.bench, "BM_key_space", t)
            sr, _ = library_rate(args.bench, "BM_score_space", t)
            # the two generators alone, and the share of a trial's time each spends generating
            tg = torch_normal_rate(torch, t, args.seconds / 3, args.seed + 1000 * r + t + 500)
            lg = library_row(args.bench, "BM_generator", t)["normals_per_s"]
            gen_ratios.append(lg / tg)
            tshare = tr * (N * D + D) / tg
            ratios.append(lr / tr)
            score_ratios.append(sr / tr)
            rows.append({"round": r, "torch_trials_per_s": tr, "torch_hit_compressed": hc, "torch_hit_full": hf,
                         "torch_trials": n, "library_key_trials_per_s": lr, "library_gen_frac": gen_frac,
                         "ratio_key": lr / tr, "library_score_trials_per_s": sr, "ratio_score": sr / tr,
                         "torch_normals_per_s": tg, "library_normals_per_s": lg, "ratio_generator": lg / tg,
                         "torch_generation_share": tshare})
            print(f"threads {t} round {r}: PyTorch {tr:8.1f} trials/s (hit compressed {hc:.3f}, full {hf:.3f}), "
                  f"kvphase key engine {lr:8.1f} trials/s ({lr / tr:5.1f}x), score engine {sr:9.1f} ({sr / tr:6.1f}x); "
                  f"generators alone: PyTorch {tg / 1e9:.3f}G normals/s, kvphase {lg / 1e9:.3f}G ({lg / tg:5.1f}x); "
                  f"generation share of a trial: PyTorch {tshare:.2f}, kvphase {gen_frac:.2f}")
        med = statistics.median(ratios)
        smed = statistics.median(score_ratios)
        gmed = statistics.median(gen_ratios)
        print(f"threads {t}: kvphase key engine / PyTorch = {med:.1f}x (min {min(ratios):.1f}, max {max(ratios):.1f}); "
              f"score engine / PyTorch = {smed:.0f}x (min {min(score_ratios):.0f}, max {max(score_ratios):.0f}) "
              f"over {args.rounds} rounds; generator / PyTorch's generator = {gmed:.1f}x")
        results.append({"threads": t, "median_ratio_key": med, "min_ratio_key": min(ratios),
                        "max_ratio_key": max(ratios), "median_ratio_score": smed, "median_ratio_generator": gmed,
                        "rounds": rows})
    if args.out:
        git = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "rev-parse", "--short=12",
                              "HEAD"], capture_output=True, text=True).stdout.strip()
        here = os.path.dirname(os.path.abspath(__file__))
        version = ""
        try:
            with open(os.path.join(here, "..", "include", "kvphase", "version.hpp")) as f:
                for line in f:
                    if "KVPHASE_VERSION_STRING" in line:
                        version = line.split('"')[1]
        except OSError:
            pass
        isa = ""
        try:
            with open("/proc/cpuinfo") as f:
                flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
            isa = " ".join(x for x in ("avx512f", "avx512bw", "avx2", "fma") if x in flags)
        except OSError:
            pass
        doc = {"provenance": {"program": "compare_torch.py", "version": version, "git_hash": git,
                              "cpu_isa": isa, "torch": torch.__version__,
                              "python": platform.python_version(), "machine": platform.machine(),
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "command_line": " ".join(sys.argv), "seed": args.seed,
                              "config": {"context": N, "dim": D, "window": S, "stride": S, "pool": "mean",
                                         "batch": BATCH, "rounds": args.rounds, "seconds": args.seconds,
                                         "bench": args.bench}},
               "results": results}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
