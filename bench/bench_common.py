"""Helpers shared by the Python benchmarks in bench/ (run as `python3 bench/NAME.py`, so this folder
is on sys.path)."""
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_kiln():
    """$KILN_BIN, else this checkout's release (or debug) build of kiln, else `kiln` on PATH."""
    if os.environ.get("KILN_BIN"):
        return os.environ["KILN_BIN"]
    for preset in ["cpu-release", "cpu-debug"]:
        p = os.path.join(ROOT, "build", preset, "bin", "kiln")
        if os.path.exists(p):
            return p
    return "kiln"
