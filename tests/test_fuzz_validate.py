"""Property tests: no input, however mutated or malformed, makes validation raise.

Mutated manifests must come back either valid or with located problems (a file, a
line and a one-line message); raw junk text and bytes must do the same.
"""

import copy
import pathlib

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from automation.cli import main
from fleet.loader import parse_text
from fleet.validate import validate_documents

from tests.manifests import example_documents

ROOT = pathlib.Path(__file__).resolve().parent.parent
EXAMPLES = example_documents()  # examples/, less its v0.3.1 variant (tests/manifests.py)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
    st.text(max_size=20), st.sampled_from(["", "Standalone", "PrefillDecode", "modelplane.ai/x", "20Gi", "true",
                                          "device.capacity[", "1e400", "-1", "\u202e", "a" * 300]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=6)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, prefix + (index,))


@st.composite
def mutated_manifests(draw):
    doc = copy.deepcopy(draw(st.sampled_from(EXAMPLES)))
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(values)
        else:
            parent[path[-1]] = draw(values)
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_manifests())
def test_mutated_manifests_get_located_problems_never_exceptions(doc):
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    docs, problems = parse_text(text, "fuzz.yaml")
    loaded = validate_documents(docs)
    problems += loaded.problems
    for problem in problems:
        assert problem.source == "fuzz.yaml" and problem.line >= 1
        assert "\n" not in str(problem)
        assert "internal error" not in problem.message
    if not [p for p in problems if not p.warning]:
        assert loaded.fleet.objects or not isinstance(doc, dict) or doc.get("apiVersion") != "modelplane.ai/v1alpha1"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_junk_text_never_raises(text):
    docs, problems = parse_text(text, "junk.yaml")
    loaded = validate_documents(docs)
    for problem in problems + loaded.problems:
        assert problem.line >= 1 and "\n" not in str(problem)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutated_manifests(), st.binary(max_size=64))
def test_cli_exits_cleanly(tmp_path, capsys, doc, junk):
    path = tmp_path / "m.yaml"
    path.write_bytes(yaml.safe_dump(doc).encode() + (b"\n---\n" + junk if junk else b""))
    code = main(["validate", "-f", str(path)])
    out, err = capsys.readouterr()
    assert code in (0, 1)
    assert "Traceback" not in err and "internal error" not in err
    if code == 1:
        assert any(line.startswith(str(path)) or line.startswith("error:") for line in err.splitlines())
