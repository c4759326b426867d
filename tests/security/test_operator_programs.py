"""Issue 28: what a team writes reaches a Pulumi YAML Program only as the literal text it wrote (no interpolation
can be smuggled in, no function called), operator Secret names and configuration keys cannot collide or be
broken out of, two stacks never share an object name, and `operator export --out` writes through no planted
link."""

from __future__ import annotations

import os
import pathlib

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from automation.cli import main
from automation.operator.export import ExportError, ExportOptions, export, operator_secret_name, secret_config_key
from automation.operator.pulumi_yaml import Expression, Malformed, NotLiteral, escaped, literal, parse_interpolation, references
from automation.planning.stacks import desired_state
from fleet.validate import load_fleet
from tests.manifests import example_files

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OPTIONS = ExportOptions(backend="s3://bucket/fleet", git_url="https://github.com/acme/fleet", git_ref=COMMIT,
                        gcp_credentials=("gcp-workspace", "credentials.json"))
ATTACK = '$${gke-us-central-platform.outputs["kubeconfig"]}'  # last round's finding: `$${` became `$$${`
TRICKY = st.text(alphabet="${}[]\".\\a0 ", max_size=24)


def test_the_grammar_port_reads_as_pulumi_yaml_does():
    # pulumi-yaml's own cases: `$$` is one `$`; `${...}` an access; a lone `$` itself
    assert parse_interpolation("Hello $${world}!") == [("Hello ${world}!", None)]
    assert parse_interpolation('a${b.outputs["k"]}c') == [("a", ["b", "outputs", "k"]), ("c", None)]
    assert parse_interpolation("$$$${x}") == [("$${x}", None)]
    assert parse_interpolation("$$${x}") == [("$", ["x"])]  # what the old escaping emitted for `$${x}`
    assert literal("cost: 5$") == "cost: 5$"
    with pytest.raises(Malformed):
        parse_interpolation("${unterminated")
    with pytest.raises(Expression):
        literal({"Fn::ReadFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"})


@settings(max_examples=400, deadline=None)
@given(TRICKY, TRICKY)
def test_any_text_escaped_reads_back_as_itself_as_value_and_as_key(text, key):
    value = escaped({key: [text, {"k": text}]})
    assert literal(value) == {key: [text, {"k": text}]}
    assert references(value) == set()


def test_a_key_pulumi_yaml_reads_as_a_function_is_refused():
    for key in ("Fn::ReadFile", "Fn::StackReference", "Fn::StringAsset", "Fn::Anything"):
        with pytest.raises(NotLiteral, match="cannot be written into a Program"):
            escaped({"metadata": {"annotations": {key: "x"}}})


def _fleet_with(tmp_path, change) -> pathlib.Path:
    docs = []
    for path in example_files():
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    change(docs)
    out = tmp_path / "fleet.yaml"
    out.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out


def _qwen(docs) -> dict:
    return next(d for d in docs if d["kind"] == "ModelDeployment" and d["metadata"]["name"] == "qwen3-8b")


def _engine(docs) -> dict:
    member = _qwen(docs)["spec"]["template"]["spec"]["engines"][0]["members"][0]
    return member["template"]["spec"]["containers"][0]


def test_a_teams_argument_reaches_the_program_as_its_own_text_never_as_a_lookup(tmp_path):
    def inject(docs):
        _engine(docs)["args"].append(ATTACK)
        _engine(docs)["args"].append("--literal=${HOME}$")
    desired = desired_state(load_fleet([str(_fleet_with(tmp_path, inject))]).fleet, control_plane="byo-eu")
    files = export(desired, OPTIONS)
    (program,) = [o for o in files[f"{OPTIONS.object_name('model-ml-team.qwen3-8b')}.yaml"] if o["kind"] == "Program"]
    resources = program["program"]["resources"]
    read_back = []
    for name, resource in resources.items():
        if name.endswith("-objects"):
            for obj in resource["properties"]["objs"]:
                if obj["kind"] == "EndpointSlice":
                    continue  # the one object that reads its cluster's gateway address, on purpose
                read_back.append(literal(obj))  # raises if anything in it is an interpolation or a function
    args = [a for obj in read_back if obj["kind"] == "Deployment"
            for c in obj["spec"]["template"]["spec"]["containers"] for a in c.get("args", [])]
    assert ATTACK in args and "--literal=${HOME}$" in args
    # the only stack references are the ones the export itself declares, for providers and gateway addresses
    assert references(resources) <= set(resources)


