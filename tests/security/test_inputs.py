"""Issue 28, smaller items: a malformed kubeconfig's error never holds its credentials, and `-f -` (or a huge
file) is refused past the size limit without being read into memory."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from automation.execution.kube import KubeClient, KubeError
from fleet.loader import MAX_BYTES, read_sources
from fleet.validate import load_fleet

TOKEN = "sekrit-token-5e1f0a"


@pytest.mark.parametrize("users", [
    f"[{{name: u, token: {TOKEN}}}]",  # the token one level too high: the client showed the entry as a dict
    f"[{{name: u, user: {TOKEN}}}]",  # a string where the user's mapping goes
    f"[{{name: u, user: {{token: {TOKEN}, exec: {{command: 5}}}}}}]",
])
def test_a_malformed_kubeconfig_read_with_a_context_never_shows_its_token(tmp_path, users):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n"
                          "clusters: [{name: c, cluster: {server: 'https://192.0.2.1'}}]\n"
                          f"users: {users}\n"
                          "contexts: [{name: ctx, context: {cluster: c, user: u}}]\n")
    try:
        KubeClient(kubeconfig, context="ctx")
    except KubeError as exc:
        assert TOKEN not in str(exc) and str(kubeconfig) in str(exc)
    # (a kubeconfig the client accepts is not an error: nothing to show)


class _Endless(io.RawIOBase):
    """A stdin that would give 300 MB: counts what is taken from it."""

    def __init__(self):
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), 300 * 1024 * 1024 - self.taken)
        buffer[:n] = b"#" * n
        self.taken += n
        return n


class _Stdin:
    def __init__(self):
        self.raw = _Endless()
        self.buffer = io.BufferedReader(self.raw)


def test_stdin_past_the_limit_is_refused_without_reading_it_all():
    stdin = _Stdin()
    (source,) = read_sources(["-"], stdin=stdin)
    assert source.raw is not None and len(source.raw) == MAX_BYTES + 1
    assert stdin.raw.taken < MAX_BYTES + 1024 * 1024
    loaded = load_fleet(["-"], stdin=_Stdin())
    assert any("larger than 16 MiB" in p.message for p in loaded.errors)


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse: 64 MiB that cost no disk
    (source,) = read_sources([str(big)])
    assert source.raw is not None and len(source.raw) == MAX_BYTES + 1
    assert any("larger than" in p.message for p in load_fleet([str(big)]).errors)


def test_a_file_under_the_limit_reads_whole(tmp_path):
    small = tmp_path / "small.yaml"
    small.write_text("# nothing\n")
    (source,) = read_sources([str(small)])
    assert source.raw == Path(small).read_bytes()
