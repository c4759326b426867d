"""The cache folder's writes are atomic and leave nothing behind when they fail; sealed entries detect damage."""

from fleet.disk_cache import sealed, unsealed, write_atomically


def test_a_write_that_fails_leaves_no_scratch_file(tmp_path):
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "inside").write_text("a folder where the entry would go: os.replace refuses")
    assert write_atomically(tmp_path / "entry", b"payload") is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_a_write_is_whole_and_private(tmp_path):
    assert write_atomically(tmp_path / "a" / "entry", "text") is True
    path = tmp_path / "a" / "entry"
    assert path.read_text() == "text" and path.stat().st_mode & 0o077 == 0
    assert sorted(p.name for p in path.parent.iterdir()) == ["entry"]


def test_a_sealed_entry_reads_back_and_any_damage_reads_as_absent(tmp_path):
    path = tmp_path / "entry"
    assert unsealed(path) is None
    write_atomically(path, sealed(b"some\nbytes"))
    assert unsealed(path) == b"some\nbytes"
    whole = path.read_bytes()
    for damaged in (whole[:-1], whole + b"x", whole[:10], b"", whole.replace(b"some", b"sone")):
        path.write_bytes(damaged)
        assert unsealed(path) is None
