"""The plan's JSON is written by orjson where it writes json.dumps(indent=2)'s bytes, and by json elsewhere."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.plan_bench import generate
from fleet.plan_output import json_text, plan_to_dict
from fleet.scheduler import schedule
from tests.manifests import run

scalars = st.one_of(st.text(), st.sampled_from(["", "\x7f", "\x00\x1f", "é", "—", "\U0001f600", "\\", '"', "\n\t"]),
                    st.integers(min_value=-(2**70), max_value=2**70), st.booleans(), st.none())
documents = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                         max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_any_document_of_the_plans_types_is_written_as_json_writes_it(document):
    assert json_text(document) == json.dumps(document, indent=2)


def test_a_generated_fleets_plan_is_written_as_json_writes_it():
    loaded = run(*generate(40, 8))
    document = plan_to_dict(schedule(loaded.fleet), explain=True)
    assert json_text(document) == json.dumps(document, indent=2)
