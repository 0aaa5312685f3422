#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Checks, inside the rehearsal root (scripts/gpu-rehearse.sh), that what the build and the
tests used came from the bundle: every header the compiler read (ninja's deps and nvcc's
depfiles), every pkg-config file, every shared library a gst-pi0 or bundle program loaded
(LD_DEBUG=libs of the test run) and every GStreamer plugin in the registries. Anything else
must come from the source tree, the build, CUDA, the torch virtual environment, or (headers)
the C/C++ toolchain, (libraries) a package the bundle names as the GPU machine's own
(DEVICE-PROVIDED). Prints what came from where; exits 1 on the first kind of violation found.

usage: gpu_rehearse_proof.py --source DIR --work DIR --bundle DIR --venv DIR --cuda DIR
                             --lddebug DIR
"""
import argparse
import collections
import glob
import json
import os
import re
import subprocess
import sys

TOOLCHAIN_HEADERS = {"libc6-dev", "linux-libc-dev", "libstdc++-12-dev", "libgcc-12-dev",
                     "gcc-12", "g++-12", "cpp-12", "libcrypt-dev"}


def real(p):
    return os.path.realpath(p)


def under(p, root):
    root = root.rstrip("/")
    return p == root or p.startswith(root + "/")


def dpkg_owner_map():
    """Real path -> package, from dpkg's file lists (the root's own packages)."""
    owner, via_link = {}, {}
    for lst in glob.glob("/var/lib/dpkg/info/*.list"):
        pkg = os.path.basename(lst)[:-5].split(":")[0]
        with open(lst) as f:
            for line in f:
                p = line.rstrip("\n")
                if not p or not os.path.exists(p) or os.path.isdir(p):
                    continue
                # The package that ships the file itself owns it, not one with a link to it
                # (libfoo-dev's libfoo.so).
                if os.path.islink(p):
                    via_link.setdefault(real(p), pkg)
                else:
                    owner[real(p)] = pkg
    for p, pkg in via_link.items():
        owner.setdefault(p, pkg)
    return owner


class Origins:
    def __init__(self, a, owner):
        self.a = a
        self.owner = owner
        self.prefix = real(os.path.join(a.work, "prefix"))
        self.roots = [("bundle", self.prefix), ("build", real(os.path.join(a.work, "build"))),
                      ("source", real(a.source)), ("cuda", real(a.cuda)), ("torch", real(a.venv))]

    def of(self, path):
        p = real(path)
        for name, root in self.roots:
            if under(p, root):
                return name, p
        return "pkg:" + self.owner.get(p, "?"), p


def check_headers(a, o):
    build = os.path.join(a.work, "build")
    deps = subprocess.run(["ninja", "-C", build, "-t", "deps"], capture_output=True, text=True,
                          check=True).stdout
    paths = set()
    for line in deps.splitlines():
        if line.startswith("    "):
            p = line.strip()
            paths.add(p if os.path.isabs(p) else os.path.join(build, p))
    # nvcc's depfiles (custom targets keep them as files).
    for d in glob.glob(os.path.join(build, "**", "*.o.d"), recursive=True):
        text = open(d).read().replace("\\\n", " ")
        for tok in text.split(":", 1)[-1].split():
            paths.add(tok if os.path.isabs(tok) else os.path.join(build, tok))
    count = collections.Counter()
    bad = []
    for p in sorted(paths):
        if not os.path.exists(p):
            continue
        origin, rp = o.of(p)
        if origin.startswith("pkg:"):
            if origin[4:] in TOOLCHAIN_HEADERS:
                origin = "toolchain"
            else:
                bad.append(f"{rp} ({origin})")
        count[origin] += 1
    print(f"headers and sources the build read: {sum(count.values())}: " +
          ", ".join(f"{k} {v}" for k, v in sorted(count.items())))
    if count["bundle"] == 0:
        bad.append("no header came from the bundle: the check saw nothing")
    return bad


def check_pkgconfig(a, o):
    build = os.path.join(a.work, "build")
    deps = json.loads(subprocess.run(["meson", "introspect", "--dependencies", build],
                                     capture_output=True, text=True, check=True).stdout)
    pkgconf = os.environ.get("PKG_CONFIG", "pkg-config")
    todo = [d["name"] for d in deps]
    seen, bad, used = set(), [], []
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        r = subprocess.run([pkgconf, "--path", n], capture_output=True, text=True)
        if r.returncode != 0:
            continue  # not a pkg-config dependency (cuda, threads, dl, the project's own)
        path = r.stdout.strip()
        origin, rp = o.of(path)
        used.append(n)
        if origin != "bundle":
            bad.append(f"{n}.pc: {rp} ({origin})")
        req = subprocess.run([pkgconf, "--print-requires", "--print-requires-private", n],
                             capture_output=True, text=True).stdout
        todo += [line.split()[0] for line in req.splitlines() if line.strip()]
    # The compile and link arguments of every dependency point into allowed places only.
    for d in deps:
        for arg in d.get("compile_args", []) + d.get("link_args", []):
            m = re.match(r"^(?:-I|-isystem|-L)?(/.*)$", arg)
            if m and os.path.exists(m.group(1)):
                origin, rp = o.of(m.group(1))
                if origin.startswith("pkg:"):
                    bad.append(f"dependency {d['name']}: {arg} ({origin})")
    # No file of those names anywhere else in the root.
    names = {n + ".pc" for n in used}
    for top in ["/usr", "/lib", "/etc", "/opt", "/var/lib"]:
        for dirpath, dirnames, filenames in os.walk(top):
            if under(real(dirpath), o.prefix):
                dirnames[:] = []
                continue
            for f in filenames:
                if f in names:
                    bad.append(f"{f} also at {os.path.join(dirpath, f)}, outside the bundle")
    print(f"pkg-config files used (the closure of what meson asked for): {len(used)}: {' '.join(sorted(used))}")
    if not used:
        bad.append("no pkg-config file was used: the check saw nothing")
    return bad


def check_libraries(a, o, device_provided):
    blocks = []  # (program, [libs])
    for f in glob.glob(os.path.join(a.lddebug, "ld.*")):
        cur_prog, cur_libs = None, []
        for line in open(f, errors="replace"):
            m = re.search(r"calling init: (\S+)", line)
            if m:
                lib = m.group(1)
                if lib.endswith("ld-linux-x86-64.so.2") and cur_libs:
                    blocks.append((cur_prog, cur_libs))  # a new exec in the same process
                    cur_prog, cur_libs = None, []
                cur_libs.append(lib)
                continue
            m = re.search(r"initialize program: (.*)$", line)
            if m:
                cur_prog = m.group(1).strip()
        if cur_libs:
            blocks.append((cur_prog, cur_libs))
    work = real(a.work)
    ours = [(p, libs) for p, libs in blocks if p and under(real(p) if os.path.isabs(p) else p, work)]
    count, bad, progs = collections.Counter(), set(), set()
    for prog, libs in ours:
        progs.add(os.path.basename(prog))
        for lib in libs:
            origin, rp = o.of(lib)
            if origin.startswith("pkg:"):
                if origin[4:] in device_provided:
                    origin = "device-provided"
                else:
                    bad.add(f"{os.path.basename(prog)} loaded {rp} ({origin})")
            count[origin] += 1
    print(f"processes traced: {len(blocks)}; gst-pi0 and bundle programs: {len(ours)} "
          f"({len(progs)} distinct)")
    print("libraries they loaded, by origin: " +
          ", ".join(f"{k} {v}" for k, v in sorted(count.items())))
    if count["bundle"] == 0 or len(progs) < 5:
        bad.add("too few traced programs or bundle libraries: the check saw nothing")
    return sorted(bad)


def check_plugins(a, o):
    regs = glob.glob(os.path.join(a.work, "build", "**", "*.registry"), recursive=True)
    regs += glob.glob(os.path.join(a.work, "registry.bin"))
    plugins, bad = set(), []
    for r in regs:
        data = open(r, "rb").read()
        for m in re.finditer(rb"(/[\x21-\x7e]+?\.so)\x00", data):
            p = m.group(1).decode()
            origin, rp = o.of(p)
            if origin not in ("bundle", "build"):
                bad.append(f"{r}: plugin {rp} ({origin})")
            plugins.add(os.path.basename(rp))
    print(f"GStreamer registries: {len(regs)}; plugins in them: {' '.join(sorted(plugins))}")
    if not plugins:
        bad.append("no plugin in any registry: the check saw nothing")
    return bad


def main():
    ap = argparse.ArgumentParser()
    for k in ("source", "work", "bundle", "venv", "cuda", "lddebug"):
        ap.add_argument("--" + k, required=True)
    a = ap.parse_args()
    device_provided = set(open(os.path.join(a.bundle, "DEVICE-PROVIDED")).read().split())
    o = Origins(a, dpkg_owner_map())
    failed = False
    for name, fn in [("headers", lambda: check_headers(a, o)),
                     ("pkg-config", lambda: check_pkgconfig(a, o)),
                     ("shared libraries", lambda: check_libraries(a, o, device_provided)),
                     ("plugins", lambda: check_plugins(a, o))]:
        bad = fn()
        if bad:
            failed = True
            print(f"PROOF FAILED ({name}): {len(bad)} item(s) from outside the bundle:")
            for b in bad[:40]:
                print("   ", b)
        else:
            print(f"proof ok: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
