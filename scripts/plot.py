#!/usr/bin/env python3
"""Plot per-phase recall from kvphase-sweep outputs (CSV or JSON, one file or several).

    plot.py FILE... [--out OUT.png] [--heatmap COLUMN] [--title TEXT]
    plot.py sweep.csv out.png [--title TEXT]          (the older form: output last)

FILE is a kvphase-sweep CSV (rows `model,phase,trials,hits,recall,ci_low,ci_high[,extras]`, '#'
lines carry provenance) or JSON (format kvphase-sweep/1). Several files are read as one table.

Without --heatmap: recall by phase group for every model with its interval, plus the theory
prediction where the data have one. Runs that differ in their configuration (e.g. several
contexts) are separate lines, labelled by the fields that differ.

--heatmap COLUMN: recall as colour over phase group × COLUMN, one panel per model. COLUMN is a
data-row column or a key of the run configuration: context, stride, chunk_window (or window),
dim, pool, preset, ... ; `depth` (or any name X with columns X_lo and X_hi) uses the interval
X_lo–X_hi. Rows with the same (model, COLUMN value, phase) are pooled by their counts.

Needs matplotlib and numpy; when the first python3 on PATH cannot import matplotlib, re-runs
itself under Debian's /usr/bin/python3.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
from kvphase_csv import STANDARD_COLUMNS, have_matplotlib, number, read_sweep  # noqa: E402

IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
# configuration keys that never label a line: output paths, parallelism, long descriptions
UNLABELLED = {"operator", "task_config", "out", "format", "threads", "shard", "progress", "theory",
              "command_line", "trials"}
ALIASES = {"window": "chunk_window", "depth-lo": "depth_lo", "depth-hi": "depth_hi"}
MODEL_STYLE = {"compressed": ("tab:red", "o"), "full": ("tab:blue", "s")}


def models_in_order(rows):
    out = []
    for r in rows:
        if r["model"] not in out:
            out.append(r["model"])
    return out


def _sort_key(v):
    v = number(v)
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def column_value(row, column):
    """The value of `column` in a row; X_lo–X_hi when the row has no X but has both bounds;
    None when the row has neither."""
    column = ALIASES.get(column, column)
    if column in row:
        return row[column]
    lo, hi = row.get(column + "_lo"), row.get(column + "_hi")
    if lo is not None and hi is not None:
        return (number(lo), number(hi))
    return None


def _label(v):
    if isinstance(v, tuple):
        return f"{v[0]:g}–{v[1]:g}" if all(isinstance(x, (int, float)) for x in v) else f"{v[0]}–{v[1]}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def heatmap_data(rows, column, model):
    """(column values, phase groups, recall matrix [values × phases]) for one model: recall is
    Σ hits / Σ trials over the rows of that (value, phase); NaN where no row has trials."""
    import numpy as np
    rs = [r for r in rows if r["model"] == model]
    vals = []
    for r in rs:
        v = column_value(r, column)
        if v is None:
            raise ValueError(f"--heatmap {column}: a row of {r['_source']} has no column or config key "
                             f"{ALIASES.get(column, column)!r}")
        if v not in vals:
            vals.append(v)
    vals.sort(key=lambda v: tuple(_sort_key(x) for x in v) if isinstance(v, tuple) else (_sort_key(v),))
    phases = sorted({int(r["phase"]) for r in rs})
    hits = np.zeros((len(vals), len(phases)))
    trials = np.zeros((len(vals), len(phases)))
    vi = {v: i for i, v in enumerate(vals)}
    pi = {p: j for j, p in enumerate(phases)}
    for r in rs:
        i, j = vi[column_value(r, column)], pi[int(r["phase"])]
        hits[i, j] += float(r["hits"])
        trials[i, j] += float(r["trials"])
    with np.errstate(invalid="ignore", divide="ignore"):
        recall = np.where(trials > 0, hits / np.where(trials > 0, trials, 1.0), np.nan)
    return vals, phases, recall


def draw_heatmap(rows, column, title=None):
    """Figure with one heatmap panel per model (rows: values of `column`, columns: phase groups)."""
    import matplotlib.pyplot as plt
    import numpy as np
    models = models_in_order(rows)
    data = [heatmap_data(rows, column, m) for m in models]
    n_vals = max(len(d[0]) for d in data)
    n_ph = max(len(d[1]) for d in data)
    width = min(4.0 + 0.45 * n_ph, 9.0)
    fig, axes = plt.subplots(1, len(models), figsize=(width * len(models), 1.6 + 0.35 * max(n_vals, 3)),
                             dpi=110, squeeze=False)
    im = None
    for ax, m, (vals, phases, recall) in zip(axes[0], models, data):
        im = ax.imshow(np.ma.masked_invalid(recall), aspect="auto", origin="lower", cmap="viridis",
                       vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_xticks(range(len(phases)), [str(p) for p in phases])
        ax.set_yticks(range(len(vals)), [_label(v) for v in vals])
        ax.set_xlabel("target phase group")
        ax.set_ylabel(column)
        ax.set_title(m, fontsize=10)
        if recall.size <= 400:
            for i in range(recall.shape[0]):
                for j in range(recall.shape[1]):
                    if np.isfinite(recall[i, j]):
                        ax.text(j, i, f"{recall[i, j]:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if recall[i, j] < 0.6 else "black")
    fig.colorbar(im, ax=list(axes[0]), label="recall", fraction=0.05, pad=0.02)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _varying_keys(rows):
    """Configuration keys that are constant within every run and differ between runs."""
    runs = {}
    for r in rows:
        runs.setdefault(r["_run"], []).append(r)
    if len(runs) < 2:
        return []
    skip = set(STANDARD_COLUMNS) | UNLABELLED
    keys = []
    for r in rows:
        for k in r:
            if k not in keys and not k.startswith("_") and k not in skip:
                keys.append(k)
    out = []
    for k in keys:
        per_run = []
        for rs in runs.values():
            vs = {str(r.get(k)) for r in rs}
            if len(vs) != 1:
                break
            per_run.append(vs.pop())
        else:
            if len(set(per_run)) > 1:
                out.append(k)
    return out


def draw_lines(rows, title=None):
    """Recall by phase group per (model, run configuration), with intervals and theory."""
    import matplotlib.pyplot as plt
    keys = _varying_keys(rows)
    series = []
    for r in rows:
        key = (r["model"],) + tuple(str(r.get(k)) for k in keys)
        if key not in series:
            series.append(key)
    fig, ax = plt.subplots(figsize=(7.0, 4.0), dpi=130)
    for i, key in enumerate(series):
        m = key[0]
        rs = [r for r in rows if (r["model"],) + tuple(str(r.get(k)) for k in keys) == key]
        rs.sort(key=lambda r: int(r["phase"]))
        ph = [int(r["phase"]) for r in rs]
        y = [float(r["recall"]) for r in rs]
        lo = [float(r["recall"]) - float(r["ci_low"]) for r in rs]
        hi = [float(r["ci_high"]) - float(r["recall"]) for r in rs]
        if len(series) == len(models_in_order(rows)):
            color, marker = MODEL_STYLE.get(m, (f"C{i}", "^"))
        else:
            color, marker = f"C{i % 10}", "os^vD<>"[i % 7]
        name = m if not keys else m + " (" + ", ".join(f"{k}={v}" for k, v in zip(keys, key[1:])) + ")"
        off = (i - (len(series) - 1) / 2) * 0.08
        ax.errorbar([p + off for p in ph], y, yerr=[lo, hi], fmt=marker + "-", color=color,
                    capsize=3, label=f"{name} (95% CI)")
        ty = [float(r["theory"]) if r.get("theory") not in (None, "", "nan", "NA") else float("nan") for r in rs]
        if any(t == t for t in ty):
            ax.plot(ph, ty, "--", color=color, alpha=0.7, label=f"{name}: theory")
    ax.set_xlabel("target phase group")
    ax.set_ylabel("recall")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 if len(series) > 4 else 8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def parse_args(argv):
    p = argparse.ArgumentParser(prog="plot.py", description="Plot per-phase recall from kvphase-sweep CSV/JSON.")
    p.add_argument("files", nargs="+", help="kvphase-sweep CSV or JSON files (and, in the older form, the output)")
    p.add_argument("--out", "-o", help="output image (.png, .pdf, .svg)")
    p.add_argument("--heatmap", metavar="COLUMN", help="draw phase × COLUMN heatmaps (context, depth, stride, ...)")
    p.add_argument("--title", help="figure title")
    a = p.parse_args(argv)
    if a.out is None:
        if len(a.files) >= 2 and a.files[-1].lower().endswith(IMAGE_SUFFIXES):
            a.out = a.files.pop()
        else:
            p.error("no output: give --out OUT.png (or the output file last)")
    return a


def main(argv):
    a = parse_args(argv[1:])
    if not have_matplotlib():
        print("plot.py: matplotlib not available (apt-get install python3-matplotlib)", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    try:
        rows = read_sweep(a.files)
        if not rows:
            raise ValueError("no data rows in " + ", ".join(a.files))
        fig = draw_heatmap(rows, a.heatmap, a.title) if a.heatmap else draw_lines(rows, a.title)
    except (OSError, ValueError, KeyError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 2
    fig.savefig(a.out)
    print(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
