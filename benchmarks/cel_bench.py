"""CEL selector cost on a large fleet: compile once per expression, evaluate once per (expression, device kind).

Prints figures; it asserts nothing. Run: .venv/bin/python benchmarks/cel_bench.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet.cel import CelEvaluator, DeviceFacts  # noqa: E402

KINDS = [
    DeviceFacts("gpu.nvidia.com", (("productName", ("string", name)), ("cc", ("version", cc))), (("memory", mem),))
    for name, cc, mem in [("NVIDIA L4", "8.9.0", "23034Mi"), ("NVIDIA A100", "8.0.0", "40960Mi"),
                          ("NVIDIA H100", "9.0.0", "81559Mi"), ("NVIDIA H200", "9.0.0", "143771Mi")]
]


def main(pools: int = 2000, expressions: int = 200) -> None:
    exprs = [f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{i % 150 + 1}Gi")) >= 0'
             for i in range(expressions)]
    evaluator = CelEvaluator()
    t0 = time.perf_counter()
    for e in exprs:
        evaluator.compile(e)
    t1 = time.perf_counter()
    checks = 0
    for p in range(pools):
        device = KINDS[p % len(KINDS)]
        for e in exprs:
            evaluator.matches(e, device)
            checks += 1
    t2 = time.perf_counter()
    print(f"compile: {len(set(exprs))} distinct expressions in {t1 - t0:.3f} s")
    print(f"match:   {checks} (expression, pool) checks in {t2 - t1:.3f} s, "
          f"{evaluator.evaluations} CEL evaluations ({len(KINDS)} device kinds)")


if __name__ == "__main__":
    main()
