# Sweeps from Python: the same bytes as the kvphase-sweep program (provenance aside), the
# statistics and theory of the result, errors, progress and Ctrl-C.
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import kvphase

# (command-line flags, the same as keyword arguments): small but every task and both engines
CASES = [
    (["--preset", "gated", "--gate-bias", "3,0,0,0", "--context", "512", "--trials", "300", "--seed", "5"],
     dict(preset="gated", gate_bias=[3, 0, 0, 0], context=512, trials=300, seed=5)),
    (["--preset", "mean", "--stride", "8", "--task", "kv-pairs", "--context", "4096", "--pairs", "400",
      "--trials", "60"],
     dict(preset="mean", stride=8, task="kv-pairs", context=4096, pairs=400, trials=60)),
    (["--task", "padding", "--stride", "4", "--trials", "80", "--pad-min", "8", "--lengths", "8", "--theory"],
     dict(task="padding", stride=4, trials=80, pad_min=8, lengths=8, theory=True)),
    (["--preset", "v41", "--rope", "none", "--context", "256", "--dim", "16", "--trials", "40",
      "--params-seed", "3"],
     dict(preset="v41", rope="none", context=256, dim=16, trials=40, params_seed=3)),
    (["--preset", "mean", "--stride", "4", "--modulus", "8", "--raw-window", "16", "--context", "1024",
      "--query-noise", "0.5", "--trials", "200", "--theory", "--shard", "1/3"],
     dict(preset="mean", stride=4, modulus=8, raw_window=16, context=1024, query_noise=0.5, trials=200,
          theory=True, shard="1/3")),
    # the CSA model with V4's own indexer: the model as a dict, the same fields the flags set
    (["--preset", "v4-csa", "--rope", "none", "--task", "kv-pairs", "--context", "512", "--pairs", "60",
      "--dim", "16", "--trials", "24", "--model", "csa", "--topk", "8", "--params", "planted-early",
      "--indexer-dim", "8", "--indexer-heads", "2", "--indexer-align", "0.5"],
     dict(preset="v4-csa", rope="none", task="kv-pairs", context=512, pairs=60, dim=16, trials=24,
          model=dict(kind="csa", top_k=8, params="planted-early", indexer=dict(dim=8, heads=2, align=0.5)))),
]


