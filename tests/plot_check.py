#!/usr/bin/env python3
"""Checks scripts/plot.py on kvphase-sweep files this script writes itself (run by ctest):

    plot_check.py <scripts dir> <output dir>

Writes three runs of a toy sweep that differ in context (1024 as CSV with the configuration in
the data rows, 2048 as CSV with it only in the '# config:' line, 4096 as JSON with it in
provenance.config), a CSV of two runs concatenated with cat (strides 2 and 4), and a CSV with
depth_lo/depth_hi columns; then draws the line plot and heatmaps through the command line and
checks that the figures exist and that each heatmap has one row per column value and one column
per phase group, with recall = hits / trials in every cell. Exits 77 (skipped) when matplotlib
is missing.
"""
import json
import os
import subprocess
import sys

scripts, out = sys.argv[1], sys.argv[2]
sys.path.insert(0, scripts)
from kvphase_csv import have_matplotlib, read_sweep  # noqa: E402

if not have_matplotlib():
    print("plot_check: matplotlib missing, skipped")
    sys.exit(77)

import plot  # noqa: E402

M = 8
MODELS = ("compressed", "full")
CONFIG_COLUMNS = ("preset", "chunk_window", "stride", "pool", "raw_window", "task", "context", "dim", "modulus",
                  "engine", "seed", "depth_lo", "depth_hi")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def hits_of(model, context, stride, phase):
    """Counts of a made-up run: distinct per (model, context, stride, phase), 200 trials."""
    base = 190 if model == "full" else 120 + (60 if phase % stride else 0)
    return base - context // 1024 - phase


def config(context, stride=4, depth=(0.0, 1.0)):
    return {"preset": "gated", "chunk_window": 8, "stride": stride, "pool": "slot_gate", "raw_window": 128,
            "task": "needle", "context": context, "dim": 32, "modulus": M, "engine": "key", "seed": 1,
            "depth_lo": depth[0], "depth_hi": depth[1], "operator": "spec{W=8, S=4, ...}", "threads": 2,
            "gate_bias": [3, 0, 0, 0]}


def provenance_lines(cfg):
    return [f"# kvphase 0.2.2 git test", f"# seed: {cfg['seed']}", "# shard: 0/1",
            "# config: " + json.dumps(cfg, separators=(",", ":")), "# format: kvphase-sweep/1",
            '# analysis: {"modulus":8,"period":4}']


def rows_of(cfg):
    for m in MODELS:
        for g in range(M):
            h = hits_of(m, cfg["context"], cfg["stride"], g)
            yield m, g, 200, h, h / 200.0


def write_csv(path, cfgs, columns_in_rows):
    lines = []
    for cfg in cfgs:
        lines += provenance_lines(cfg)
        head = "model,phase,trials,hits,recall,ci_low,ci_high,theory"
        if columns_in_rows:
            head += "," + ",".join(CONFIG_COLUMNS)
        lines.append(head)
        for m, g, t, h, r in rows_of(cfg):
            line = f"{m},{g},{t},{h},{r:.10f},{max(r - 0.05, 0):.10f},{min(r + 0.05, 1):.10f},{r + 0.01}"
            if columns_in_rows:
                line += "," + ",".join(str(cfg[k]) for k in CONFIG_COLUMNS)
            lines.append(line)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_json(path, cfg):
    models = []
    for m in MODELS:
        phases = [{"phase": g, "trials": t, "hits": h, "recall": r, "ci_low": max(r - 0.05, 0),
                   "ci_high": min(r + 0.05, 1)} for mm, g, t, h, r in rows_of(cfg) if mm == m]
        models.append({"model": m, "modulus": M, "trials": 200 * M, "hits": sum(p["hits"] for p in phases),
                       "phases": phases})
    doc = {"format": "kvphase-sweep/1", "provenance": {"config": cfg, "seed": 1, "shard": "0/1"},
           "analysis": {"modulus": M, "period": 4}, "models": models}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)


