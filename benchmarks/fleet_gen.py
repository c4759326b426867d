"""A second fleet generator, written apart from plan_bench.generate, with the shapes real fleets have.

plan_bench's fleet is kind to the scheduler: 4 classes, every cluster the same 4 pools, one selector per size,
capacity to spare. This one has what an outside performance engineer would build from a real fleet:

- 14 classes over three vendors' shapes (1-, 2-, 4- and 8-GPU nodes; NVIDIA and AMD devices, so selectors on the
  NVIDIA domain do not match every pool);
- uneven clusters: 1 to 6 pools each, drawn per cloud, node counts skewed (most pools small, a few of 48-96
  nodes, some empty), labels for cloud, region and tier;
- 40 teams, each with its own way of writing selectors (memory thresholds, architecture, product names, a
  minimum device count) and its own cluster selector, some of them pinned to one small region so that its
  clusters are full and replicas go unscheduled;
- mixed engines: single-GPU and tensor-parallel vLLM and SGLang, whole-node replicas, leader/worker gangs, and
  prefill/decode pairs, with 1 to 8 replicas (most 1-2);
- what users reach them by: a fleet gateway, a ModelService per deployment (a quarter of them sending a weighted
  share to another deployment of their team, as a canary does), and a hosted provider's ModelEndpoint per team
  that some services keep a share on. Drawn after everything else, so the fleet's other objects are those of a
  fleet without them.

    .venv/bin/python benchmarks/fleet_gen.py --deployments 2000 --clusters 500 > fleet.yaml
"""

from __future__ import annotations

import argparse
import random
import sys

import yaml

API = "modelplane.ai/v1alpha1"
# name, vendor domain, devices per node, memory (Mi), architecture, product
CLASSES = [
    ("l4-1", "nvidia", 1, 23034, "Ada Lovelace", "NVIDIA L4"),
    ("l4-4", "nvidia", 4, 23034, "Ada Lovelace", "NVIDIA L4"),
    ("l4-8", "nvidia", 8, 23034, "Ada Lovelace", "NVIDIA L4"),
    ("a10g-1", "nvidia", 1, 23028, "Ampere", "NVIDIA A10G"),
    ("a10g-4", "nvidia", 4, 23028, "Ampere", "NVIDIA A10G"),
    ("l40s-4", "nvidia", 4, 46068, "Ada Lovelace", "NVIDIA L40S"),
    ("l40s-8", "nvidia", 8, 46068, "Ada Lovelace", "NVIDIA L40S"),
    ("a100-40-8", "nvidia", 8, 40960, "Ampere", "NVIDIA A100-SXM4-40GB"),
    ("a100-80-8", "nvidia", 8, 81920, "Ampere", "NVIDIA A100-SXM4-80GB"),
    ("h100-8", "nvidia", 8, 81559, "Hopper", "NVIDIA H100 80GB HBM3"),
    ("h200-8", "nvidia", 8, 143771, "Hopper", "NVIDIA H200"),
    ("mi300x-8", "amd", 8, 196608, "CDNA3", "AMD Instinct MI300X"),
    ("mi250-2", "amd", 2, 65536, "CDNA2", "AMD Instinct MI250"),
    ("rtx6000-2", "nvidia", 2, 49152, "Ada Lovelace", "NVIDIA RTX 6000 Ada"),
]
DRIVERS = {"nvidia": "gpu.nvidia.com", "amd": "gpu.amd.com"}
CLOUDS = {  # the classes each cloud's clusters draw their pools from
    "gke": ["l4-1", "l4-4", "l4-8", "a100-40-8", "a100-80-8", "h100-8", "h200-8"],
    "eks": ["a10g-1", "a10g-4", "l40s-4", "l40s-8", "a100-40-8", "h100-8", "h200-8"],
    "onprem": ["a100-80-8", "h100-8", "mi300x-8", "mi250-2", "rtx6000-2", "l40s-8"],
}
REGIONS = {"gke": ["us-central1", "us-east4", "europe-west4", "asia-southeast1"],
           "eks": ["us-west-2", "us-east-1", "eu-central-1"],
           "onprem": ["dc-fra", "dc-sjc"]}
