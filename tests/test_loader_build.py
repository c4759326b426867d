"""The loader builds plain documents in one walk (data, lines and duplicate keys together); anything else goes
through PyYAML's safe constructor after a separate walk for lines. Both must give what the second way gives:
the same data as yaml.safe_load, the same line per field, the same problems."""

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import loader
from fleet.loader import parse_text


def reference(text: str) -> tuple[list, list]:
    """(data, lines, first line) per document and the problems, the two-walk way, for every document."""
    documents, problems = [], []
    parser = yaml.CSafeLoader(text)
    try:
        while parser.check_node():
            node = parser.get_node()
            lines: dict = {}
            loader._walk_lines(node, (), lines, set(), problems, "f.yaml")
            documents.append((repr(parser.construct_document(node)), lines, node.start_mark.line + 1))
    finally:
        parser.dispose()
    return documents, [str(p) for p in problems]


def loaded(text: str) -> tuple[list, list]:
    documents, problems = parse_text(text, "f.yaml")
    return [(repr(d.data), d.lines, d.line) for d in documents], [str(p) for p in problems]


# scalars whose text YAML 1.1 resolves to something other than a string, and strings that look like them
TRICKY = ["yes", "No", "on", "~", "null", "", "0x1F", "0o17", "017", "1_000", "1:30", "+.inf", "-.Inf", ".nan",
          "1e3", "1.5e-3", "2001-12-14", "2001-12-14t21:59:43.10-05:00", "=", "<<", "true", "False", "-0", "0.",
          "a: b", "- x", "#", "'q'", "\"dq\"", "ünï", "\t", "123456789012345678901234567890"]
keys = st.one_of(st.sampled_from(TRICKY), st.text(max_size=6), st.integers(-5, 5), st.booleans())
scalars = st.one_of(st.sampled_from(TRICKY), st.text(max_size=8), st.integers(), st.booleans(), st.none(),
                    st.floats(allow_nan=False))
data = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(keys, inner, max_size=4)), max_leaves=25)


@settings(max_examples=300, deadline=None)
@given(st.lists(data, min_size=1, max_size=3), st.sampled_from([None, False, True]))
def test_dumped_documents_load_as_the_two_walks_load_them(documents, flow):
    text = yaml.safe_dump_all(documents, default_flow_style=flow, allow_unicode=True)
    assert loaded(text) == reference(text)


UNUSUAL = {
    "duplicate keys, nested under a duplicate": "a:\n  b: 1\n  b: 2\na:\n  b: 3\n  c: [1, 2]\n",
    "an anchor and aliases": "base: &b {x: 1, y: [a, b]}\nuse: *b\nlist: [*b, *b]\n",
    "a merge key": "base: &b {x: 1}\nmerged:\n  <<: *b\n  y: 2\n",
    "timestamps and binary": "when: 2001-12-14 21:59:43.10 -5\nday: 2002-12-14\nblob: !!binary aGVsbG8=\n",
    "explicit core tags": "a: !!str 12\nb: !!int '7'\nc: !!float '1'\nd: !!bool 'yes'\n",
    "a set and an omap": "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\n",
    "a value key": "=: 1\nb: 2\n",
    "keys that are not strings": "1: one\ntrue: t\n~: n\n1.5: f\n",
    "a complex key": "? [a, b]\n: c\n",
    "a scalar and an empty document": "just text\n---\n---\n- 1\n",
    "deep lists and maps": "a: [[[{b: [[c]]}]]]\n",
    "an unknown tag": "a: !custom x\n",
    # the loader looks each scalar's tag up once per stream, by its text and whether it was quoted
    "the same text plain, quoted and tagged": "a: yes\nb: 'yes'\nc: \"yes\"\nd: !!str yes\ne: [yes, '1', 1, 1.0, '~', ~]\n",
    "a key repeated as a value": "true: true\n'true': 'true'\n? true\n: x\n",
}


def test_unusual_documents_load_as_the_two_walks_load_them():
    for name, text in UNUSUAL.items():
        try:
            expected = reference(text)
        except yaml.YAMLError as exc:  # PyYAML refuses it: the loader reports a problem and keeps no document
            documents, problems = parse_text(text, "f.yaml")
            assert not documents and problems, (name, exc)
            continue
        assert loaded(text) == expected, name


def test_plain_documents_take_the_one_walk(monkeypatch):
    """Without this, a loader that always fell back would pass the tests above."""
    def refuse(*args, **kwargs):
        raise AssertionError("PyYAML's constructor was used for a plain document")

    monkeypatch.setattr(yaml.CSafeLoader, "construct_document", refuse)
    documents, problems = parse_text("kind: A\nspec: {n: 1, on: yes, list: [a, ~, 1.5]}\n---\n- x\n", "f.yaml")
    assert [d.data for d in documents] == [{"kind": "A", "spec": {"n": 1, True: True, "list": ["a", None, 1.5]}},
                                           ["x"]]
    assert not problems