def run(*args):
    r = subprocess.run([sys.executable, os.path.join(scripts, "plot.py"), *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


os.makedirs(out, exist_ok=True)
p = {k: os.path.join(out, k) for k in ("c1024.csv", "c2048.csv", "c4096.json", "strides.csv", "depth.csv")}
write_csv(p["c1024.csv"], [config(1024)], columns_in_rows=True)
write_csv(p["c2048.csv"], [config(2048)], columns_in_rows=False)
write_json(p["c4096.json"], config(4096))
write_csv(p["strides.csv"], [config(1024, stride=2), config(1024, stride=4)], columns_in_rows=False)
write_csv(p["depth.csv"], [config(1024, depth=(0.0, 0.5)), config(1024, depth=(0.5, 1.0))], columns_in_rows=True)
contexts = [p["c1024.csv"], p["c2048.csv"], p["c4096.json"]]

# the reader: every run's rows carry the context, from the columns, the '# config:' line or JSON
rows = read_sweep(contexts)
check(len(rows) == 3 * len(MODELS) * M, f"read_sweep: {len(rows)} rows, expected {3 * len(MODELS) * M}")
check(sorted({r["context"] for r in rows}) == [1024, 2048, 4096], "read_sweep: contexts 1024, 2048, 4096")
check(all(r["stride"] == 4 and r["pool"] == "slot_gate" for r in rows), "read_sweep: stride and pool in every row")
check(len({r["_run"] for r in rows}) == 3, "read_sweep: three runs")
check(len({r["_run"] for r in read_sweep(p["strides.csv"])}) == 2, "read_sweep: a concatenated CSV is two runs")


def check_heatmap(files, column, values, png):
    code, text = run(*files, "--heatmap", column, "--out", png)
    check(code == 0, f"--heatmap {column}: exit {code}: {text}")
    check(os.path.isfile(png) and os.path.getsize(png) > 1000, f"--heatmap {column}: {png} written")
    rs = read_sweep(files)
    fig = plot.draw_heatmap(rs, column)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    check(len(images) == len(MODELS), f"--heatmap {column}: {len(images)} panels, expected {len(MODELS)}")
    for im in images:
        check(im.get_array().shape == (len(values), M),
              f"--heatmap {column}: panel shape {im.get_array().shape}, expected {(len(values), M)}")
    for m in MODELS:
        vals, phases, recall = plot.heatmap_data(rs, column, m)
        check(vals == values, f"--heatmap {column}: {m} rows {vals}, expected {values}")
        check(phases == list(range(M)), f"--heatmap {column}: {m} phases {phases}")
        for i, v in enumerate(vals):
            for g in phases:
                r = next(x for x in rs if x["model"] == m and plot.column_value(x, column) == v and x["phase"] == g)
                check(abs(recall[i, g] - r["hits"] / r["trials"]) < 1e-12,
                      f"--heatmap {column}: {m} {v} phase {g}: {recall[i, g]} != hits/trials")


check_heatmap(contexts, "context", [1024, 2048, 4096], os.path.join(out, "heatmap_context.png"))
check_heatmap([p["strides.csv"]], "stride", [2, 4], os.path.join(out, "heatmap_stride.png"))
check_heatmap([p["depth.csv"]], "depth", [(0.0, 0.5), (0.5, 1.0)], os.path.join(out, "heatmap_depth.png"))

# the line plot: several runs (one line per model and context), and the older form (output last)
png = os.path.join(out, "lines_contexts.png")
code, text = run(*contexts, "--out", png, "--title", "contexts")
check(code == 0 and os.path.getsize(png) > 1000, f"line plot of three runs: exit {code}: {text}")
fig = plot.draw_lines(read_sweep(contexts))
labels = fig.axes[0].get_legend_handles_labels()[1]
check(sum("(95% CI)" in s for s in labels) == 3 * len(MODELS), f"line plot: one line per model and run: {labels}")
check(any("context=2048" in s for s in labels), f"line plot: lines labelled by context: {labels}")
png = os.path.join(out, "lines_single.png")
code, text = run(p["c1024.csv"], png)
check(code == 0 and os.path.getsize(png) > 1000, f"older form plot.py FILE OUT: exit {code}: {text}")

# a column that no row or config has: exit 2 naming it
code, text = run(p["c1024.csv"], "--heatmap", "no_such_column", "--out", os.path.join(out, "bad.png"))
check(code == 2 and "no_such_column" in text, f"unknown heatmap column: exit {code}: {text}")

if failures:
    print(f"plot_check: {len(failures)} failure(s)")
    sys.exit(1)
print("plot_check: all figures written, heatmap shapes and cells as expected")
