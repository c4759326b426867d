"""Every provider SDK module a program uses is loaded before programs run side by side (components/lazy_modules.py):
loading one from two threads at once fails on Python before 3.12.3, so a program that loads a lazy module not
listed there must fail this test."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

# in a fresh interpreter: what this test process already imported would hide a missing module
SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from automation.execution.pulumi_runner import program_sources
from automation.checks.offline_preview import all_stacks
from automation.planning.stacks import desired_state
from components import lazy_modules
from fleet.loader import load_paths
from fleet.scheduler import schedule
from fleet.validate import validate_documents

def loaded_lazily():
    return {{name for name, m in list(sys.modules.items())
            if isinstance(getattr(getattr(m, "__spec__", None), "loader_state", None), dict)
            and "__dict__" in m.__spec__.loader_state and type(m).__name__ != "_LazyModule"}}

# each stack's program alone, after what the runner loads for it: nothing else may be loaded lazily on the way
surprises, sources, ran, kubernetes = [], set(), 0, False
for paths in (["examples"], ["tests/data/reference/concepts.yaml"]):
    fleet = validate_documents(load_paths([str({root!r} + "/" + p) for p in paths])[0]).fleet
    sources |= {{ic.spec.cluster.source for ic in fleet.of("InferenceCluster")}}
    specs = desired_state(fleet).specs
    for name in sorted(specs, key=lambda n: specs[n].kind != "platform"):  # workload stacks after the clouds too
        lazy_modules.load(program_sources(specs[name]))
        kubernetes = kubernetes or "pulumi_kubernetes.core.v1" in loaded_lazily()
        before = loaded_lazily()
        [preview] = all_stacks(fleet, specs=specs, only={{name}}, jobs=1, config={{"gcp:project": "lazy-modules-test"}})
        assert not preview.error or "cannot be provisioned" in preview.error, (name, preview.error[:300])
        surprises += [(name, m) for m in sorted(loaded_lazily() - before)]
        ran += 1
print(json.dumps({{"surprises": surprises, "sources": sorted(sources), "ran": ran, "kubernetes": kubernetes}}))
"""


def test_programs_load_no_lazy_provider_module_that_is_not_loaded_first():
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(root=str(ROOT))], capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert {"GKE", "EKS", "AKS", "Existing"} <= set(found["sources"])  # every cloud's programs ran
    assert found["kubernetes"] and found["ran"] > 20
    assert found["surprises"] == []
