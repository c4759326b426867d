"""Stand-in charts for the local fleet: one per chart the platform installs, written from the chart's declaration in
components/versions.py, so a platform stack can run its Helm releases where no chart repository can be reached.

A stand-in holds what the platform's later objects need of the real chart (its CRDs: the bundled upstream files
where the project has them, else a CRD of the declared group, kind and versions that keeps any fields) and one
controller Deployment that never runs a container (kwok marks its pod ready), so Helm's wait has something to wait
for. It has no webhooks and no APIServices (nothing may dial a simulated pod). They are stand-ins: the real charts'
values, webhooks and controllers are not exercised, and output and docs say so.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import yaml

from components.versions import CHARTS, Chart

BUNDLED = Path(__file__).resolve().parents[2] / "workloads" / "crds" / "upstream"
STANDIN_LABEL = "modelplane.ai/stand-in"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # never pulled: kwok runs no container
# Charts whose CRDs are templates, not files of their crds/ folder (the bundled cert-manager files hold the chart's
# template text): the stand-in templates them the same way, gated and kept by the same values (the real chart's
# defaults in values.yaml), because Helm treats the two differently. A CRD already in the cluster is left alone
# from crds/, but refused from a template unless it carries the release's ownership metadata; and only a
# templated CRD is deleted with its release, unless it carries `helm.sh/resource-policy: keep`.
TEMPLATED_CRDS: dict[str, tuple[str, str, dict]] = {
    # key -> (the condition that installs them, the condition that keeps them, the chart's default values)
    "cert-manager": ("or .Values.crds.enabled .Values.installCRDs", ".Values.crds.keep",
                     {"crds": {"enabled": False, "keep": True}, "installCRDs": False}),
}


def plural(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in "aeiou":
        return lower[:-1] + "ies"
    if lower.endswith(("s", "x")):
        return lower + "es"
    return lower + "s"


def cluster_scoped(kind: str) -> bool:
    return kind.startswith("Cluster") or kind in ("NodeFeatureRule",)


@lru_cache(maxsize=1)
def bundled_crds() -> dict[tuple[str, str], dict]:
    """(group, kind) -> the bundled upstream CRD."""
    out = {}
    for path in sorted(BUNDLED.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                spec = doc["spec"]
                out[(spec["group"], spec["names"]["kind"])] = doc
    return out


def crd(group: str, kind: str, versions: list[str]) -> dict:
    bundled = bundled_crds().get((group, kind))
    if bundled is not None:  # its schema; its metadata can hold the chart's own template text (cert-manager's)
        doc = json.loads(json.dumps(bundled))
        doc.pop("status", None)
        doc["metadata"] = {"name": doc["metadata"]["name"], "labels": {STANDIN_LABEL: "true"}}
        doc["spec"].pop("conversion", None)  # a conversion webhook: nothing may dial a simulated pod
        return doc
    names = {"kind": kind, "listKind": f"{kind}List", "plural": plural(kind), "singular": kind.lower()}
    served = versions or ["v1alpha1"]
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{names['plural']}.{group}", "labels": {STANDIN_LABEL: "true"}},
            "spec": {"group": group, "names": names, "scope": "Cluster" if cluster_scoped(kind) else "Namespaced",
                     "versions": [{"name": v, "served": True, "storage": v == served[-1],
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}
                                  for v in served]}}


def chart_crds(spec: Chart) -> list[dict]:
    """The stand-in CRDs of a chart: those it declares and installs itself (none when another owner does)."""
    if not spec.crds or spec.skip_crds:
        return []
    by_group: dict[str, list[str]] = {}
    for served in spec.serves:
        group, _, version_name = served.rpartition("/")
        by_group.setdefault(group, []).append(version_name)
    return [crd(group, kind, by_group.get(group, [])) for group, kind in spec.crds]


def chart_files(spec: Chart) -> dict[str, str]:
    """The stand-in chart's files (path -> text)."""
    version = spec.version.lstrip("v")
    files = {"Chart.yaml": yaml.safe_dump({
        "apiVersion": "v2", "name": spec.chart, "version": version, "appVersion": version,
        "description": f"Stand-in for {spec.chart} {spec.version} (the modelplane local fleet): its CRDs and one "
                       "controller Deployment that runs no container; no webhooks, no APIServices."}, sort_keys=False),
        "values.yaml": "{}\n"}
    docs = chart_crds(spec)
    if docs:
        if spec.key in TEMPLATED_CRDS:
            installed, kept, defaults = TEMPLATED_CRDS[spec.key]
            files["templates/crds.yaml"] = templated(docs, installed, kept)
            files["values.yaml"] = yaml.safe_dump(defaults, sort_keys=False)
        else:
            files["crds/crds.yaml"] = yaml.safe_dump_all(docs, sort_keys=False)
    labels = {"app.kubernetes.io/name": spec.key, STANDIN_LABEL: "true"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"{spec.key}-stand-in", "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "controller", "image": PAUSE_IMAGE}]}}}}
    files["templates/controller.yaml"] = yaml.safe_dump(deployment, sort_keys=False).replace(
        "name: " + f"{spec.key}-stand-in", "name: " + f"{spec.key}-stand-in\n  namespace: {{{{ .Release.Namespace }}}}")
    return files


def templated(docs: list[dict], installed: str, kept: str) -> str:
    """CRDs as a chart template: all of them only if `installed`, each annotated to be kept only if `kept`."""
    keep = (f"metadata:\n  {{{{- if {kept} }}}}\n  annotations:\n    helm.sh/resource-policy: keep\n"
            "  {{- end }}\n")
    bodies = [re.sub(r"^metadata:\n", lambda _: keep, yaml.safe_dump(doc, sort_keys=False), count=1, flags=re.M)
              for doc in docs]
    return f"{{{{- if {installed} }}}}\n" + "".join(f"---\n{body}" for body in bodies) + "{{- end }}\n"


def write(folder: Path) -> dict[str, str]:
    """Every chart's stand-in under `folder/<key>/`; returns the chart sources (key -> absolute path) that point
    the platform's releases at them."""
    sources = {}
    for key, spec in sorted(CHARTS.items()):
        root = folder / key
        for name, text in chart_files(spec).items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)
        sources[key] = str(root.resolve())
    return sources
