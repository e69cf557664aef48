#!/usr/bin/env python3
"""Checks that the documentation covers what the code offers:

- docs/configuration.md's 'Variables' table lists exactly the VMEM_*
  variables of the options table in src/options.c, each with the default that
  table states, and every other VMEM_* variable the library, the tools, the
  examples or the Python modules read is named somewhere on that page;
- every statistics key src/stats.c writes is in docs/control.md's statistics
  tables and has a row (or a title entry) in vmemctl's `stats` table;
- every public function of include/vmem.h has a comment right above its
  declaration and is named in README.md or docs/*.md.

usage: check_config_doc.py SOURCE_ROOT
       check_config_doc.py SRC/options.c DOCS/configuration.md   (the first check only)
"""
import glob
import os
import re
import sys


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def options_table(path):
    """{name: default text} from the options[] table of options.c."""
    text = read(path)
    table = text[text.index("options[] = {"):]
    table = table[:table.index("};")]
    out = {}
    for m in re.finditer(r'\{"(VMEM_[A-Z_]+)",[^"]*"([^"]*)"\}', table):
        name, what = m.group(1), m.group(2)
        d = re.search(r"default (.*)$", what)
        out[name] = d.group(1) if d else ""
    return out


def documented(path):
    """{name: default cell} from the 'Variables' table of configuration.md."""
    text = read(path)
    sect = text[text.index("## Variables"):]
    sect = sect[:sect.index("\n## ", 5)]
    out = {}
    for line in sect.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"`VMEM_[A-Z_]+`", cells[0]):
            out[cells[0].strip("`")] = cells[2].replace("`", "")
    return out


def check_variables(options_c, config_md, problems):
    code, doc = options_table(options_c), documented(config_md)
    if not code:
        problems.append("no VMEM_* entries found in the options table")
    for name in sorted(set(code) - set(doc)):
        problems.append(f"{name}: in src/options.c, not documented")
    for name in sorted(set(doc) - set(code)):
        problems.append(f"{name}: documented, not in src/options.c")
    for name in sorted(set(code) & set(doc)):
        first = code[name].split()[0] if code[name] else ""
        if first and first not in doc[name]:
            problems.append(f"{name}: default \"{code[name]}\" in the code, "
                            f"\"{doc[name]}\" in the documentation")
    return len(code)


def variables_read(root):
    """VMEM_* names read with getenv / os.environ outside the options table."""
    names = {}
    sources = (glob.glob(os.path.join(root, d, "*.c")) for d in ("src", "tools", "examples", "bench"))
    for path in [p for group in sources for p in group]:
        for m in re.finditer(r'getenv\(\s*"(VMEM_[A-Z0-9_]+)"', read(path)):
            names.setdefault(m.group(1), os.path.relpath(path, root))
    for path in glob.glob(os.path.join(root, "python", "*.py")):
        if os.path.basename(path).startswith("test_"):
            continue
        for m in re.finditer(r'environ(?:\.get\(|\[)\s*["\'](VMEM_[A-Z0-9_]+)', read(path)):
            names.setdefault(m.group(1), os.path.relpath(path, root))
    return names


def stats_keys(stats_c):
    """The JSON keys vmem_stats_json writes."""
    keys = []
    for line in read(stats_c).splitlines():
        if "jprintf" in line or line.strip().startswith('"'):
            keys += re.findall(r'\\"([A-Za-z]+)\\":', line)
    return keys


def public_functions(header):
    """[(name, has_comment)] of the VMEM_API functions of vmem.h.  A
    declaration that directly follows a commented one (a pair such as
    malloc/free) shares its comment."""
    text = read(header)
    out = []
    prev_end, prev_commented = -1, False
    for m in re.finditer(r"^VMEM_API\b[^;]*?\b(vmem_\w+)\s*\([^;]*;", text, re.M):
        before = text[:m.start()].rstrip()
        commented = before.endswith("*/") or (
            prev_commented and text[prev_end:m.start()].strip() == "")
        out.append((m.group(1), commented))
        prev_end, prev_commented = m.end(), commented
    return out


def main():
    problems = []
    if len(sys.argv) == 3:
        n = check_variables(sys.argv[1], sys.argv[2], problems)
        summary = f"{n} variables"
    elif len(sys.argv) == 2:
        root = sys.argv[1]
        config_md = os.path.join(root, "docs", "configuration.md")
        n = check_variables(os.path.join(root, "src", "options.c"), config_md, problems)
        config_text = read(config_md)
        extra = variables_read(root)
        for name, where in sorted(extra.items()):
            if f"`{name}`" not in config_text:
                problems.append(f"{name}: read by {where}, not in docs/configuration.md")

        keys = stats_keys(os.path.join(root, "src", "stats.c"))
        control_md = read(os.path.join(root, "docs", "control.md"))
        stats_sect = control_md[control_md.index("## The statistics file"):]
        stats_sect = stats_sect[:stats_sect.index("\n## ", 5)]
        vmemctl = read(os.path.join(root, "tools", "vmemctl.c"))
        if len(keys) < 10:
            problems.append(f"only {len(keys)} statistics keys found in src/stats.c")
        for k in keys:
            if f"`{k}`" not in stats_sect:
                problems.append(f"statistics key {k}: not in docs/control.md's statistics tables")
            if f'"{k}"' not in vmemctl:
                problems.append(f"statistics key {k}: vmemctl stats has no row for it")

        fns = public_functions(os.path.join(root, "include", "vmem.h"))
        docs = read(os.path.join(root, "README.md")) + "".join(
            read(p) for p in glob.glob(os.path.join(root, "docs", "*.md")))
        if len(fns) < 10:
            problems.append(f"only {len(fns)} public functions found in include/vmem.h")
        for name, commented in fns:
            if not commented:
                problems.append(f"{name}: no comment above its declaration in include/vmem.h")
            if not re.search(r"\b%s\b" % name, docs):
                problems.append(f"{name}: not named in README.md or docs/*.md")
        summary = (f"{n} variables in the options table, {len(extra)} read elsewhere, "
                   f"{len(keys)} statistics keys, {len(fns)} public functions")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for p in problems:
        print("check_config_doc:", p, file=sys.stderr)
    print(f"check_config_doc: {summary}, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
