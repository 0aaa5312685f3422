#!/usr/bin/env python3
"""Copies a shared library and sets DF_SYMBOLIC in the copy's DT_FLAGS.

Usage: elf_symbolic.py SRC DST
       elf_symbolic.py --print-soname SRC

DF_SYMBOLIC is what `ld -Bsymbolic` writes: the dynamic linker resolves the library's own
references to its own definitions first, then searches the usual scopes. gst-pi0 uses it on a
private copy of Debian's libsentencepiece (see pi0spmshim.cpp for why); nothing else in the file
changes. --print-soname prints SRC's DT_SONAME: the name the copy must have to be found, next to
the module that needs it, by the dynamic linker.

Only ELF64 little-endian files (x86-64, aarch64) are handled; anything else is an error, as is
a dynamic section with neither DT_FLAGS nor a spare DT_NULL slot to hold one.
"""
import os
import shutil
import struct
import sys

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_STRTAB, DT_SONAME, DT_FLAGS = 0, 5, 14, 30
DF_SYMBOLIC = 0x2


def fail(msg):
    sys.exit(f"elf_symbolic.py: {msg}")


def read_elf(path):
    """Returns (data, program headers, the dynamic entries up to the first DT_NULL, DT_NULL count)."""
    data = bytearray(open(path, "rb").read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        fail(f"{path}: not an ELF64 little-endian file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    phdrs = [struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize) for i in range(phnum)]
    dyn = next(((p[2], p[5]) for p in phdrs if p[0] == PT_DYNAMIC), None)
    if dyn is None:
        fail(f"{path}: no dynamic section (not a shared library)")
    entries = []  # (file offset, tag, value), up to and including the first DT_NULL
    nulls = 0
    for off in range(dyn[0], dyn[0] + dyn[1] - 15, 16):
        tag, val = struct.unpack_from("<qQ", data, off)
        if nulls == 0:
            entries.append((off, tag, val))
        if tag == DT_NULL:
            nulls += 1
    return data, phdrs, entries, nulls


def soname(path):
    data, phdrs, entries, _ = read_elf(path)
    strtab = next((v for _, t, v in entries if t == DT_STRTAB), None)
    name = next((v for _, t, v in entries if t == DT_SONAME), None)
    if strtab is None or name is None:
        fail(f"{path}: no DT_SONAME")
    for p_type, _, p_offset, p_vaddr, _, p_filesz in phdrs:
        if p_type == PT_LOAD and p_vaddr <= strtab < p_vaddr + p_filesz:
            start = strtab - p_vaddr + p_offset + name
            return bytes(data[start:data.index(0, start)]).decode()
    fail(f"{path}: DT_STRTAB is not in a loadable segment")


def make_symbolic(src, dst):
    data, _, entries, nulls = read_elf(src)
    flags = next((e for e in entries if e[1] == DT_FLAGS), None)
    if flags is not None:
        struct.pack_into("<qQ", data, flags[0], DT_FLAGS, flags[2] | DF_SYMBOLIC)
    elif nulls >= 2:
        # The first DT_NULL becomes DT_FLAGS; the next one ends the section.
        struct.pack_into("<qQ", data, entries[-1][0], DT_FLAGS, DF_SYMBOLIC)
    else:
        fail(f"{src}: no DT_FLAGS and no spare DT_NULL to add one")
    tmp = dst + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    shutil.copymode(src, tmp)
    os.replace(tmp, dst)


def main(argv):
    if len(argv) == 3 and argv[1] == "--print-soname":
        print(soname(os.path.realpath(argv[2])))
    elif len(argv) == 3:
        make_symbolic(os.path.realpath(argv[1]), argv[2])
    else:
        fail("usage: elf_symbolic.py SRC DST | elf_symbolic.py --print-soname SRC")


if __name__ == "__main__":
    main(sys.argv)
