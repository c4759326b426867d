"""Every object rendered from the examples and from generated fleets validates against its upstream schema."""

import json
import pathlib
import random

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from automation.cli import main
from fleet.scheduler import schedule
from fleet.validate import load_fleet
from tests.manifests import (SHAPES, cache, cluster, deployment, endpoint, example_paths, gateway, gpu_class, member, run,
                             service)
from workloads import render as render_module
from workloads.render import render
from workloads.schemas import check

ROOT = pathlib.Path(__file__).resolve().parent.parent
DYN = "nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.6.1"


def all_problems(result) -> list[str]:
    return [f"{s}/{t}: {o['kind']}/{o['metadata']['name']}: {m}" for s, t, o in result.objects() for m in check(o)]


@pytest.mark.parametrize("shape", SHAPES)
def test_examples_render_and_validate(shape):
    loaded = load_fleet(example_paths(shape))
    result = render(loaded.fleet, schedule(loaded.fleet))
    kinds = {o["kind"] for _, _, o in result.objects()}
    assert kinds >= {"Deployment", "LeaderWorkerSet", "InferencePool", "HTTPRoute", "ResourceClaimTemplate",
                     "EndpointSlice", "Service", "PersistentVolumeClaim", "Job", "ConfigMap", "Role"}
    assert all_problems(result) == []


def generated_fleet(seed: int) -> list[dict]:
    rnd = random.Random(seed)
    objects = [gpu_class("l4", 1, "23034Mi"), gpu_class("h100", 8, "81559Mi", "NVIDIA H100", "Hopper"), gateway()]
    for i in range(rnd.randint(2, 4)):
        objects.append(cluster(f"c{i}", pools=(("l4", "l4", rnd.randint(1, 4)), ("h100", "h100", rnd.randint(2, 6))),
                               labels={"region": rnd.choice(["us", "eu"])}, cache_class=rnd.choice(["rwx", None])))
    objects.append(cache("weights"))
    for i in range(rnd.randint(3, 7)):
        kind = rnd.choice(["single", "gang", "pd", "dynamo", "dynamo-pd", "llm-d-single", "scaled"])
        name = f"m{i}-{kind}"
        if kind in ("single", "llm-d-single", "scaled"):
            md = deployment(name, replicas=rnd.randint(1, 3))
            if kind == "llm-d-single":
                md["metadata"]["annotations"] = {"modelplane.ai/backend": "llm-d"}
            if kind == "scaled":
                md["metadata"]["annotations"] = {"modelplane.ai/autoscaling": "keda", "modelplane.ai/autoscaling-max-copies": "2"}
        elif kind in ("gang", "dynamo"):
            image = DYN if kind == "dynamo" else "lmsysorg/sglang:v0.5.3"
            engine = {"name": "e", "copies": rnd.randint(1, 2),
                      "members": [member("Leader", gpus=8, image=image), member("Worker", gpus=8, nodes=1, image=image)]}
            if kind == "dynamo":
                engine["capabilities"] = [rnd.choice(["KVOffload", "WeightStreaming", "NVLinkDomain"])]
            md = deployment(name, engines=[engine], modelCacheRef={"name": "weights"})
        else:
            image = DYN if kind == "dynamo-pd" else "vllm/vllm-openai:v0.11.0"
            engines = [{"name": "prefill", "phase": "Prefill", "members": [member(gpus=4, image=image)]},
                       {"name": "decode", "phase": "Decode", "members": [member(gpus=4, image=image)]}]
            md = deployment(name, engines=engines, serving={"mode": "PrefillDecode"})
            if kind == "dynamo-pd":
                md["metadata"]["annotations"] = {"modelplane.ai/backend": "dynamo"}
        objects.append(md)
        svc = service(name, deployment_name=name)
        if rnd.random() < 0.3:
            svc["spec"]["endpoints"].append({"weight": 5, "selector": {"matchLabels": {"provider": "ext"}}})
        objects.append(svc)
    ext = endpoint("ext")
    ext["metadata"]["labels"] = {"provider": "ext"}
    objects.append(ext)
    return objects


@pytest.mark.parametrize("seed", range(8))
def test_generated_fleets_render_valid_objects(seed):
    loaded = run(*generated_fleet(seed))
    assert loaded.errors == [], [str(p) for p in loaded.errors]
    result = render(loaded.fleet, schedule(loaded.fleet))
    assert len(list(result.objects())) > 10
    assert all_problems(result) == []


