"""Finding 9: `render --out DIR` never deletes a folder it did not write, and leaves DIR with a normal mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def render(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "automation.cli", "render", "-f", str(ROOT / "examples"), "--out",
                           str(out), "--fresh"], capture_output=True, text=True, timeout=300, cwd=ROOT)


def test_a_sibling_with_a_telling_name_survives_every_render(tmp_path):
    out = tmp_path / "render"
    precious = tmp_path / "render.old-render"
    precious.mkdir()
    (precious / "keep.txt").write_text("mine")
    old = os.umask(0o022)
    try:
        assert render(out).returncode == 0
        assert render(out).returncode == 0  # a second render swaps the folder
    finally:
        os.umask(old)
    assert (precious / "keep.txt").read_text() == "mine"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["render", "render.old-render"]  # nothing left behind


def test_a_folder_render_did_not_write_is_refused_and_untouched(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    result = render(out)
    assert result.returncode != 0 and "was not written by modelplane render" in result.stderr
    assert (out / "notes.txt").read_text() == "mine"
