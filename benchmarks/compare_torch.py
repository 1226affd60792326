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

Compression operators (the `compress` subcommand; kvphase-bench --compare-torch calls it):
  /usr/bin/python3 benchmarks/compare_torch.py compress --preset v4_csa --context 16384 \
      --dim 4096 --head-dim 512 [--threads 1] [--reps 5] [--seed 1] \
      [--tensors DIR] [--out-npy OUT.npy] [--out OUT.json]
  or a custom spec: --pool {identity,mean,max,weights,slot_gate,channel_gate,two_stream,mlp}
      --window W --stride S [--origin O] [--convention v4|nsa] [--slot-weights w0 ...]
      [--slot-bias b0 ...] [--rmsnorm] [--rms-eps E] [--rope-anchor none|start|end|centre]
      [--rope-theta T] [--rope-dim R] [--activation gelu|relu] [--mlp-hidden H]
      (a preset's fields can be overridden by the same flags).
The operator is written as a PyTorch researcher writes it (float32, CPU, no autograd): source
windows gathered with an index tensor (masked slots before position 0), projections as matmuls
of all tokens, softmax over the window, RMSNorm and RoPE as separate tensor ops. With --tensors,
DIR holds x.npy (context × dim) and the parameters under pool_params' field names (w_c.npy,
w_z.npy, slot_bias_c.npy, content_u.npy, slot_u.npy, mlp_pos.npy, mlp_w1.npy, mlp_b1.npy,
mlp_w2.npy, mlp_b2.npy, rms_weight.npy; a missing file means the field is empty), so the output
can be compared with the library's on the same data; without it, x ~ N(0, 1) and parameters are
drawn with make_params' scales (projections N(0, 1/d), logit maps N(0, 1/d), zero biases, RMSNorm
weight 1 + 0.1 N(0, 1), MLP weights N(0, 1/fan_in)). One line of JSON goes to stdout: operator,
shape, threads, time (median, min, max over --reps after one warm-up call), GFLOP and GFLOP/s
(the projections' and MLP layers' 2 per multiply-add), and the output's checksum (sum and sum of
absolute values in double); --out-npy writes the output (entries × head-dim, float32), --out the
same JSON with provenance. Exit 2 on bad flags or when torch is missing.
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


# ---- compression operators ------------------------------------------------------------------------

PRESETS = {
    # name: (pool, window, stride, convention, content-gated, rmsnorm, rope anchor, theta, rope_dim)
    "v4_csa": dict(pool="two_stream", window=8, stride=4, convention="v4", gated=True, rmsnorm=True,
                   rope_anchor="start", rope_theta=160000.0, rope_dim=64),
    "v4_hca": dict(pool="channel_gate", window=128, stride=128, convention="v4", gated=True, rmsnorm=True,
                   rope_anchor="start", rope_theta=160000.0, rope_dim=64),
    "v41": dict(pool="channel_gate", window=2, stride=2, convention="v4", gated=True, rmsnorm=True,
                rope_anchor="start", rope_theta=160000.0, rope_dim=64),
    "nsa": dict(pool="mlp", window=32, stride=16, convention="nsa", gated=False, rmsnorm=False,
                rope_anchor="none", rope_theta=10000.0, rope_dim=0),
    "paper_ref": dict(pool="slot_gate", window=8, stride=8, convention="v4", gated=True, rmsnorm=True,
                      rope_anchor="start", rope_theta=10000.0, rope_dim=0, per_slot=True),
    "full": dict(pool="identity", window=1, stride=1, convention="v4", gated=False, rmsnorm=False,
                 rope_anchor="none", rope_theta=10000.0, rope_dim=0),
}
POOLS = ("identity", "mean", "max", "weights", "slot_gate", "channel_gate", "two_stream", "mlp")
PARAM_NAMES = ("content_u", "slot_u", "w_c", "w_z", "slot_bias_c", "mlp_pos", "mlp_w1", "mlp_b1", "mlp_w2",
               "mlp_b2", "rms_weight")