def test_a_path_resolver_is_honoured(monkeypatch):
    """A tag is looked up once per text only when no path resolver is registered; one registered on the safe
    loader (an obscure, experimental PyYAML feature) still decides the tags of the paths it names."""
    monkeypatch.setattr(yaml.CSafeLoader, "yaml_path_resolvers", {})
    yaml.CSafeLoader.add_path_resolver("tag:yaml.org,2002:int", ["port"], yaml.ScalarNode)
    documents, _ = parse_text("port: '80'\nother: '80'\n", "f.yaml")
    assert documents[0].data == {"port": 80, "other": "80"}


@settings(max_examples=200, deadline=None)
@given(st.lists(data, min_size=1, max_size=3), st.lists(st.integers(0, 2), min_size=1, max_size=4),
       st.sampled_from([None, False, True]))
def test_shared_parts_written_as_aliases_load_as_the_two_walks_load_them(parts, uses, flow):
    """What Python's yaml.dump writes for objects used twice (anchors and aliases, as benchmarks/fleet_gen's fleet
    has) is built in the one walk, each alias the same object PyYAML's constructor makes it."""
    shared = [{"part": p} for p in parts]  # containers: only they are written as anchors
    document = {"spec": [shared[i % len(shared)] for i in uses], "again": shared}
    text = yaml.safe_dump(document, default_flow_style=flow, allow_unicode=True)
    assert loaded(text) == reference(text)
    built = parse_text(text, "f.yaml")[0][0].data
    assert built["spec"][0] is built["again"][uses[0] % len(shared)]


def test_aliased_documents_take_the_one_walk_and_a_bomb_is_still_measured(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("PyYAML's constructor was used for a document of plain aliases")

    monkeypatch.setattr(yaml.CSafeLoader, "construct_document", refuse)
    documents, problems = parse_text("a: &x {n: [1, 2]}\nb: *x\nc: [*x, *x]\n", "f.yaml")
    assert not problems and documents[0].data == {"a": {"n": [1, 2]}, "b": {"n": [1, 2]}, "c": [{"n": [1, 2]}] * 2}
    assert documents[0].lines == {("a",): 1, ("a", "n"): 1, ("a", "n", 0): 1, ("a", "n", 1): 1, ("b",): 2, ("c",): 3,
                                  ("c", 0): 1, ("c", 1): 1}  # an alias's lines are where its anchor is
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 8)]
    text = "kind: A\n" + "\n".join(lines) + "\n---\nkind: B\n"
    documents, problems = parse_text(text, "f.yaml", max_expanded=1_000_000)
    assert [d.data["kind"] for d in documents] == ["B"]
    assert len(problems) == 1 and "expands to about" in problems[0].message and problems[0].line == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(data, min_size=1, max_size=3), st.lists(st.integers(0, 2), min_size=1, max_size=4),
       st.integers(-40, 40), st.sampled_from([None, False, True]))
def test_a_document_with_aliases_is_refused_exactly_when_its_expanded_size_is_beyond_the_bound(parts, uses, slack,
                                                                                                flow):
    """The loader skips measuring node by node when the text and what the aliases add are surely within the
    bound: the answer must be the measured one, at the bound and on either side of it."""
    shared = [{"part": p} for p in parts]
    text = yaml.safe_dump({"spec": [shared[i % len(shared)] for i in uses], "again": shared}, default_flow_style=flow)
    size = loader.expanded_size(yaml.compose(text, Loader=yaml.CSafeLoader), {})
    documents, problems = parse_text(text, "f.yaml", max_expanded=max(0, size + slack))
    refused = [p for p in problems if "expands to about" in p.message]
    assert bool(refused) is (size > size + slack) and len(documents) == (0 if refused else 1)


KEY_ALIASES = "a: {&k " + "x" * 1000 + ": 1}\nb: [" + ",".join(["{*k: 1}"] * 2000) + "]\n"  # 17 KB, 2 MB written out


def test_aliases_used_as_keys_count_towards_the_bound():
    for text in (KEY_ALIASES, KEY_ALIASES.replace("\nb:", "\nm: {<<: {z: 1}}\nb:")):  # the one walk, then PyYAML's
        documents, problems = parse_text(text, "f.yaml", max_expanded=100_000)
        assert not documents and len(problems) == 1 and "expands to about 2,0" in problems[0].message
    documents, problems = parse_text(KEY_ALIASES, "f.yaml", max_expanded=3_000_000)
    assert not problems and documents[0].data["b"][0] == {"x" * 1000: 1}


