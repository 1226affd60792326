#!/usr/bin/env python3
"""A walk-through of kvphase from Python, in the order a notebook would take it:

  1. an operator: the DeepSeek-V4 CSA preset, and a custom gated operator;
  2. compress a tensor (random here; a model's keys, e.g. ``t.numpy()``, work the same way);
  3. which tokens each entry pools, and when a query can see it;
  4. a phase sweep of the gated operator, beside full attention on the same inputs;
  5. the statistics (intervals, phase gap, periodicity) and the theory's prediction;
  6. a figure (matplotlib, Agg backend: no display needed).

    PYTHONPATH=build/release/python /usr/bin/python3 examples/python/phase_sweep.py --out phase_sweep.png
"""
import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import kvphase  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=2000, help="trials per phase")
    ap.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
    ap.add_argument("--out", default="phase_sweep.png", help="figure file")
    a = ap.parse_args()

    # 1. operators: a preset, and a custom spec from keyword arguments (the C++ field names)
    csa = kvphase.preset("v4_csa")
    print("preset:", csa)
    gated = kvphase.operator_spec(window=4, stride=4, pool="slot_gate", slot_bias=[1.0, 0, 0, 0], name="gated")

    # 2. compress a tensor: float32, tokens x channels, read in place
    keys = np.random.default_rng(0).standard_normal((1024, 64), dtype=np.float32)
    params = kvphase.make_params(csa, 64, seed=1)  # the preset's learned projections, drawn at random
    entries = kvphase.compress(csa, keys, params)
    print(f"compressed {keys.shape} -> {entries.shape} entries ({entries.dtype})")

    # 3. entry metadata: sources, masked slots, visibility, phases
    meta = csa.entries(16)
    for e in range(len(meta["first"])):
        print(f"  entry {e}: tokens {meta['first'][e]}..{meta['last'][e]}, masked slots {meta['masked'][e]}, "
              f"visible from query position {meta['visible_from'][e]}")
    print("  phases of tokens 0..7:", csa.phases(np.arange(8)))

    # 4. a sweep: the kvphase-sweep parameters as keyword arguments
    r = kvphase.sweep(op=gated, context=4096, trials=a.trials, threads=a.threads, theory=True)
    print(r, f"- {r.trials_per_second:,.0f} trials/s")

    # 5. statistics and theory
    for model in ("compressed", "full"):
        s = r.statistics[model]
        g = s["gap"]
        print(f"  {model:10s} recall by phase {np.round(s['recall'], 3)}, gap {g['gap']:.3f} "
              f"[{g['simultaneous']['low']:.3f}, {g['simultaneous']['high']:.3f}], "
              f"periodicity p = {s['periodicity']['p']:.2g}")
    print("  theory (compressed):", np.round(r.theory["compressed"], 3))

    # 6. the figure
    phases = r.labels
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for model, colour in (("compressed", "tab:red"), ("full", "tab:blue")):
        s = r.statistics[model]
        err = np.vstack([s["recall"] - s["ci_low"], s["ci_high"] - s["recall"]])
        ax.errorbar(phases, s["recall"], yerr=err, fmt="o-", color=colour, capsize=3, label=model)
    ax.plot(phases, r.theory["compressed"], "k--", lw=1, label="theory (compressed)")
    ax.set_xlabel("phase of the needle (position mod 4)")
    ax.set_ylabel("recall")
    ax.set_xticks(phases)
    ax.set_title("slot gate b = (1, 0, 0, 0): phase 0 is favoured")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