def test_render_cli_writes_stacks_and_targets(tmp_path, capsys):
    out = tmp_path / "render"
    code = main(["render", "-f", str(ROOT / "examples"), "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    stacks = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert stacks == ["cache-ml-team.qwen3-coder", "endpoints-ml-team", "model-ml-team.kimi-k2",
                      "model-ml-team.qwen3-8b", "model-ml-team.qwen3-coder", "service-ml-team.kimi-k2",
                      "service-ml-team.qwen3-8b", "service-ml-team.qwen3-coder", "team-ml-team.byo-eu",
                      "team-ml-team.eks-us-west", "team-ml-team.gke-us-central"]
    assert sorted(p.name for p in (out / "model-ml-team.qwen3-8b").iterdir()) == ["eks-us-west", "gke-us-central"]
    assert (out / "service-ml-team.qwen3-8b" / "control-plane").is_dir()
    files = list(out.rglob("*.yaml"))
    assert len(files) == int(stdout.split()[1])
    for f in files:
        obj = yaml.safe_load(f.read_text())
        assert f.name == f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
        assert "&id" not in f.read_text()
    # rendering again replaces the folder as a whole
    (out / "model-ml-team.qwen3-8b" / "stale.yaml").write_text("x: 1\n")
    assert main(["render", "-f", str(ROOT / "examples"), "--out", str(out)]) == 0
    assert not (out / "model-ml-team.qwen3-8b" / "stale.yaml").exists()


def test_render_refuses_invalid_objects_and_writes_nothing(tmp_path, capsys, monkeypatch):
    real = render_module.compose_replica

    def broken(ctx):
        objects = real(ctx)
        for obj in objects:
            if obj["kind"] == "InferencePool":
                obj["spec"]["targetPorts"] = [{"number": "eighty"}]
        return objects

    monkeypatch.setattr(render_module, "compose_replica", broken)
    out = tmp_path / "render"
    code = main(["render", "-f", str(ROOT / "examples"), "--out", str(out)])
    _, err = capsys.readouterr()
    assert code == 1 and not out.exists()
    assert "InferencePool/qwen3-8b-a02c0-pool: spec.targetPorts[0].number: 'eighty' is not of type 'integer'" in err
    assert "nothing was written" in err


def test_render_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    code = main(["render", "-f", str(ROOT / "examples"), "--out", str(tmp_path)])
    _, err = capsys.readouterr()
    assert code == 1 and "was not written by modelplane render" in err
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_render_refuses_colliding_deployments_when_teams_share_default(tmp_path, capsys):
    shared = gateway()
    shared["metadata"]["annotations"] = {"modelplane.ai/workload-namespaces": "Default"}
    fleet = [gpu_class("l4", 1, "23034Mi"), cluster("a", pools=(("gpu", "l4", 2),)),
             deployment("qwen", namespace="team-a"), deployment("qwen", namespace="team-b"), shared]
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump_all(fleet))
    code = main(["render", "-f", str(path), "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    assert code == 1 and "already creates this object" in err and not (tmp_path / "out").exists()


def test_schema_checker_rejects_what_the_api_server_would():
    bad = [
        {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"},
         "spec": {"leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i", "typo": 1}]}}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": {"a": True}},
         "spec": {"selector": {}, "template": {}}},
        {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "x"},
         "spec": {"scaleTargetRef": {"name": "d"}, "triggers": [], "maxReplicaCount": "many"}},
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "BackendTLSPolicy", "metadata": {"name": "x"},
         "spec": {"targetRefs": [], "validation": {}}},
        {"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}},
    ]
    for obj in bad:
        assert check(obj), json.dumps(obj)
    # defaults are applied before checking, as the API server does: LWS rolloutStrategy.type is required but defaulted
    good = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"},
            "spec": {"rolloutStrategy": {}, "leaderWorkerTemplate": {"workerTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}
    assert check(good) == []


def test_generated_fleets_cover_every_kind_we_emit():
    kinds = set()
    for seed in range(8):
        loaded = run(*generated_fleet(seed))
        kinds |= {o["kind"] for _, _, o in render(loaded.fleet, schedule(loaded.fleet)).objects()}
    assert kinds >= {"Deployment", "LeaderWorkerSet", "DynamoGraphDeployment", "ScaledObject", "BackendTLSPolicy",
                     "InferencePool", "HTTPRoute", "EndpointSlice", "PersistentVolumeClaim", "Job", "ResourceClaimTemplate"}


@pytest.mark.parametrize("seed", range(4))
def test_the_fast_yaml_writer_writes_what_the_reference_writer_writes(seed):
    """`render` writes with libyaml (6x faster); the text must be the pure-Python writer's, byte for byte."""
    from workloads.yamlio import dump, dump_fast

    loaded = run(*generated_fleet(seed))
    objects = [o for _, _, o in render(loaded.fleet, schedule(loaded.fleet)).objects()]
    tricky = {"data": {"plain": "yes", "spaced": "  leading", "trailing": "line \nnext ", "tab": "a\tb\nc",
                       "unicode": "Grüße\n— ok", "empty-lines": "a\n\n\nb\n", "long": "x " * 200 + "\ny",
                       "number": "0123", "colon": "a: b\nc: d", "crlf": "a\r\nb"}}
    for obj in [*objects, tricky]:
        assert dump_fast(obj) == dump(obj)
    assert yaml.safe_load(dump_fast(tricky)) == tricky


TRICKY = ["", " ", "yes", "no", "null", "~", "0123", "1.5", "1e3", ".inf", "-", "- a", "? a", ": a", "a: b", "a #b",
          "#c", "@x", "`x", "'q'", '"q"', "{a}", "[a]", "*x", "&x", "!x", "|x", ">x", "%x", "a\tb", "a\n", "a\nb",
          "\na", " lead\nx", "trail \nx", "a\n\n", "a\n\n\nb\n", "a\r\nb", "Grüße", "x" * 130, "---", "...",
          "a:b", "http://x/y?z=1", "2026-12-01", "0x1F", "+1", "true", "True", "NO",
          # words the writer writes plain without asking libyaml, unless they read back as something else
          "a", "a-b", "a.b", "a/b", "a_b", "a:", "a:b:c", "1:30", "1_000", "0o17", "0b101", "1.5e3", "6.", "ON", "off",
          "Yes", "y", "n", "nan", "NaN", "inf", "v0.11.0", "vllm/vllm-openai:v0.11.0", "2026-12-01t10:00:00Z", "a/",
          "1-2", "0.0.0.0", "12:30:45", "190:20:30", "1__2", "._", "A1/b.c-d_e",
          "/a", "/team-1/model-a/", "//a", "/-a", "-a", "--a", "---a", "-1", "--1", "-0x1F", "-.5", "-a=b", "--pool=x",
          "--a=", "=", "a=b", "a==b", "--a:b", "--yes", "-y", "/1", "/1.5",
          "k" * 119, "k" * 120, "k" * 123, "k" * 128]  # from about 123 characters a key is no longer simple
scalars = st.one_of(st.sampled_from(TRICKY), st.text(max_size=12), st.integers(-10**6, 10**6), st.booleans(),
                    st.none(), st.floats(allow_nan=False, allow_infinity=False))
keys = st.one_of(st.sampled_from(TRICKY), st.text(min_size=1, max_size=10))
documents = st.dictionaries(keys, st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)), max_leaves=20), min_size=1, max_size=6)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_the_fast_yaml_writer_writes_what_libyaml_and_the_pure_python_writer_write_on_random_data(obj):
    from workloads.yamlio import dump, dump_fast

    assert dump_fast(obj) == dump(obj)


