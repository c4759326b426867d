"""The test suite's cost: wall time and CPU seconds (user + system, of pytest and every process it waited for:
the Pulumi CLI double's warm server and its children, the CLI subprocesses, portal servers).

The double's server is stopped and waited for at the end of the session (tests/pulumi_double.py, `Warm._stop`),
so the CPU of every `pulumi` call is counted. Prints figures; asserts nothing.
Run: .venv/bin/python benchmarks/suite_cpu.py [pytest arguments, e.g. tests/test_lifecycle.py]
"""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(args: list[str]) -> int:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.monotonic() - start
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        print(done.stdout[-3000:])
    print(f"pytest exit code {done.returncode} ({'every test passed' if done.returncode == 0 else 'failures'})")
    print(f"wall {wall:.0f} s, CPU {used.ru_utime + used.ru_stime:.0f} s "
          f"(user {used.ru_utime:.0f} s, system {used.ru_stime:.0f} s), peak RSS of one process "
          f"{used.ru_maxrss / 1024:.0f} MB")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
