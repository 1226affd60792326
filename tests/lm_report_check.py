#!/usr/bin/env python3
"""Checks scripts/lm_report.py on three small train_lm runs stored in tests/data/lm_runs (run by ctest):

    lm_report_check.py <scripts dir> <data dir> <output dir>

The runs (files only, no checkpoints) were written by
    train_lm --preset csa --seeds 2 --steps 40 --eval-every 10 --ablate --readout ...
    train_lm --preset full --seeds 1 --steps 60 --eval-every 10 --stop-recall 0.13 ...
both with --context 32 --pairs 4 --queries 4 --keys 8 --values 8 --gap 4 --modulus 32 --eval 128.
Checks, against numbers recomputed here from the files:
- every run's row gives its mean recall, sum(hits) / sum(trials), and the stopped run is labelled
  with the step it stopped at;
- --mitigation marks a run learned exactly when eval loss + 5 SE < ln(values), and counts per
  preset and step count the runs whose worst phase ends at recall >= --phase-floor (three floors),
  with an exact interval whose bounds solve the binomial tail equations and Fisher's p by
  enumeration of the tables (both functions also on textbook values);
- --readout gives, per layer, head, phase and outcome, the query-weighted means of lm_readout.csv
  (recomputed here), and refuses (exit 2) runs without that file;
- the gate-stability table's last-step slot weights equal lm_history.csv's;
- --figs writes the four figures (when matplotlib is present);
- bad options and bad files exit 2 with a message naming the option or the file;
- the gates-and-heads table of a run with two per-head grids (tests/data/lm_runs/heads, written by
  train_lm --preset shifted-heads --seeds 1 --steps 60 --eval-every 20 --ablate --eval 256 and the
  data flags above): recall by slot with the other head knocked out, the gate weight on the pair's
  two slots, Spearman's rho and its exact permutation p, all recomputed here;
- a seeded mutation fuzz of the files (JSON values replaced, CSV bytes flipped, cut or inserted),
  of the csa run and of the per-head-grid run: lm_report either reports (exit 0) or refuses
  (exit 2), never a traceback.
Exits 77 (skipped) when numpy is missing.
"""
import contextlib
import copy
import csv
import io
import json
import math
import os
import random
import shutil
import subprocess
import sys

scripts, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    import numpy  # noqa: F401
except ImportError:
    print("lm_report_check: numpy missing, skipped")
    sys.exit(77)
sys.path.insert(0, scripts)
import lm_report  # noqa: E402

