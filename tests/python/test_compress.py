# Operators from Python: specs and presets (same validation messages as C++), compress equal to the
# C++ result bit for bit, entry metadata, array argument errors, attention models.
import numpy as np
import pytest

import kvphase


# ---- specs ------------------------------------------------------------------------------------------

def test_version_and_presets():
    assert kvphase.__version__.count(".") == 2
    assert set(kvphase.preset_names) >= {"v4_csa", "v4_hca", "v41", "nsa", "paper_ref", "full"}
    s = kvphase.preset("v4_csa")
    d = s.to_dict()
    assert d["grid"]["window"] == 8 and d["grid"]["stride"] == 4 and d["pool"] == "two_stream"
    assert kvphase.preset("v4_csa") == s
    assert kvphase.preset("v4_csa", rope={"anchor": "none"}) != s


def test_operator_spec_fields_flat_or_nested():
    a = kvphase.operator_spec(window=8, stride=4, pool="mean", name="m")
    b = kvphase.operator_spec(grid={"window": 8, "stride": 4}, pool="mean", name="m")
    assert a == b
    assert a.to_dict()["grid"]["window"] == 8
    # derived from a preset, one field changed
    c = kvphase.operator_spec("v4_hca", anchor="none")
    assert c.to_dict()["rope"]["anchor"] == "none" and c.to_dict()["grid"]["window"] == 128
    assert "window=8" in repr(a)


def test_spec_errors_carry_the_library_message():
    with pytest.raises(ValueError, match=r"^kvphase: window = 2: must be >= stride \(4\): every token must be pooled$"):
        kvphase.operator_spec(window=2, stride=4)
    with pytest.raises(ValueError, match=r"^kvphase: pool = \"bogus\"|kvphase: pool = bogus: must be identity, mean"):
        kvphase.operator_spec(pool="bogus")
    with pytest.raises(ValueError, match=r"kvphase: nope = 3: is not a field of this configuration"):
        kvphase.operator_spec(nope=3)
    with pytest.raises(ValueError, match=r"kvphase: grid.window = \"8\": must be an integer"):
        kvphase.operator_spec(window="8")
    with pytest.raises(ValueError, match=r"kvphase: preset = bogus: unknown preset"):
        kvphase.preset("bogus")
    with pytest.raises(ValueError, match=r"slot_weights.size\(\) = 0: must equal window \(4\)"):
        kvphase.operator_spec(pool="weights")


# ---- compress -----------------------------------------------------------------------------------------

def _reference_cases(d):
    for line in (d / "cases.txt").read_text().splitlines():
        name, dtype, n, dim, seed, e, c = line.split()
        yield name, np.dtype(dtype), int(n), int(dim), int(seed), int(e), int(c)


def _spec_of(name):
    if name.startswith("mean84"):
        return kvphase.operator_spec(window=8, stride=4, pool="mean", name="mean84")
    return kvphase.preset(name)


def test_compress_equals_cpp_bitwise(compress_reference):
    cases = list(_reference_cases(compress_reference))
    assert len(cases) >= 8
    for name, dtype, n, dim, seed, e, c in cases:
        x = np.fromfile(compress_reference / f"{name}.x", dtype=dtype).reshape(n, dim)
        want = np.fromfile(compress_reference / f"{name}.out", dtype=dtype).reshape(e, c)
        spec = _spec_of(name)
        params = kvphase.make_params(spec, dim, seed=seed, dtype=dtype.name) if seed >= 0 else None
        got = kvphase.compress(spec, x, params)
        assert got.dtype == dtype and got.shape == (e, c), name
        assert got.tobytes() == want.tobytes(), f"{name}: compress differs from the C++ result"


def test_compress_mean_matches_the_formula():
    # W = 8, S = 4 (v4 convention): entry e pools tokens 4e-4 ... 4e+3, the slots before 0 masked
    x = np.arange(16 * 3, dtype=np.float64).reshape(16, 3)
    spec = kvphase.operator_spec(window=8, stride=4, pool="mean")
    out = kvphase.compress(spec, x)
    assert out.shape == (spec.num_entries(16), 3) == (4, 3)
    np.testing.assert_array_equal(out[0], x[0:4].mean(axis=0))  # exact: small integers
    np.testing.assert_array_equal(out[2], x[4:12].mean(axis=0))


def test_compress_reads_in_place_and_returns_owned_arrays():
    x = np.random.default_rng(1).standard_normal((64, 8)).astype(np.float32)
    x.setflags(write=False)  # read-only input is fine: never written, never copied
    spec = kvphase.operator_spec(window=4, stride=4, pool="mean")
    out = kvphase.compress(spec, x)
    assert out.flags.c_contiguous and out.flags.owndata is False and out.base is not None
    assert not np.shares_memory(out, x)
    out[0, 0] = 1.0  # writable


