#!/usr/bin/env python3
"""Tables and figures for the controlled pretraining runs (examples/torch/train_lm.cpp).

    scripts/lm_report.py RUN_DIR [RUN_DIR ...] [--figs FIG_DIR] [--permutations B] [--drop G,G,...] [--edges] [--fold F]
    scripts/lm_report.py RUN_DIR [RUN_DIR ...] --mitigation [--phase-mod P] [--phase-floor R] [--drop G,G,...] [--figs FIG_DIR]

Each RUN_DIR is a `train_lm --out` directory (lm_phase.csv, lm_summary.json, lm_history.csv,
optionally lm_ablation.csv). Prints, as Markdown:
- one row per run: mean recall with its 95 % Wilson interval (all queries pooled), eval loss,
  train_lm's own period_p and uniformity_p, and nested period tests on the per-group counts;
- one row per preset: the mean over seeds of the mean recall with a 95 % t interval over seeds,
  and the nested period tests on the counts pooled over seeds (folded mod 8), the phase labels
  permuted within each seed.
`uniformity_p` is train_lm's test over its `--modulus` groups; X2(P) p tests unequal recall over
the P classes of key position mod P (the same for any modulus divisible by P; X2(S) is train_lm's
period-S test, with other permutations). Recall per group is shown folded mod 8.
Nested period tests: X2(P) is Pearson's X^2 of the hits on the table folded mod P (the statistic
of the harmonic score test of stats/periodicity.hpp, so X2(S) is train_lm's period test). For
P = 2, 4, 8 dividing the modulus, `P|P/2` tests whether phase mod P explains more than phase
mod P/2 does: statistic X2(P) - X2(P/2), permutation reference (group sizes and total hits
fixed, B permutations, seed 1). A run whose recall has period S shows `S|S/2` small and `2S|S`
large. The permutation p is (1 + #{T* >= T}) / (B + 1).
--drop G,...: leave the queries of those groups out of every test and mean (a sensitivity check,
e.g. the last key position of the context with --modulus = context; runs whose modulus is too
small are left unchanged and flagged "drop n/a"; train_lm's period_p and uniformity_p, which saw
every group, are then shown as "-").
A run ended early by train_lm --stop-recall is labelled "(stopped at step N of M)".
--fold F: fold the ablation tables mod F instead of 8 (e.g. 16 for per-head grids of stride 16,
whose heads split pairs at different positions mod 16 but the same mod 8); the gate slot profiles'
stability over the last half of training is printed after them. For a run with two per-head
grids (train_lm's shift_heads, 2 heads, W = S) that has head ablations and gate profiles (a
`train_lm --load … --ablate` directory has the loaded model's profiles at step 0), a last table
links heads, gates and phases: per layer and head g, with the other head knocked out, g's recall
by the slot of its own grid that holds the pair's key, against g's gate weight on the pair's two
slots; Spearman's rho over the slots and its one-sided permutation p (exact up to 7 slots).
--edges: for runs with at least 16 groups, the misses at the last three key positions that have
queries and at all the others.
With --figs: lm_phase.png (recall per phase group, every run), lm_curves.png (eval loss and
eval recall by training step, a column per preset, a line per run), lm_gates.png (gate slot profile
of each compressed layer over training, first run with profiles), lm_ablation.png (recall drop
per knocked-out head or layer by key position mod 8, first run with lm_ablation.csv).
--mitigation: instead of the tables above, the mitigation comparison. Phase = key position mod
P (--phase-mod, default 4 = the stride of the mitigation presets). Per run: whether it learned
(eval loss + 5 standard errors below ln(values), the loss of a model that ignores the context),
its eval-loss curve (lm_history.csv), mean recall [95 % Wilson], the worst phase with its recall
[95 % Wilson], the gap max - min phase recall with a 95 % parametric-bootstrap percentile
interval (hits per phase redrawn from Binomial(n, observed recall), B draws, seed 1; the
observed gap of equal true recalls is > 0, so the lower end is the informative one), and X2(P) p
(unequal recall over the P phases, permutation). Per preset: the mean over seeds of the mean
recall, worst-phase recall and gap with 95 % t intervals over seeds, and the same three on the
counts pooled over seeds (X2(P) p with labels permuted within each seed). A run that did not
learn is listed with its curve and left out of the per-preset rows. Last, how often each preset
learns every phase: per preset and number of training steps, the runs whose worst phase ends at
recall >= R (--phase-floor, default 0.5; a split pair that is never learned leaves its phase near
the share of queries it can answer without it), their share with its exact 95 % Clopper-Pearson
interval, and Fisher's exact two-sided p against the first preset listed with as many steps.
--readout: instead, for runs made with train_lm --readout, where the queries' attention goes:
per layer, head, phase (key position mod --phase-mod) and outcome (hit or miss), the mean
attention mass on the rows (compressed entries or raw tokens) holding the pair's key token, its
value token and both, and the shares of queries whose largest-weight row holds both, the key
only, the value only or neither (lm_readout.csv; --drop applies).
Needs numpy; matplotlib only for --figs (re-runs under /usr/bin/python3 when needed).
"""
import json
import math
import os
import sys

from kvphase_csv import have_matplotlib, read_rows


def wilson(h, n, z=1.959964):
    if n == 0:
        return (0.0, 1.0)
    p = h / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    r = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - r), min(1.0, c + r))