report = os.path.join(scripts, "lm_report.py")
runs = [os.path.join(data, "csa"), os.path.join(data, "full_stop")]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args):
    p = subprocess.run([sys.executable, report, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


# ---- tables: mean recall and the stop label, from the files ----
rc, text, err = run(*runs, "--permutations", "199", "--edges")
check(rc == 0, f"default tables exit 0 (got {rc}: {err})")
rows = [ln for ln in text.splitlines() if ln.startswith("| ")]
for d in runs:
    summary = json.load(open(os.path.join(d, "lm_summary.json")))
    for r in summary["runs"]:
        m = sum(r["hits"]) / sum(r["trials"])
        label = r["preset"]
        if r["steps_trained"] < r["train"]["steps"]:
            label += f" (stopped at step {r['steps_trained']} of {r['train']['steps']})"
        row = [x for x in rows if x.startswith(f"| {label} | {r['seed']} | ")]
        check(len(row) >= 1, f"a row for {label} seed {r['seed']}")
        if row:
            check(f"{m:.4f} [" in row[0], f"{label} seed {r['seed']}: mean recall {m:.4f} in {row[0][:80]}")
check(any(x.startswith("| full (stopped at step 20 of 60) | 1 |") for x in rows), "the stopped full run's label")
check(any(x.startswith("| csa | 2 | ") for x in rows), "the per-preset row of csa over 2 seeds")

# ---- --fold: the ablation tables folded mod F; the gate-stability table beside them ----
rc, text, err = run(runs[0], "--permutations", "199", "--fold", "4")
check(rc == 0, f"--fold 4 exits 0 (got {rc}: {err})")
check("(recall folded mod 4;" in text, "--fold 4 folds the ablation tables mod 4")
abl = [ln for ln in text.splitlines() if ln.startswith("| layer ")]
check(abl and all(len(ln.split("|")[3].split()) == 4 for ln in abl), "--fold 4: four recalls per ablation row")
check("Gate slot profiles over the last half of training" in text, "the gate-stability table is printed")
# its last column: each slot's weight at the last step. The stored runs' gates hardly leave 1/4 in
# 40 steps, so a copy gets distinct weights per (seed, layer, slot) at every step first.
gw = os.path.join(out, "gate_weights")
shutil.rmtree(gw, ignore_errors=True)
shutil.copytree(runs[0], gw)
hp = os.path.join(gw, "lm_history.csv")
lines = open(hp).read().splitlines(keepends=True)
head = [ln for ln in lines if ln.startswith("#")]
rd = list(csv.DictReader(ln for ln in lines if not ln.startswith("#")))
for x in rd:
    if x["slot"] != "":
        x["slot_weight"] = f"{0.1 + 0.01 * int(x['slot']) + 0.2 * int(x['layer']) + 0.05 * int(x['seed']) + 1e-3 * int(x['step']):.6f}"
buf = io.StringIO()
wr = csv.DictWriter(buf, fieldnames=list(rd[0].keys()), lineterminator="\n")
wr.writeheader()
wr.writerows(rd)
open(hp, "w").write("".join(head) + buf.getvalue())
rc, text, err = run(gw, "--permutations", "19")
check(rc == 0, f"the copy with distinct gate weights exits 0 (got {rc}: {err})")
h0 = [x for x in rd if x["slot"] != ""]
comps0 = sorted({(x["seed"], x["layer"], x.get("head", "all")) for x in h0})
check(len(comps0) >= 2, "the stored csa run has gate profiles")
for x0 in comps0:
    mine = [x for x in h0 if (x["seed"], x["layer"], x.get("head", "all")) == x0]
    last = max(int(x["step"]) for x in mine)
    want_w = " ".join(f"{float(x['slot_weight']):.3f}"
                      for x in sorted((x for x in mine if int(x["step"]) == last), key=lambda x: int(x["slot"])))
    row = [ln for ln in text.splitlines() if ln.startswith(f"| csa seed {x0[0]} | {x0[1]} | {x0[2]} | ")]
    check(len(row) == 1 and row[0].rstrip(" |").split("|")[-1].strip() == want_w,
          f"gate stability, seed {x0[0]} layer {x0[1]}: last-step weights {want_w} (row {row})")

# ---- --readout: query-weighted means over the groups of a phase, from lm_readout.csv ----
rc, text, err = run(runs[0], "--readout", "--phase-mod", "4")
check(rc == 0, f"--readout exits 0 (got {rc}: {err})")
ro = list(csv.DictReader(ln for ln in open(os.path.join(runs[0], "lm_readout.csv")) if not ln.startswith("#")))
check(len(ro) > 0, "the stored csa run has readout rows")
want = {}
for x in ro:
    k = (x["seed"], x["layer"], x["head"], int(x["group"]) % 4, x["outcome"])
    a = want.setdefault(k, [0, 0.0, 0.0, 0])
    n = int(x["queries"])
    a[0] += n
    a[1] += n * float(x["key_mass"])
    a[2] += n * float(x["pair_mass"])
    a[3] += int(x["top_pair"])
blocks = text.split("**Attention readout: ")
for k, a in want.items():
    seed, layer, head, phase, outcome = k
    blk = [b for b in blocks if b.startswith(f"csa seed {seed}**")]
    row = [ln for b in blk for ln in b.splitlines() if ln.startswith(f"| {layer} | csa | {head} | {phase} | {outcome} | ")]
    check(len(row) == 1, f"one readout row for seed {seed} layer {layer} head {head} phase {phase} {outcome}")
    if row:
        cells = [c.strip() for c in row[0].split("|")[1:-1]]
        check(int(cells[5]) == a[0], f"readout {k}: queries {a[0]} (row {cells[5]})")
        check(cells[6] == f"{a[1] / a[0]:.3f}", f"readout {k}: key mass {a[1] / a[0]:.3f} (row {cells[6]})")
        check(cells[8] == f"{a[2] / a[0]:.3f}", f"readout {k}: pair mass {a[2] / a[0]:.3f} (row {cells[8]})")
        check(cells[9] == f"{a[3] / a[0]:.2f}", f"readout {k}: top-pair share {a[3] / a[0]:.2f} (row {cells[9]})")
rc, text, err = run(runs[1], "--readout")
check(rc == 2 and "lm_readout.csv" in err, f"--readout without lm_readout.csv exits 2 naming the file (got {rc}: {err})")

# ---- gates and heads: a run with two per-head grids, recomputed from its files ----
heads = os.path.join(data, "heads")
rc, text, err = run(heads, "--permutations", "199")
check(rc == 0, f"the per-head-grid run's tables exit 0 (got {rc}: {err})")
hs = json.load(open(os.path.join(heads, "lm_summary.json")))["runs"][0]
hm = hs["model"]
S, Sh = hm["stride"], 2 * hm["stride"]
nl = len(hm["schedule"].split(","))
hist = [x for x in csv.DictReader(ln for ln in open(os.path.join(heads, "lm_history.csv")) if not ln.startswith("#"))
        if x["slot"] != ""]
abl = list(csv.DictReader(ln for ln in open(os.path.join(heads, "lm_ablation.csv")) if not ln.startswith("#")))
last = max(int(x["step"]) for x in hist)


def avg_ranks(v):
    pos = {}
    for i, x in enumerate(sorted(v)):
        pos.setdefault(x, []).append(i)
    return [sum(pos[x]) / len(pos[x]) for x in v]


def rho_of(x, y):
    import numpy as np
    return float(np.corrcoef(avg_ranks(x), avg_ranks(y))[0, 1])


check("\nGates and heads (" in text, "the gates-and-heads table is printed")
linked = [ln for ln in text.split("\nGates and heads (", 1)[-1].splitlines()
          if ln.startswith(f"| {hs['preset']} seed {hs['seed']} | ") and ln.count("|") == 9]
check(len(linked) == 2 * nl, f"one gates-and-heads row per layer and head ({2 * nl}; got {len(linked)})")
for l in range(nl):
    origin0 = (hm["origin"] + (l * S // nl if hm["shift_layers"] else 0)) % S
    for g in (0, 1):
        w = [0.0] * Sh
        for x in hist:
            if int(x["step"]) == last and int(x["layer"]) == l and x["head"] == str(g):
                w[int(x["slot"])] = float(x["slot_weight"])
        h, t = [0] * Sh, [0] * Sh
        for x in abl:
            if int(x["layer"]) == l and x["head"] == str(1 - g):
                k = (int(x["group"]) - origin0 - g * S) % Sh
                h[k] += int(x["hits"])
                t[k] += int(x["trials"])
        ks = [k for k in range(Sh - 1) if t[k]]
        pw = [w[k] + w[k + 1] for k in ks]
        rec = [h[k] / t[k] for k in ks]
        rho = rho_of(pw, rec)
        import itertools
        perms = list(itertools.permutations(rec))
        pv = sum(rho_of(pw, q) >= rho - 1e-12 for q in perms) / len(perms)
        row = [ln for ln in linked if ln.startswith(f"| {hs['preset']} seed {hs['seed']} | {l} | {g} | ")]
        check(len(row) == 1, f"a gates-and-heads row for layer {l} head {g}")
        if row:
            cells = [c.strip() for c in row[0].split("|")[1:-1]]
            check(cells[3] == " ".join(f"{v:.3f}" for v in pw), f"layer {l} head {g}: pair weights {pw} (row {cells[3]})")
            check(cells[4] == " ".join(f"{v:.3f}" for v in rec), f"layer {l} head {g}: recall by slot {rec} (row {cells[4]})")
            check(cells[5] == f"{h[Sh - 1] / t[Sh - 1]:.3f}", f"layer {l} head {g}: split-slot recall (row {cells[5]})")
            check(cells[6] == f"{rho:.3f}", f"layer {l} head {g}: rho {rho:.3f} (row {cells[6]})")
            check(cells[7] == lm_report.fmt_p(pv), f"layer {l} head {g}: p {pv} (row {cells[7]})")
rc, text, err = run(runs[0], "--permutations", "19")
check("Gates and heads" not in text, "no gates-and-heads table for a run with one grid per layer")

# ---- --mitigation: learned iff eval loss + 5 SE < ln(values) ----
rc, text, err = run(*runs, "--mitigation", "--permutations", "199")
check(rc == 0, f"--mitigation exits 0 (got {rc}: {err})")
for d in runs:
    summary = json.load(open(os.path.join(d, "lm_summary.json")))
    values = summary["provenance"]["config"]["data"]["values"]
    for r in summary["runs"]:
        learned = r["eval_loss"] + 5 * r["eval_loss_se"] < math.log(values)
        row = [x for x in text.splitlines() if x.startswith(f"| {r['preset']}") and f" | {r['seed']} | " in x
               and "eval loss by step" not in x]
        check(bool(row), f"a mitigation row for {r['preset']} seed {r['seed']}")
        if row:
            check((" | yes | " in row[0]) == learned, f"{r['preset']} seed {r['seed']}: learned = {learned} in {row[0][:90]}")

# ---- --mitigation: every phase learned (worst phase >= --phase-floor), exact interval, Fisher p ----
def binom_tail_ge(k, n, q):
    return sum(math.comb(n, i) * q ** i * (1 - q) ** (n - i) for i in range(k, n + 1))


def fisher_enumerated(k1, n1, k2, n2):
    """Two-sided Fisher p by enumerating every 2 x 2 table with the observed margins."""
    K = k1 + k2
    tables = [(x, math.comb(n1, x) * math.comb(n2, K - x)) for x in range(0, n1 + 1) if 0 <= K - x <= n2]
    total = sum(w for _, w in tables)
    obs = dict(tables)[k1]
    return sum(w for _, w in tables if w <= obs) / total


# the functions on textbook values: Clopper-Pearson 3 / 6 = [0.1181, 0.8819], 0 / 6 upper
# 1 - 0.025^(1/6); Fisher 6/6 vs 0/6 = 2 / 924, 1/6 vs 5/6 = 0.0801
check(all(abs(a - b) < 1e-4 for a, b in zip(lm_report.clopper_pearson(3, 6), (0.1181, 0.8819))), "Clopper-Pearson 3 / 6")
check(abs(lm_report.clopper_pearson(0, 6)[1] - (1 - 0.025 ** (1 / 6))) < 1e-9, "Clopper-Pearson 0 / 6")
check(abs(lm_report.fisher_exact(6, 6, 0, 6) - 2 / 924) < 1e-12, "Fisher 6/6 vs 0/6")
check(abs(lm_report.fisher_exact(1, 6, 5, 6) - fisher_enumerated(1, 6, 5, 6)) < 1e-12, "Fisher 1/6 vs 5/6")
# a copy of the csa run as another preset whose runs answer every query: a second preset at the
# same step count, so that its Fisher p (2 of 2 against 0 of 2 at floor 0.5: 1/3) is recomputed
other = os.path.join(out, "other")
shutil.rmtree(other, ignore_errors=True)
shutil.copytree(runs[0], other)
s_other = json.load(open(os.path.join(other, "lm_summary.json")))
for r in s_other["runs"]:
    r["preset"] = "other"
    r["hits"] = list(r["trials"])
json.dump(s_other, open(os.path.join(other, "lm_summary.json"), "w"))
s_csa = json.load(open(os.path.join(runs[0], "lm_summary.json")))["runs"][0]
exact = min(sum(s_csa["hits"][c::4]) / sum(s_csa["trials"][c::4]) for c in range(4))
for floor in (0.01, 0.5, 1.0, exact):  # the last: a worst phase exactly at the floor counts
    rc, text, err = run(*runs, other, "--mitigation", "--permutations", "19", "--phase-floor", repr(floor))
    check(rc == 0, f"--phase-floor {floor}: exits 0 (got {rc}: {err})")
    rows = text.split("\nEvery phase learned", 1)[-1].splitlines()
    groups = {}
    for d in runs + [other]:
        summary = json.load(open(os.path.join(d, "lm_summary.json")))
        for r in summary["runs"]:
            h, t = r["hits"], r["trials"]
            worst = min(sum(h[c::4]) / sum(t[c::4]) for c in range(4) if sum(t[c::4]) > 0)
            groups.setdefault((r["preset"], r.get("steps_trained", r["train"]["steps"])), []).append((r["seed"], worst))
    firsts = {}
    for (preset, steps), g in groups.items():
        firsts.setdefault(steps, g)
        n, k = len(g), sum(1 for _, w in g if w >= floor)
        row = [x for x in rows if x.startswith(f"| {preset} | {steps} | ")]
        check(len(row) == 1, f"--phase-floor {floor}: one row for {preset} at {steps} steps")
        if not row:
            continue
        cells = [c.strip() for c in row[0].strip("|").split("|")]
        check(cells[2] == str(n) and cells[3] == str(k), f"--phase-floor {floor}: {preset} {k} of {n} (row {row[0]})")
        lo, hi = (float(v) for v in cells[4].split("[")[1].rstrip("]").split(","))
        # the printed bounds solve the tail equations of the exact interval (to their 3 decimals)
        if k > 0:
            check(binom_tail_ge(k, n, lo - 5e-4) <= 0.025 <= binom_tail_ge(k, n, lo + 5e-4), f"{preset}: lower bound {lo}")
        else:
            check(lo == 0.0, f"{preset}: lower bound 0 at k = 0")
        if k < n:
            check(1 - binom_tail_ge(k + 1, n, hi + 5e-4) <= 0.025 <= 1 - binom_tail_ge(k + 1, n, hi - 5e-4),
                  f"{preset}: upper bound {hi}")
        ref = firsts[steps]
        if ref is not g:
            k0 = sum(1 for _, w in ref if w >= floor)
            check(cells[5].startswith(f"{fisher_enumerated(k, n, k0, len(ref)):.3f}"), f"{preset}: Fisher p (row {cells[5]})")
        per = " ".join(f"{seed}: {w:.3f}" for seed, w in sorted(g))
        check(cells[6] == per, f"{preset}: worst-phase recall per seed {per} (row {cells[6]})")

# ---- figures ----
figs = os.path.join(out, "figs")
shutil.rmtree(figs, ignore_errors=True)
try:
    import matplotlib  # noqa: F401
    have_mpl = True
except ImportError:
    have_mpl = False
if have_mpl:
    rc, text, err = run(*runs, "--permutations", "19", "--figs", figs)
    check(rc == 0, f"--figs exits 0 (got {rc}: {err})")
    for f in ("lm_phase.png", "lm_curves.png", "lm_gates.png", "lm_ablation.png"):
        p = os.path.join(figs, f)
        check(os.path.exists(p) and os.path.getsize(p) > 1000, f"figure {f} written")

# ---- bad options and files: exit 2, naming the option or the file ----
os.makedirs(out, exist_ok=True)
bad = os.path.join(out, "bad")


def bad_copy(edit_summary=None, summary_text=None):
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(runs[0], bad)
    p = os.path.join(bad, "lm_summary.json")
    if summary_text is not None:
        open(p, "w").write(summary_text)
    elif edit_summary is not None:
        s = json.load(open(p))
        edit_summary(s)
        json.dump(s, open(p, "w"))
    return bad


def hits_above_trials(s):
    s["runs"][0]["hits"][3] = s["runs"][0]["trials"][3] + 1


for name, args, expect in [
    ("permutations 0", [runs[0], "--permutations", "0"], "--permutations"),
    ("permutations text", [runs[0], "--permutations", "x"], "--permutations"),
    ("drop text", [runs[0], "--drop", "a,b"], "--drop"),
    ("fold 0", [runs[0], "--fold", "0"], "--fold"),
    ("phase floor 0", [runs[0], "--mitigation", "--phase-floor", "0"], "--phase-floor"),
    ("phase floor above 1", [runs[0], "--mitigation", "--phase-floor", "1.5"], "--phase-floor"),
    ("phase floor text", [runs[0], "--mitigation", "--phase-floor", "x"], "--phase-floor"),
    ("phase floor without --mitigation", [runs[0], "--phase-floor", "0.5"], "--phase-floor"),
    ("unknown option", [runs[0], "--nothing"], "--nothing"),
    ("no run", [], "RUN_DIR"),
    ("missing dir", [os.path.join(out, "no_such_run")], "no_such_run: is not a directory"),
    ("not JSON", [bad_copy(summary_text="{ not json")], "lm_summary.json: is not JSON"),
]:
    rc, text, err = run(*args)
    check(rc == 2 and expect in err, f"{name}: exit 2 naming '{expect}' (got {rc}: {err.strip()[-200:]})")
rc, text, err = run(bad_copy(edit_summary=hits_above_trials))
check(rc == 2 and "lm_summary.json" in err and "0 <= hits <= trials" in err,
      f"hits above trials: exit 2 naming the file and the rule (got {rc}: {err.strip()})")

# ---- mutation fuzz: report or refuse, never a traceback ----
junk = [None, -1, 0, 1, 2.5, 1e308, float("nan"), "", "x", True, [], {}, [1, 2], {"a": 1}, 10 ** 30]


def paths(v, prefix=()):
    yield prefix
    if isinstance(v, dict):
        for k, x in v.items():
            yield from paths(x, prefix + (k,))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from paths(x, prefix + (i,))


def fuzz(src, n, modes, seed):
    """n seeded mutations of the run in src, each reported by lm_report with one of `modes` (extra
    flags, in turn): every case must exit 0 or 2, and at least a quarter must reach the tables."""
    rng = random.Random(seed)
    base = {f: open(os.path.join(src, f), "rb").read() for f in os.listdir(src)}
    summary0 = json.loads(base["lm_summary.json"])
    all_paths = [p for p in paths(summary0) if p]
    outcomes = {}
    for i in range(n):
        files = dict(base)
        kind = rng.randrange(3)
        if kind == 0:  # a JSON value replaced by one of another type or range
            s = copy.deepcopy(summary0)
            p = rng.choice(all_paths)
            tgt = s
            for k in p[:-1]:
                tgt = tgt[k]
            tgt[p[-1]] = rng.choice(junk)
            files["lm_summary.json"] = json.dumps(s, allow_nan=True).encode()
            what = f"summary {p} -> {tgt[p[-1]]!r}"
        else:  # bytes of one CSV (or the JSON) flipped, cut or inserted
            f = rng.choice(sorted(files))
            b = bytearray(files[f])
            for _ in range(rng.randint(1, 4)):
                j = rng.randrange(len(b))
                op = rng.randrange(3)
                if op == 0:
                    b[j] = rng.randrange(256)
                elif op == 1:
                    del b[j:j + rng.randint(1, 64)]
                else:
                    b[j:j] = rng.choice([b",", b"\n", b"-", b"nan", b"\"", b"9999999", b"#"])
            files[f] = bytes(b)
            what = f"bytes of {f}"
        d = os.path.join(out, "fuzz")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for f, b in files.items():
            open(os.path.join(d, f), "wb").write(b)
        args = ["lm_report.py", d, "--permutations", "9"] + modes[i % len(modes)]
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                rc = lm_report.main(args)
        except SystemExit as e:
            rc = e.code
        except Exception as e:  # a traceback: the defect this fuzz looks for
            rc = f"{type(e).__name__}: {e}"
        check(rc in (0, 2), f"fuzz case {i} of {os.path.basename(src)} ({what}): exit 0 or 2, got {rc}")
        outcomes[rc if rc in (0, 2) else "other"] = outcomes.get(rc if rc in (0, 2) else "other", 0) + 1
    print(f"lm_report_check: {n} fuzz cases of {os.path.basename(src)}: {outcomes.get(0, 0)} reported, "
          f"{outcomes.get(2, 0)} refused")
    # most mutations leave a readable file: the fuzz must reach the tables, not stop at the loader
    check(outcomes.get(0, 0) >= n // 4, f"at least a quarter of the fuzz cases of {os.path.basename(src)} reach the tables")


fuzz(runs[0], 1000, [["--edges"], ["--mitigation"], ["--readout"]], 1)
fuzz(heads, 300, [[]], 2)  # the gates-and-heads table (default tables of a per-head-grid run)

if failures:
    print(f"lm_report_check: {len(failures)} failures")
    sys.exit(1)
print("lm_report_check: all checks passed")
