"""Helpers shared by the command-line tests of bench/ (test_cli.py,
test_shrink_trace.py): checks that record failures instead of stopping, and
running a tool with its output captured."""
import subprocess
import sys

failures = []


def check(cond, what):
    """Records `what` as a failure (and prints it) when cond is false."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(tool, *args):
    """Runs tool with args; returns (exit status, stdout, stderr)."""
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def finish(name):
    """Prints the verdict and exits 1 if any check failed, else 0."""
    print("%s: %d failed checks" % (name, len(failures)) if failures else "%s: all checks passed" % name)
    sys.exit(1 if failures else 0)