def _without_provenance(text):
    """Everything from the "# format:" line on: the provenance block (io/provenance.hpp,
    to_csv_comment: version, build, date, command line, config) comes before it."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("# format: "))
    assert start > 0 and lines[start - 1].startswith("# provenance_json: ")
    assert all(ln.startswith("# ") for ln in lines[:start])
    return "".join(lines[start:])


# The theory column is the one value computed in scalar double code outside the counts: GCC's
# default -ffp-contract=fast fuses its a*b + c differently in the extension's translation unit
# than in the program's (docs/sim.md, "Bitwise holds for one build"), so it may differ in the
# last bits: it is compared to 1e-12 relative (observed: 1 ulp), every other byte exactly.
THEORY_REL = 1e-12


def _split_theory(text):
    """(text with the theory column blanked, theory values) of a CSV text."""
    lines = text.splitlines(keepends=True)
    head = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    cols = lines[head].rstrip("\n").split(",")
    if "theory" not in cols:
        return text, []
    j = cols.index("theory")
    values = []
    for i in range(head + 1, len(lines)):
        f = lines[i].rstrip("\n").split(",")
        values.append(float(f[j]))
        f[j] = "?"
        lines[i] = ",".join(f) + "\n"
    return "".join(lines), values


def _json_equal(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _json_equal(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _json_equal(x, y, f"{path}[{i}]")
    elif "theory" in path and isinstance(a, float):
        assert a == pytest.approx(b, rel=THEORY_REL, abs=0), path
    else:
        assert a == b, path


@pytest.mark.parametrize("flags,kwargs", CASES, ids=[" ".join(c[0][:4]) for c in CASES])
def test_sweep_equals_the_cli_byte_for_byte(sweep_cli, tmp_path, flags, kwargs):
    out = tmp_path / "cli.csv"
    subprocess.run([sweep_cli, *flags, "--threads", "2", "--quiet", "--out", str(out)], check=True)
    r = kvphase.sweep(threads=2, **kwargs)
    cli, cli_theory = _split_theory(_without_provenance(out.read_text()))
    py, py_theory = _split_theory(_without_provenance(r.to_csv()))
    assert py == cli
    assert py_theory == pytest.approx(cli_theory, rel=THEORY_REL, abs=0)
    assert (len(py_theory) > 0) == ("--theory" in flags)
    # JSON: the same document once provenance (command line, time, program) is set aside
    jout = tmp_path / "cli.json"
    subprocess.run([sweep_cli, *flags, "--threads", "2", "--quiet", "--out", str(jout)], check=True)
    a, b = json.loads(jout.read_text()), json.loads(r.to_json())
    a.pop("provenance"), b.pop("provenance")
    _json_equal(b, a)


def test_result_arrays_statistics_and_provenance():
    r = kvphase.sweep(preset="gated", gate_bias=[3, 0, 0, 0], context=512, trials=200, seed=2, threads=2,
                      theory=True)
    M = len(r.labels)
    assert M == 4 and r.labels.dtype == np.int64
    for m in ("compressed", "full"):
        assert r.trials[m].shape == (M,) and (r.trials[m] == 200).all()
        assert ((0 <= r.hits[m]) & (r.hits[m] <= 200)).all()
        s = r.statistics[m]
        np.testing.assert_array_equal(s["recall"], r.hits[m] / 200.0)
        assert (s["ci_low"] <= s["recall"]).all() and (s["recall"] <= s["ci_high"]).all()
        g = s["gap"]
        assert g["simultaneous"]["low"] <= g["gap"] <= g["simultaneous"]["high"]
        assert 0.0 <= s["uniformity"]["p"] <= 1.0 and 0.0 <= s["periodicity"]["p"] <= 1.0
    assert r.statistics["compressed"]["vs_baseline"] is not None
    assert r.theory is not None and r.theory["compressed"].shape == (M,)
    p = r.provenance
    assert p["seed"] == 2 and p["config"]["program"] == "kvphase (python)"
    assert p["config"]["task"]["kind"] == "needle"
    assert r.run_columns["preset"] == "gated" and r.trials_per_second > 0
    # the statistics are those written into the JSON output
    doc = json.loads(r.to_json())
    assert json.dumps(doc)  # valid JSON
    assert "# format: kvphase-sweep/1\n" in r.to_csv()


def test_progress_and_shards():
    # progress reports the done fraction; shards partition the trials (the counts add up)
    kw = dict(preset="mean", stride=4, context=256, trials=2000, seed=9, threads=1)
    seen = []
    whole = kvphase.sweep(progress=seen.append, check_seconds=0.001, **kw)
    assert seen and seen[-1] == 1.0 and all(0.0 <= f <= 1.0 for f in seen) and seen == sorted(seen)
    parts = [kvphase.sweep(shard=f"{i}/3", **kw) for i in range(3)]
    for m in ("compressed", "full"):
        np.testing.assert_array_equal(whole.hits[m], sum(p.hits[m] for p in parts))
        np.testing.assert_array_equal(whole.trials[m], sum(p.trials[m] for p in parts))


def test_an_exception_in_progress_stops_the_sweep():
    def boom(fraction):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        kvphase.sweep(preset="mean", stride=4, context=8192, trials=10**9, threads=2, progress=boom)


def test_theory_per_phase_predictions_and_coverage():
    t = kvphase.theory(preset="mean", stride=4, context=1024)
    assert t["covered"] and t["reason"] == ""
    assert t["compressed"].shape == (4,) and t["full"].shape == (4,)
    assert ((0 <= t["compressed"]) & (t["compressed"] <= 1)).all()
    t2 = kvphase.theory(preset="mean", task="kv-pairs", context=4096, pairs=400)
    assert not t2["covered"] and "kv-pairs" in t2["reason"]
    with pytest.raises(ValueError, match=r"^kvphase: theory = on: no prediction for this configuration"):
        kvphase.sweep(preset="mean", task="kv-pairs", context=4096, pairs=400, trials=10, theory=True)


def test_generic_fields_reach_the_config():
    # a task field the command line has no flag for, and a sweep_config field
    c = kvphase.sweep_config(task="padding", offset_a=100, offset_b=230, compute_mass=True)
    assert c["task"]["offset_a"] == 100 and c["compute_mass"] is True
    with pytest.raises(TypeError, match=r"unknown keyword argument 'bogus'"):
        kvphase.sweep_config(bogus=1)


def test_sweep_errors_map_to_value_error_with_the_library_message():
    with pytest.raises(ValueError, match=r"^kvphase: config.trials = \"x\": must be an integer$"):
        kvphase.sweep(trials="x")
    with pytest.raises(ValueError, match=r"^kvphase: trials = 0: must be in \[1, 2\^40\]$"):
        kvphase.sweep(trials=0)
    with pytest.raises(ValueError, match=r"^kvphase: context = 30: too short"):
        kvphase.sweep(context=30)
    with pytest.raises(ValueError, match=r"^kvphase: engine = score: operator v41 is not exact on the score engine"):
        kvphase.sweep(preset="v41", rope="none", engine="score")
    with pytest.raises(ValueError, match=r"^kvphase: gate_bias = 3: needs one value per slot of the window \(4\)$"):
        kvphase.sweep(preset="gated", gate_bias=[1, 2, 3])
    with pytest.raises(ValueError, match=r"^kvphase: shard = 3/2: index must be in \[0, count\)$"):
        kvphase.sweep(shard="3/2")
    with pytest.raises(ValueError, match=r"^kvphase: config.seed = -1: is out of range for this field$"):
        kvphase.sweep(seed=-1)


def test_ctrl_c_interrupts_a_long_sweep():
    code = textwrap.dedent("""
        import sys, kvphase
        print("start", flush=True)
        try:
            kvphase.sweep(preset="mean", stride=4, context=8192, trials=10**9, threads=1)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert p.stdout.readline().strip() == "start"
    time.sleep(1.0)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    try:
        out, _ = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 3 and "interrupted" in out
    assert time.monotonic() - t0 < 10  # signals checked every 0.1 s (generous on a loaded machine)


