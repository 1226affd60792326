# Statistics from Python: intervals, uniformity, periodicity, gap, against their formulas; errors.
import math

import numpy as np
import pytest

import kvphase

Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def test_wilson_interval_formula():
    for k, n in [(0, 10), (3, 10), (10, 10), (517, 1000)]:
        p = k / n
        c = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
        h = Z95 / (1 + Z95**2 / n) * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
        lo, hi = kvphase.binomial_interval(k, n)
        # double arithmetic on O(1) terms: a few ulp
        assert lo == pytest.approx(max(0.0, c - h), abs=1e-14)
        assert hi == pytest.approx(min(1.0, c + h), abs=1e-14)


def test_clopper_pearson_contains_wilson_centre_and_simultaneous_is_wider():
    lo, hi = kvphase.binomial_interval(30, 100, method="clopper_pearson")
    wl, wh = kvphase.binomial_interval(30, 100)
    assert lo < 0.3 < hi and lo <= wl and hi >= wh  # exact interval is the more conservative here
    slo, shi = kvphase.simultaneous_intervals([30, 40, 50, 60], [100] * 4)
    assert slo[0] < lo and shi[0] > hi


def test_uniformity_pearson_statistic():
    hits, trials = np.array([10, 20, 30, 40]), np.array([100] * 4)
    pbar = hits.sum() / trials.sum()
    e = trials * pbar
    x2 = (((hits - e) ** 2) / e + ((trials - hits - (trials - e)) ** 2) / (trials - e)).sum()
    r = kvphase.uniformity_test(hits, trials)
    assert r["statistic"] == pytest.approx(x2, rel=1e-12) and r["dof"] == 3
    # chi-square(3) upper tail in closed form: erfc(sqrt(x/2)) + sqrt(2x/pi) exp(-x/2)
    q = math.erfc(math.sqrt(x2 / 2)) + math.sqrt(2 * x2 / math.pi) * math.exp(-x2 / 2)
    assert r["p"] == pytest.approx(q, rel=1e-10)
    assert kvphase.uniformity_test(hits, trials, method="g_test")["test"].startswith("g")


def test_gap_and_periodicity():
    hits, trials = [90, 50, 50, 50, 90, 50, 50, 50], [100] * 8
    g = kvphase.phase_gap(hits, trials, replicates=500, seed=1)
    assert g["gap"] == pytest.approx(0.4, abs=1e-15) and g["argmax"] == 0 and g["argmin"] == 1
    assert g["simultaneous"]["low"] <= 0.4 <= g["simultaneous"]["high"]
    p = kvphase.periodicity_test(hits, trials, modulus=8, period=4, permutations=999, seed=1)
    assert p["p"] < 0.01 and p["peak_phase"] == pytest.approx(0.0, abs=0.5)
    d = kvphase.gap_difference(hits, trials, [50] * 8, [100] * 8, replicates=200)
    assert d["difference"] == pytest.approx(0.4, abs=1e-15)
    s = kvphase.summarize(hits, trials, period=4, permutations=99, bootstrap_replicates=100)
    assert s["total_trials"] == 800 and s["gap"]["gap"] == pytest.approx(0.4, abs=1e-15)


def test_statistics_errors():
    with pytest.raises(ValueError, match=r"^kvphase: hits"):
        kvphase.binomial_interval(11, 10)
    with pytest.raises(ValueError, match=r"^kvphase: confidence = 1.5"):
        kvphase.binomial_interval(1, 10, confidence=1.5)
    with pytest.raises(ValueError, match=r"^kvphase: interval_method = bogus"):
        kvphase.binomial_interval(1, 10, method="bogus")
    with pytest.raises(TypeError, match=r"^hits: dtype must be an integer type, got float64"):
        kvphase.uniformity_test(np.array([1.0, 2.0]), [10, 10])
    with pytest.raises(ValueError, match=r"^hits: must be 1-D"):
        kvphase.uniformity_test(np.zeros((2, 2), dtype=int), [10, 10])
