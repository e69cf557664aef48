#!/usr/bin/env python3
"""Checks that docs/configuration.md documents exactly the VMEM_* variables of
the options table in src/options.c, each with the default that table states.

usage: check_config_doc.py SRC/options.c DOCS/configuration.md
"""
import re
import sys


def options_table(path):
    """{name: default text} from the options[] table of options.c."""
    text = open(path, encoding="utf-8").read()
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
    text = open(path, encoding="utf-8").read()
    sect = text[text.index("## Variables"):]
    sect = sect[:sect.index("\n## ", 5)]
    out = {}
    for line in sect.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and re.fullmatch(r"`VMEM_[A-Z_]+`", cells[0]):
            out[cells[0].strip("`")] = cells[2].replace("`", "")
    return out


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    code, doc = options_table(sys.argv[1]), documented(sys.argv[2])
    problems = []
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
    for p in problems:
        print("check_config_doc:", p, file=sys.stderr)
    print(f"check_config_doc: {len(code)} variables, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
