"""kvphase from Python: exact chunked KV-cache compression operators, toy attention, phase sweeps,
their statistics and the theory's per-phase predictions, on NumPy arrays.

A thin layer over the C++ library (the ``_kvphase`` extension): every computation is the library's
own, every invalid value raises ``ValueError`` with the library's message
(``kvphase: <parameter> = <value>: <rule>``), and configs are the library's config structs read
through their field lists, so a field added in C++ is a keyword argument here.

    import numpy as np, kvphase
    spec = kvphase.preset("v4_csa")                       # or kvphase.operator_spec(window=8, stride=4)
    x = np.random.default_rng(0).standard_normal((4096, 64), dtype=np.float32)
    params = kvphase.make_params(spec, 64, seed=1)
    entries = kvphase.compress(spec, x, params)            # (num_entries, 64), float32
    r = kvphase.sweep(preset="gated", gate_bias=[3, 0, 0, 0], trials=2000)
    r.statistics["compressed"]["gap"]["simultaneous"]      # the phase gap's interval
    r.to_csv("gated.csv")                                 # the same file kvphase-sweep writes

See docs/python.md.
"""

from __future__ import annotations

import shlex as _shlex

from . import _kvphase as _k
from ._kvphase import (  # noqa: F401  (re-exported API)
    OperatorSpec,
    Params,
    __version__,
    binomial_interval,
    compiled_isa,
    compress,
    full_attention,
    gap_difference,
    make_params,
    output_dim,
    periodicity_test,
    phase_gap,
    preset_names,
    recall,
    scores,
    simultaneous_intervals,
    summarize,
    task_names,
    uniformity_test,
)

__all__ = [
    "Analysis", "OperatorSpec", "Params", "SweepResult", "__version__", "analyze", "binomial_interval", "compress",
    "counts_by_phase",
    "compressed_attention", "full_attention", "gap_difference", "load_v4_layer", "make_params", "multihead_attention",
    "operator_spec", "output_dim", "paired_test", "periodicity_test", "phase_gap", "preset", "preset_names",
    "recall", "scores", "simultaneous_intervals", "summarize", "sweep", "sweep_config", "task_names", "theory",
    "uniformity_test",
]


def _fail(parameter, value, rule):
    """The library's message form (core/error.hpp)."""
    raise ValueError(f"kvphase: {parameter} = {value}: {rule}")


# ---- operators -----------------------------------------------------------------------------------

_SPEC_DEFAULTS = _k._spec_from_dict({}).to_dict()
# nested structs of operator_spec (grid, rope): their fields may be given flat (window=8)
_NESTED = {k: v for k, v in _SPEC_DEFAULTS.items() if isinstance(v, dict)}


def _spec_dict(base):
    if base is None:
        return dict(_SPEC_DEFAULTS)
    if isinstance(base, OperatorSpec):
        return base.to_dict()
    if isinstance(base, str):
        return _k._preset(base).to_dict()
    if isinstance(base, dict):
        return dict(base)
    raise TypeError(f"base: expected an OperatorSpec, a preset name or a dict, got {type(base).__name__}")


def _apply_spec_fields(d, fields):
    d = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
    for key, value in fields.items():
        if key in d:
            if isinstance(d[key], dict) and isinstance(value, dict):
                d[key].update(value)
            else:
                d[key] = value
            continue
        owners = [n for n, sub in _NESTED.items() if key in sub]
        if len(owners) == 1:
            d[owners[0]][key] = value
        else:
            d[key] = value  # unknown: the field reader names it ("is not a field of this configuration")
    return d


def operator_spec(base=None, **fields) -> OperatorSpec:
    """An operator spec (compress::operator_spec) from keyword arguments named by its field list.

    ``base``: a spec, a preset name or a dict to start from (default: the library's defaults).
    Fields of the nested grid and rope structs may be given flat (``window=8, stride=4,
    anchor="start"``) or nested (``grid={"window": 8}``). The spec is validated by the library.
    """
    return _k._spec_from_dict(_apply_spec_fields(_spec_dict(base), fields))


