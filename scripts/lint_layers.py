#!/usr/bin/env python3
"""Layering lint (DESIGN.md "Layout"). Checks every C++/CUDA file under src/, include/, tools/, python/,
bench/ and tests/ of a tree:

1. Project includes go down, never up or sideways. A file of layer L may include headers of L and of
   layers ranked below L; layers of the same rank may not include each other. Inside `kernels` the
   sub-layers are ranked too: the neutral headers (src/kernels/*.h: the structs every backend shares)
   < `kernels/ref` (the scalar oracle), `kernels/cpu`, `kernels/cuda`, `kernels/roofline`, which may
   not include each other (the oracle never depends on what it checks, nor a backend on the oracle)
   < `kernels/select` (the run-time choice of a kernel by ISA, kRef being the oracle's). include/kiln (the public
   API) includes nothing from src/; src/api implements it. tools/, python/ (the Python extension), bench/
   and tests/ sit on top: they may include any layer, but nothing includes them.
2. The CMake link graph agrees: each src/<dir>/CMakeLists.txt `kiln_library(<dir> DEPS ...)` lists only
   kiln_ libraries of lower layers, and a file of src/<dir> includes another layer's headers only when
   that layer's library is among <dir>'s DEPS (directly or through them), so no header works only by
   accident of a shared include path.
3. System headers stay where they belong: CUDA (cuda*.h, cublas*, cub/, thrust/, nccl.h) only in
   kernels/cuda, the GPU model runner (src/model/cuda), the GPU communicator (src/dist/cuda), the CUDA
   tools (tools/*cuda*), bench/gpu and tests/gpu; NCCL and MPI only in src/dist; the HTTP library (httplib.h) only in src/server, the
   `kiln bench serve` client (tools/bench_serve*, tools/cmd_bench_serve*) and tests/server.

Usage: lint_layers.py [ROOT]   (ROOT defaults to this repository). Prints every violation with its
file and line and exits 1 when there is one. CMake runs it before building any library (target
`lint_layers`), so a reverse include fails the build; tests/scripts/lint_layers_test.sh plants bad
includes in a copy of the tree and checks that each one is caught.
"""
import os
import re
import sys

# Lower rank = lower layer. Keep in step with DESIGN.md "Layout" and docs/layout.md.
RANK = {
    "core": 0, "kernels": 1, "ops": 2, "formats": 2, "quant": 2, "dist": 2,
    "tokenizer": 3, "grammar": 4, "loader": 4, "kv": 4, "model": 5, "quant_tools": 6, "sched": 6, "sampling": 6,
    "engine": 7, "kiln": 8, "api": 8, "server": 9, "tools": 10, "python": 10, "bench": 10, "tests": 10,
}
# Sub-layers of kernels ("" = the neutral headers directly in src/kernels).
KERNEL_RANK = {"": 0, "ref": 1, "cpu": 1, "cuda": 1, "roofline": 1, "select": 2}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]')
SOURCES = (".h", ".cc", ".cu", ".cuh")

CUDA_HEADER = re.compile(r"^(cuda[^/]*\.h|cublas[^/]*\.h|cub/|thrust/|nccl\.h|curand[^/]*\.h|cuda/)")
MPI_HEADER = re.compile(r"^(mpi\.h|nccl\.h)$")
HTTP_HEADER = re.compile(r"^httplib\.h$")


