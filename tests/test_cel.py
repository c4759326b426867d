"""The DRA CEL dialect: the device view, functions, error semantics and caching."""

import pytest

from fleet.cel import CelCompileError, CelEvaluator, DeviceFacts, check_expression

L4 = DeviceFacts(
    "gpu.nvidia.com",
    (("productName", ("string", "NVIDIA L4")), ("cudaComputeCapability", ("version", "8.9.0")),
     ("mig", ("bool", False)), ("sm", ("int", 58)), ("pci.example.com/slot", ("string", "a1"))),
    (("memory", "23034Mi"), ("other.io/bandwidth", "100G")),
)
BAD_VERSION = DeviceFacts("gpu.nvidia.com", (("v", ("version", "not-a-version")),), (("memory", "1Gi"),))
NVIDIA = 'device.attributes["gpu.nvidia.com"]'
CAP = 'device.capacity["gpu.nvidia.com"]'

CASES = [
    # device shape
    ('device.driver == "gpu.nvidia.com"', L4, True),
    ('device.driver == "gpu.amd.com"', L4, False),
    (f'{NVIDIA}.productName == "NVIDIA L4"', L4, True),
    (f'{NVIDIA}["productName"].startsWith("NVIDIA")', L4, True),
    (f'{NVIDIA}.mig == false', L4, True),
    (f'{NVIDIA}.sm > 50', L4, True),
    ('device.attributes["pci.example.com"].slot == "a1"', L4, True),  # "domain/id" keys split at the first '/'
    ('device.capacity["other.io"].bandwidth.compareTo(quantity("10G")) > 0', L4, True),
    # unknown domain = empty map; unknown id = error = non-match
    ('"x.io" in device.attributes', L4, False),
    ('"gpu.nvidia.com" in device.attributes', L4, True),
    ('device.attributes["x.io"].y == 1', L4, False),
    (f'{NVIDIA}.nope == "x"', L4, False),
    ('size(device.attributes["x.io"]) == 0', L4, True),
    # quantity functions
    (f'{CAP}.memory.compareTo(quantity("20Gi")) >= 0', L4, True),
    (f'{CAP}.memory.compareTo(quantity("24Gi")) >= 0', L4, False),
    (f'{CAP}.memory.isGreaterThan(quantity("20Gi"))', L4, True),
    (f'{CAP}.memory.isLessThan(quantity("20Gi"))', L4, False),
    (f'compareTo({CAP}.memory, quantity("20Gi")) == 1', L4, True),  # global call style
    (f'{CAP}.memory == quantity("23034Mi")', L4, True),
    (f'{CAP}.memory.sub(quantity("23034Mi")).sign() == 0', L4, True),
    (f'{CAP}.memory.add(1).isInteger()', L4, True),
    (f'{CAP}.memory.asInteger() == {23034 * 2**20}', L4, True),
    ('quantity("1500m").asApproximateFloat() == 1.5', L4, True),
    ('isQuantity("10Gi") && !isQuantity("10GB")', L4, True),
    ('quantity("10GB").sign() == 1', L4, False),  # a bad quantity is an error: non-match
    # semver functions
    (f'{NVIDIA}.cudaComputeCapability.isGreaterThan(semver("8.0.0"))', L4, True),
    (f'{NVIDIA}.cudaComputeCapability.compareTo(semver("9.0.0")) < 0', L4, True),
    (f'{NVIDIA}.cudaComputeCapability.major() == 8', L4, True),
    (f'minor({NVIDIA}.cudaComputeCapability) == 9', L4, True),
    (f'{NVIDIA}.cudaComputeCapability.patch() == 0', L4, True),
    (f'{NVIDIA}.cudaComputeCapability == semver("v8.9", true)', L4, True),
    ('isSemver("v1.2", true) && !isSemver("v1.2")', L4, True),
    ('semver("v1.2.3").major() == 1', L4, False),  # strict parse fails: non-match
    (f'{NVIDIA}.cudaComputeCapability.compareTo(quantity("1")) == 0', L4, False),  # type mismatch: non-match
    # non-bool results and errors are non-matches, never coerced
    ('1', L4, False),
    ('"true"', L4, False),
    (f'{NVIDIA}.productName', L4, False),
    ('1 / 0 == 1', L4, False),
    ('true', L4, True),
    # a device whose version attribute does not parse matches nothing
    ('true', BAD_VERSION, False),
    # standard library
    ('[1, 2].exists(x, x == 2)', L4, True),
    (f'{NVIDIA}.productName.matches("^NVIDIA L[0-9]$")', L4, True),
]