def preset(name: str, **overrides) -> OperatorSpec:
    """A named preset (``kvphase.preset_names``), optionally with fields overridden."""
    spec = _k._preset(name)
    return operator_spec(spec, **overrides) if overrides else spec


def compressed_attention(q, kc, vc, spec, k, v, pos=None, head=0, **params):
    """Compressed + raw-window attention (attention::compressed_attention).

    ``q`` [M x d] queries at positions ``pos`` (default: the last M tokens); ``kc``/``vc`` the
    compressed entries (e.g. ``kvphase.compress(spec, k)``); ``k``/``v`` the raw tokens. Keyword
    arguments: window (raw tokens ending at the query, default 128; 0 = none), compressed
    (default True), scale, sink, threads. Returns the outputs [M x dv].
    """
    return _k._compressed_attention(q, kc, vc, spec, k, v, pos, params, head)


def multihead_attention(q, k, v, kc=None, vc=None, spec=None, pos=None, window=128, scale=0.0, threads=0, **heads):
    """Multi-head attention: with ``spec`` (and kc, vc) the compressed model, without it the full
    causal control. Head layout by keyword: heads, kv_heads, head_dim, value_dim, sinks, gates,
    rope (a dict of rope fields)."""
    return _k._multihead_attention(q, kc, vc, spec, k, v, pos, heads, window, scale, threads)


# ---- sweeps ----------------------------------------------------------------------------------------

# kvphase-sweep's parameters (examples/kvphase-sweep.cpp) and their defaults; None = "the preset's
# or the task's".
_CLI_DEFAULTS = dict(
    preset="mean", window=None, stride=None, rope=None, pool=None, gate_bias=None, slot_weights=None,
    gate_content_std=0.0, raw_window=0, task="needle", context=None, dim=64, key_span=None, value_span=None,
    value_key_weight=1.0, query_noise=0.0, logit_scale=None, depth_lo=None, depth_hi=None, pairs=16000,
    codes=64, modulus=None, pad_min=24, lengths=None, engine="auto", trials=1000, seed=1, params_seed=0,
    threads=0, shard="0/1",
)
_CLI_PRESETS = ("full", "mean", "gated", "v4-csa", "v4-hca", "v41", "nsa", "paper-ref")
_CLI_POOLS = {"mean": "mean", "slot-gate": "slot_gate", "slot_gate": "slot_gate", "gated": "slot_gate",
              "weights": "weights", "max": "max", "identity": "identity"}


def _cli_operator(o, op):
    p = o["preset"]
    if op is not None:
        spec = _spec_dict(op)
        p = None  # the CLI presets' rules (mean/gated window, gated content_std) do not apply
    elif p == "full":
        spec = _k._preset("full").to_dict()
    elif p in ("mean", "gated"):
        spec = _apply_spec_fields(_SPEC_DEFAULTS, {"window": 4, "stride": 4, "name": p,
                                                   "pool": "mean" if p == "mean" else "slot_gate"})
    elif p.replace("_", "-") in _CLI_PRESETS:
        spec = _k._preset(p.replace("-", "_")).to_dict()
    else:
        _fail("preset", p, "must be one of " + ", ".join(_CLI_PRESETS))
    g = spec["grid"]
    if o["stride"] is not None:
        g["stride"] = o["stride"]
        if o["window"] is None and g["window"] < o["stride"]:
            g["window"] = o["stride"]
        if o["window"] is None and p in ("mean", "gated"):
            g["window"] = o["stride"]
    if o["window"] is not None:
        g["window"] = o["window"]
    if o["rope"] is not None:
        spec["rope"]["anchor"] = o["rope"]
    if o["pool"] is not None:
        if o["pool"] not in _CLI_POOLS:
            _fail("pool", o["pool"], "must be mean, slot-gate, weights, max or identity")
        spec["pool"] = _CLI_POOLS[o["pool"]]
    W = g["window"]
    bias = [] if o["gate_bias"] is None else [float(b) for b in o["gate_bias"]]
    if spec["pool"] == "slot_gate":
        if bias:
            spec["slot_bias"] = bias
        elif len(spec["slot_bias"]) != W:
            spec["slot_bias"] = [0.0] * W
        if p == "gated" or o["pool"] is not None:
            spec["content_std"] = float(o["gate_content_std"])
        if len(spec["slot_bias"]) != W:
            _fail("gate_bias", len(spec["slot_bias"]), f"needs one value per slot of the window ({W})")
    else:
        if bias:
            _fail("gate_bias", len(bias), "applies only to gated pools (preset='gated')")
        if o["gate_content_std"] != 0.0:
            _fail("gate_content_std", o["gate_content_std"], "applies only to gated pools (preset='gated')")
    if spec["pool"] == "weights":
        spec["slot_weights"] = [] if o["slot_weights"] is None else [float(w) for w in o["slot_weights"]]
    name = p if p is not None else (spec.get("name") or spec["pool"])
    return _k._spec_from_dict(spec).to_dict(), name