LAYOUTS = {
    "text before, in other scripts": "a: ünïcødé ✓ 日本語\nb: 2\n---\nkind: X\nspec:\n  items:\n  - x: 1\n    y: é\n  - z: 3\n",
    "Windows line ends": "a: 1\r\nb: ü\r\n---\r\nk: v\r\nm:\r\n  - 1\r\n",
    "a flow node on the start line": "--- {a: 1, b: [x, y]}\n--- [1, {c: 2}]\n---   # a comment\nd:\n  e: f\n",
    "an indented root and comments": "# head\n---\n  a: 1   # trailing\n  # between\n  b:\n    - c\n...\n---\nz: 0\n",
    "a block literal, then a list": "a: |\n  line one\n\n  line three\nb:\n- 1\n- k: v\n---\nlast: true\n",
    "an empty document in between": "a: 1\n---\n---\nb: 2\n",
    "directives": "%YAML 1.1\n%TAG !e! tag:example.com,2000:\n---\na: 1\nb: [x]\n",
    "lone carriage returns": "a: 1\rb:\r  - c\r---\rd: e\r",
}


def test_lines_made_when_asked_are_the_ones_the_walk_records():
    """A plain document's lines are noted in order as it is built, and its map made the first time it is asked:
    the same map as the two walks record, wherever the document stands in the stream."""
    for name, text in LAYOUTS.items():
        assert loaded(text) == reference(text), name


def test_parsing_plain_documents_makes_no_paths_until_asked(monkeypatch):
    walked, placed = [], []
    real_walk, real_place = loader._walk_lines, loader._place_marks
    monkeypatch.setattr(loader, "_walk_lines", lambda *a: (a[1] == () and walked.append(a[0])) or real_walk(*a))
    monkeypatch.setattr(loader, "_place_marks", lambda *a: placed.append(a[0]) or real_place(*a))
    text = "".join(f"---\nkind: K\nmetadata:\n  name: n{i}\nspec:\n  list: [{i}, b]\n" for i in range(50))
    documents, problems = parse_text(text, "f.yaml")
    assert len(documents) == 50 and not problems and not walked and not placed
    assert documents[7].line_of(("spec", "list", 1)) == 7 * 6 + 6  # six lines a document, the first a start line
    assert documents[7].line_of(("metadata", "name", "deeper")) == 7 * 6 + 4
    assert not placed and not walked  # one field's line: no map made
    assert documents[7].lines[("spec",)] == 7 * 6 + 5 and placed == [documents[7].data]  # the whole map when asked


@settings(max_examples=200, deadline=None)
@given(st.lists(data, min_size=1, max_size=3), st.lists(st.integers(0, 2), min_size=1, max_size=4),
       st.sampled_from([None, False, True]))
def test_one_fields_line_is_the_maps(parts, uses, flow):
    """The line of one path, counted from the notes, is the one the whole map gives, for every path the map has
    and for paths it has not (aliases included: nothing under a repeated object has a line of its own)."""
    shared = [{"part": p} for p in parts]
    text = yaml.safe_dump_all([{"spec": [shared[i % len(shared)] for i in uses], "again": shared}, *parts],
                              default_flow_style=flow, allow_unicode=True)
    whole = [d.lines for d in parse_text(text, "f.yaml")[0]]
    for document, lines in zip(parse_text(text, "f.yaml")[0], whole):
        for path in [*lines, *(p + ("no-such",) for p in lines), ("no-such",), ("spec", 99), ("spec", "0")]:
            expected = next((lines[path[:n]] for n in range(len(path), 0, -1) if path[:n] in lines), document.line)
            assert document.line_of(path) == expected, path


def test_data_changed_after_parsing_never_gets_a_wrong_line():
    """A document's data is not to be changed once parsed; if it is, its lines are its first line, never another
    field's, and asking never fails."""
    for change in (lambda d: d.pop("b"), lambda d: d.update(z=1), lambda d: d["c"].append(4)):
        documents, _ = parse_text("---\na: 1\nb: 2\nc: [1, 2, 3]\nd: {e: f}\n", "f.yaml")
        change(documents[0].data)
        assert documents[0].line_of(("d", "e")) == 2 and documents[0].line_of(("a",)) == 2


def test_lines_of_a_document_nested_as_deep_as_yaml_allows():
    """Found in review: counting marks recursed two frames a level, so one field's line of a document nested 500
    deep (it parses) ran out of stack, and a portal request with such a field answered 500."""
    for depth in (495, 900):
        text = "a: " + "[" * depth + "]" * depth + "\nb: 1\n"
        asked, whole = parse_text(text, "f.yaml")[0][0], parse_text(text, "f.yaml")[0][0]
        assert asked.line_of(("b",)) == 2 and asked.line_of(("a", 0, 0, 0)) == 1
        assert len(whole.lines) == depth + 1 and whole.lines[("b",)] == 2