@pytest.mark.parametrize("word", TRICKY)
def test_the_fast_yaml_writer_writes_each_tricky_scalar_as_libyaml_does_wherever_it_stands(word):
    """Each scalar the writer may write without asking libyaml, or must not: as a key, a value and an item."""
    from workloads.yamlio import dump, dump_fast

    obj = {word: word, "in": [word, {word: [word]}], "nested": {"k": word}}
    assert dump_fast(obj) == dump(obj)
    assert yaml.safe_load(dump_fast(obj)) == obj


@pytest.mark.parametrize("folder", [ROOT / "workloads" / "crds", ROOT / "automation" / "operator" / "crds"])
def test_every_crd_file_is_named_by_its_group_as_the_schema_check_looks_it_up(folder):
    """The check parses only the files of an object's API group (`<group>_<plural>.yaml`): a CRD in a file named
    otherwise would never be found, and its objects would be refused as having no schema."""
    files = sorted(folder.rglob("*.yaml"))
    assert files
    for path in files:
        for crd in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            if crd and crd.get("kind") == "CustomResourceDefinition":
                assert path.name == f"{crd['spec']['group']}_{crd['spec']['names']['plural']}.yaml", path


def test_a_custom_resource_is_checked_against_its_groups_crd_only_when_its_kind_and_version_are_served():
    lws = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": {"name": "x"},
           "spec": {"replicas": "two"}}
    assert any("replicas" in m for m in check(lws))
    assert check({**lws, "apiVersion": "leaderworkerset.x-k8s.io/v9"}) == [
        "apiVersion: no schema known for leaderworkerset.x-k8s.io/v9 LeaderWorkerSet"]
    assert check({**lws, "kind": "LeaderWorkerThing"})[0].startswith("apiVersion: no schema known")


