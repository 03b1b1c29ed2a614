#!/usr/bin/env python3
"""Layering lint (DESIGN.md): a file under src/<layer>/ may include only headers of its own layer or of
layers below it. Same-rank layers (e.g. ops and quant) may not include each other. include/kiln is the
public API and may include nothing from src/; src/api implements it (over engine and below). Exits 1 listing every violation."""
import os
import re
import sys

# Lower rank = lower layer. Keep in step with DESIGN.md "Layout".
RANK = {
    "core": 0, "kernels": 1, "ops": 2, "formats": 2, "quant": 2, "dist": 2,
    "tokenizer": 3, "model": 4, "kv": 4, "sched": 5, "sampling": 5, "engine": 6,
    "kiln": 7, "api": 7, "server": 8,
}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of(rel):
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "kiln":
        return "kiln"
    return None


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = []
    for top in ("src", "include"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".cc", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                me = layer_of(rel)
                if me not in RANK:
                    bad.append(f"{rel}: layer '{me}' is not in scripts/lint_layers.py RANK")
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        dep = m.group(1).split("/")[0]
                        if dep not in RANK or dep == me:
                            continue
                        if me == "api" and dep == "kiln":
                            continue  # src/api implements the public headers
                        if me == "kiln" or RANK[dep] >= RANK[me]:
                            bad.append(f"{rel}:{n}: layer '{me}' includes '{m.group(1)}' (layer '{dep}')")
    for b in bad:
        print("layering:", b)
    if bad:
        sys.exit(1)
    print("layering: ok")


if __name__ == "__main__":
    main()
