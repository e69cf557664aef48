"""tests/skip77.h: a binary whose every test skipped exits 77; one whose
tests ran exits as Criterion's own main does (0; test_core_log)."""
import subprocess
import sys

probe, normal = sys.argv[1], sys.argv[2]
r = subprocess.run([probe], capture_output=True, text=True, timeout=60)
ok = r.returncode == 77 and "skipped: exit 77" in r.stderr
print("all-skipped probe: exit %d (want 77)" % r.returncode)
r2 = subprocess.run([normal], capture_output=True, text=True, timeout=60)
print("suite that ran: exit %d (want 0)" % r2.returncode)
sys.exit(0 if ok and r2.returncode == 0 else 1)
