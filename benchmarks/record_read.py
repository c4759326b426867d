"""Reading the record of what is applied from a Pulumi backend: a fresh machine, a warm cache, one stack changed.

Applies the example fleet (15 stacks) through the Pulumi CLI double (tests/pulumi_double.py, which runs each
program and keeps its outputs in a file:// backend; nothing is deployed), then times `PulumiRecord.read()`
with no cache (a fresh CI clone), with the cache (a machine that read it before) and after one stack's
update. Prints the time and the number of CLI calls of each; asserts nothing. The CLI calls are the double's,
each a Python process: a real `pulumi` costs more per call, so the calls count is the figure that carries over.
Run: .venv/bin/python benchmarks/record_read.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    import pytest

    from automation.cli import main as modelplane
    from automation.record.backend import PulumiRecord
    from tests import pulumi_double

    with tempfile.TemporaryDirectory() as folder, pytest.MonkeyPatch.context() as patch:
        root = Path(folder)
        work = pulumi_double.on_path(root, patch, "record-bench")
        patch.setenv("MODELPLANE_SECRET_ML_TEAM__HF_TOKEN__HF_TOKEN", "hf_bench")
        kubeconfig = root / "byo-eu.yaml"
        kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
        args = ["-f", str(ROOT / "examples"), "--kubeconfig", f"byo-eu={kubeconfig}"]
        with open(os.devnull, "w") as quiet:
            stdout, stderr = sys.stdout, sys.stderr
            sys.stdout = sys.stderr = quiet
            try:
                modelplane(["up", *args])
            finally:
                sys.stdout, sys.stderr = stdout, stderr
        state = work / ".modelplane"

        def timed(label: str) -> None:
            calls = len(pulumi_double.calls(root / "double"))
            start = time.perf_counter()
            applied = PulumiRecord(state).read()
            took = time.perf_counter() - start
            made = len(pulumi_double.calls(root / "double")) - calls
            print(f"{label:<34} {took:6.2f} s  {made:3d} CLI calls  {len(applied.stacks)} stacks, "
                  f"{len(applied.placements())} replicas")

        (state / "record.json").unlink(missing_ok=True)
        timed("fresh machine (no cache)")
        timed("warm cache, nothing changed")
        (state / "record.json").unlink()
        timed("fresh machine again")
        cache = state / "record.json"
        text = cache.read_text()
        first = text.index('"lastUpdate": "') + len('"lastUpdate": "')
        cache.write_text(text[:first] + "1999" + text[first + 4:])  # as if one stack was updated elsewhere
        timed("one stack updated elsewhere")


if __name__ == "__main__":
    main()
