#!/usr/bin/env python3
"""kvphase-inspect on files this script writes itself (standard library only).

A tiny 2-layer DeepSeek-V4-like checkpoint (safetensors, Hugging Face names, F32): layer 0 an
HCA-like compressor (m = 8) whose slot bias prefers slot 2 in every channel, layer 1 a CSA
compressor (m = 4, two streams) whose stream-b bias prefers block slot 2. Captured activations:
400 x 16 standard normal hidden states (.npy, version 1). Checks: the weights report names slot
2 for every channel of both layers (window slot 6 = block slot 2 for CSA, histogram all on it);
the activation report's compressed model retrieves phase-2 tokens and misses the others, its
per-phase profile is periodic with period m (periodicity p < 0.01), and full attention is flat.

usage: inspect_check.py KVPHASE_INSPECT WORKDIR
"""
import json
import os
import random
import struct
import subprocess
import sys


def safetensors(path, tensors):
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack("<%df" % len(values), *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def npy(path, rows, cols, values):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }" % (rows, cols)
    h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + struct.pack("<%df" % len(values), *values))


def models_of(work, layer):
    with open(os.path.join(work, "layer%d.json" % layer)) as f:
        return {m["model"]: m for m in json.load(f)["models"]}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s exited %d: %s" % (" ".join(cmd), p.returncode, p.stderr))
    return p.stdout


def main():
    exe, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    rng = random.Random(5)
    D, c = 16, 8
    gauss = lambda n, sd=1.0: [rng.gauss(0.0, sd) for _ in range(n)]
    P0, P1 = "model.layers.0.self_attn.compressor", "model.layers.1.self_attn.compressor"
    bias0 = [4.0 if r == 2 else 0.0 for r in range(8) for _ in range(c)]  # [m = 8, c]
    bias1 = [(-2.0 if k < c else (4.0 if r == 2 else 0.0)) for r in range(4) for k in range(2 * c)]  # [4, 2c]
    t = {
        P0 + ".kv_proj.weight": ([c, D], gauss(c * D, 0.5)),
        P0 + ".gate_proj.weight": ([c, D], [0.0] * (c * D)),
        P0 + ".position_bias": ([8, c], bias0),
        P0 + ".kv_norm.weight": ([c], [1.0] * c),
        P1 + ".kv_proj.weight": ([2 * c, D], gauss(2 * c * D, 0.5)),
        P1 + ".gate_proj.weight": ([2 * c, D], gauss(2 * c * D, 0.05)),
        P1 + ".position_bias": ([4, 2 * c], bias1),
        P1 + ".kv_norm.weight": ([c], [1.0] * c),
    }
    ck = os.path.join(work, "model.safetensors")
    safetensors(ck, t)
    N = 400
    acts = os.path.join(work, "hidden.npy")
    hidden = gauss(N * D)
    npy(acts, N, D, hidden)
    acts_st = os.path.join(work, "hidden.safetensors")
    safetensors(acts_st, {"h": ([N, D], hidden), "other": ([1], [0.0])})

    w = json.loads(run([exe, ck, "--rope-dim", "4", "--format", "json"]))
    layers = {e["layer"]: e for e in w["layers"]}
    assert sorted(layers) == [0, 1], layers.keys()
    for ch in layers[0]["channels"]:
        assert ch["preferred_slot"] == 2, ch
    assert layers[0]["histogram"] == [0, 0, 8, 0, 0, 0, 0, 0], layers[0]["histogram"]
    for ch in layers[1]["channels"]:
        assert ch["preferred_slot"] == 6 and ch["preferred_block_slot"] == 2, ch
    csv = run([exe, ck, "--rope-dim", "4"])
    assert "histogram layer 0 compressor: 0 0 8 0 0 0 0 0" in csv, csv[:2000]

    for layer, m in ((0, 8), (1, 4)):
        out = os.path.join(work, "layer%d.json" % layer)
        run([exe, ck, "--layer", str(layer), "--activations", acts, "--rope-dim", "4", "--permutations", "999",
             "--bootstrap", "200", "--out", out])
        with open(out) as f:
            r = json.load(f)
        assert r["format"] == "kvphase-sweep/1" and "provenance" in r
        models = {mm["model"]: mm for mm in r["models"]}
        comp, full = models["compressed"], models["full"]
        assert comp["modulus"] == m, comp["modulus"]
        rec = [p["recall"] for p in comp["phases"]]
        best = max(range(m), key=lambda g: rec[g])
        assert best == 2, rec
        assert rec[2] >= 0.9 and max(rec[g] for g in range(m) if g != 2) <= 0.1, rec
        assert comp["period"] == m and comp["period_p"] < 0.01, (comp["period"], comp["period_p"])
        assert min(p["recall"] for p in full["phases"]) >= 0.9, [p["recall"] for p in full["phases"]]
        print("layer %d (m = %d): compressed recall per phase %s, period p %.4g; full min %.3f" %
              (layer, m, ["%.2f" % x for x in rec], comp["period_p"], min(p["recall"] for p in full["phases"])))
    # the same activations from a safetensors file give the same counts
    a = json.loads(run([exe, ck, "--layer", "0", "--activations", acts_st, "--activations-tensor", "h", "--rope-dim", "4",
                        "--permutations", "99", "--bootstrap", "0", "--format", "json"]))
    assert [p["hits"] for p in a["models"][0]["phases"]] == [p["hits"] for p in models_of(work, 0)["compressed"]["phases"]]

    # bad input exits 2 naming what was wrong
    for args, needle in (([os.path.join(work, "missing.safetensors")], "cannot be opened"),
                         ([ck, "--layer", "0", "--activations", acts_st, "--rope-dim", "4"], "name one with the tensor flag"),
                         ([ck, "--layer", "5", "--rope-dim", "4"], "missing"),
                         ([ck, "--layer", "0", "--activations", os.path.join(work, "model.safetensors"),
                           "--activations-tensor", P0 + ".kv_norm.weight", "--rope-dim", "4"], "columns"),
                         ([ck, "--rope-dim", "x"], "--rope-dim")):
        p = subprocess.run([exe] + args, capture_output=True, text=True)
        assert p.returncode == 2 and needle in p.stderr, (args, p.returncode, p.stderr)
    # a config.json beside the weights gives the compress rope (qk_rope_head_dim 4 here)
    with open(os.path.join(work, "config.json"), "w") as f:
        json.dump({"compress_rope_theta": 160000, "qk_rope_head_dim": 4,
                   "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536}}, f)
    w2 = json.loads(run([exe, ck, "--format", "json"]))
    assert w2["provenance"]["config"]["rope_dim"] == 4 and w2["layers"] == w["layers"]
    os.remove(os.path.join(work, "config.json"))
    print("inspect_check: ok")


if __name__ == "__main__":
    main()
