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


def test_the_engine_warning_about_the_registered_older_provider_is_dropped_only_for_the_toolchains_own():
    import os

    from automation.local import toolchain

    recipe = (ROOT / "tools" / "realengine" / "build.py").read_text()
    assert f'\nPROVIDER_VERSION = "{toolchain.BUILT_PROVIDER}"\n' in recipe  # the version the toolchain builds
    said = (f"resource plugin kubernetes is expected to have version >=4.34.2, but has {toolchain.BUILT_PROVIDER}; "
            "the wrong version may be on your path, or this may be a bug in the plugin")
    home = os.environ.get("PULUMI_HOME")
    try:
        os.environ["PULUMI_HOME"] = str(toolchain.find().pulumi_home)
        assert toolchain.registered_provider_warning(said)
        assert not toolchain.registered_provider_warning(said.replace(toolchain.BUILT_PROVIDER, "4.20.0"))
        assert not toolchain.registered_provider_warning("[MinimumReplicasUnavailable] Deployment does not have "
                                                         "minimum availability.")
        os.environ["PULUMI_HOME"] = "/home/someone/.pulumi"  # a user's own provider: their warning stays
        assert not toolchain.registered_provider_warning(said)
    finally:
        if home is None:
            os.environ.pop("PULUMI_HOME", None)
        else:
            os.environ["PULUMI_HOME"] = home


def test_down_keeps_the_clusters_data_and_purge_deletes_it(tmp_path):
    local = tmp_path / ".modelplane" / "local"
    (local / "etcd").mkdir(parents=True)
    (local / "local-a").mkdir()
    (local / "local-a" / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    runner = CliRunner()
    done = runner.invoke(cli, ["local", "down", "--state", str(tmp_path / ".modelplane")])
    assert done.exit_code == 0 and (local / "etcd").is_dir() and (local / "local-a" / "kubeconfig").is_file()
    done = runner.invoke(cli, ["local", "down", "--purge", "--state", str(tmp_path / ".modelplane")])
    assert done.exit_code == 0 and not local.exists()
    assert "modelplane refresh" in done.output


def test_local_down_never_signals_a_process_that_took_a_recorded_pid(tmp_path):
    """A record's pid may belong to another process by the time `local down` (or `local up`, stopping what it finds
    stale) reads it: pids wrap at 32,768 on this machine within minutes, and every reboot reuses them. Only the process
    the record started is signalled, known by its start time; the other keeps running."""
    import json
    import os
    import subprocess

    from automation.local import control_plane

    other = subprocess.Popen(["sleep", "120"], start_new_session=True)  # has the pid a stale record names
    ours = control_plane._start("kwok", ["sleep", "120"], tmp_path / "logs")  # as the local fleet starts its own
    try:
        state = tmp_path / "state"
        folder = control_plane.local_folder(state)
        folder.mkdir(parents=True)
        stale = {"name": "etcd", "pid": other.pid, "log": "", "started": "an-earlier-boot:1234"}
        (folder / "fleet.json").write_text(json.dumps({"etcd": stale, "etcd_port": 1, "clusters": {"a": {
            "name": "a", "port": 1, "kubeconfig": "", "processes": [ours.__dict__]}}}))
        result = run("local", "down", "--state", str(state))
        assert result.exit_code == 0, result.output
        assert other.poll() is None  # still running: never signalled
        assert not ours.alive()  # ours was stopped (and reaped: this process started it)
    finally:
        other.kill()
        other.wait()
        try:
            os.kill(ours.pid, 9)
        except ProcessLookupError:
            pass