def folded_x2(hits, trials, P):
    """Pearson X^2 of the hits on the table folded mod P (0 when recall is all 0 or all 1)."""
    import numpy as np
    hits = np.asarray(hits, dtype=float)
    trials = np.asarray(trials, dtype=float)
    N, Y = trials.sum(), hits.sum(axis=-1)
    pbar = Y / N
    v = pbar * (1 - pbar)
    M = trials.shape[-1]
    t = 0.0
    for c in range(P):
        n_c = trials[c:M:P].sum()
        if n_c == 0:
            continue
        y_c = hits[..., c:M:P].sum(axis=-1)
        t = t + (y_c - n_c * pbar) ** 2 / n_c
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(v > 0, t / np.where(v > 0, v, 1), 0.0)


def nested_tests(hits, trials, B=9999, seed=1, strata=None):
    """{P: (X2(P), p of X2(P), p of P|P/2)} for P = 2, 4, 8, 16 dividing the modulus (2|1 is X2(2)).
    strata: optional list of (hits, trials) whose sums are hits, trials (e.g. seeds); the labels
    are then permuted within each stratum and the permuted counts summed."""
    import numpy as np
    M = len(trials)
    periods = [P for P in (2, 4, 8, 16) if M % P == 0]
    rng = np.random.default_rng(seed)
    if strata is None:
        strata = [(hits, trials)]
    perm = sum(rng.multivariate_hypergeometric(np.asarray(t, dtype=np.int64), int(sum(h)), size=B) for h, t in strata)
    out = {}
    prev_obs, prev_perm = 0.0, np.zeros(B)
    for P in periods:
        obs = float(folded_x2(hits, trials, P))
        pp = folded_x2(perm, trials, P)
        d_obs, d_perm = obs - prev_obs, pp - prev_perm
        tol = 1e-9 * max(1.0, abs(obs))
        p_tot = (1 + int(np.sum(pp >= obs - tol))) / (B + 1)
        p_inc = (1 + int(np.sum(d_perm >= d_obs - tol))) / (B + 1)
        out[P] = (obs, p_tot, p_inc)
        prev_obs, prev_perm = obs, pp
    return out


def load_run(d):
    summary = json.load(open(os.path.join(d, "lm_summary.json")))
    phase = read_rows(os.path.join(d, "lm_phase.csv"))
    hist = read_rows(os.path.join(d, "lm_history.csv")) if os.path.exists(os.path.join(d, "lm_history.csv")) else []
    abl = os.path.join(d, "lm_ablation.csv")
    abl = read_rows(abl) if os.path.exists(abl) else []
    ro = os.path.join(d, "lm_readout.csv")
    ro = read_rows(ro) if os.path.exists(ro) else []
    runs = []
    for r in summary["runs"]:
        key = (r["preset"], str(r["seed"]))
        runs.append({
            "dir": d, "preset": r["preset"], "seed": int(r["seed"]), "summary": r,
            "values": int(summary["provenance"]["config"]["data"]["values"]),
            "model": r["model"],
            "phase": [x for x in phase if (x["preset"], x["seed"]) == key],
            "history": [x for x in hist if (x["preset"], x["seed"]) == key],
            "ablation": [x for x in abl if (x["preset"], x["seed"]) == key],
            "readout": [x for x in ro if (x["preset"], x["seed"]) == key],
        })
    return runs


def stopped(r):
    """' (stopped at step N of M)' for a run ended by train_lm --stop-recall, else ''."""
    s = r["summary"]
    n, m = s.get("steps_trained"), s.get("train", {}).get("steps")
    return f" (stopped at step {n} of {m})" if n is not None and m is not None and n < m else ""


def fmt_p(p):
    return f"{p:.2g}" if p < 0.001 else f"{p:.3f}"