def layer_of(rel):
    """(layer, kernel sub-layer or None) of a file path relative to the root, or (None, None)."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        if parts[1] == "kernels":
            return "kernels", (parts[2] if len(parts) > 3 else "")
        return parts[1], None
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "kiln":
        return "kiln", None
    if parts[0] in ("tools", "python", "bench", "tests"):
        return parts[0], None
    return None, None


def target_of(inc):
    """(layer, kernel sub-layer) an include "a/b/c.h" names, or (None, None) for a file-local one."""
    parts = inc.split("/")
    if parts[0] not in RANK or len(parts) < 2 or parts[0] in ("tools", "python", "bench", "tests"):
        return None, None
    if parts[0] == "kernels":
        return "kernels", (parts[1] if len(parts) > 2 else "")
    return parts[0], None


def system_header_allowed(rel, header):
    if CUDA_HEADER.match(header) and not MPI_HEADER.match(header):
        return (rel.startswith(("src/kernels/cuda/", "src/model/cuda/", "src/dist/cuda/", "bench/gpu/", "tests/gpu/"))
                or (rel.startswith("tools/") and "cuda" in os.path.basename(rel)))
    if MPI_HEADER.match(header):
        return rel.startswith("src/dist/")
    if HTTP_HEADER.match(header):
        return rel.startswith(("src/server/", "tests/server/", "tools/bench_serve", "tools/cmd_bench_serve"))
    return True


def check_include(rel, me, my_sub, header):
    """The violation text of one quoted include, or None."""
    dep, dep_sub = target_of(header)
    if dep is None:
        return None
    if me == "api" and dep == "kiln":
        return None  # src/api implements the public headers
    if me == "kiln":
        return f"the public API includes '{header}' (layer '{dep}'): include/kiln includes nothing from src/"
    if dep == me:
        if me != "kernels" or my_sub == dep_sub or dep_sub not in KERNEL_RANK or my_sub not in KERNEL_RANK:
            return None
        if KERNEL_RANK[dep_sub] < KERNEL_RANK[my_sub]:
            return None
        where = f"kernels/{my_sub}" if my_sub else "the neutral kernels headers"
        return f"{where} includes '{header}' (kernels/{dep_sub}): sub-layers of kernels include only lower ones"
    if RANK[dep] >= RANK[me]:
        return f"layer '{me}' includes '{header}' (layer '{dep}'), which is not below it"
    return None


LIBRARY = re.compile(r"kiln_library\(\s*(\w+)\s+DEPS([^)]*)\)", re.S)


def link_graph(root, bad):
    """{layer: set of kiln layers it links, transitively} from src/*/CMakeLists.txt; DEPS that go up or
    sideways are reported into bad."""
    direct = {}
    src = os.path.join(root, "src")
    for d in sorted(os.listdir(src)) if os.path.isdir(src) else []:
        cm = os.path.join(src, d, "CMakeLists.txt")
        if not os.path.isfile(cm):
            continue
        with open(cm, encoding="utf-8") as fh:
            text = re.sub(r"#[^\n]*", "", fh.read())
        for m in LIBRARY.finditer(text):
            name, deps = m.group(1), [x[len("kiln_"):] for x in m.group(2).split() if x.startswith("kiln_")]
            direct[name] = set(deps)
            for dep in deps:
                if name in RANK and dep in RANK and RANK[dep] >= RANK[name]:
                    bad.append(f"src/{d}/CMakeLists.txt: kiln_{name} links kiln_{dep}, which is not below it")
    closure = {}
    def reach(n, seen=()):
        if n not in closure:
            out = set()
            for dep in direct.get(n, ()):
                if dep not in seen:
                    out |= {dep} | reach(dep, seen + (n,))
            closure[n] = out
        return closure[n]
    for n in direct:
        reach(n)
    return closure


def lint(root):
    bad = []
    links = link_graph(root, bad)
    for top in ("src", "include", "tools", "python", "bench", "tests"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                me, my_sub = layer_of(rel)
                if me not in RANK:
                    bad.append(f"{rel}: layer '{me}' is not in scripts/lint_layers.py RANK")
                    continue
                if me == "kernels" and my_sub not in KERNEL_RANK:
                    bad.append(f"{rel}: kernels sub-layer '{my_sub}' is not in scripts/lint_layers.py KERNEL_RANK")
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        kind, header = m.group(1), m.group(2)
                        if kind == "<":
                            if not system_header_allowed(rel, header):
                                bad.append(f"{rel}:{n}: system header <{header}> does not belong here "
                                           "(scripts/lint_layers.py rule 3)")
                            continue
                        why = check_include(rel, me, my_sub, header)
                        dep = target_of(header)[0]
                        if (not why and rel.startswith("src/") and me in links and dep not in (None, me, "kiln")
                                and dep not in links[me]):
                            why = (f"layer '{me}' includes '{header}', but kiln_{me} does not link kiln_{dep} "
                                   f"(add it to DEPS in src/{me}/CMakeLists.txt)")
                        if why:
                            bad.append(f"{rel}:{n}: {why}")
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad = lint(root)
    for b in bad:
        print("layering:", b)
    if bad:
        print(f"layering: {len(bad)} violation(s) (rules: scripts/lint_layers.py, DESIGN.md 'Layout')")
        sys.exit(1)
    print("layering: ok")


if __name__ == "__main__":
    main()