def _shard(text):
    if isinstance(text, (tuple, list)) and len(text) == 2:
        return {"index": int(text[0]), "count": int(text[1])}
    parts = str(text).split("/")
    if len(parts) != 2 or not all(s.isdigit() for s in parts):
        _fail("shard", text, "must be i/n with integers 0 <= i < n")
    return {"index": int(parts[0]), "count": int(parts[1])}


def sweep_config(op=None, **kwargs) -> dict:
    """The sweep config (sim::sweep_config, as a dict by its field list) that ``kvphase-sweep``
    builds from the same parameters: ``sweep_config(preset="gated", stride=4, trials=2000)`` is
    ``kvphase-sweep --preset gated --stride 4 --trials 2000``. Flag names use underscores
    (``gate_bias``, ``raw_window``, ``params_seed``); list flags take sequences; ``window`` is the
    chunk window W and ``raw_window`` the raw window, as on the command line.

    ``op``: an OperatorSpec (or dict) used instead of ``preset``; the operator flags (window,
    stride, rope, pool, gate_bias, ...) still apply on top of it.
    Any other keyword must be a field of the task's config or of sweep_config (e.g.
    ``offset_a=100`` for the padding task, ``compute_mass=True``): fields added to those structs
    need no change here.
    """
    o = dict(_CLI_DEFAULTS)
    rest = {}
    for key, value in kwargs.items():
        if key in o:
            o[key] = value
        else:
            rest[key] = value
    opd, preset_name = _cli_operator(o, op)
    c = _k._default_config()
    c["op"] = opd
    task = "kv-pairs" if o["task"] == "kv_pairs" else o["task"]
    t = _k._task_defaults(task)
    c["task"] = t
    c["engine"] = o["engine"]
    c["window"] = o["raw_window"]
    c["trials"] = o["trials"]
    c["seed"] = o["seed"]
    c["params_seed"] = o["params_seed"]
    c["threads"] = o["threads"]
    c["shard"] = _shard(o["shard"])
    c["compute_mass"] = False  # the output carries counts only
    S = opd["grid"]["stride"]

    def put(field, value):
        if value is not None:
            t[field] = value

    kind = t["kind"]
    if kind in ("needle", "kv-pairs"):
        t["dim"] = o["dim"]
        put("context", o["context"])
        put("key_span", o["key_span"])
        put("value_span", o["value_span"])
        t["value_key_weight"] = o["value_key_weight"]
        t["query_noise"] = o["query_noise"]
        put("logit_scale", o["logit_scale"])
        put("depth_lo", o["depth_lo"])
        put("depth_hi", o["depth_hi"])
        c["modulus"] = o["modulus"] if o["modulus"] is not None else (max(S, 2) if kind == "needle" else 8)
        if kind == "kv-pairs":
            t["pairs"] = o["pairs"]
            t["codes"] = o["codes"]
    elif kind == "padding":
        t["dim"] = o["dim"]
        put("code_length", o["context"])
        put("span_a", o["key_span"])
        put("span_b", o["value_span"])
        t["query_noise"] = o["query_noise"]
        put("logit_scale", o["logit_scale"])
        t["pad_min"] = o["pad_min"]
        t["lengths"] = o["lengths"] if o["lengths"] is not None else 4 * max(S, 1)
        if o["modulus"] is not None:
            _fail("modulus", o["modulus"], "does not apply to the padding task (groups = lengths)")
        if o["depth_lo"] is not None or o["depth_hi"] is not None:
            _fail("depth_lo", o["depth_lo"] if o["depth_lo"] is not None else o["depth_hi"],
                  "does not apply to the padding task (its evidence sits at fixed code offsets)")
    elif o["modulus"] is not None:
        c["modulus"] = o["modulus"]
    for key, value in rest.items():
        if key in t and key != "kind":
            t[key] = value
        elif key in c and key not in ("task", "op"):
            c[key] = value
        else:
            raise TypeError(f"sweep: unknown keyword argument '{key}' (neither a kvphase-sweep parameter nor a "
                            f"field of the task {kind} or of sweep_config)")
    checked, groups = _k._check_config(c)
    if groups < 2:
        _fail("modulus", groups, "needs at least 2 phase groups")
    period = S if S >= 2 else groups
    if groups % period != 0:
        _fail("modulus", groups, f"must be a multiple of the stride {S} (the period tested)")
    checked["_preset"] = preset_name
    return checked


