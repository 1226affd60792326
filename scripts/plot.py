#!/usr/bin/env python3
"""Plot per-phase recall from a kvphase sweep CSV (kvphase-sweep --format csv, or the demo).

    scripts/plot.py sweep.csv out.png [--title TEXT]

Reads the rows `model,phase,trials,hits,recall,ci_low,ci_high[,theory,...]` (lines starting with
'#' carry provenance and are skipped), and draws recall by phase for every model with its
interval, plus the theory prediction where the CSV has one. Needs matplotlib; when the first
python3 on PATH cannot import it, re-runs itself under Debian's /usr/bin/python3.
"""
import sys

from kvphase_csv import have_matplotlib, read_rows


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    src, out = argv[1], argv[2]
    title = None
    if "--title" in argv:
        title = argv[argv.index("--title") + 1]
    if not have_matplotlib():
        print("plot.py: matplotlib not available (apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_rows(src)
    models = []
    for r in rows:
        if r["model"] not in models:
            models.append(r["model"])
    style = {"compressed": ("tab:red", "o"), "full": ("tab:blue", "s")}
    fig, ax = plt.subplots(figsize=(7.0, 4.0), dpi=130)
    for i, m in enumerate(models):
        rs = [r for r in rows if r["model"] == m]
        ph = [int(r["phase"]) for r in rs]
        y = [float(r["recall"]) for r in rs]
        lo = [float(r["recall"]) - float(r["ci_low"]) for r in rs]
        hi = [float(r["ci_high"]) - float(r["recall"]) for r in rs]
        color, marker = style.get(m, (f"C{i}", "^"))
        off = (i - (len(models) - 1) / 2) * 0.08
        ax.errorbar([p + off for p in ph], y, yerr=[lo, hi], fmt=marker + "-", color=color,
                    capsize=3, label=f"{m} (95% CI)")
        if "theory" in rs[0] and rs[0]["theory"] not in ("", "nan", "NA"):
            ty = [float(r["theory"]) if r["theory"] not in ("", "nan", "NA") else float("nan") for r in rs]
            ax.plot(ph, ty, "--", color=color, alpha=0.7, label=f"{m}: theory")
    ax.set_xlabel("target phase group")
    ax.set_ylabel("recall")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
