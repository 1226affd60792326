"""Helpers shared by the plotting scripts: matplotlib discovery and reading kvphase outputs.

read_rows(path)    rows of any kvphase CSV as dicts of strings ('#' lines skipped).
read_sweep(paths)  rows of kvphase-sweep outputs, CSV or JSON (format kvphase-sweep/1, see
                   include/kvphase/io/sweep_format.hpp), one dict per (run, model, phase) with the
                   standard columns, the per-phase extras (e.g. theory) and the run configuration.

Only the standard library is used here, so the module imports under any python3.
"""
import csv
import json
import os
import sys

SWEEP_FORMAT = "kvphase-sweep/1"
# the standard columns of a sweep data row, before the extras
STANDARD_COLUMNS = ("model", "phase", "trials", "hits", "recall", "ci_low", "ci_high")


def have_matplotlib():
    """True when matplotlib imports. When the first python3 on PATH cannot import it, re-runs
    the calling script under Debian's /usr/bin/python3 (which python3-matplotlib serves)."""
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        return False


def read_rows(path):
    """Rows of a kvphase CSV as dicts; lines starting with '#' (provenance) are skipped."""
    with open(path, newline="") as f:
        lines = [ln for ln in f if not ln.startswith("#") and ln.strip()]
    return list(csv.DictReader(lines))


def number(x):
    """x as int or float when it reads as one (CSV cells are text), else x unchanged."""
    if isinstance(x, bool) or not isinstance(x, (str, int, float)):
        return x
    if isinstance(x, (int, float)):
        return x
    s = x.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        return x


def _config_value(v):
    """A provenance config value as a cell: scalars as they are, lists and objects as compact JSON."""
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"))
    return v


def _with_config(row, config):
    """row plus every config key the row does not carry as a column (the data-row columns win)."""
    for k, v in config.items():
        if k not in row:
            row[k] = _config_value(v)
    return row


def _read_sweep_csv(path, first_run):
    rows, run = [], first_run - 1
    header, config = None, {}
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                if line.startswith("# config: "):
                    config = json.loads(line[len("# config: "):])
                    # a new provenance block starts a new run (files concatenated with cat)
                    header = None
                continue
            if not line.strip():
                continue
            cells = next(csv.reader([line]))
            if cells[:2] == ["model", "phase"]:
                header = cells
                run += 1
                continue
            if header is None:
                raise ValueError(f"{path}: data row before the header line 'model,phase,...'")
            if len(cells) != len(header):
                raise ValueError(f"{path}: row has {len(cells)} cells, header {len(header)}: {line.strip()}")
            row = {k: number(v) for k, v in zip(header, cells)}
            row["_run"] = run
            row["_source"] = path
            rows.append(_with_config(row, config))
    return rows, run + 1


def _read_sweep_json(path, run):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("format") != SWEEP_FORMAT:
        raise ValueError(f"{path}: format is {doc.get('format')!r}, expected {SWEEP_FORMAT!r}")
    config = doc.get("provenance", {}).get("config", {}) or {}
    rows = []
    for m in doc.get("models", []):
        for p in m.get("phases", []):
            row = {"model": m["model"]}
            row.update({k: v for k, v in p.items()})
            row["_run"] = run
            row["_source"] = path
            rows.append(_with_config(row, config))
    return rows, run + 1


def read_sweep(paths):
    """Rows of one or several kvphase-sweep outputs (CSV or JSON, told apart by their first
    character), concatenated. Each row has the standard columns, the per-phase extras, the run
    configuration (the data row's own columns when present, else the file's provenance config:
    the '# config: {...}' line of a CSV, provenance.config of a JSON), and '_run' (a number per
    run: per file, or per header block in a concatenated CSV) and '_source' (the file)."""
    if isinstance(paths, str):
        paths = [paths]
    rows, run = [], 0
    for path in paths:
        with open(path) as f:
            head = f.read(64).lstrip()
        if head.startswith("{"):
            r, run = _read_sweep_json(path, run)
        else:
            r, run = _read_sweep_csv(path, run)
        rows.extend(r)
    for r in rows:
        for k in STANDARD_COLUMNS:
            if k not in r:
                raise ValueError(f"{r['_source']}: a row has no {k!r} column")
    return rows