def entry_sources(torch, n, W, S, origin, convention):
    """First source position of every complete entry (chunk_grid::sources), as a tensor."""
    if convention == "v4":  # grid index j pools [last - W + 1, last], last = origin + jS + S - 1 >= 0
        j0 = -((S + origin - 1) // S)
        j = torch.arange(j0, (n - origin - S) // S + 1)
        return origin + j * S + S - W
    j0 = -(origin // S)  # nsa: [origin + jS, origin + jS + W - 1], first >= 0
    j = torch.arange(j0, (n - W - origin) // S + 1)
    return origin + j * S


def torch_params(torch, op, d, c, gen):
    """Random parameters with make_params' shapes and scales (see the file comment)."""
    W, S, pool = op["window"], op["stride"], op["pool"]
    sd = d ** -0.5
    p = {}
    if pool == "slot_gate":
        if op["gated"]:
            if op.get("per_slot"):
                p["slot_u"] = torch.randn(W, d, generator=gen) * sd
            else:
                p["content_u"] = torch.randn(d, generator=gen) * sd
        if c != d or op.get("project", True):
            p["w_c"] = torch.randn(d, c, generator=gen) * sd
    elif pool in ("channel_gate", "two_stream"):
        f = 2 if pool == "two_stream" else 1
        p["w_c"] = torch.randn(d, f * c, generator=gen) * sd
        if op["gated"]:
            p["w_z"] = torch.randn(d, f * c, generator=gen) * sd
        p["slot_bias_c"] = torch.zeros(S if f == 2 else W, f * c)
    elif pool == "mlp":
        H = op.get("mlp_hidden") or 2 * c
        p["mlp_pos"] = torch.randn(W, d, generator=gen) * 0.1
        p["mlp_w1"] = torch.randn(W * d, H, generator=gen) * (W * d) ** -0.5
        p["mlp_b1"] = torch.zeros(H)
        p["mlp_w2"] = torch.randn(H, c, generator=gen) * H ** -0.5
        p["mlp_b2"] = torch.zeros(c)
    if op["rmsnorm"] and pool in ("channel_gate", "two_stream"):
        p["rms_weight"] = 1 + 0.1 * torch.randn(c, generator=gen)
    return p


def torch_compress(torch, op, x, p):
    """The operator in plain PyTorch (float32): entries × c."""
    F = torch.nn.functional
    n, d = x.shape
    W, S, pool = op["window"], op["stride"], op["pool"]
    first = entry_sources(torch, n, W, S, op["origin"], op["convention"])
    idx = first[:, None] + torch.arange(W)[None, :]          # E × W source positions
    valid = idx >= 0                                          # slots before position 0 are masked
    idx = idx.clamp(min=0)
    neg = torch.tensor(float("-inf"))
    if pool == "identity":
        out = x[idx[:, 0]]
    elif pool == "mean":
        m = valid.to(x.dtype)
        out = (x[idx] * m[..., None]).sum(1) / m.sum(1, keepdim=True)
    elif pool == "max":
        out = x[idx].masked_fill(~valid[..., None], neg).amax(1)
    elif pool == "weights":
        w = torch.tensor(op["slot_weights"], dtype=x.dtype)[None, :] * valid
        w = w / w.sum(1, keepdim=True)
        out = torch.einsum("ew,ewd->ed", w, x[idx])
    elif pool == "slot_gate":
        pay = x @ p["w_c"] if "w_c" in p else x
        xs = x[idx]                                           # E × W × d
        logits = torch.tensor(op["slot_bias"] or [0.0] * W, dtype=x.dtype).expand(len(first), W).clone()
        if "content_u" in p:
            logits = logits + xs @ p["content_u"]
        if "slot_u" in p:
            logits = logits + torch.einsum("ewd,wd->ew", xs, p["slot_u"])
        a = torch.softmax(logits.masked_fill(~valid, neg), dim=1)
        out = torch.einsum("ew,ewc->ec", a, pay[idx])
    elif pool in ("channel_gate", "two_stream"):
        C = x @ p["w_c"] if "w_c" in p else (torch.cat([x, x], 1) if pool == "two_stream" else x)
        Z = x @ p["w_z"] if "w_z" in p else torch.zeros_like(C)
        B = p.get("slot_bias_c", torch.zeros(S if pool == "two_stream" else W, C.shape[1]))
        if pool == "two_stream":
            c = C.shape[1] // 2
            ia, ib = idx[:, :S], idx[:, S:]                   # previous block: stream a; own block: stream b
            Cw = torch.cat([C[ia, :c], C[ib, c:]], 1)
            Zw = torch.cat([Z[ia, :c] + B[None, :, :c], Z[ib, c:] + B[None, :, c:]], 1)
        else:
            Cw, Zw = C[idx], Z[idx] + B[None]
        a = torch.softmax(Zw.masked_fill(~valid[..., None], neg), dim=1)
        out = (a * Cw).sum(1)
    elif pool == "mlp":
        f = (x[idx] + p.get("mlp_pos", torch.zeros(W, d))[None]) * valid[..., None]
        h = f.reshape(len(first), W * d) @ p["mlp_w1"] + p.get("mlp_b1", 0)
        h = F.relu(h) if op["activation"] == "relu" else F.gelu(h)
        out = h @ p["mlp_w2"] + p.get("mlp_b2", 0)
    else:
        raise ValueError(pool)
    if op["rmsnorm"]:
        out = out * torch.rsqrt(out.pow(2).mean(1, keepdim=True) + op["rms_eps"])
        if "rms_weight" in p:
            out = out * p["rms_weight"]
    if op["rope_anchor"] != "none":
        c = out.shape[1]
        R = op["rope_dim"] or c
        last = first + W - 1
        start = last - S + 1 if op["convention"] == "v4" else first
        pos = {"start": start, "end": last, "centre": 0.5 * (start + last)}[op["rope_anchor"]].to(torch.float64)
        inv = op["rope_theta"] ** (-2.0 * torch.arange(R // 2, dtype=torch.float64) / R)
        ang = pos[:, None] * inv[None, :]
        cos, sin = torch.cos(ang).to(out.dtype), torch.sin(ang).to(out.dtype)
        x0, x1 = out[:, c - R::2], out[:, c - R + 1::2]
        rot = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], 2).reshape(len(first), R)
        out = torch.cat([out[:, :c - R], rot], 1)
    return out


def op_gflop(op, n, d, c, p, entries):
    f = 0.0
    for k in ("w_c", "w_z"):
        if k in p:
            f += 2.0 * n * d * p[k].shape[1]
    if "slot_u" in p:
        f += 2.0 * entries * op["window"] * d
    for k in ("mlp_w1", "mlp_w2"):
        if k in p:
            f += 2.0 * entries * p[k].shape[0] * p[k].shape[1]
    return f * 1e-9


def provenance(torch, config, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    git = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
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
    return {"program": "compare_torch.py", "version": version, "git_hash": git, "cpu_isa": isa,
            "torch": torch.__version__, "python": platform.python_version(), "machine": platform.machine(),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command_line": " ".join(sys.argv), "seed": seed, "config": config}


def compress_main(argv):
    ap = argparse.ArgumentParser(prog="compare_torch.py compress",
                                 description="one compression operator in PyTorch: time and output checksum")
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--pool", choices=POOLS)
    ap.add_argument("--window", type=int)
    ap.add_argument("--stride", type=int)
    ap.add_argument("--origin", type=int, default=0)
    ap.add_argument("--convention", choices=("v4", "nsa"))
    ap.add_argument("--slot-weights", type=float, nargs="+")
    ap.add_argument("--slot-bias", type=float, nargs="+")
    ap.add_argument("--rmsnorm", action="store_true", default=None)
    ap.add_argument("--rms-eps", type=float, default=1e-6)
    ap.add_argument("--rope-anchor", choices=("none", "start", "end", "centre"))
    ap.add_argument("--rope-theta", type=float)
    ap.add_argument("--rope-dim", type=int)
    ap.add_argument("--activation", choices=("gelu", "relu"), default="gelu")
    ap.add_argument("--mlp-hidden", type=int, default=0)
    ap.add_argument("--context", type=int, default=16384)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--head-dim", type=int, default=0, help="output channels c (0: c = dim)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tensors", help="directory with x.npy and the parameters (see the file comment)")
    ap.add_argument("--out-npy", help="write the output (entries × head-dim, float32)")
    ap.add_argument("--out", help="write the JSON line with provenance to this file")
    a = ap.parse_args(argv)
    op = dict(PRESETS[a.preset]) if a.preset else dict(pool=None, window=None, stride=None, convention="v4",
                                                     gated=False, rmsnorm=False, rope_anchor="none",
                                                     rope_theta=10000.0, rope_dim=0)
    for k in ("pool", "window", "stride", "convention", "rope_anchor", "rope_theta", "rope_dim", "rmsnorm"):
        if getattr(a, k) is not None:
            op[k] = getattr(a, k)
    op.update(origin=a.origin, rms_eps=a.rms_eps, activation=a.activation, mlp_hidden=a.mlp_hidden,
              slot_weights=a.slot_weights, slot_bias=a.slot_bias)

    def bad(msg):
        print(f"compare_torch compress: {msg}", file=sys.stderr)
        return 2
    if op["pool"] is None or op["window"] is None or op["stride"] is None:
        return bad("give --preset or --pool with --window and --stride")
    if op["window"] < 1 or op["stride"] < 1 or a.context < 1 or a.dim < 1 or a.head_dim < 0:
        return bad("--window, --stride, --context and --dim must be >= 1, --head-dim >= 0")
    if op["pool"] == "weights" and (not a.slot_weights or len(a.slot_weights) != op["window"]):
        return bad(f"--slot-weights needs window = {op['window']} values for pool weights")
    if op["pool"] == "two_stream" and op["window"] != 2 * op["stride"]:
        return bad("two_stream needs window = 2 * stride")
    if a.threads < 1 or a.reps < 1:
        return bad("--threads and --reps must be >= 1")
    if op["pool"] in ("identity", "mean", "max", "weights") and a.head_dim not in (0, a.dim):
        return bad(f"pool {op['pool']} has no projection: --head-dim must be 0 or --dim")
    if op["rope_anchor"] != "none" and (op["rope_dim"] or 0) > (a.head_dim or a.dim):
        return bad(f"--rope-dim {op['rope_dim']} exceeds the output width {a.head_dim or a.dim}")
    try:
        import torch
    except ImportError:
        return bad("PyTorch is not installed (Debian: apt-get install python3-torch; run with /usr/bin/python3)")
    torch.set_num_threads(a.threads)
    gen = torch.Generator().manual_seed(a.seed)
    d, c = a.dim, a.head_dim or a.dim
    if a.tensors:
        import numpy as np
        x = torch.from_numpy(np.load(os.path.join(a.tensors, "x.npy")).astype(np.float32))
        p = {}
        for k in PARAM_NAMES:
            f = os.path.join(a.tensors, k + ".npy")
            if os.path.exists(f):
                p[k] = torch.from_numpy(np.load(f).astype(np.float32))
        d = x.shape[1]
        c = (p["w_c"].shape[1] // (2 if op["pool"] == "two_stream" else 1) if "w_c" in p
             else p["mlp_w2"].shape[1] if "mlp_w2" in p else d)
    else:
        x = torch.randn(a.context, d, generator=gen)
        op["project"] = c != d or a.preset in ("v4_csa", "v4_hca", "v41", "paper_ref")
        p = torch_params(torch, op, d, c, gen)
    times = []
    with torch.inference_mode():
        out = torch_compress(torch, op, x, p)  # warm-up
        for _ in range(a.reps):
            t0 = time.perf_counter()
            out = torch_compress(torch, op, x, p)
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    gflop = op_gflop(op, x.shape[0], d, c, p, out.shape[0])
    od = out.to(torch.float64)
    row = {"operator": a.preset or op["pool"], "pool": op["pool"], "tokens": x.shape[0], "dim": d, "out_dim": c,
           "entries": out.shape[0], "threads": a.threads, "reps": a.reps, "median_s": med, "min_s": min(times),
           "max_s": max(times), "gflop": gflop, "gflops": gflop / med, "checksum": float(od.sum()),
           "abs_sum": float(od.abs().sum())}
    print(json.dumps(row))
    if a.out_npy:
        import numpy as np
        np.save(a.out_npy, out.numpy().astype(np.float32))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"provenance": provenance(torch, {k: v for k, v in op.items()}, a.seed), "results": [row]},
                      f, indent=2)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "compress":
        return compress_main(sys.argv[2:])
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
        doc = {"provenance": provenance(torch, {"context": N, "dim": D, "window": S, "stride": S, "pool": "mean",
                                                "batch": BATCH, "rounds": args.rounds, "seconds": args.seconds,
                                                "bench": args.bench}, args.seed),
               "results": results}
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
