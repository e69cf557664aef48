#!/usr/bin/env python3
"""Checks what libvmem.so exports: vmem_create, vmem_alloc, vmem_free,
vmem_set_limit and vmem_step_end are there; every defined dynamic symbol
starts with vmem_ (the version node VMEM_0 aside); every exported function
is declared in include/vmem.h.

usage: check_symbols.py NM LIBVMEM_SO VMEM_H
"""
import re
import subprocess
import sys

REQUIRED = ["vmem_create", "vmem_alloc", "vmem_free", "vmem_set_limit", "vmem_step_end"]


def exported(nm, lib):
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        name = name.split("@")[0]
        syms.append((kind, name))
    return syms


def declared(header):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return set(re.findall(r"\b(vmem_\w+)\s*\(", text))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    nm, lib, header = sys.argv[1:]
    syms = exported(nm, lib)
    decl = declared(header)
    errors = []
    names = {name for _, name in syms}
    for r in REQUIRED:
        if r not in names:
            errors.append("required symbol %s is not exported" % r)
    for kind, name in syms:
        if kind == "A" and re.fullmatch(r"VMEM_[0-9.]+", name):
            continue  # the version node of the version script
        if not name.startswith("vmem_"):
            errors.append("exported symbol without the vmem_ prefix: %s (%s)" % (name, kind))
        elif kind in ("T", "W", "i") and name not in decl:
            errors.append("exported function %s is not declared in %s" % (name, header))
    funcs = sorted(n for k, n in syms if k in ("T", "W", "i"))
    print("%d exported functions, %d symbols in all" % (len(funcs), len(syms)))
    for e in errors:
        print("FAIL: " + e)
    if not funcs:
        errors.append("no functions exported")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