@pytest.mark.parametrize("expression,device,expected", CASES)
def test_evaluation(expression, device, expected):
    assert CelEvaluator().matches(expression, device) is expected


@pytest.mark.parametrize("expression,fragment", [
    ("device.capacity[", "CEL syntax error"),
    ("", "empty"),
    ("   ", "empty"),
    ("quantiti('1Gi')", "unknown function 'quantiti'"),
    ("device.driver.lowerAscii() == 'x'", "unknown function 'lowerAscii'"),
    ("device.driver ==", "CEL syntax error"),
])
def test_compile_errors(expression, fragment):
    with pytest.raises(CelCompileError, match=fragment):
        CelEvaluator().compile(expression)
    assert fragment in check_expression(expression)


def test_each_pair_is_evaluated_once_and_each_expression_compiled_once():
    evaluator = CelEvaluator()
    expression = f'{CAP}.memory.compareTo(quantity("20Gi")) >= 0'
    other = DeviceFacts("gpu.nvidia.com", (), (("memory", "80Gi"),))
    for _ in range(100):
        assert evaluator.matches(expression, L4)
        assert evaluator.matches(expression, other)
    assert evaluator.evaluations == 2
    assert len(evaluator.programs) == 1
    # equal device facts built separately share the cache entry
    twin = DeviceFacts("gpu.nvidia.com", (), (("memory", "80Gi"),))
    evaluator.matches(expression, twin)
    assert evaluator.evaluations == 2


@pytest.mark.parametrize("expression,refused", [
    ('device.capacity["gpu.nvidia.com"].memory >= quantity("20Gi")', ">="),
    ('quantity("1Gi").add(1) < device.capacity["gpu.nvidia.com"].memory', "<"),
    ('semver("1.2.3") <= semver("2.0.0")', "<="),
    ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20Gi")) >= 0', None),
    ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("20Gi"))', None),
    ('device.attributes["gpu.nvidia.com"].index > 2', None),
])
def test_ordering_operators_on_quantities_are_refused_as_kubernetes_does(expression, refused):
    """Kubernetes' DRA CEL has no <, <=, >, >= on quantities or semvers: such a selector never matches there."""
    from fleet.cel import check_expression

    error = check_expression(expression)
    if refused is None:
        assert error is None
    else:
        assert error.startswith(f"`{refused}` on a quantity or semver") and "compareTo" in error


def test_a_syntax_error_shows_where_the_parser_stopped():
    from fleet.cel import check_expression

    error = check_expression('device.driver >>= "x"')
    assert error.startswith("CEL syntax error at column") and 'device.driver > ^ >= "x"' in error


