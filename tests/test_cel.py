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


BROKEN = ["device.driver ==", "a..b", "1 +", "'unclosed", "f(1,", "x ? y", "@", "[1, 2"]


def _celpy_own_parser():
    """The parser celpy builds itself, analysing its grammar; the one in use is put back."""
    from celpy import celparser

    ours = celparser.CELParser.CEL_PARSER
    celparser.CELParser.CEL_PARSER = None
    try:
        celparser.CELParser()
        return ours, celparser.CELParser.CEL_PARSER
    finally:
        celparser.CELParser.CEL_PARSER = ours


def test_the_parser_loaded_from_the_shipped_tables_parses_as_celpys_own():
    """fleet.cel loads celpy's parser from tables analysed in advance; celpy's own analysis must give the same trees,
    and the same errors at the same places."""
    from celpy import celparser

    ours, theirs = _celpy_own_parser()
    assert ours is not None and theirs is not ours
    for expression in PARSED:
        assert ours.parse(expression) == theirs.parse(expression), expression
    for expression in BROKEN:
        errors = []
        for parser in (ours, theirs):
            celparser.CELParser.CEL_PARSER = parser
            try:
                celparser.CELParser().parse(expression)
            except celparser.CELParseError as exc:
                errors.append((str(exc), exc.line, exc.column))
            finally:
                celparser.CELParser.CEL_PARSER = ours
        assert len(errors) == 2 and errors[0] == errors[1], expression


def test_the_shipped_tables_are_the_installed_grammars():
    """fleet/cel_tables.py is what `make cel-tables` writes from the installed celpy and Lark (pinned in
    pyproject.toml): after a bump, this fails until the tables are written again."""
    from fleet import cel_tables
    from fleet.cel import TABLES, grammar_key, tables_text

    assert cel_tables.KEY == grammar_key(), "celpy or Lark changed: run `make cel-tables`"
    assert TABLES.read_text() == tables_text(), "fleet/cel_tables.py was edited: run `make cel-tables`"


def test_importing_the_dialect_analyses_no_grammar_and_stale_tables_are_not_loaded():
    """A process that imports fleet.cel builds no Lark parser (the tables are loaded), and tables made from another
    grammar than the installed one are never used: celpy then analyses its own."""
    import subprocess
    import sys

    check = ("import lark, sys\n"
             "built, real = [], lark.Lark.__init__\n"
             "lark.Lark.__init__ = lambda self, *a, **k: built.append(1) or real(self, *a, **k)\n"
             "from fleet import cel_tables\n"
             "if sys.argv[1] == 'stale': cel_tables.KEY = '0' * 64\n"
             "from celpy import celparser\n"
             "from fleet.cel import CelEvaluator, DeviceFacts\n"
             "at_import = len(built)\n"
             "ours, celparser.CELParser.CEL_PARSER = celparser.CELParser.CEL_PARSER, None\n"
             "celparser.CELParser()\n"
             f"same = all(ours.parse(e) == celparser.CELParser.CEL_PARSER.parse(e) for e in {PARSED!r})\n"
             "works = CelEvaluator().matches('device.driver == \"gpu.nvidia.com\"', DeviceFacts('gpu.nvidia.com'))\n"
             "print('built' if at_import else 'loaded', same and works)\n")

    def run(case: str) -> str:
        result = subprocess.run([sys.executable, "-c", check, case], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and not result.stderr, result.stderr
        return result.stdout.strip()

    assert run("shipped") == "loaded True"
    assert run("stale") == "built True"


@pytest.mark.parametrize("expression,fragment", [
    (f"{NVIDIA}.sm.map(x, x > 1, x).size() > 0", "the three-argument map, is not supported"),
    ("[1, 2].map(x, x > 1, x).size() == 1", "write `.filter(x, filter).map(x, body)`"),
    ("[1, 2].all(x)", "`all` takes a variable and a body, `all(x, body)`: it was given 1 argument(s)"),
    ("[1, 2].exists(x, x > 1, x)", "`exists` takes a variable and a body"),
    ("[1, 2].filter(1, true).size() == 2", "its first argument is not a variable name"),
])
def test_a_comprehension_celpy_cannot_evaluate_is_refused_when_compiled(expression, fragment):
    """Such a selector compiled, then failed on every device: a class or member that silently matched nothing."""
    assert fragment in (check_expression(expression) or "")


@pytest.mark.parametrize("expression,expected", [
    ("[1, 2, 3].filter(x, x > 1).map(x, x * 2) == [4, 6]", True),  # what the refused three-argument map says
    ("[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
    ("[1, 2, 3].filter(x, x > 5).map(x, x).size() == 0", True),
])
def test_the_two_argument_comprehensions_evaluate(expression, expected):
    assert CelEvaluator().matches(expression, L4) is expected


def test_validate_names_the_selector_field_of_a_three_argument_map(tmp_path, capsys):
    import yaml as _yaml

    from automation.cli import main
    from tests.manifests import cluster, deployment, gpu_class, member

    three = member(cel="device.attributes.map(x, x != '', x).size() > 0")
    path = tmp_path / "f.yaml"
    path.write_text(_yaml.safe_dump_all([gpu_class(), cluster("c1"),
                                         deployment("mapped", engines=[{"name": "vllm", "members": [three]}])]))
    assert main(["validate", "-f", str(path)]) == 1
    err = capsys.readouterr().err
    assert "the three-argument map, is not supported" in err and "f.yaml" in err
    assert "ModelDeployment/mapped: spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel" in err