class _Output:
    """What sweeps and analyses share: statistics computed once, provenance, and the CLI's
    kvphase-sweep/1 CSV and JSON texts (written to ``path`` if given)."""

    _stats = None

    @property
    def statistics(self):
        """Per model: recall, ci_low/ci_high, total_recall, gap (raw, bias_corrected, simultaneous
        interval), uniformity and periodicity tests, vs_baseline (gap minus the baseline's), paired
        (shifted design or item ids). Computed once (the permutation tests take a moment)."""
        if self._stats is None:
            self._stats = self._h.statistics()
        return self._stats

    @property
    def provenance(self):
        return self._h.provenance

    def _text(self, fmt, path):
        text = self._h.text(fmt)
        if path is not None:
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
        return text

    def to_csv(self, path=None) -> str:
        """The kvphase-sweep/1 CSV text (written to ``path`` if given): the CLI's bytes, provenance aside."""
        return self._text("csv", path)

    def to_json(self, path=None) -> str:
        """The kvphase-sweep/1 JSON document (written to ``path`` if given)."""
        return self._text("json", path)


class SweepResult(_Output):
    """Counts of a sweep (per group, compressed model and full control), their statistics, the
    provenance, and the CLI's output formats.

    Attributes: ``labels`` (group labels: phases, or padding lengths), ``trials`` and ``hits``
    (dicts model -> int64 array), ``recall`` (model -> array), ``statistics`` (model -> intervals,
    gap, uniformity, periodicity, gap vs the full model), ``theory`` (model -> predicted recall, or
    None), ``provenance``, ``config``, ``seconds``, ``trials_per_second``.
    """

    def __init__(self, handle):
        self._h = handle
        self.labels = handle.labels
        counts = {m: handle.counts(m) for m in ("compressed", "full")}
        self.trials = {m: c["trials"] for m, c in counts.items()}
        self.hits = {m: c["hits"] for m, c in counts.items()}

    @property
    def recall(self):
        import numpy as _np

        return {m: _np.divide(self.hits[m], _np.maximum(self.trials[m], 1), dtype=float) for m in self.trials}

    @property
    def theory(self):
        e = self._h.extra()
        if "theory" not in e["compressed"]:
            return None
        return {m: e[m]["theory"] for m in e}

    @property
    def config(self):
        return self._h.config

    @property
    def analysis(self):
        return self._h.analysis

    @property
    def run_columns(self):
        return dict(self._h.run_columns)

    @property
    def seconds(self):
        return self._h.seconds

    @property
    def trials_per_second(self):
        n = int(self.trials["compressed"].sum())
        return n / self.seconds if self.seconds > 0 else float("inf")

    @property
    def stream_key(self):
        return self._h.stream_key

    def __repr__(self):
        c = self.config
        return (f"SweepResult(task={c['task']['kind']}, op={c['op'].get('name') or c['op']['pool']}, "
                f"groups={len(self.labels)}, trials={int(self.trials['compressed'].sum())}, "
                f"seconds={self.seconds:.3g})")