def test_selectors_that_can_never_match_are_warnings_and_plan_says_why(tmp_path, capsys):
    import json as _json

    import yaml as _yaml

    from automation.cli import main
    from tests.manifests import cluster, deployment, gpu_class, member

    bad = member(cel='device.attributes["gpu.nvidia.com"].architecure == "Hopper"')
    literal = member(cel='device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("20GB")) >= 0')
    path = tmp_path / "f.yaml"
    path.write_text(_yaml.safe_dump_all([gpu_class(), cluster("c1"),
                                         deployment("typo", engines=[{"name": "vllm", "members": [bad]}]),
                                         deployment("units", engines=[{"name": "vllm", "members": [literal]}])]))
    assert main(["validate", "-f", str(path)]) == 0
    err = capsys.readouterr().err
    assert "warning: no InferenceClass publishes the attribute 'architecure' (did you mean 'architecture'?)" in err
    assert 'warning: quantity("20GB") is not valid' in err
    assert main(["plan", "-f", str(path), "-o", "json", "--fresh"]) == 0
    reasons = {u["deployment"]: " ".join(u["reasons"]) for u in _json.loads(capsys.readouterr().out)["unscheduled"]}
    assert "could not be evaluated on this pool's devices (no such member in mapping: 'architecure')" in reasons["ml-team/typo"]
    assert "could not be evaluated" in reasons["ml-team/units"] and "invalid quantity '20GB'" in reasons["ml-team/units"]


PARSED = [case[0] for case in CASES] + ['a.b[1] ? -x : "s" + b"y"', "f(1, 2u, 3.0, [1], {1: 2})",
                                       "true && false || x.exists(y, y > 1)"]


def test_the_parser_built_through_the_cache_is_the_one_celpy_builds():
    """fleet.cel builds celpy's parser with Lark's cache added; celpy's own construction must parse alike."""
    from celpy import celparser

    ours = celparser.CELParser.CEL_PARSER
    celparser.CELParser.CEL_PARSER = None
    try:
        celparser.CELParser()
        theirs = celparser.CELParser.CEL_PARSER
    finally:
        celparser.CELParser.CEL_PARSER = ours
    assert ours is not None and theirs is not ours
    for expression in PARSED:
        assert ours.parse(expression) == theirs.parse(expression), expression


def test_a_cache_folder_that_is_missing_unwritable_or_corrupt_changes_nothing(tmp_path):
    import os
    import subprocess
    import sys

    # whether importing fleet.cel built a parser (a load does not), whether the parser in use parses as one celpy
    # builds afresh, and whether a selector evaluates
    check = ("import lark\n"
             "built, real = [], lark.Lark.__init__\n"
             "lark.Lark.__init__ = lambda self, *a, **k: built.append(1) or real(self, *a, **k)\n"
             "from celpy import celparser\n"
             "from fleet.cel import CelEvaluator, DeviceFacts\n"
             "at_import = len(built)\n"
             "ours, celparser.CELParser.CEL_PARSER = celparser.CELParser.CEL_PARSER, None\n"
             "celparser.CELParser()\n"
             f"same = all(ours.parse(e) == celparser.CELParser.CEL_PARSER.parse(e) for e in {PARSED!r})\n"
             "works = CelEvaluator().matches('device.driver == \"gpu.nvidia.com\"', DeviceFacts('gpu.nvidia.com'))\n"
             "print('built' if at_import else 'loaded', same and works)\n")

    def run(cache_dir) -> str:
        result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "MODELPLANE_CACHE_DIR": str(cache_dir)})
        assert result.returncode == 0 and not result.stderr, result.stderr
        return result.stdout.strip()

    folder = tmp_path / "cache"
    assert run(folder) == "built True"  # and kept
    entry = folder / "cel-grammar.lark"
    good = entry.read_bytes()
    assert run(folder) == "loaded True" and entry.read_bytes() == good
    assert sorted(p.name for p in folder.iterdir()) == [".key", "cel-grammar.lark"]  # the entry and its folder's key
    # a file cut short by a crash, and random damage: never unpickled (that printed a SystemError), rebuilt
    for damaged in [good[:len(good) // 2], good[:70] + os.urandom(200), os.urandom(64), b""]:
        entry.write_bytes(damaged)
        assert run(folder) == "built True"
        assert run(folder) == "loaded True"  # kept again (Lark's bytes differ between processes: not compared)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert run(blocked) == "built True"  # the cache folder cannot be made
