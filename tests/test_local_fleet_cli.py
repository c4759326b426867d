"""`modelplane local ...` without a running fleet: what it says when it cannot start one, and what `env` and
`status` print (the real control planes are exercised in tests/realengine/)."""

from __future__ import annotations

import pathlib

from click.testing import CliRunner

from automation.cli import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_a_fleet_without_existing_clusters_has_no_local_fleet(tmp_path):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "classes.yaml").write_text((ROOT / "examples" / "platform" / "classes.yaml").read_text())
    (fleet / "cluster.yaml").write_text((ROOT / "examples" / "platform" / "clusters.yaml").read_text().split("---")[0])
    result = run("local", "up", "-f", str(fleet), "--state", str(tmp_path / "state"))
    assert result.exit_code == 2
    assert "no InferenceCluster with source Existing" in result.output


def test_without_the_toolchain_local_up_says_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELPLANE_TOOLCHAIN_BIN", str(tmp_path / "empty"))
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)  # no ambient pulumi either
    result = run("local", "up", "-f", str(ROOT / "local-fleet"), "--state", str(tmp_path / "state"))
    assert result.exit_code == 2
    assert "run `make toolchain`" in result.output and "Traceback" not in result.output


def test_status_and_env_of_no_local_fleet(tmp_path, monkeypatch):
    monkeypatch.setenv("MODELPLANE_TOOLCHAIN_BIN", str(tmp_path / "bin"))
    status = run("local", "status", "--state", str(tmp_path))
    assert status.exit_code == 0 and "no local fleet" in status.output
    env = run("local", "env", "--state", str(tmp_path))
    assert env.exit_code == 0
    assert env.output.splitlines() == [f'export PATH={tmp_path / "bin"}:"$PATH"',
                                       f"export PULUMI_HOME={tmp_path / 'pulumi-home'}"]
