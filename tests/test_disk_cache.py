"""The cache folder: writes are atomic and leave nothing behind when they fail; an entry is read back only when
this user wrote it, in a folder that is this user's alone, unchanged (issue 28: no code or result from a file
anyone else could write)."""

import os

import pytest

from fleet.disk_cache import KEY_FILE, DiskCache, trusted_root, write_atomically


def test_a_write_that_fails_leaves_no_scratch_file(tmp_path):
    (tmp_path / "entry").mkdir()
    (tmp_path / "entry" / "inside").write_text("a folder where the entry would go: os.replace refuses")
    assert write_atomically(tmp_path / "entry", b"payload") is False
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry"]


def test_a_write_is_whole_and_private(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    assert cache.write("plans/entry", "text") is True
    path = cache.path("plans/entry")
    assert cache.read("plans/entry") == b"text" and path.stat().st_mode & 0o077 == 0
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "cache" / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["entry"]


def test_any_change_to_an_entry_reads_as_absent(tmp_path):
    cache = DiskCache(tmp_path)
    assert cache.read("entry") is None
    cache.write("entry", b"some\nbytes")
    path = cache.path("entry")
    whole = path.read_bytes()
    for damaged in (whole[:-1], whole + b"x", whole[:10], b"", whole.replace(b"some", b"sone")):
        path.write_bytes(damaged)
        assert cache.read("entry") is None


def test_an_entry_is_bound_to_its_name_and_to_this_folders_key(tmp_path):
    cache = DiskCache(tmp_path / "a")
    cache.write("plans/one.json", b'{"format": 2}')
    cache.write("plans/two.json", b'{"format": 2, "other": 1}')
    os.replace(cache.path("plans/two.json"), cache.path("plans/one.json"))  # a genuine entry under another key
    assert cache.read("plans/one.json") is None
    other = DiskCache(tmp_path / "b")
    other.write("plans/one.json", b"planted")
    os.makedirs(cache.path("plans"), exist_ok=True)
    os.replace(other.path("plans/one.json"), cache.path("plans/one.json"))  # copied from another cache
    assert cache.read("plans/one.json") is None


def test_a_folder_others_can_write_is_neither_read_nor_written(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    cache = DiskCache(shared)
    assert cache.write("entry", b"x") is True
    shared.chmod(0o777)  # as a cache folder planted by another user, or made world-writable
    assert trusted_root(shared) is None
    assert cache.read("entry") is None and cache.write("entry", b"y") is False
    shared.chmod(0o755)  # others may read it (the key is 0600), not change it
    assert cache.read("entry") == b"x"
    (shared / "plans").mkdir(mode=0o777)
    (shared / "plans").chmod(0o777)
    assert cache.write("plans/entry", b"z") is False


def test_a_linked_entry_or_folder_is_not_followed(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    cache.write("entry", b"mine")
    elsewhere = DiskCache(tmp_path / "elsewhere")
    elsewhere.write("entry", b"mine")
    cache.path("entry").unlink()
    cache.path("entry").symlink_to(elsewhere.path("entry"))
    assert cache.read("entry") is None
    (tmp_path / "link").symlink_to(tmp_path / "cache")
    assert DiskCache(tmp_path / "link").read("entry") is None


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_an_entry_owned_by_another_user_is_not_read_even_in_ones_own_folder(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    cache.write("entry", b"x")
    os.chown(cache.path("entry"), 65534, 65534)  # nobody
    assert cache.read("entry") is None
