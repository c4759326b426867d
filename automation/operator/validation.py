"""The exported objects checked before anything is written: every object against the operator's own CRDs (v2.9.0)
and core kinds against Kubernetes' schemas, every Stack's name against the objects PKO derives from it, and every
Program's `${...}` references against what it declares."""

from __future__ import annotations

from pathlib import Path

from automation.operator.export import DNS_1035
from automation.operator.pulumi_yaml import Malformed, references
from workloads.schemas import check

CRDS = Path(__file__).parent / "crds"
WORKSPACE_SUFFIX = "-workspace"


def derived_name_problems(name: str) -> list[str]:
    """What the API server would refuse among the objects PKO derives from a Stack named `name`."""
    workspace = name + WORKSPACE_SUFFIX  # (the Stack's own 42-character limit is the CRD's rule: check() has it)
    found = []
    if not DNS_1035.match(workspace) or len(workspace) > 63:
        found.append(f"its workspace Service {workspace!r} is not a DNS-1035 label (a letter first; lowercase "
                     "letters, digits and '-'; at most 63)")
    if len(f"{workspace}-0123456789") > 63:
        found.append(f"its workspace StatefulSet {workspace!r} is too long for its pods' controller-revision-hash "
                     "label (63)")
    return found


def undeclared_references(program: dict) -> list[str]:
    """The `${name}` a Pulumi YAML program uses without declaring it (a resource or a configuration key), read with
    Pulumi YAML's own grammar: what the escaping left as literal text is never mistaken for a reference."""
    declared = set(program.get("resources") or {}) | set(program.get("configuration") or {})
    try:
        used = references(program.get("resources") or {})
    except Malformed as exc:
        return [f"program: Pulumi YAML would refuse it: {exc}"]
    return [f"program: ${{{name}}} is undeclared (no resource or configuration key of that name)"
            for name in sorted(used - declared)]


def _object_problems(obj: dict) -> list[str]:
    found = check(obj, CRDS)
    if obj["kind"] == "Stack":
        found += derived_name_problems(obj["metadata"]["name"])
    if obj["kind"] == "Program":
        found += undeclared_references(obj.get("program") or {})
    return found


def problems(files: dict[str, list[dict]]) -> list[str]:
    """Every object checked against the operator's CRDs (and core kinds against Kubernetes' schemas), every
    Stack's name against the objects PKO derives from it, and every Program's references."""
    return [f"{file}: {obj['kind']}/{obj['metadata']['name']}: {message}"
            for file, objects in files.items() for obj in objects for message in _object_problems(obj)]
