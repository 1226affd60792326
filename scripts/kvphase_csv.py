"""Helpers shared by the plotting scripts: matplotlib discovery and kvphase CSV reading."""
import csv
import os
import sys


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
