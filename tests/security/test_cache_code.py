"""Issue 28: nothing read from the cache folder runs code. Then, a pickle planted in the cache (with a sha256 of
itself: the "seal" anyone can compute) ran as the next user of `modelplane`; the CEL parser's analysed grammar was
the one entry loaded with pickle, and it was then read only from a folder no other user could change, authenticated
with a key made there. The grammar's tables now ship with the package as plain data (fleet/cel_tables.py), so
nothing in the cache folder is loaded as code at all: these tests hold it so."""

from __future__ import annotations

import ast
import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

from fleet.disk_cache import DiskCache

ROOT = Path(__file__).resolve().parents[2]
OLD_ENTRY = "cel-grammar.lark"  # where an earlier version kept the pickled parser


class _Planted:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _old_key() -> bytes:
    """The key an earlier version's entry started with (celpy's grammar, its parser module, Lark's and Python's
    versions): a planted entry as good as one that version wrote."""
    import lark
    from celpy import celparser

    here = Path(celparser.__file__).parent
    return hashlib.sha256((here / "cel.lark").read_bytes() + Path(celparser.__file__).read_bytes()
                          + f"{lark.__version__} {sys.version}".encode()).hexdigest().encode()


def _select(cache: Path) -> subprocess.CompletedProcess:
    """A process that imports the CEL dialect and evaluates a selector, as every `modelplane` command may."""
    env = {**os.environ, "MODELPLANE_CACHE_DIR": str(cache)}
    check = ("from fleet.cel import CelEvaluator, DeviceFacts\n"
             "print(CelEvaluator().matches('device.driver == \"gpu.nvidia.com\"', DeviceFacts('gpu.nvidia.com')))\n")
    return subprocess.run([sys.executable, "-c", check], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_an_authenticated_pickle_in_the_cache_folder_is_never_loaded(tmp_path):
    """Sealed as the last-but-one round did, and authenticated with the folder's own key as the last round did: an
    entry an earlier version would have loaded is not loaded, and nothing is written in its place."""
    marker = tmp_path / "ran"
    for cache, seal in ((tmp_path / "sealed", True), (tmp_path / "authenticated", False)):
        cache.mkdir(mode=0o700)
        payload = _old_key() + b"\n" + pickle.dumps(_Planted(marker))
        if seal:
            (cache / OLD_ENTRY).write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
        else:
            DiskCache(cache).write(OLD_ENTRY, payload)
        planted = (cache / OLD_ENTRY).read_bytes()
        result = _select(cache)
        assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr
        assert not marker.exists()
        assert (cache / OLD_ENTRY).read_bytes() == planted  # neither loaded nor rewritten


def test_a_fresh_cache_folder_gets_no_code():
    """Importing the dialect and evaluating a selector writes no parser to the cache folder."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder) / "cache"
        result = _select(cache)
        assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr
        assert not (cache / OLD_ENTRY).exists()


_UNPICKLERS = {("pickle", "load"), ("pickle", "loads"), ("pickle", "Unpickler"), ("Lark", "load"), ("marshal", "load"), ("marshal", "loads"), ("shelve", "open")}


def test_no_module_of_the_project_loads_pickles():
    """What the project reads from disk is data: no module calls pickle's, marshal's or Lark's loaders (processes
    of the project's own may still pass objects to each other through multiprocessing)."""
    found = []
    for folder in ("fleet", "workloads", "components", "infra", "automation"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                owner = getattr(node, "value", None)  # `pickle.load`, `lark.Lark.load`
                owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
                if isinstance(node, ast.Attribute) and (owner_name, node.attr) in _UNPICKLERS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {owner_name}.{node.attr}")
                elif isinstance(node, ast.ImportFrom) and node.module in ("pickle", "marshal", "shelve"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import ...")
    assert not found, found


def test_a_swapped_or_edited_base_summary_never_changes_what_plan_against_reports(tmp_path, monkeypatch, capsys):
    """Last round: an edited summary made `plan --against` print "0 stack(s) change" when 4 changed."""
    import shutil

    import yaml

    from automation.cli import main

    monkeypatch.setenv("MODELPLANE_CACHE_DIR", str(tmp_path / "cache"))
    head = tmp_path / "head"
    shutil.copytree(ROOT / "examples", head)
    model = head / "models" / "qwen3-8b.yaml"
    docs = [d for d in yaml.safe_load_all(model.read_text()) if d]
    next(d for d in docs if d["kind"] == "ModelDeployment")["spec"]["replicas"] += 1
    model.write_text(yaml.safe_dump_all(docs))

    def against(base: Path) -> str:
        assert main(["plan", "-f", str(head), "--against", str(base), "-o", "markdown", "--fresh"]) == 0
        return capsys.readouterr().out

    against(head)  # the head planned as a base: a summary that says nothing changes
    (same,) = (tmp_path / "cache" / "plans").glob("*.json")
    truth = against(ROOT / "examples")
    assert "No stack changes" not in truth
    (real,) = set((tmp_path / "cache" / "plans").glob("*.json")) - {same}
    shutil.copyfile(same, real)  # swapped in by anyone who can write the file
    assert against(ROOT / "examples") == truth
    real.write_text(real.read_text().replace('"format": 2', '"format": 2, "x": 1'))  # or edited by hand
    assert against(ROOT / "examples") == truth