def sweep(op=None, *, theory=False, progress=None, config=None, check_seconds=0.1, **kwargs) -> SweepResult:
    """Runs a phase sweep (sim::run_sweep) with ``kvphase-sweep``'s parameters as keyword
    arguments (see :func:`sweep_config`), or a full config dict (``config=``, sweep_config's field
    list). ``theory=True`` adds the theory column (an error when not covered, as ``--theory``).
    ``progress``: optional callable receiving the done fraction (0 ... 1).

    The trials run in one C++ run_sweep with the GIL released. About every ``check_seconds`` the
    calling thread checks for signals and calls ``progress``: Ctrl-C raises KeyboardInterrupt
    there (the trials not yet started are skipped), as does an exception of ``progress``.
    """
    if config is not None:
        if kwargs or op is not None:
            raise TypeError("sweep: config= excludes other sweep parameters")
        cfg = dict(config)
        preset_name = cfg.pop("_preset", None)
    else:
        cfg = sweep_config(op, **kwargs)
        preset_name = cfg.pop("_preset")
    if preset_name is None:
        preset_name = cfg["op"].get("name") or cfg["op"]["pool"]
    extra = {"program": "kvphase (python)", "preset": preset_name}
    argv = ["kvphase.sweep"] + [f"{k}={v!r}" for k, v in kwargs.items()] + (["theory=True"] if theory else [])
    argv = [_shlex.quote(a) for a in argv]
    return SweepResult(_k._sweep(cfg, extra, argv, bool(theory), progress, check_seconds))


def theory(op=None, *, config=None, **kwargs) -> dict:
    """The theory's per-group predictions for a sweep config (same parameters as :func:`sweep`):
    ``covered`` (bool), ``reason`` (why not, when not covered), ``labels`` and the predicted
    recall of the ``compressed`` model and the ``full`` control per group."""
    cfg = dict(config) if config is not None else sweep_config(op, **kwargs)
    cfg.pop("_preset", None)
    return _k._theory(cfg)


# ---- statistics of external results -------------------------------------------------------------------

def counts_by_phase(positions, correct, modulus, origin=0):
    """Per-phase counts of external results (e.g. a model's needle-in-a-haystack runs): each
    trial's target ``positions`` and whether it was ``correct``, grouped by phase
    (position - origin) mod ``modulus``. Returns ``(trials, hits)`` as int64 arrays, ready for
    :func:`summarize` (``summarize(hits, trials, period=stride)``) and the other statistics."""
    import numpy as _np  # imported on use: `import kvphase` itself needs no NumPy

    pos = _np.asarray(positions)
    ok = _np.asarray(correct)
    if pos.ndim != 1 or not _np.issubdtype(pos.dtype, _np.integer):
        raise TypeError("positions: expected a 1-D sequence of integers")
    if ok.shape != pos.shape:
        raise ValueError(f"correct: must have the shape of positions {pos.shape}, got {ok.shape}")
    if ok.dtype != bool and not _np.issubdtype(ok.dtype, _np.integer):
        raise TypeError("correct: expected booleans or 0/1 integers")
    if ok.dtype != bool and ((ok != 0) & (ok != 1)).any():
        _fail("correct", "a value other than 0 or 1", "must be booleans or 0/1")
    if int(modulus) < 2:
        _fail("modulus", modulus, "must be >= 2")
    g = _np.mod(pos.astype(_np.int64) - int(origin), int(modulus))
    trials = _np.bincount(g, minlength=int(modulus)).astype(_np.int64)
    hits = _np.bincount(g, weights=ok.astype(_np.int64), minlength=int(modulus)).astype(_np.int64)
    return trials, hits


