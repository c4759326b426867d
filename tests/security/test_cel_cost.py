"""Finding: a CEL selector had no cost limit (a 200-character nest of map() held a portal write for minutes).

A selector is refused when its estimated cost is over the budget (fleet/cel.py, MAX_COST), and an
evaluation that still runs past the budget stops and is a non-match that says why. No test here times
anything: each asserts what was refused or why a device did not match.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

from automation.cli import main
from fleet.cel import (
    MAX_COST, CelCompileError, CelEvaluator, DeviceFacts, _parse, check_expression, estimated_cost,
)
from fleet.inventory import PoolDevice, PoolKind
from fleet.matching import match_member
from fleet.shapes import MemberShape, Request
from tests.test_cel import CASES, L4
from tests.manifests import example_files

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE_SELECTOR = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0'
DEPLOYMENT = ROOT / "examples" / "models" / "qwen3-8b.yaml"
REPLICA = ROOT / "examples" / "observed" / "qwen3-8b-gke.yaml"
DEPLOYMENT_FIELD = "ModelDeployment/qwen3-8b: spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel"
REPLICA_FIELD = "ModelReplica/qwen3-8b-a02c0: spec.engines[0].members[0].deviceRequests[0].selectors[0].cel"
GPU = 'device.attributes["gpu.nvidia.com"]'


def literal_list(k: int) -> str:
    return "[" + ",".join(str(i) for i in range(k)) + "]"


def nested_map(depth: int, width: int = 8) -> str:
    """The reported selector's shape: each level maps over a literal list, so the work is width**depth."""
    expression = "1"
    for level in range(depth):
        expression = f"{literal_list(width)}.map(v{level}, {expression})"
    return expression + ".size() > 0"


def two_level(k: int) -> str:
    return f"{literal_list(k)}.map(a, {literal_list(k)}.map(b, b)).size() > 0"


def cost(expression: str) -> int:
    tree = _parse(expression)
    assert tree is not None, expression
    return estimated_cost(tree)


def largest_accepted(build, limit: int) -> int:
    """The largest k whose build(k) is estimated at or under the limit (build(k + 1) is over it)."""
    k = 1
    while cost(build(k + 1)) <= limit:
        k += 1
    return k


def with_selector(tmp_path, source: pathlib.Path, expression: str) -> str:
    text = source.read_text()
    assert EXAMPLE_SELECTOR in text
    path = tmp_path / source.name
    path.write_text(text.replace(EXAMPLE_SELECTOR, json.dumps(expression)))  # a JSON string is a YAML scalar
    return str(path)


def validate(capsys, path: str) -> tuple[int, str]:
    code = main(["validate", "-f", path])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out + err


COSTLY = [
    ("the reported nested map", nested_map(7)),
    ("a shallower nested map", nested_map(5)),
    ("nested exists over literals", f"{literal_list(60)}.exists(a, {literal_list(60)}.exists(b, a == b + 100))"),
    ("all over every pair of attributes of every domain",
     "device.attributes.all(d, device.attributes[d].all(k, device.attributes.all(e, device.attributes[e].all("
     "j, device.attributes[d][k] != device.attributes[e][j]))))"),
    ("a long pattern over a long string, many times",
     f'{literal_list(50)}.all(i, {GPU}.productName.matches("{"(a|b)" * 200}"))'),
]


@pytest.mark.parametrize("source,field", [(DEPLOYMENT, DEPLOYMENT_FIELD), (REPLICA, REPLICA_FIELD)],
                         ids=["ModelDeployment", "ModelReplica"])
@pytest.mark.parametrize("name,expression", COSTLY, ids=[name for name, _ in COSTLY])
def test_validate_refuses_a_costly_selector_naming_file_object_field_and_cost(tmp_path, capsys, source, field,
                                                                                 name, expression):
    path = with_selector(tmp_path, source, expression)
    code, output = validate(capsys, path)
    assert code == 1
    [line] = [line for line in output.splitlines() if "too costly" in line]
    assert line.startswith(f"{path}:")  # file and line
    assert field in line  # object and field
    assert f"its estimated cost is {cost(expression):,}, over the limit of {MAX_COST:,}" in line


def test_the_reported_selector_is_about_200_characters_and_estimated_far_over():
    assert 190 <= len(nested_map(7)) <= 210
    assert cost(nested_map(7)) > 100 * MAX_COST


def example_selectors() -> list[str]:
    found = []
    for path in example_files():
        for doc in yaml.safe_load_all(path.read_text()):
            found += _cel_strings(doc)
    return found


def _cel_strings(node) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "cel" and isinstance(v, str)] + [
            s for v in node.values() for s in _cel_strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _cel_strings(v)]
    return []


ORDINARY = sorted(set(example_selectors())) + [
    f'{GPU}.exists(k, k.startsWith("product") && {GPU}[k] == "NVIDIA L4")',
    f'{GPU}.exists(k, {GPU}.exists(j, j == k))',  # every pair of one domain's attribute ids
    " || ".join(f'{GPU}.productName == "NVIDIA L{i}"' for i in range(150)),  # a long flat selector
]


@pytest.mark.parametrize("expression", ORDINARY)
def test_ordinary_selectors_are_accepted(expression):
    assert len(example_selectors()) >= 5
    assert check_expression(expression) is None
    assert cost(expression) <= MAX_COST


def test_the_examples_still_validate(capsys):
    code, output = validate(capsys, str(ROOT / "examples"))
    assert code == 0, output


