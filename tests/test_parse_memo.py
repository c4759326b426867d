"""A comparison's base is read after its head and shares most of its documents (fleet.loader.ParseMemo,
fleet.validate.LoadMemo): what is shared must be exactly what parsing and validating the base alone gives, with
each line where the base has it, and a base with a broken document must report what it reports alone."""

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.loader import ParseMemo, parse_text
from fleet.validate import LoadMemo, load_fleet
from tests.test_loader_build import UNUSUAL, data


def seen(documents, problems) -> tuple[list, list]:
    """Everything a caller can read of a parse: data, source, first line, and the line of every field."""
    out = []
    for d in documents:
        paths = list(d.lines) + [("no", "such", "field")]
        out.append((repr(d.data), d.source, d.line, {p: d.line_of(p) for p in paths}))
    return out, [str(p) for p in problems]


SEPARATORS = ["---\n", "--- # next\n", "\n---\n", "# a comment\n---\n", "---   \n", "---\r\n", "\r---\n", "---#c\n",
              "---\t\n"]
pieces = st.one_of(
    data.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    data.map(lambda d: yaml.safe_dump(d, default_flow_style=True, allow_unicode=True)),
    st.sampled_from(list(UNUSUAL.values()) + ["a: |\n  x\n  ---\n  y\n", "- [1, 2\n", "a: 'x\n---\ny'\n", "",
                                               "# only a comment\n", "--- |\nx\n---\ny\n", "a: 'x\x85y'\n",
                                               "a: 1\r\nb: [2,\r\n  3]\r\n", "a: 'x\u2028y'\n",
                                               "----\nx: 1\n", "a: 1", "---", "%YAML 1.1\n---\na: 1\n"]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(pieces, min_size=1, max_size=6), st.data())
def test_a_base_read_after_its_head_reads_as_it_reads_alone(head_pieces, draw):
    separators = draw.draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(head_pieces), max_size=len(head_pieces)))
    head = "".join(s + p for s, p in zip(separators, head_pieces))
    # the base: some of the head's documents, moved, dropped or changed, and new ones
    base_pieces = draw.draw(st.lists(st.one_of(st.sampled_from(head_pieces), pieces), min_size=1, max_size=6))
    base_separators = draw.draw(st.lists(st.sampled_from(SEPARATORS), min_size=len(base_pieces),
                                         max_size=len(base_pieces)))
    base = draw.draw(st.sampled_from(["", "# base\n\n"])) + "".join(s + p for s, p in zip(base_separators, base_pieces))
    memo = ParseMemo()
    assert seen(*parse_text(head, "head.yaml", memo=memo)) == seen(*parse_text(head, "head.yaml"))
    assert seen(*parse_text(base, "base.yaml", memo=memo)) == seen(*parse_text(base, "base.yaml"))


def test_the_base_shares_the_heads_documents_and_reports_its_own_problems():
    """Without the first half, a memo that never reused anything would pass the property above."""
    head = "---\na: 1\n---\nb: [1, 2]\n--- # the last\nc: {d: 3}\n"
    memo = ParseMemo()
    head_docs, _ = parse_text(head, "head.yaml", memo=memo)
    base_docs, problems = parse_text("# moved down\n\n---\nc: {d: 3}\n---\na: 1\n---\nb: [1, 3]\n", "base.yaml", memo=memo)
    assert not problems
    assert base_docs[0].data is head_docs[2].data and base_docs[1].data is head_docs[0].data
    assert base_docs[2].data is not head_docs[1].data and base_docs[2].data == {"b": [1, 3]}
    assert [(d.source, d.line, d.line_of(("c", "d"))) for d in base_docs[:1]] == [("base.yaml", 4, 4)]
    broken = "a: 1\n---\nb: [1,\n---\nc: {d: 3}\n"
    assert seen(*parse_text(broken, "base.yaml", memo=memo)) == seen(*parse_text(broken, "base.yaml"))


def test_text_that_only_looks_like_a_start_line_is_not_split():
    """`---#x` is text, not a start line; and a document across several start lines keeps none of them (both
    found by review: a base with a broken separator loaded as valid, and a stretch inside one document was kept
    as holding no document)."""
    memo = ParseMemo()
    parse_text("---\na: 1\n---\nb: 2\n", "head.yaml", memo=memo)
    broken = "---\na: 1\n---#oops\nb: 2\n"
    assert seen(*parse_text(broken, "base.yaml", memo=memo)) == seen(*parse_text(broken, "base.yaml"))
    assert parse_text(broken, "base.yaml", memo=memo)[1]  # the syntax error is reported
    memo = ParseMemo()
    parse_text("foo\n---#a\nbar\n---#b\nbaz\n", "head.yaml", memo=memo)  # one plain scalar
    assert seen(*parse_text("---\nbar\n", "base.yaml", memo=memo)) == seen(*parse_text("---\nbar\n", "base.yaml"))


def test_a_shared_document_is_validated_once_and_its_problems_stay_the_bases(tmp_path):
    head = tmp_path / "head.yaml"
    base = tmp_path / "base.yaml"
    cls = ("---\napiVersion: modelplane.ai/v1alpha1\nkind: InferenceClass\nmetadata: {name: l4}\nspec:\n"
           "  provisioning: {provider: GKE, gke: {machineType: g2-standard-8, accelerator: {type: nvidia-l4, count: 1}}}\n"
           "  devices:\n  - name: gpu\n    driver: gpu.nvidia.com\n    deviceClassName: gpu.nvidia.com\n    count: 1\n"
           "    attributes: {productName: {string: NVIDIA L4}}\n    capacity: {memory: {value: 23034Mi}}\n")
    bad = "apiVersion: modelplane.ai/v1alpha1\nkind: InferenceClass\nmetadata: {name: bad}\nspec: {devices: 3}\n"
    head.write_text(cls)
    base.write_text("# the base\n---\n" + bad + cls)
    memo = LoadMemo()
    loaded_head = load_fleet([str(head)], memo=memo)
    loaded_base = load_fleet([str(base)], memo=memo)
    alone = load_fleet([str(base)])
    assert loaded_base.fleet.objects[0] is loaded_head.fleet.objects[0]
    assert [o.model_dump() for o in loaded_base.fleet.objects] == [o.model_dump() for o in alone.fleet.objects]
    assert [str(p) for p in loaded_base.problems] == [str(p) for p in alone.problems]
    assert loaded_base.problems and all(p.source == str(base) for p in loaded_base.problems)
    origin = loaded_base.fleet.origin["InferenceClass/l4"]
    assert (origin.source, origin.line) == (str(base), alone.fleet.origin["InferenceClass/l4"].line)