def tables(runs, B, drop=()):
    print("| preset | seed | mean recall [95 % Wilson] | eval loss | period S | period_p | uniformity_p | "
          "X2(2) p | X2(4) p | X2(8) p | 4\\|2 p | 8\\|4 p | recall per group (mod 8) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    by_preset = {}
    for r in runs:
        s = r["summary"]
        h, t = list(s["hits"]), list(s["trials"])
        note = ""
        if drop:
            if all(g < len(t) for g in drop):
                for g in drop:
                    h[g], t[g] = 0, 0
                note = f" (without groups {','.join(map(str, drop))})"
            else:
                note = " (drop n/a)"
        H, T = sum(h), sum(t)
        lo, hi = wilson(H, T)
        nt = nested_tests(h, t, B)
        h8 = [sum(h[g::8]) for g in range(8)] if len(h) % 8 == 0 else h
        t8 = [sum(t[g::8]) for g in range(8)] if len(t) % 8 == 0 else t
        per = " ".join(f"{(a / b if b else 0):.3f}" for a, b in zip(h8, t8))
        S = r["model"]["stride"] if r["model"]["schedule"].split(",")[0] != "full" else "-"
        pp = fmt_p(s["period_p"]) if s.get("period") else "-"
        up = fmt_p(s["uniformity_p"])
        if note and note != " (drop n/a)":
            pp = up = "-"  # train_lm's tests saw every group
        cells = [fmt_p(nt[P][1]) if P in nt else "-" for P in (2, 4, 8)] + [fmt_p(nt[P][2]) if P in nt else "-" for P in (4, 8)]
        print(f"| {r['preset']}{stopped(r)}{note} | {r['seed']} | {H / T:.4f} [{lo:.4f}, {hi:.4f}] | {s['eval_loss']:.3f} | {S} | {pp} | "
              f"{up} | {' | '.join(cells)} | {per} |")
        by_preset.setdefault(r["preset"], []).append((H / T, h8, t8))
    print()
    tq = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}
    print("| preset | seeds | mean of mean recall | 95 % t interval over seeds | min | max | "
          "pooled X2(2) p | X2(4) p | X2(8) p | 4\\|2 p | 8\\|4 p | pooled recall per group (mod 8) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for p, rows in by_preset.items():
        v = [x[0] for x in rows]
        m = sum(v) / len(v)
        if len(v) > 1:
            sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
            w = tq.get(len(v) - 1, 1.96) * sd / math.sqrt(len(v))
            ci = f"[{m - w:.4f}, {min(1.0, m + w):.4f}]"
        else:
            ci = "-"
        strata = [(x[1], x[2]) for x in rows if len(x[2]) == 8]
        if len(strata) == len(rows):
            hp = [sum(x[0][g] for x in strata) for g in range(8)]
            tp = [sum(x[1][g] for x in strata) for g in range(8)]
            nt = nested_tests(hp, tp, B, strata=strata)
            cells = [fmt_p(nt[2][1]), fmt_p(nt[4][1]), fmt_p(nt[8][1]), fmt_p(nt[4][2]), fmt_p(nt[8][2]),
                     " ".join(f"{a / b:.3f}" if b else "-" for a, b in zip(hp, tp))]
        else:
            cells = ["-"] * 6
        print(f"| {p} | {len(v)} | {m:.4f} | {ci} | {min(v):.4f} | {max(v):.4f} | {' | '.join(cells)} |")


def edge_table(runs):
    """Runs with at least 16 groups: misses at the last three key positions that have queries
    (with --modulus = context these are the last positions of the context) and elsewhere."""
    rs = [r for r in runs if len(r["summary"]["trials"]) >= 16]
    if not rs:
        return
    print("\n| preset | seed | misses | at the other positions | at the last three key positions (position: misses/queries) |")
    print("|---|---|---|---|---|")
    for r in rs:
        h, t = r["summary"]["hits"], r["summary"]["trials"]
        full = [g for g in range(len(t)) if t[g] > 0]
        last = full[-3:]
        miss = [t[g] - h[g] for g in range(len(t))]
        other = sum(miss[g] for g in full if g not in last)
        cells = ", ".join(f"{g}: {miss[g]}/{t[g]}" for g in last)
        print(f"| {r['preset']} | {r['seed']} | {sum(miss)} | {other} | {cells} |")


def ablation_tables(runs, B, fold=8):
    """Per knocked-out component: mean recall, recall per key position mod `fold` (mod the
    run's modulus when `fold` does not divide it), and the period-S test of the ablated counts."""
    for r in [x for x in runs if x["ablation"]]:
        M = len(r["summary"]["trials"])
        F = fold if M % fold == 0 else M
        S = r["model"]["stride"]
        print(f"\nAblation, {r['preset']} seed {r['seed']} (recall folded mod {F}; drop = intact - ablated):\n")
        print(f"| knocked out | mean recall | recall per group (mod {F}) | largest drop at | period-{S} p |")
        print("|---|---|---|---|---|")
        comps = []
        for x in r["ablation"]:
            if (x["layer"], x["head"]) not in comps:
                comps.append((x["layer"], x["head"]))
        bh = [sum(r["summary"]["hits"][g::F]) for g in range(F)]
        bt = [sum(r["summary"]["trials"][g::F]) for g in range(F)]
        rows = [("none", bh, bt)]
        for c in comps:
            xs = [x for x in r["ablation"] if (x["layer"], x["head"]) == c]
            h = [sum(int(x["hits"]) for x in xs if int(x["group"]) % F == g) for g in range(F)]
            t = [sum(int(x["trials"]) for x in xs if int(x["group"]) % F == g) for g in range(F)]
            rows.append((f"layer {c[0]} " + ("(whole attention)" if c[1] == "all" else f"head {c[1]}"), h, t))
        base = [a / b if b else 0 for a, b in zip(bh, bt)]
        for name, h, t in rows:
            rec = [a / b if b else 0 for a, b in zip(h, t)]
            drops = [b0 - x for b0, x in zip(base, rec)]
            worst = max(range(F), key=lambda g: drops[g]) if name != "none" else None
            nt = nested_tests(h, t, B) if F % S == 0 else {}
            per = " ".join(f"{x:.3f}" for x in rec)
            pS = fmt_p(nt[S][1]) if S in nt else "-"
            print(f"| {name} | {sum(h) / sum(t):.3f} | {per} | {'-' if worst is None else f'{worst} ({drops[worst]:.3f})'} | {pS} |")


def gate_stability(runs):
    """Per run with gate slot profiles, per (layer, head): the largest change of any slot weight
    between a step in the last half of training and the last step, the two heaviest slots at
    each of those steps (the same pair at every step: a stable preference), and the last step's
    weights (a gate near 1 / slots has no preference to be stable)."""
    withprof = [r for r in runs if any(x["slot"] != "" for x in r["history"])]
    if not withprof:
        return
    print("\nGate slot profiles over the last half of training (steps >= last / 2):\n")
    print("| run | layer | head | steps | max \\|weight - last\\| | top two slots at the last step | same top two at every step "
          "| weight per slot at the last step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in withprof:
        rows = [x for x in r["history"] if x["slot"] != ""]
        last = max(int(x["step"]) for x in rows)
        steps = sorted({int(x["step"]) for x in rows if int(x["step"]) * 2 >= last})
        comps = sorted({(int(x["layer"]), x.get("head", "all")) for x in rows},
                       key=lambda c: (c[0], -1 if c[1] == "all" else int(c[1])))
        for l, h in comps:
            w = {(int(x["step"]), int(x["slot"])): float(x["slot_weight"]) for x in rows
                 if x["layer"] == str(l) and x.get("head", "all") == h}
            slots = sorted({k for _, k in w})
            top = {st: tuple(sorted(sorted(slots, key=lambda k: -w[(st, k)])[:2])) for st in steps}
            mx = max(abs(w[(st, k)] - w[(last, k)]) for st in steps for k in slots)
            print(f"| {r['preset']} seed {r['seed']} | {l} | {h} | {steps[0]}-{last} | {mx:.4f} | "
                  f"{top[last][0]}, {top[last][1]} | {'yes' if len(set(top.values())) == 1 else 'no'} | "
                  f"{' '.join(f'{w[(last, k)]:.3f}' for k in slots)} |")


def spearman(x, y):
    """Spearman's rho of two equal-length sequences (average ranks for ties)."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(v):
            j = i
            while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2.0
            i = j + 1
        return r
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def spearman_p(x, y, B=9999, seed=1):
    """One-sided permutation p of rho(x, y) >= the observed: exact over every order of y when
    there are at most 7! of them, else B seeded random orders, (1 + #{rho* >= rho}) / (B + 1)."""
    import itertools
    import random
    rho = spearman(x, y)
    if math.isnan(rho):
        return rho, float("nan")
    if math.factorial(len(y)) <= 5040:
        perms = list(itertools.permutations(y))
        return rho, sum(1 for q in perms if spearman(x, q) >= rho - 1e-12) / len(perms)
    rng = random.Random(seed)
    yy = list(y)
    ge = 0
    for _ in range(B):
        rng.shuffle(yy)
        ge += spearman(x, yy) >= rho - 1e-12
    return rho, (1 + ge) / (B + 1)


def head_gate_link(runs, B):
    """Runs with two per-head grids (shift_heads, 2 heads, W = S) that have head ablations and
    gate slot profiles: per layer and head g, with the other head knocked out, g's recall by the
    slot of its own grid that holds the pair's key (s = 0 … W_h − 2, where the pair (key at the
    group's position, value next) lies whole in one entry of g's grid), against g's gate weight on
    those two slots (w[s] + w[s + 1], the profile of the last snapshot); Spearman's rho over the
    slots with its one-sided permutation p."""
    rows = []
    for r in runs:
        m = r["model"]
        if not (m.get("shift_heads") and int(m["heads"]) == 2 and int(m["window"]) == int(m["stride"])):
            continue
        prof = [x for x in r["history"] if x["slot"] != "" and x.get("head", "all") != "all"]
        if not prof or not r["ablation"]:
            continue
        last = max(int(x["step"]) for x in prof)
        H, S = 2, int(m["stride"])
        Sh = H * S
        L = len(str(m["schedule"]).split(","))
        M = len(r["summary"]["trials"])
        if M % Sh:
            continue
        for l in sorted({int(x["layer"]) for x in prof}):
            lo = (int(m["origin"]) + (l * S // L if m.get("shift_layers") else 0)) % S
            for g in range(H):
                w = {int(x["slot"]): float(x["slot_weight"]) for x in prof
                     if int(x["step"]) == last and int(x["layer"]) == l and int(x["head"]) == g}
                other = str(1 - g)
                abl = [x for x in r["ablation"] if int(x["layer"]) == l and x["head"] == other]
                if len(w) != Sh or not abl:
                    continue
                origin = lo + g * S
                hits, trials = [0] * Sh, [0] * Sh
                for x in abl:
                    sl = (int(x["group"]) - origin) % Sh
                    hits[sl] += int(x["hits"])
                    trials[sl] += int(x["trials"])
                slots = [k for k in range(Sh - 1) if trials[k] > 0]
                pw = [w[k] + w[k + 1] for k in slots]
                rec = [hits[k] / trials[k] for k in slots]
                rho, p = spearman_p(pw, rec, B)
                rows.append((r, l, g, pw, rec, rho, p, hits[Sh - 1], trials[Sh - 1]))
    if not rows:
        return
    print("\nGates and heads (two per-head grids; head g alone = the other head knocked out; s = the slot of "
          "g's grid holding the pair's key, s = 0 … W_h − 2; gate weight on the pair = w[s] + w[s + 1] at the "
          "last snapshot; rho: Spearman over the slots, p: one-sided permutation):\n")
    print("| run | layer | head alone | gate weight on the pair, s = 0 … | recall alone, s = 0 … | split (last slot) | rho | p |")
    print("|---|---|---|---|---|---|---|---|")
    for r, l, g, pw, rec, rho, p, hs, ts in rows:
        split = f"{hs / ts:.3f}" if ts else "-"
        print(f"| {r['preset']} seed {r['seed']} | {l} | {g} | {' '.join(f'{v:.3f}' for v in pw)} | "
              f"{' '.join(f'{v:.3f}' for v in rec)} | {split} | {rho:.3f} | {fmt_p(p)} |")


T_Q = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}


def t_interval(v):
    m = sum(v) / len(v)
    if len(v) < 2:
        return m, "-"
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    w = T_Q.get(len(v) - 1, 1.96) * sd / math.sqrt(len(v))
    return m, f"[{max(0.0, m - w):.4f}, {min(1.0, m + w):.4f}]"


def gap_interval(h, t, B, seed=1):
    """95 % parametric-bootstrap percentile interval of max - min recall over the classes."""
    import numpy as np
    h, t = np.asarray(h, dtype=np.int64), np.asarray(t, dtype=np.int64)
    keep = t > 0
    h, t = h[keep], t[keep]
    rng = np.random.default_rng(seed)
    r = rng.binomial(t, h / t, size=(B, len(t))) / t
    g = r.max(axis=1) - r.min(axis=1)
    return float(np.quantile(g, 0.025)), float(np.quantile(g, 0.975))


def run_counts(r, drop=()):
    """A run's per-group hits and trials (copies), the groups in `drop` emptied."""
    h, t = list(r["summary"]["hits"]), list(r["summary"]["trials"])
    for g in drop:
        if g < len(t):
            h[g], t[g] = 0, 0
    return h, t


def fold(h, t, P):
    """Per-group counts folded mod P: (hits, trials) per class."""
    return [sum(h[c::P]) for c in range(P)], [sum(t[c::P]) for c in range(P)]


def phase_stats(h, t, P, B):
    """Fold per-group counts mod P: (hits, trials, mean, worst class, gap, gap interval)."""
    hp, tp = fold(h, t, P)
    rec = [a / b if b else float("nan") for a, b in zip(hp, tp)]
    have = [c for c in range(P) if tp[c] > 0]
    worst = min(have, key=lambda c: rec[c])
    best = max(have, key=lambda c: rec[c])
    return hp, tp, sum(hp) / sum(tp), worst, rec[best] - rec[worst], gap_interval(hp, tp, B)


def learned(r):
    """eval loss + 5 SE below ln(values) (a model that ignores the context)."""
    s = r["summary"]
    values = r["values"]
    return s["eval_loss"] + 5.0 * s.get("eval_loss_se", 0.0) < math.log(values), math.log(values)


def mitigation_tables(runs, B, P, drop=()):
    print(f"Phase = key position mod {P}." + (f" Without key-position groups {','.join(map(str, drop))}." if drop else ""))
    print()
    print(f"| preset | seed | learned | eval loss by step | mean recall [95 % Wilson] | worst phase: recall [95 % Wilson] | "
          f"gap max - min [95 % bootstrap] | X2({P}) p | recall per phase (mod {P}) |")
    print("|---|---|---|---|---|---|---|---|---|")
    by_preset = {}
    for r in runs:
        s = r["summary"]
        h, t = run_counts(r, drop)
        if len(t) % P:
            print(f"| {r['preset']} | {r['seed']} | modulus {len(t)} not divisible by {P}: skipped |||||||")
            continue
        ok, bound = learned(r)
        curve = {}
        for x in r["history"]:
            curve.setdefault(int(x["step"]), float(x["eval_loss"]))
        cv = " ".join(f"{k}:{v:.3f}" for k, v in sorted(curve.items()))
        hp, tp, mean, worst, gap, (glo, ghi) = phase_stats(h, t, P, B)
        lo, hi = wilson(sum(hp), sum(tp))
        wl, wh = wilson(hp[worst], tp[worst])
        nt = nested_tests(h, t, B) if P in (2, 4, 8, 16) else {}
        xp = fmt_p(nt[P][1]) if P in nt else "-"
        per = " ".join(f"{a / b:.3f}" if b else "-" for a, b in zip(hp, tp))
        lab = "yes" if ok else f"**no** (eval loss {s['eval_loss']:.3f} vs ln(values) = {bound:.3f})"
        print(f"| {r['preset']}{stopped(r)} | {r['seed']} | {lab} | {cv} | {mean:.4f} [{lo:.4f}, {hi:.4f}] | "
              f"{worst}: {hp[worst] / tp[worst]:.4f} [{wl:.4f}, {wh:.4f}] | {gap:.4f} [{glo:.4f}, {ghi:.4f}] | {xp} | {per} |")
        if ok:
            by_preset.setdefault(r["preset"], []).append((mean, hp[worst] / tp[worst], gap, h, t))
    print()
    print(f"| preset | seeds | mean recall: mean over seeds [95 % t] | worst-phase recall: mean [95 % t] | "
          f"gap: mean [95 % t] | pooled mean recall [95 % Wilson] | pooled worst phase: recall [95 % Wilson] | "
          f"pooled gap [95 % bootstrap] | pooled X2({P}) p | pooled recall per phase (mod {P}) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for p, rows in by_preset.items():
        cells = []
        for i in range(3):
            m, ci = t_interval([x[i] for x in rows])
            cells.append(f"{m:.4f} {ci}")
        M = len(rows[0][4])
        same = all(len(x[4]) == M for x in rows)
        if same:
            H = [sum(x[3][g] for x in rows) for g in range(M)]
            T = [sum(x[4][g] for x in rows) for g in range(M)]
            hp, tp, mean, worst, gap, (glo, ghi) = phase_stats(H, T, P, B)
            lo, hi = wilson(sum(hp), sum(tp))
            wl, wh = wilson(hp[worst], tp[worst])
            strata = [(x[3], x[4]) for x in rows]
            nt = nested_tests(H, T, B, strata=strata) if P in (2, 4, 8, 16) and M % P == 0 else {}
            xp = fmt_p(nt[P][1]) if P in nt else "-"
            per = " ".join(f"{a / b:.3f}" if b else "-" for a, b in zip(hp, tp))
            pooled = (f"{mean:.4f} [{lo:.4f}, {hi:.4f}] | {worst}: {hp[worst] / tp[worst]:.4f} [{wl:.4f}, {wh:.4f}] | "
                      f"{gap:.4f} [{glo:.4f}, {ghi:.4f}] | {xp} | {per}")
        else:
            pooled = " | ".join(["runs with different moduli"] + ["-"] * 4)
        print(f"| {p} | {len(rows)} | {' | '.join(cells)} | {pooled} |")


def binom_cdf(k, n, p):
    """P(X <= k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(0, k + 1))


def clopper_pearson(k, n, alpha=0.05):
    """Exact (Clopper-Pearson) 1 - alpha interval of a binomial share k / n: lo solves
    P(X >= k | lo) = alpha / 2, hi solves P(X <= k | hi) = alpha / 2 (bisection, 1e-12)."""
    def solve(f, target):  # f increasing in p on [0, 1]
        a, b = 0.0, 1.0
        for _ in range(60):
            m = (a + b) / 2
            if f(m) < target:
                a = m
            else:
                b = m
        return (a + b) / 2
    lo = 0.0 if k == 0 else solve(lambda q: 1.0 - binom_cdf(k - 1, n, q), alpha / 2)
    hi = 1.0 if k == n else solve(lambda q: -binom_cdf(k, n, q), -alpha / 2)
    return lo, hi


def fisher_exact(k1, n1, k2, n2):
    """Two-sided Fisher exact p of k1 / n1 against k2 / n2: the probability, under the
    hypergeometric law with both margins fixed, of a table no more likely than the observed one."""
    K, N = k1 + k2, n1 + n2
    def prob(x):
        return math.comb(n1, x) * math.comb(n2, K - x) / math.comb(N, K)
    obs = prob(k1)
    lo, hi = max(0, K - n2), min(n1, K)
    return min(1.0, sum(prob(x) for x in range(lo, hi + 1) if prob(x) <= obs * (1 + 1e-7)))


def plateau_table(runs, P, floor, drop=()):
    """Per preset and schedule length: how many runs end with every phase (key position mod P)
    at recall >= floor, with the share's exact 95 % interval and Fisher's exact p against the
    first preset listed at the same schedule length."""
    groups = {}
    for r in runs:
        s = r["summary"]
        h, t = run_counts(r, drop)
        if len(t) % P:
            continue
        hp, tp = fold(h, t, P)
        have = [c for c in range(P) if tp[c] > 0]
        if not have:
            continue
        worst = min(hp[c] / tp[c] for c in have)
        steps = s.get("steps_trained", s.get("train", {}).get("steps"))
        groups.setdefault((r["preset"], steps), []).append((r["seed"], worst))
    if not groups:
        return
    print(f"\nEvery phase learned: a run whose worst phase (key position mod {P}) ends at recall >= {floor} "
          f"(--phase-floor). Per preset and number of training steps; Fisher's exact p against the first "
          f"preset listed with the same number of steps.\n")
    print("| preset | steps | runs | every phase learned | share [95 % Clopper-Pearson] | Fisher p | "
          "worst-phase recall per seed |")
    print("|---|---|---|---|---|---|---|")
    first = {}
    for (preset, steps), rows in groups.items():
        first.setdefault(steps, (preset, rows))
    for (preset, steps), rows in groups.items():
        n = len(rows)
        k = sum(1 for _, w in rows if w >= floor)
        lo, hi = clopper_pearson(k, n)
        ref, rrows = first[steps]
        if ref == preset:
            fp = "-"
        else:
            k0 = sum(1 for _, w in rrows if w >= floor)
            fp = f"{fisher_exact(k, n, k0, len(rrows)):.3f} (vs {ref})"
        per = " ".join(f"{seed}: {w:.3f}" for seed, w in sorted(rows))
        print(f"| {preset} | {steps} | {n} | {k} | {k / n:.3f} [{lo:.3f}, {hi:.3f}] | {fp} | {per} |")


def figures(runs, figs):
    if not have_matplotlib():
        print("lm_report.py: matplotlib not available; no figures written", file=sys.stderr)
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(figs, exist_ok=True)

    presets = []
    for r in runs:
        if r["preset"] not in presets:
            presets.append(r["preset"])
    fig, axes = plt.subplots(1, len(presets), figsize=(2.6 * len(presets), 2.8), sharey=True, squeeze=False)
    for ax, p in zip(axes[0], presets):
        for r in [x for x in runs if x["preset"] == p]:
            rows = [x for x in r["phase"] if int(x["trials"]) > 0]  # e.g. the last context position
            g = [int(x["group"]) for x in rows]
            y = [float(x["recall"]) for x in rows]
            lo = [y[i] - float(x["ci_low"]) for i, x in enumerate(rows)]
            hi = [float(x["ci_high"]) - y[i] for i, x in enumerate(rows)]
            ax.errorbar(g, y, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=f"seed {r['seed']}")
        ax.set_title(p)
        ax.set_xlabel(f"key position mod {len(r['phase'])}")
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel("recall (95 % Wilson)")
    fig.tight_layout()
    fig.savefig(os.path.join(figs, "lm_phase.png"), dpi=110)
    plt.close(fig)

    # training curves: eval loss (log scale) and eval recall by step, a column per preset and a line
    # per seed (how a run that does not learn is reported: its curve, not only its end point)
    fig, axes = plt.subplots(2, len(presets), figsize=(2.8 * len(presets), 4.6), sharex="col", squeeze=False)
    for j, p in enumerate(presets):
        for r in [x for x in runs if x["preset"] == p]:
            snaps = sorted({(int(x["step"]), float(x["eval_loss"]), float(x["eval_recall"])) for x in r["history"]})
            if not snaps:
                continue
            steps = [a for a, _, _ in snaps]
            lab = f"seed {r['seed']}, {steps[-1]} steps"
            axes[0][j].plot(steps, [b for _, b, _ in snaps], marker=".", label=lab)
            axes[1][j].plot(steps, [c for _, _, c in snaps], marker=".", label=lab)
        axes[0][j].set_title(p)
        axes[0][j].set_yscale("log")
        axes[1][j].set_ylim(0.0, 1.02)
        axes[1][j].set_xlabel("training step")
        axes[0][j].legend(fontsize=6)
    axes[0][0].set_ylabel("eval loss")
    axes[1][0].set_ylabel("eval recall")
    fig.tight_layout()
    fig.savefig(os.path.join(figs, "lm_curves.png"), dpi=110)
    plt.close(fig)

    withprof = [r for r in runs if any(x["slot"] != "" for x in r["history"])]
    if withprof:
        r = withprof[0]
        # one panel per gated compressor: (layer, head), head "all" for a layer's one compressor
        # (histories written before the head column have one per layer)
        comps = sorted({(int(x["layer"]), x.get("head", "all")) for x in r["history"] if x["layer"] != ""},
                       key=lambda c: (c[0], -1 if c[1] == "all" else int(c[1])))
        fig, axes = plt.subplots(1, len(comps) + 1, figsize=(3.2 * (len(comps) + 1), 2.8), squeeze=False)
        for ax, (l, h) in zip(axes[0], comps):
            rows = [x for x in r["history"] if x["layer"] == str(l) and x.get("head", "all") == h]
            for s in sorted({int(x["slot"]) for x in rows}):
                pts = sorted((int(x["step"]), float(x["slot_weight"])) for x in rows if x["slot"] == str(s))
                ax.plot([a for a, _ in pts], [b for _, b in pts], marker=".", label=f"slot {s}")
            ax.set_title(f"{r['preset']} seed {r['seed']}, layer {l}" + ("" if h == "all" else f" head {h}"), fontsize=8)
            ax.set_xlabel("training step")
            ax.set_ylabel("mean softmax over slots of the bias")
            ax.legend(fontsize=6, ncol=2)
        ax = axes[0][-1]
        pts = sorted({(int(x["step"]), float(x["eval_recall"])) for x in r["history"]})
        ax.plot([a for a, _ in pts], [b for _, b in pts], marker="o")
        ax.set_title("eval recall (256 sequences)")
        ax.set_xlabel("training step")
        fig.tight_layout()
        fig.savefig(os.path.join(figs, "lm_gates.png"), dpi=110)
        plt.close(fig)

    withabl = [r for r in runs if r["ablation"]]
    if withabl:
        import numpy as np
        r = withabl[0]
        comps = []
        for x in r["ablation"]:
            c = (x["layer"], x["head"])
            if c not in comps:
                comps.append(c)
        M = len(r["summary"]["trials"])
        F = 8 if M % 8 == 0 else M  # folded mod 8 (per-position counts are ~130 queries)
        groups = list(range(F))
        base_h = [sum(r["summary"]["hits"][g::F]) for g in range(F)]
        base_t = [sum(r["summary"]["trials"][g::F]) for g in range(F)]
        ah = np.zeros((len(comps), F))
        at = np.zeros((len(comps), F))
        for x in r["ablation"]:
            i, g = comps.index((x["layer"], x["head"])), int(x["group"]) % F
            ah[i, g] += int(x["hits"])
            at[i, g] += int(x["trials"])
        base = np.array([a / b if b else 0.0 for a, b in zip(base_h, base_t)])
        m = base[None, :] - np.divide(ah, at, out=np.zeros_like(ah), where=at > 0)
        fig, ax = plt.subplots(figsize=(1.0 + 0.5 * len(groups), 0.9 + 0.4 * len(comps)))
        im = ax.imshow(m, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(groups)), [str(g) for g in groups])
        ax.set_yticks(range(len(comps)), [f"L{l} {'layer' if h == 'all' else 'head ' + h}" for l, h in comps])
        ax.set_xlabel(f"key position mod {len(groups)}")
        for i in range(len(comps)):
            for j in range(len(groups)):
                ax.text(j, i, f"{m[i, j]:.2f}", ha="center", va="center", fontsize=6, color="w")
        ax.set_title(f"recall drop, {r['preset']} seed {r['seed']}")
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        fig.savefig(os.path.join(figs, "lm_ablation.png"), dpi=110)
        plt.close(fig)


class InputError(Exception):
    """A run directory's file is missing, unreadable or inconsistent (exit 2, naming the file)."""


def check_run(path, r):
    """Refuses a run whose counts cannot be recall counts: equal-length lists of integers with
    0 <= hits <= trials (a file edited or cut short must not give a silently wrong table)."""
    h, t = r.get("hits"), r.get("trials")
    if not isinstance(h, list) or not isinstance(t, list) or len(h) != len(t) or not t:
        raise InputError(f"{path}: run {r.get('preset')} seed {r.get('seed')}: hits and trials must be "
                         "non-empty lists of equal length")
    for g, (a, b) in enumerate(zip(h, t)):
        if not (isinstance(a, int) and isinstance(b, int)) or isinstance(a, bool) or isinstance(b, bool) \
                or not 0 <= a <= b <= 2 ** 53:
            raise InputError(f"{path}: run {r.get('preset')} seed {r.get('seed')}: group {g} has hits = {a}, "
                             f"trials = {b}; must be integers with 0 <= hits <= trials <= 2^53")
    for k in ("preset", "seed", "model", "eval_loss"):
        if k not in r:
            raise InputError(f"{path}: run {r.get('preset')} seed {r.get('seed')}: has no '{k}'")
    m = r["model"]
    if not isinstance(m, dict) or not isinstance(m.get("schedule"), str) or not isinstance(m.get("stride"), int) \
            or isinstance(m.get("stride"), bool) or m["stride"] < 1:
        raise InputError(f"{path}: run {r.get('preset')} seed {r.get('seed')}: 'model' must hold a schedule (text) "
                         "and a stride (integer >= 1)")


def load_checked(d):
    if not os.path.isdir(d):
        raise InputError(f"{d}: is not a directory (a train_lm --out directory)")
    path = os.path.join(d, "lm_summary.json")
    try:
        summary = json.load(open(path))
    except OSError as e:
        raise InputError(f"{path}: cannot be read ({e.strerror})")
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: is not JSON ({e.msg} at line {e.lineno})")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: is not UTF-8 text (byte {e.start})")
    if not isinstance(summary, dict) or not isinstance(summary.get("runs"), list) or not summary["runs"]:
        raise InputError(f"{path}: must be a train_lm summary with a non-empty 'runs' list")
    for r in summary["runs"]:
        if not isinstance(r, dict):
            raise InputError(f"{path}: every entry of 'runs' must be an object")
        check_run(path, r)
    try:
        return load_run(d)
    except OSError as e:
        raise InputError(f"{e.filename}: cannot be read ({e.strerror})")
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise InputError(f"{d}: a file lacks a field train_lm writes or has a malformed one ({e!r})")


def readout_tables(runs, P, drop=()):
    """--readout: per run with lm_readout.csv, per layer and head, phase (key position mod P) and
    outcome: queries, the mean attention mass on the rows holding the pair's key, its value and
    both, and the shares of queries whose largest-weight row holds both / the key only / the
    value only / neither."""
    shown = 0
    for r in runs:
        if not r["readout"]:
            continue
        shown += 1
        print(f"\n**Attention readout: {r['preset']} seed {r['seed']}** ({r['dir']}; phase = key position mod {P}"
              + (f", groups {','.join(map(str, drop))} left out" if drop else "") + ")\n")
        print("| layer | kind | head | phase | outcome | queries | key mass | value mass | pair mass |"
              " top row: pair | key only | value only | neither |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        acc = {}
        for x in r["readout"]:
            g = int(x["group"])
            if g in drop:
                continue
            k = (int(x["layer"]), x["kind"], int(x["head"]), g % P, x["outcome"])
            n = int(x["queries"])
            a = acc.setdefault(k, [0, 0.0, 0.0, 0.0, 0, 0, 0, 0])
            a[0] += n
            a[1] += n * float(x["key_mass"])
            a[2] += n * float(x["value_mass"])
            a[3] += n * float(x["pair_mass"])
            for i, f in enumerate(("top_pair", "top_key_only", "top_value_only", "top_neither")):
                a[4 + i] += int(x[f])
        for k in sorted(acc, key=lambda k: (k[0], k[2], k[3], k[4] != "hit")):
            a = acc[k]
            n = a[0]
            print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {k[4]} | {n} | {a[1] / n:.3f} | {a[2] / n:.3f} | {a[3] / n:.3f} | "
                  + " | ".join(f"{a[4 + i] / n:.2f}" for i in range(4)) + " |")
    if not shown:
        raise InputError("--readout: none of the runs has lm_readout.csv (train_lm --readout)")


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="lm_report.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="train_lm --out directories")
    ap.add_argument("--figs", metavar="FIG_DIR", help="write the figures there")

    def positive(x):
        v = int(x)
        if v < 1:
            raise argparse.ArgumentTypeError(f"{x} must be an integer >= 1")
        return v

    def groups(x):
        try:
            v = tuple(int(g) for g in x.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{x!r} must be a comma list of group numbers")
        if any(g < 0 for g in v):
            raise argparse.ArgumentTypeError(f"{x!r}: group numbers must be >= 0")
        return v

    ap.add_argument("--permutations", type=positive, default=9999, metavar="B")
    ap.add_argument("--drop", type=groups, default=(), metavar="G,G,...")
    ap.add_argument("--edges", action="store_true")
    ap.add_argument("--mitigation", action="store_true")
    ap.add_argument("--readout", action="store_true")
    ap.add_argument("--phase-mod", type=positive, default=4, metavar="P")
    def share(x):
        try:
            v = float(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{x!r} must be a number in (0, 1]")
        if not 0.0 < v <= 1.0:
            raise argparse.ArgumentTypeError(f"{x} must be in (0, 1]")
        return v

    ap.add_argument("--phase-floor", type=share, default=None, metavar="R",
                    help="--mitigation: a run learned every phase when its worst phase's recall is >= R (default 0.5)")
    ap.add_argument("--fold", type=positive, default=8, metavar="F",
                    help="fold the ablation tables mod F (default 8; the run's modulus when F does not divide it)")
    a = ap.parse_args(argv[1:])  # a bad option or value: argparse names it and exits 2
    if a.phase_floor is not None and not a.mitigation:
        ap.error("--phase-floor applies to --mitigation only")  # exits 2, not silently ignored
    runs = []
    try:
        for d in a.runs:
            runs.extend(load_checked(d))
    except InputError as e:
        print(f"lm_report: {e}", file=sys.stderr)
        return 2
    try:
        if a.mitigation:
            mitigation_tables(runs, a.permutations, a.phase_mod, a.drop)
            plateau_table(runs, a.phase_mod, 0.5 if a.phase_floor is None else a.phase_floor, a.drop)
            if a.figs:
                figures(runs, a.figs)
            return 0
        if a.readout:
            try:
                readout_tables(runs, a.phase_mod, a.drop)
            except InputError as e:
                print(f"lm_report: {e}", file=sys.stderr)
                return 2
            return 0
        tables(runs, a.permutations, a.drop)
        if a.edges:
            edge_table(runs)
        ablation_tables(runs, a.permutations, a.fold)
        gate_stability(runs)
        head_gate_link(runs, a.permutations)
        if a.figs:
            figures(runs, a.figs)
    except (KeyError, TypeError, ValueError, IndexError, ArithmeticError, AttributeError) as e:
        # a CSV row of lm_phase / lm_history / lm_ablation with a missing or non-numeric cell
        print(f"lm_report: a file in {', '.join(a.runs)} has a missing or malformed field ({e!r}); "
              "the files must be train_lm's own", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
