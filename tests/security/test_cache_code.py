"""Issue 28: nothing read from the cache folder runs code unless this user wrote it there. Last round, a pickle
planted in the cache (with a sha256 of itself: the "seal" anyone can compute) ran as the next user of
`modelplane`. Each case plants a pickle that would create a file when loaded, then starts a process that
builds the CEL parser through the cache, as every `modelplane` command does."""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from fleet.disk_cache import DiskCache

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "cel-grammar.lark"


class _Planted:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _grammar_key() -> bytes:
    """The key the parser's entry starts with (celpy's grammar, its parser module, Lark's and Python's versions)."""
    import lark
    from celpy import celparser

    here = Path(celparser.__file__).parent
    return hashlib.sha256((here / "cel.lark").read_bytes() + Path(celparser.__file__).read_bytes()
                          + f"{lark.__version__} {sys.version}".encode()).hexdigest().encode()


def _start(cache: Path) -> None:
    env = {**os.environ, "MODELPLANE_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-c", "import fleet.cel"], cwd=ROOT, env=env, check=True, timeout=120)


def _payload(marker: Path) -> bytes:
    return _grammar_key() + b"\n" + pickle.dumps(_Planted(marker))


def test_an_entry_sealed_with_its_own_hash_is_not_loaded(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    cache.mkdir(mode=0o700)
    payload = _payload(marker)
    (cache / ENTRY).write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)  # last round's seal
    _start(cache)
    assert not marker.exists()


def test_an_authenticated_entry_in_a_folder_others_can_write_is_not_loaded(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    DiskCache(cache).write(ENTRY, _payload(marker))  # key and entry as good as ours...
    cache.chmod(0o777)  # ...but in a folder anyone could have written them to
    _start(cache)
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a folder to another user")
def test_a_folder_planted_by_nobody_is_not_loaded_by_root(tmp_path):
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    DiskCache(cache).write(ENTRY, _payload(marker))
    for path in (cache, cache / ENTRY, cache / ".key"):
        os.chown(path, 65534, 65534)  # nobody's folder, key and entry, all consistent
    tmp_path.chmod(0o755)
    _start(cache)
    assert not marker.exists()


def test_a_good_entry_is_written_and_used(tmp_path):
    cache = tmp_path / "cache"
    _start(cache)
    kept = DiskCache(cache).read(ENTRY)
    assert kept is not None and kept.startswith(_grammar_key() + b"\n")


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