@pytest.mark.parametrize("source", [DEPLOYMENT, REPLICA], ids=["ModelDeployment", "ModelReplica"])
def test_a_selector_just_under_the_limit_is_accepted_and_one_just_over_refused(tmp_path, capsys, source):
    k = largest_accepted(two_level, MAX_COST)
    assert cost(two_level(k)) > MAX_COST * 0.95  # close to the limit, not far under it
    assert validate(capsys, with_selector(tmp_path, source, two_level(k)))[0] == 0
    code, output = validate(capsys, with_selector(tmp_path, source, two_level(k + 1)))
    assert code == 1 and "too costly" in output


def test_at_the_limit_the_evaluation_finishes_within_its_budget():
    """The estimate bounds the evaluation: an expression estimated exactly at a (small) limit evaluates."""
    limit = 3_000
    k = largest_accepted(two_level, limit)
    evaluator = CelEvaluator(cost_limit=limit, runtime_limit=limit)
    assert evaluator.matches(two_level(k), L4) is True
    assert evaluator.error([two_level(k)], L4) is None
    with pytest.raises(CelCompileError, match="too costly"):
        evaluator.compile(two_level(k + 1))


BOUNDED = [(e, device) for e, device, _ in CASES] + [(e, L4) for e in ORDINARY] + [
    (nested_map(3), L4),
    (f"{literal_list(20)}.filter(x, x % 2 == 0).map(y, [y, y]).all(p, p[0] == p[1])", L4),
    ('"abc".startsWith("a") && "x-y".endsWith("y") && "hello".contains("ell")', L4),
    (f'[{GPU}.productName, "b"].exists_one(s, s.matches("^NVIDIA"))', L4),
    ('{"a": [1, 2], "b": [3]}.all(k, {"a": [1, 2], "b": [3]}[k].size() > 0)', L4),
]


@pytest.mark.parametrize("expression,device", BOUNDED)
def test_the_estimate_bounds_the_steps_an_evaluation_takes(expression, device):
    """With a budget of exactly its estimate, no accepted expression runs out (the estimate is a true bound)."""
    unlimited = CelEvaluator(cost_limit=10**12, runtime_limit=10**12)
    tight = CelEvaluator(runtime_limit=cost(expression))
    assert tight.matches(expression, device) is unlimited.matches(expression, device)
    assert "cost budget" not in (tight.error([expression], device) or "")


MANY_ATTRIBUTES = DeviceFacts("gpu.nvidia.com", tuple((f"a{i}", ("string", "x")) for i in range(2_000)))
RUNAWAY = [
    # a device with more attributes than any InferenceClass may declare (32) slips the estimate
    ("a device larger than the estimate assumes", f'{GPU}.exists(k, {GPU}[k] == "y")', MANY_ATTRIBUTES,
     CelEvaluator(cost_limit=10_000, runtime_limit=10_000)),
    ("a budget lower than the estimate", nested_map(3), L4, CelEvaluator(runtime_limit=2_000)),
]


@pytest.mark.parametrize("name,expression,device,evaluator", RUNAWAY, ids=[r[0] for r in RUNAWAY])
def test_an_evaluation_past_its_budget_stops_and_the_device_does_not_match(name, expression, device, evaluator):
    evaluator.compile(expression)  # accepted by the estimate
    assert evaluator.matches(expression, device) is False
    budget = f"{evaluator.runtime_limit:,}"
    assert evaluator.error([expression], device) == f"the selector exceeded its cost budget of {budget} steps"
    kind = PoolKind((PoolDevice("gpu", "DRA", "gpu.nvidia.com", 1, device, 0),))
    reason = match_member(MemberShape("Standalone", 1, (Request("gpu", 1, (expression,)),)), kind, evaluator).reason
    assert reason is not None and "exceeded its cost budget" in reason and expression[:40] in reason


@pytest.mark.parametrize("expression,fragment", [
    ("(" * 1500 + "true" + ")" * 1500, "nested too deeply"),
    ("true || " * 1300 + "true", "characters long, over the limit of 10,240"),
    (nested_map(7), "too costly"),
])
def test_compile_refuses_with_one_line(expression, fragment):
    message = check_expression(expression)
    assert message is not None and fragment in message and "\n" not in message


def test_an_object_whose_selectors_together_are_over_the_budget_is_refused(tmp_path, capsys):
    """Each selector under its own budget, four of them over the object's: a member may carry 128 selectors."""
    k = largest_accepted(two_level, MAX_COST // 3)
    selector = f"{two_level(k)} || {EXAMPLE_SELECTOR}"
    assert check_expression(selector) is None  # accepted alone
    docs = [d for d in yaml.safe_load_all(DEPLOYMENT.read_text()) if d]
    deployment = next(d for d in docs if d["kind"] == "ModelDeployment")
    request = deployment["spec"]["template"]["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"][0]
    path = tmp_path / "model.yaml"
    for count, refused in ((1, False), (4, True)):
        request["selectors"] = [{"cel": selector}] * count
        path.write_text(yaml.safe_dump_all(docs))
        code = main(["validate", "-f", str(ROOT / "examples" / "platform"), "-f", str(path)])
        err = capsys.readouterr().err
        assert (code != 0) == refused, err
        assert ("selectors together are too costly" in err) == refused
        if refused:
            assert f"{path}:" in err and "ModelDeployment/qwen3-8b: spec.template.spec.engines" in err