SMALL_REGION = "dc-sjc"  # few clusters: the teams pinned here overfill it
IMAGES = ["vllm/vllm-openai:v0.11.0", "lmsysorg/sglang:v0.5.3", "vllm/vllm-openai:v0.10.2"]


def _classes() -> list[dict]:
    out = []
    for name, vendor, count, memory, arch, product in CLASSES:
        driver = DRIVERS[vendor]
        out.append({"apiVersion": API, "kind": "InferenceClass", "metadata": {"name": name},
                    "spec": {"devices": [{"name": "gpu", "driver": driver, "deviceClassName": driver, "count": count,
                                          "attributes": {"architecture": {"string": arch},
                                                         "productName": {"string": product}},
                                          "capacity": {"memory": {"value": f"{memory}Mi"}}}]}})
    return out


def _nodes(rnd: random.Random) -> int:
    roll = rnd.random()
    if roll < 0.08:
        return 0  # scaled to zero
    if roll < 0.85:
        return rnd.randint(1, 6)
    if roll < 0.97:
        return rnd.randint(8, 24)
    return rnd.randint(48, 96)


def _clusters(count: int, rnd: random.Random) -> list[dict]:
    out = []
    for i in range(count):
        cloud = rnd.choices(list(CLOUDS), weights=[5, 4, 1])[0]
        region = SMALL_REGION if cloud == "onprem" and rnd.random() < 0.3 else rnd.choice(REGIONS[cloud])
        kinds = rnd.sample(CLOUDS[cloud], rnd.choice([1, 2, 2, 3, 3, 4, 5, 6]))
        pools = [{"name": f"{kind}-{j}", "className": kind, "nodeCount": _nodes(rnd)} for j, kind in enumerate(kinds)]
        out.append({"apiVersion": API, "kind": "InferenceCluster",
                    "metadata": {"name": f"{cloud}-{region}-{i:05d}",
                                 "labels": {"cloud": cloud, "region": region,
                                            "tier": rnd.choice(["prod", "prod", "prod", "dev"])}},
                    "spec": {"cluster": {"source": "Existing", "existing": {"secretRef": {"name": f"kc-{i}"}}},
                             "nodePools": pools}})
    return out


def _team_styles(rnd: random.Random, teams: int) -> list[dict]:
    """How each team writes its selectors and where it runs."""
    styles = []
    for t in range(teams):
        where: dict[str, str] = {}
        roll = rnd.random()
        if t >= 24 and roll < 0.4:
            where = {"region": SMALL_REGION}  # capacity is short here (smaller teams: they own few deployments)
        elif roll < 0.45:
            cloud = rnd.choice(list(REGIONS))
            where = {"region": rnd.choice(REGIONS[cloud])}
        elif roll < 0.65:
            where = {"cloud": rnd.choice(list(CLOUDS)), "tier": "prod"}
        styles.append({"team": f"team-{t}", "selector": rnd.choice(["memory", "arch", "product", "memory+arch"]),
                       "where": where, "engine": rnd.choice(IMAGES)})
    return styles


def _selectors(style: str, memory_gi: int, rnd: random.Random) -> list[dict]:
    memory = f'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("{memory_gi}Gi")) >= 0'
    if style == "memory":
        return [{"cel": memory}]
    if style == "arch":
        arch = "Hopper" if memory_gi > 40 else rnd.choice(["Ada Lovelace", "Ampere"])
        return [{"cel": f'device.attributes["gpu.nvidia.com"].architecture == "{arch}"'}]
    if style == "product":
        products = ["NVIDIA H100 80GB HBM3", "NVIDIA H200"] if memory_gi > 40 else ["NVIDIA L4", "NVIDIA A10G",
                                                                                     "NVIDIA L40S"]
        listed = ", ".join(f'"{p}"' for p in products)
        return [{"cel": f'device.attributes["gpu.nvidia.com"].productName in [{listed}]'}]
    return [{"cel": memory}, {"cel": 'device.attributes["gpu.nvidia.com"].architecture != "Turing"'}]


def _member(role: str, gpus: int, selectors: list[dict], image: str, nodes: int | None = None) -> dict:
    member = {"role": role, "nodeSelector": {"devices": [{"name": "gpu", "count": gpus, "selectors": selectors}]},
              "template": {"spec": {"containers": [{"name": "engine", "image": image}]}}}
    if nodes:
        member["worker"] = {"nodes": nodes}
    return member


