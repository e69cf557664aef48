"""Every program a user runs answers --help (exit 0, its usage and its exit
statuses), refuses an unknown argument with exit 2, and the installed ones
(vmemctl, the demos) print libvmem's version for --version.

    python3 tools/test_help.py VERSION PROGRAM ...
"""
import subprocess
import sys

version, programs = sys.argv[1], sys.argv[2:]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


for prog in programs:
    name = prog.rsplit("/", 1)[-1]
    r = subprocess.run([prog, "--help"], capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    check(r.returncode == 0, "%s --help: exit %d" % (name, r.returncode))
    check("usage:" in out, "%s --help: no usage line" % name)
    check("exit status" in out, "%s --help: exit statuses not listed" % name)
    r = subprocess.run([prog, "--no-such-option"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2, "%s --no-such-option: exit %d, not 2" % (name, r.returncode))
    if name in ("vmemctl", "vmem-demo", "vmem-control-demo"):
        r = subprocess.run([prog, "--version"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and version in r.stdout,
              "%s --version: exit %d, %r" % (name, r.returncode, r.stdout))

for f in failures:
    print("FAIL:", f)
print("%d programs checked, %d failures" % (len(programs), len(failures)))
sys.exit(1 if failures else 0)
