#!/usr/bin/env python3
"""Figures for the training experiment (examples/train_phase.cpp).

    scripts/plot_train.py OUT_DIR FIG_DIR [--seed N]

Reads OUT_DIR/train_{gates,phase,position,ablation,mitigations}.csv written by
`train_phase --out OUT_DIR` (lines starting with '#' carry provenance and are skipped) and writes
FIG_DIR/train_gates.png       gate profile softmax(b) over training, plain model, one panel per head
FIG_DIR/train_phase.png       recall by target position and by phase, plain vs full attention
FIG_DIR/train_ablation.png    ablation matrix (per-phase recall drop per knocked-out component)
FIG_DIR/train_mitigations.png mean recall, worst phase and gap per mitigation, every seed
The seed shown for single-model figures is --seed (default: the smallest seed in the CSVs).
Needs matplotlib; when the first python3 on PATH cannot import it, re-runs itself under
Debian's /usr/bin/python3; if that fails too it prints a note and exits 0 (the CSVs remain).
"""
import os
import sys

from kvphase_csv import have_matplotlib, read_rows


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, figs = argv[1], argv[2]
    seed = None
    if "--seed" in argv:
        seed = argv[argv.index("--seed") + 1]
    if not have_matplotlib():
        print("plot_train.py: matplotlib not available (apt-get install python3-matplotlib); no figures written",
              file=sys.stderr)
        return 0
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(figs, exist_ok=True)
    gates = read_rows(os.path.join(src, "train_gates.csv"))
    phase = read_rows(os.path.join(src, "train_phase.csv"))
    position = read_rows(os.path.join(src, "train_position.csv"))
    ablation = read_rows(os.path.join(src, "train_ablation.csv"))
    mitig = read_rows(os.path.join(src, "train_mitigations.csv"))
    if seed is None:
        seed = str(min(int(r["seed"]) for r in mitig))

    # ---- gate profiles over training ----
    g = [r for r in gates if r["variant"] == "plain" and r["seed"] == seed]
    if g:
        heads = sorted({(int(r["layer"]), int(r["head"])) for r in g})
        slots = sorted({int(r["slot"]) for r in g})
        fig, axes = plt.subplots(1, len(heads), figsize=(3.2 * len(heads), 3.0), sharey=True, squeeze=False)
        for ax, (l, h) in zip(axes[0], heads):
            for s in slots:
                pts = sorted((int(r["step"]), float(r["weight"])) for r in g
                             if int(r["layer"]) == l and int(r["head"]) == h and int(r["slot"]) == s)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"slot {s}")
            ax.set_title(f"layer {l}, head {h}")
            ax.set_xlabel("training step")
            ax.set_ylim(-0.02, 1.02)
        axes[0][0].set_ylabel("gate weight softmax(b)")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"Slot-gate profiles during training (plain, seed {seed})")
        fig.tight_layout()
        fig.savefig(os.path.join(figs, "train_gates.png"), dpi=110)
        plt.close(fig)

    # ---- recall by position and by phase ----
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [2.2, 1]})
    for model, colour in (("plain", "C3"), ("full_attention", "C0")):
        rows = [r for r in position if r["model"] == model and r["seed"] == seed]
        if rows:
            a1.plot([int(r["position"]) for r in rows], [float(r["recall"]) for r in rows], "o-", ms=3, color=colour,
                    label=model)
        rows = [r for r in phase if r["model"] == model and r["seed"] == seed]
        if rows:
            x = [int(r["phase"]) for r in rows]
            y = [float(r["recall"]) for r in rows]
            lo = [float(r["recall"]) - float(r["ci_low"]) for r in rows]
            hi = [float(r["ci_high"]) - float(r["recall"]) for r in rows]
            a2.errorbar(x, y, yerr=[lo, hi], fmt="o-", capsize=3, color=colour, label=model)
    a1.set_xlabel("target position")
    a1.set_ylabel("recall")
    a1.set_ylim(-0.03, 1.03)
    a1.set_title("recall by target position")
    a1.legend(fontsize=8)
    a2.set_xlabel("phase (position mod S)")
    a2.set_xticks(sorted({int(r["phase"]) for r in phase}))
    a2.set_ylim(-0.03, 1.03)
    a2.set_title("by phase, Wilson 95%")
    fig.suptitle(f"Trained compressed model vs full-attention control (seed {seed})")
    fig.tight_layout()
    fig.savefig(os.path.join(figs, "train_phase.png"), dpi=110)
    plt.close(fig)

    # ---- ablation matrix ----
    rows = [r for r in ablation if r["model"] == "plain" and r["seed"] == seed and r["component"] != "none"]
    if rows:
        comps = []
        for r in rows:
            if r["component"] not in comps:
                comps.append(r["component"])
        phases = sorted({int(r["phase"]) for r in rows})
        m = [[0.0] * len(phases) for _ in comps]
        for r in rows:
            m[comps.index(r["component"])][phases.index(int(r["phase"]))] = float(r["drop"])
        fig, ax = plt.subplots(figsize=(1.2 * len(phases) + 2.5, 0.45 * len(comps) + 1.6))
        im = ax.imshow(m, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
        for i in range(len(comps)):
            for j in range(len(phases)):
                ax.text(j, i, f"{m[i][j]:.2f}", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(phases)), [f"phase {p}" for p in phases])
        ax.set_yticks(range(len(comps)), comps)
        ax.set_title(f"Recall drop when knocked out (plain, seed {seed})")
        fig.colorbar(im, ax=ax, fraction=0.05)
        fig.tight_layout()
        fig.savefig(os.path.join(figs, "train_ablation.png"), dpi=110)
        plt.close(fig)

    # ---- mitigations ----
    variants = []
    for r in mitig:
        if r["variant"] not in variants:
            variants.append(r["variant"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=False)
    for ax, (key, title) in zip(axes, (("mean", "mean recall"), ("worst", "worst phase recall"), ("gap", "gap (max - min)"))):
        for i, v in enumerate(variants):
            rows = [r for r in mitig if r["variant"] == v]
            for k, r in enumerate(rows):
                x = i + (k - (len(rows) - 1) / 2) * 0.18
                y = float(r[key])
                ax.errorbar([x], [y], yerr=[[y - float(r[key + "_low"])], [float(r[key + "_high"]) - y]], fmt="o",
                            ms=4, capsize=2, color=f"C{i}")
        ax.set_xticks(range(len(variants)), variants, rotation=40, ha="right", fontsize=8)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Mitigations at matched cache size (one point per training seed, 95% intervals)")
    fig.tight_layout()
    fig.savefig(os.path.join(figs, "train_mitigations.png"), dpi=110)
    plt.close(fig)
    print(f"plot_train.py: wrote {figs}/train_{{gates,phase,ablation,mitigations}}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