def test_a_crd_file_is_parsed_once_per_content_then_read_back_from_the_cache(tmp_path):
    from fleet.disk_cache import DiskCache
    from workloads.schemas import crds_in

    source = ROOT / "workloads" / "crds" / "upstream" / "inference.networking.k8s.io_inferencepools.yaml"
    parsed = [d for d in yaml.load_all(source.read_text(), Loader=yaml.CSafeLoader) if d]
    assert crds_in(source, tmp_path) == parsed
    entries = list((tmp_path / "crds").glob("*.json"))
    assert len(entries) == 1 and entries[0].stat().st_mode & 0o077 == 0
    name = f"crds/{entries[0].name}"
    DiskCache(tmp_path).write(name, json.dumps([{"kind": "Marker"}]))
    assert crds_in(source, tmp_path) == [{"kind": "Marker"}]  # read back, not parsed again
    for junk in ("{not json", json.dumps([{"kind": "Edited"}])):  # damaged, or edited by anyone: parsed again
        entries[0].write_text(junk)
        assert crds_in(source, tmp_path) == parsed
        assert json.loads(DiskCache(tmp_path).read(name) or b"null") == parsed  # and rewritten
    changed = tmp_path / "inference.networking.k8s.io_inferencepools.yaml"
    changed.write_text(source.read_text().replace("InferencePool is", "An InferencePool is"))
    assert crds_in(changed, tmp_path) != parsed and len(list((tmp_path / "crds").glob("*.json"))) == 2
    (tmp_path / "a-file").write_text("")  # a cache folder that cannot be made, even by root: only slower
    assert crds_in(source, tmp_path / "a-file") == parsed


@pytest.mark.parametrize("rules, fields", [
    (("size(self.metadata.name) <= 42",), {"metadata"}),
    (("self.spec.x == 1 || has(self.status)", "self.spec.y != 'z'"), {"spec", "status"}),
    (("self.spec.y != 'self'",), None),  # a literal that says `self`: the whole object, to be safe
    (("size(self) > 1",), None),  # `self` whole
    (("self.all(k, k != 'x')",), None),  # a macro on `self`
    (("self.exists (k, true)",), None),
    (("self.metadata.name != ''", "self == self"), None),
])
def test_a_rule_is_evaluated_on_the_fields_it_reads(rules, fields):
    """The root rules are given only the top-level fields they read (`self.<field>`), unless they read `self`
    otherwise; either way every verdict is the one on the whole object."""
    from workloads import schemas

    assert schemas._fields_read(rules) == (frozenset(fields) if fields is not None else None)
    objects = [{"metadata": {"name": "n" * length}, "spec": {"x": x, "y": "self"}, **extra}
               for length in (3, 43) for x in (1, 2) for extra in ({}, {"status": {}})]
    messages = [(rule, f"broke {i}") for i, rule in enumerate(rules)]
    for obj in objects:
        projected = schemas._rule_failures(obj, messages)
        schemas._fields_read.cache_clear()
        original = schemas._fields_read
        try:
            schemas._fields_read = lambda rules: None  # type: ignore[assignment]
            whole = schemas._rule_failures(obj, messages)
        finally:
            schemas._fields_read = original
        assert projected == whole


def test_core_kinds_are_checked_against_the_newest_strict_schemas_up_to_our_kubernetes_release(tmp_path):
    from workloads.schemas import newest_strict

    for name in ("v1.9.0-local-strict", "v1.35.9-local-strict", "v1.35.10-local-strict", "v1.35.11-local",
                 "v1.36.0-local-strict", "v2.0.0-local-strict", "_definitions.json"):
        (tmp_path / name).mkdir()
    assert newest_strict(tmp_path, "1.35").name == "v1.35.10-local-strict"  # 10 > 9, as numbers
    assert newest_strict(tmp_path, "1.34").name == "v1.9.0-local-strict"
    assert newest_strict(tmp_path, "2.0").name == "v2.0.0-local-strict"
    with pytest.raises(FileNotFoundError):
        newest_strict(tmp_path, "1.8")


def test_the_fast_yaml_writer_remembers_a_bounded_number_of_keys_and_strings(monkeypatch):
    """The portal composes for days: what the writer remembers is let go at its limit, and the text stays the same."""
    import workloads.yamlio as yamlio

    monkeypatch.setattr(yamlio, "_REMEMBERED", 50)
    monkeypatch.setattr(yamlio, "_KEYS", {})
    monkeypatch.setattr(yamlio, "_STRINGS", {})
    for i in range(400):
        obj = {f"key-{i}": f"value-{i}", "list": [f"--flag={i}", f"/path/{i}/"], "same": "yes"}
        assert yamlio.dump_fast(obj) == yamlio.dump(obj)
        assert len(yamlio._KEYS) <= 50 and len(yamlio._STRINGS) <= 50
