"""CEL selector cost on a large fleet: compile once per expression, evaluate once per (expression, device kind);
and the cost budget: what a selector near the limit takes to evaluate, and how fast an expensive one is refused.

Prints figures; it asserts nothing. Run: .venv/bin/python benchmarks/cel_bench.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fleet.cel import MAX_COST, CelEvaluator, DeviceFacts, check_expression, _parse, estimated_cost  # noqa: E402

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


def _literal_list(k: int) -> str:
    return "[" + ",".join(str(i) for i in range(k)) + "]"


def budget() -> None:
    """Estimate and evaluation time of selectors just under the limit, and the time to refuse the reported one."""
    shapes = {
        "two nested maps": lambda k: f"{_literal_list(k)}.map(a, {_literal_list(k)}.map(b, b)).size() > 0",
        "flat list literal": lambda k: f"size({_literal_list(k)}) > 0",
        "flat || chain": lambda k: " || ".join(f'device.driver == "d{i}"' for i in range(k)),
    }
    for name, build in shapes.items():
        def fits(k: int) -> bool:
            return len(build(k)) <= 10_240 and estimated_cost(_parse(build(k))) <= MAX_COST

        low, high = 1, 2  # the largest k that fits, by doubling then halving
        while fits(high):
            low, high = high, high * 2
        while high - low > 1:
            low, high = ((low + high) // 2, high) if fits((low + high) // 2) else (low, (low + high) // 2)
        expression = build(low)
        evaluator = CelEvaluator()
        evaluator.compile(expression)
        t0 = time.perf_counter()
        evaluator.matches(expression, KINDS[0])
        print(f"budget:  {name}: estimate {estimated_cost(_parse(expression)):,} of {MAX_COST:,}, "
              f"{len(expression)} characters, evaluated in {time.perf_counter() - t0:.3f} s")
    nested = "1"
    for level in range(7):
        nested = f"{_literal_list(8)}.map(v{level}, {nested})"
    nested += ".size() > 0"
    t0 = time.perf_counter()
    refused = check_expression(nested)
    print(f"budget:  the reported {len(nested)}-character nested map: refused in {time.perf_counter() - t0:.3f} s "
          f"({refused})")


if __name__ == "__main__":
    main()
    budget()