def _deployment(i: int, style: dict, rnd: random.Random) -> dict:
    roll = rnd.random()
    image = style["engine"]
    spec: dict = {}
    if roll < 0.5:
        memory = rnd.choice([12, 16, 20, 22])
        engines = [{"name": "engine", "members": [_member("Standalone", 1, _selectors(style["selector"], memory, rnd),
                                                          image)]}]
    elif roll < 0.7:
        memory = rnd.choice([20, 40, 44])
        engines = [{"name": "engine", "members": [_member("Standalone", rnd.choice([2, 4]),
                                                          _selectors(style["selector"], memory, rnd), image)]}]
    elif roll < 0.85:
        engines = [{"name": "engine", "members": [_member("Standalone", 8, _selectors(style["selector"], 70, rnd),
                                                          image)]}]
    elif roll < 0.93:
        selectors = _selectors(style["selector"], 70, rnd)
        engines = [{"name": "engine", "members": [_member("Leader", 8, selectors, image),
                                                  _member("Worker", 8, selectors, image, rnd.choice([1, 1, 3]))]}]
    else:
        selectors = _selectors(style["selector"], 70, rnd)
        spec["serving"] = {"mode": "PrefillDecode"}
        engines = [{"name": "prefill", "phase": "Prefill",
                    "members": [_member("Standalone", rnd.choice([4, 8]), selectors, image)]},
                   {"name": "decode", "phase": "Decode",
                    "members": [_member("Standalone", 8, selectors, image)]}]
    spec["engines"] = engines
    if style["where"]:
        spec["clusterSelector"] = {"matchLabels": dict(style["where"])}
    replicas = rnd.choices([1, 2, 3, 4, 8], weights=[45, 30, 12, 9, 4])[0]
    return {"apiVersion": API, "kind": "ModelDeployment",
            "metadata": {"name": f"svc-{i:05d}", "namespace": style["team"]},
            "spec": {"replicas": replicas, "template": {"spec": spec}}}


def realistic(deployments: int, clusters: int, seed: int = 31) -> list[dict]:
    rnd = random.Random(seed)
    styles = _team_styles(rnd, 40)
    objects = _classes() + _clusters(clusters, rnd)
    # teams are uneven too: a few own most deployments
    weights = [1.0 / (1 + t) for t in range(len(styles))]
    for i in range(deployments):
        objects.append(_deployment(i, rnd.choices(styles, weights=weights)[0], rnd))
    return objects + _front_door(objects, random.Random(seed + 1))


def _front_door(objects: list[dict], rnd: random.Random) -> list[dict]:
    """The gateway, a service per deployment and a hosted endpoint per team (see the module's docstring)."""
    out: list[dict] = [{"apiVersion": API, "kind": "InferenceGateway", "metadata": {"name": "default"},
                        "spec": {"backend": "Traefik", "traefik": {"version": "40.2.0"}}}]
    by_team: dict[str, list[str]] = {}
    for o in objects:
        if o["kind"] == "ModelDeployment":
            by_team.setdefault(o["metadata"]["namespace"], []).append(o["metadata"]["name"])
    for team, names in by_team.items():
        out.append({"apiVersion": API, "kind": "ModelEndpoint",
                    "metadata": {"name": "hosted", "namespace": team, "labels": {"provider": "hosted"}},
                    "spec": {"url": "https://inference.example.com/v1", "rewritePath": "/"}})
        for name in names:
            entries = [{"selector": {"matchLabels": {"modelplane.ai/deployment": name}}, "weight": 90}]
            roll = rnd.random()
            if roll < 0.25 and len(names) > 1:
                canary = rnd.choice([n for n in names if n != name])
                entries.append({"selector": {"matchLabels": {"modelplane.ai/deployment": canary}}, "weight": 10})
            elif roll < 0.35:
                entries.append({"selector": {"matchLabels": {"provider": "hosted"}}, "weight": 10})
            out.append({"apiVersion": API, "kind": "ModelService", "metadata": {"name": name, "namespace": team},
                        "spec": {"endpoints": entries}})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployments", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    sys.stdout.write(yaml.safe_dump_all(realistic(args.deployments, args.clusters, args.seed), sort_keys=False))


if __name__ == "__main__":
    main()