class Analysis(_Output):
    """Per-phase analysis of an external evaluation (io/evaluation.hpp, the library behind
    ``kvphase-analyze``): ``models`` (one per condition, "all" without conditions), ``trials`` /
    ``hits`` (model -> int64 array per phase), ``statistics`` (as :class:`SweepResult`'s, plus
    ``paired`` when item ids were given), ``provenance``, and ``to_csv()`` / ``to_json()`` in
    kvphase-analyze's format."""

    def __init__(self, handle):
        self._h = handle
        self.models = list(handle.models)
        counts = {m: handle.counts(m) for m in self.models}
        self.trials = {m: c["trials"] for m, c in counts.items()}
        self.hits = {m: c["hits"] for m, c in counts.items()}

    def __repr__(self):
        return f"Analysis(models={self.models}, groups={len(next(iter(self.trials.values())))})"


def _column(name, values, n=None):
    import numpy as _np

    a = _np.asarray(values)
    if a.ndim != 1:
        _fail(name + ".ndim", a.ndim, "must be 1 (one value per record)")
    if n is not None and a.shape[0] != n:
        _fail(name + ".shape[0]", a.shape[0], f"must equal the number of records ({n})")
    return a


def analyze(positions=None, correct=None, stride=4, *, phases=None, scores=None, items=None, conditions=None,
            modulus=0, origin=0, confidence=0.95, permutations=9999, bootstrap=2000, seed=0, baseline="") -> Analysis:
    """Phase analysis of a real model's per-item results, as ``kvphase-analyze`` does: one record
    per (item, target placement) with the target's token index ``positions`` (phase =
    (position - origin) mod M, M = modulus or stride) or ``phases`` directly; ``correct`` (0/1)
    and/or ``scores`` (continuous margins); optional ``items`` (ids: the same item at every phase
    -> the paired tests) and ``conditions`` (one label per record: one model per label). The
    records go through the same parser and checks as the program's input files."""
    import numpy as _np

    cols, names = [], []
    if (positions is None) == (phases is None):
        _fail("positions", "phases", "give exactly one of positions and phases")
    first = _column("positions" if positions is not None else "phases", positions if positions is not None else phases)
    n = first.shape[0]
    if n == 0:
        _fail("positions", "[]", "needs at least one record")
    if not _np.issubdtype(first.dtype, _np.integer):
        raise TypeError(f"{'positions' if positions is not None else 'phases'}: expected a 1-D sequence of integers, "
                        f"got dtype {first.dtype}")
    names.append("position" if positions is not None else "phase")
    cols.append([str(int(v)) for v in first])
    if correct is None and scores is None:
        _fail("correct", "None", "give correct (0/1) and/or scores")
    if correct is not None:
        c = _column("correct", correct, n)
        if not (_np.issubdtype(c.dtype, _np.integer) or c.dtype == _np.bool_):
            raise TypeError(f"correct: expected a 1-D sequence of 0/1 integers or bools, got dtype {c.dtype}")
        names.append("correct")
        cols.append([str(int(v)) for v in c])
    if scores is not None:
        sc = _column("scores", scores, n).astype(float)
        names.append("score")
        cols.append([repr(float(v)) for v in sc])
    if items is not None:
        it = _column("items", items, n)
        names.append("item")
        cols.append([str(v) for v in it])
    by = []
    if conditions is not None:
        cd = _column("conditions", conditions, n)
        names.append("condition")
        cols.append([str(v) for v in cd])
        by = ["condition"]
    for name, col in zip(names, cols):
        for v in col:
            if any(ch in v for ch in ',"\n\r#'):
                _fail(name, v, "values must not contain commas, quotes, line breaks or '#'")
    text = ",".join(names) + "\n" + "".join(",".join(row) + "\n" for row in zip(*cols))
    argv = ["python", "kvphase.analyze"]
    return Analysis(_k._analyze(text, int(stride), int(modulus), int(origin), by, float(confidence), int(permutations),
                                int(bootstrap), int(seed), str(baseline), argv))


paired_test = _k.paired_test
load_v4_layer = _k.load_v4_layer