def test_external_results_by_phase():
    rng = np.random.default_rng(5)
    pos = rng.integers(0, 4096, size=4000)
    correct = rng.random(4000) < np.where(pos % 4 == 0, 0.9, 0.5)
    trials, hits = kvphase.counts_by_phase(pos, correct, modulus=4)
    np.testing.assert_array_equal(trials, np.bincount(pos % 4, minlength=4))
    np.testing.assert_array_equal(hits, np.bincount(pos % 4, weights=correct, minlength=4).astype(int))
    s = kvphase.summarize(hits, trials, period=4, permutations=999, bootstrap_replicates=200)
    # phase 0 at 0.9 against 0.5: a gap of 0.4, ~ 1000 trials per phase (z far above 5)
    assert s["periodicity"]["p"] < 0.01 and s["gap"]["simultaneous"]["low"] > 0.2
    with pytest.raises(TypeError, match=r"^positions: expected a 1-D sequence of integers"):
        kvphase.counts_by_phase(pos.astype(float), correct, modulus=4)
    with pytest.raises(ValueError, match=r"^correct: must have the shape of positions"):
        kvphase.counts_by_phase(pos, correct[:10], modulus=4)
    # analyze(): the same records through kvphase-analyze's parser and statistics
    a = kvphase.analyze(pos, correct.astype(int), stride=4, permutations=999, bootstrap=200)
    assert a.models == ["all"]
    np.testing.assert_array_equal(a.trials["all"], trials)
    np.testing.assert_array_equal(a.hits["all"], hits)
    assert a.statistics["all"]["periodicity"]["p"] < 0.01 and a.statistics["all"]["paired"] is None
    assert a.to_csv().startswith("# kvphase") and '"models"' in a.to_json()
    with pytest.raises(TypeError, match=r"^positions: expected a 1-D sequence of integers"):
        kvphase.analyze(pos.astype(float), correct, stride=4)
    with pytest.raises(ValueError, match=r"^kvphase: stride = 1: must be in \[2, 4096\]"):
        kvphase.analyze(pos, correct, stride=1)
    with pytest.raises(ValueError, match=r"^kvphase: correct.shape\[0\] = 10"):
        kvphase.analyze(pos, correct[:10], stride=4)


def _cochran_q(x):
    """Cochran's Q of outcomes x [items × groups], from its textbook formula."""
    k = x.shape[1]
    col, row, n = x.sum(axis=0), x.sum(axis=1), x.sum()
    return (k - 1) * (k * (col**2).sum() - n**2) / (k * n - (row**2).sum())


def test_paired_test_against_textbook_formulas():
    import math

    rng = np.random.default_rng(11)
    # 300 items at 4 phases, phase 2 easier: Cochran's Q and McNemar best (2) vs worst
    x = (rng.random((300, 4)) < np.array([0.3, 0.35, 0.7, 0.3])).astype(np.int64)
    r = kvphase.paired_test(x, permutations=999)
    assert r["groups"] == 4 and r["items"] == 300
    assert r["cochran_q"]["statistic"] == pytest.approx(_cochran_q(x), rel=1e-12)
    assert r["cochran_q"]["dof"] == 3
    m = r["mcnemar_best_vs_worst"]
    a_only = int(((x[:, m["group_a"]] == 1) & (x[:, m["group_b"]] == 0)).sum())
    b_only = int(((x[:, m["group_a"]] == 0) & (x[:, m["group_b"]] == 1)).sum())
    assert (m["a_only"], m["b_only"]) == (a_only, b_only) and m["group_a"] == 2
    n, lo = a_only + b_only, min(a_only, b_only)
    exact = min(1.0, 2 * sum(math.comb(n, i) for i in range(lo + 1)) / 2**n)
    assert m["p_exact"] == pytest.approx(exact, rel=1e-9)
    flips = int((x.min(axis=1) != x.max(axis=1)).sum())
    assert r["flips"] == flips and r["flip_ci"]["low"] <= flips / 300 <= r["flip_ci"]["high"]
    # analyze() with item ids runs the same paired test on the same counts
    items = np.repeat(np.arange(300), 4)
    phases = np.tile(np.arange(4), 300)
    a = kvphase.analyze(phases=phases, correct=x.reshape(-1), items=items, stride=4, permutations=999)
    p = a.statistics["all"]["paired"]
    assert p["cochran_q"]["statistic"] == pytest.approx(r["cochran_q"]["statistic"], rel=1e-12)
    assert p["flips"] == flips and p["mcnemar_best_vs_worst"]["p_exact"] == m["p_exact"]
    with pytest.raises(ValueError, match=r"^kvphase: outcomes\[0, 0\] = 2: must be 0 or 1"):
        kvphase.paired_test(np.full((3, 2), 2))
    with pytest.raises(TypeError, match=r"^outcomes: dtype must be an integer or bool type, got float64"):
        kvphase.paired_test(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"outcomes.shape\[1\] = 1"):
        kvphase.paired_test(np.zeros((3, 1), dtype=np.int64))