def test_a_function_key_in_a_pod_template_never_reaches_a_program(tmp_path, capsys):
    # validation refuses it as a Kubernetes key first; `escaped` would refuse it too (test above)
    def inject(docs):
        member = _qwen(docs)["spec"]["template"]["spec"]["engines"][0]["members"][0]
        member["template"]["metadata"] = {"annotations": {"Fn::ReadFile": "/var/run/secrets/token"}}
    fleet = _fleet_with(tmp_path, inject)
    code = main(["operator", "export", "-f", str(fleet), "--backend", "s3://bucket/fleet", "--git-url",
                 "https://github.com/acme/fleet", "--git-ref", COMMIT, "--gcp-credentials", "gcp", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code != 0 and "Traceback" not in err
    assert "Fn::" in err and not (tmp_path / "out").exists()


def test_operator_secret_names_and_configuration_keys_cannot_collide():
    # `ml`/`team-hf` and `ml-team`/`hf` were both the Secret `ml-team-hf`
    assert operator_secret_name("ml", "team-hf") != operator_secret_name("ml-team", "hf")
    assert secret_config_key("ml", "team-hf", "tok") != secret_config_key("ml-team", "hf", "tok")
    key = secret_config_key("ns", "name", 'x}${other.outputs["kubeconfig"]')
    assert parse_interpolation(f"${{{key}}}") == [("", [key])]  # one plain root, whatever the key's text
    with pytest.raises(ExportError, match="253"):
        operator_secret_name("n" * 63, "s" * 200)


def test_two_stacks_with_one_object_name_are_refused_not_dropped(monkeypatch):
    desired = desired_state(load_fleet([str(ROOT / "examples")]).fleet, control_plane="byo-eu")
    monkeypatch.setattr(ExportOptions, "object_name", lambda self, stack: "same")
    with pytest.raises(ExportError, match="same operator object name 'same'"):
        export(desired, OPTIONS)


def test_export_out_writes_through_no_planted_link(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["operator", "export", "-f", str(ROOT / "examples"), "--backend", "s3://bucket/fleet", "--git-url",
            "https://github.com/acme/fleet", "--git-ref", COMMIT, "--gcp-credentials", "gcp", "--out", str(out)]
    assert main(args) == 0
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    marker = out / ".modelplane-render"
    marker.unlink()
    marker.symlink_to(victim)  # planted by whoever can write the folder
    (out / "_operator.yaml").unlink()
    os.symlink(victim, out / "_operator.yaml")
    code = main(args)
    capsys.readouterr()
    assert victim.read_text() == "keep me\n"
    if code == 0:  # replaced as a whole: the links are gone, not followed
        assert not marker.is_symlink() and not (out / "_operator.yaml").is_symlink()


def _reference_reading(value: str) -> list[tuple[str, list | None]]:
    """The grammar port as first written, one character at a time (quadratic on long strings, which Programs hold:
    it was two thirds of `operator export` at 2,000 deployments); the scan by index must read every text as it does."""
    parts: list[tuple[str, list | None]] = []
    text: list[str] = []
    while value:
        if value.startswith("$$"):
            text.append("$")
            value = value[2:]
        elif value.startswith("${"):
            value, access = _reference_access(value[2:])
            parts.append(("".join(text), access))
            text = []
        else:
            text.append(value[0])
            value = value[1:]
    if text:
        parts.append(("".join(text), None))
    return parts


def _reference_access(access: str) -> tuple[str, list]:
    accessors: list = []
    while access:
        head = access[0]
        if head == "}":
            return access[1:], accessors
        if head == ".":
            access = access[1:]
        elif head == "[":
            if len(access) > 1 and access[1] == '"':
                key, i = [], 2
                while True:
                    if i >= len(access):
                        raise Malformed("missing closing quote in property name")
                    if access[i] == '"':
                        i += 1
                        break
                    if access[i] == "\\" and i + 1 < len(access) and access[i + 1] == '"':
                        key.append('"')
                        i += 2
                    else:
                        key.append(access[i])
                        i += 1
                if i >= len(access) or access[i] != "]":
                    raise Malformed("missing closing bracket in property access")
                accessors.append("".join(key))
                access = access[i + 1:]
            else:
                close = access.find("]")
                if close == -1:
                    raise Malformed("missing closing bracket in list index")
                try:
                    index = int(access[1:close], 10)
                except ValueError:
                    raise Malformed("invalid list index") from None
                if not accessors:
                    raise Malformed("the root property must be a string subscript or a name")
                accessors.append(index)
                access = access[close + 1:]
        else:
            i = 0
            while i < len(access) and access[i] not in ".[}":
                i += 1
            accessors.append(access[:i])
            access = access[i:]
    raise Malformed("unterminated interpolation")


def _reading(read, value: str):
    try:
        return read(value)
    except Malformed as exc:
        return ("Malformed", str(exc))


@settings(max_examples=2000, deadline=None)
@given(st.text(alphabet='${}[]".\\a0 -1', max_size=40))
def test_the_scan_by_index_reads_every_text_as_the_character_by_character_port(value):
    assert _reading(parse_interpolation, value) == _reading(_reference_reading, value)


def test_a_config_file_of_a_megabyte_with_many_accesses_is_read_whole():
    config = "line of a config file with $$ and ${name.outputs[\"x\"]} in it\n" * 20000  # 1.2 MB
    parts = parse_interpolation(config)
    assert len(parts) == 20001 and parts[0] == ("line of a config file with $ and ", ["name", "outputs", "x"])
    assert references({"data": {"big": config}}) == {"name"}