def test_compress_argument_errors_name_the_argument():
    spec = kvphase.operator_spec(window=4, stride=4, pool="mean")
    with pytest.raises(TypeError, match=r"^x: dtype must be float32 or float64, got int64"):
        kvphase.compress(spec, np.zeros((8, 4), dtype=np.int64))
    with pytest.raises(TypeError, match=r"^x: expected a numpy.ndarray"):
        kvphase.compress(spec, [[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"^x: must be 2-D"):
        kvphase.compress(spec, np.zeros(8, dtype=np.float32))
    with pytest.raises(ValueError, match=r"^x: must be C-contiguous"):
        kvphase.compress(spec, np.zeros((8, 4), dtype=np.float32).T)
    p = kvphase.make_params(kvphase.preset("v41"), 64, dtype="float64")
    with pytest.raises(TypeError, match=r"^params: made for float64 but x is float32"):
        kvphase.compress(kvphase.preset("v41"), np.zeros((8, 64), dtype=np.float32), p)
    # a gated preset without its parameters: the library's own message
    with pytest.raises(ValueError, match=r"^kvphase: "):
        kvphase.compress(kvphase.preset("v4_csa"), np.zeros((8, 16), dtype=np.float32))


# ---- entry metadata ---------------------------------------------------------------------------------------

def test_entry_metadata():
    spec = kvphase.operator_spec(window=8, stride=4, pool="mean")
    e = spec.entries(16)
    np.testing.assert_array_equal(e["first"], [-4, 0, 4, 8])
    np.testing.assert_array_equal(e["last"], [3, 7, 11, 15])
    np.testing.assert_array_equal(e["masked"], [4, 0, 0, 0])
    np.testing.assert_array_equal(e["visible_from"], [3, 7, 11, 15])  # complete entries only
    np.testing.assert_array_equal(spec.phases([0, 1, 5, 11, -1]), [0, 1, 1, 3, 3])
    assert spec.num_visible(6) == 1 and spec.num_visible(7) == 2
    assert spec.entries_containing(5) == [(1, 1), (2, 1)] or spec.entries_containing(5) == [(1, 5), (2, 1)]
    assert kvphase.output_dim(spec, 8) == 8
    with pytest.raises(ValueError, match=r"kvphase: head = 1: must be in \[0, heads = 1\)"):
        spec.entries(16, head=1)


# ---- attention --------------------------------------------------------------------------------------------

def _softmax_rows(s):
    s = s - s.max(axis=1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=1, keepdims=True)


def test_full_attention_and_scores_against_numpy():
    rng = np.random.default_rng(2)
    n, d = 40, 8
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    s = kvphase.scores(q, k)
    np.testing.assert_allclose(s, q @ k.T / np.sqrt(d), rtol=0, atol=64 * np.finfo(float).eps * np.abs(s).max())
    o = kvphase.full_attention(q, k, v)
    mask = np.tril(np.ones((n, n), dtype=bool))
    p = _softmax_rows(np.where(mask, q @ k.T / np.sqrt(d), -np.inf))
    # double precision: softmax and the weighted sum of n terms, error a few n*eps of |v|
    np.testing.assert_allclose(o, p @ v, rtol=0, atol=8 * n * np.finfo(float).eps * np.abs(v).max())
    with pytest.raises(TypeError, match=r"^k: dtype float32 differs from q's float64"):
        kvphase.full_attention(q, k.astype(np.float32), v)


def test_compressed_attention_window_only_equals_full_on_the_window():
    rng = np.random.default_rng(3)
    n, d, w = 32, 4, 6
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    spec = kvphase.operator_spec(window=4, stride=4, pool="mean")
    kc, vc = kvphase.compress(spec, k), kvphase.compress(spec, v)
    o = kvphase.compressed_attention(q[-1:], kc, vc, spec, k, v, window=w, compressed=False)
    s = (q[-1] @ k[n - w:].T) / np.sqrt(d)
    p = np.exp(s - s.max())
    p /= p.sum()
    np.testing.assert_allclose(o[0], p @ v[n - w:], rtol=0, atol=8 * w * np.finfo(float).eps * np.abs(v).max())
    # compressed + window: one joint softmax over the visible entries and the window
    o2 = kvphase.compressed_attention(q[-1:], kc, vc, spec, k, v, window=w)
    E = spec.num_visible(n - 1)
    s2 = np.concatenate([kc[:E] @ q[-1], k[n - w:] @ q[-1]]) / np.sqrt(d)
    p2 = np.exp(s2 - s2.max())
    p2 /= p2.sum()
    want = p2 @ np.concatenate([vc[:E], v[n - w:]])
    np.testing.assert_allclose(o2[0], want, rtol=0, atol=8 * (E + w) * np.finfo(float).eps * np.abs(v).max())
    # selected: only entry 0 of the compressed branch
    o3 = kvphase.compressed_attention(q[-1:], kc, vc, spec, k, v, window=w, entries=[[0]])
    s3 = np.concatenate([kc[:1] @ q[-1], k[n - w:] @ q[-1]]) / np.sqrt(d)
    p3 = np.exp(s3 - s3.max())
    p3 /= p3.sum()
    np.testing.assert_allclose(o3[0], p3 @ np.concatenate([vc[:1], v[n - w:]]), rtol=0,
                               atol=8 * (1 + w) * np.finfo(float).eps * np.abs(v).max())


def test_multihead_full_equals_per_head_full():
    rng = np.random.default_rng(4)
    n, H, dh = 24, 2, 4
    q = rng.standard_normal((n, H * dh))
    k = rng.standard_normal((n, dh))
    v = rng.standard_normal((n, dh))
    o = kvphase.multihead_attention(q, k, v, heads=H, kv_heads=1, head_dim=dh)
    for h in range(H):
        np.testing.assert_allclose(o[:, h * dh:(h + 1) * dh],
                                   kvphase.full_attention(np.ascontiguousarray(q[:, h * dh:(h + 1) * dh]), k, v),
                                   rtol=0, atol=16 * n * np.finfo(float).eps)
    with pytest.raises(ValueError, match=r"kvphase: kv_heads = 3: must divide heads \(2\)"):
        kvphase.multihead_attention(q, k, v, heads=H, kv_heads=3, head_dim=dh)


# ---- real checkpoints -------------------------------------------------------------------------------

def _write_safetensors(path, tensors):
    """A safetensors file (8-byte little-endian header length, JSON header, raw data) of float32 arrays."""
    import json
    import struct

    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_load_v4_layer_hca_matches_a_numpy_reference(tmp_path):
    import json

    # one HCA layer: m = 4 slots, hidden D = 16, c = 8 channels, the last 4 rotated
    rng = np.random.default_rng(3)
    m, D, c, rope = 4, 16, 8, 4
    wc, wz = rng.standard_normal((c, D)), rng.standard_normal((c, D))
    bias, gain = rng.standard_normal((m, c)), 1 + 0.1 * rng.standard_normal(c)
    P = "model.layers.0.self_attn.compressor"
    _write_safetensors(tmp_path / "model.safetensors", {P + ".kv_proj.weight": wc, P + ".gate_proj.weight": wz,
                                                         P + ".position_bias": bias, P + ".kv_norm.weight": gain})
    (tmp_path / "config.json").write_text(json.dumps({"compress_rope_theta": 10000.0, "qk_rope_head_dim": rope,
                                                      "rms_norm_eps": 1e-6}))
    layer = kvphase.load_v4_layer(str(tmp_path), 0)
    assert layer["csa"] is False and layer["indexer"] is None and layer["compressor"]["d"] == D
    spec, params = layer["compressor"]["spec"], layer["compressor"]["params"]
    assert spec.to_dict()["grid"]["window"] == m and spec.to_dict()["grid"]["stride"] == m
    x = rng.standard_normal((64, D)).astype(np.float32)
    got = kvphase.compress(spec, x, params)
    # reference in double on the float32 weights: softmax over the slots of (gate logits + slot
    # bias) per channel, weighted payloads, RMSNorm with the gain; channels [0, c - rope) are not
    # rotated, so they are compared exactly up to float32 rounding
    f = lambda a: a.astype(np.float32).astype(np.float64)  # noqa: E731
    X = x.astype(np.float64).reshape(-1, m, D)
    pay, z = X @ f(wc).T, X @ f(wz).T + f(bias)[None]
    w = np.exp(z - z.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    C = (w * pay).sum(axis=1)
    C = C / np.sqrt((C**2).mean(axis=1, keepdims=True) + 1e-6) * f(gain)
    assert got.shape == (16, c)
    # float32 evaluation of sums of D + m terms of O(1) values: bound 8·(D + m)·eps32 of the scale
    tol = 8 * (D + m) * np.finfo(np.float32).eps * np.abs(C).max()
    np.testing.assert_allclose(got[:, : c - rope], C[:, : c - rope], rtol=0, atol=tol)
    # the rotated channels keep their norm (a rotation of channel pairs)
    np.testing.assert_allclose(np.linalg.norm(got[:, c - rope :], axis=1), np.linalg.norm(C[:, c - rope :], axis=1),
                               rtol=0, atol=4 * tol)
    with pytest.raises(ValueError, match=r"kvphase: .*model.layers.1.self_attn.compressor"):
        kvphase.load_v4_layer(str(tmp_path), 1)
    with pytest.raises(ValueError, match=r"^kvphase: dtype = float16"):
        kvphase.load_v4_layer(str(tmp_path), 0, dtype="float16")
