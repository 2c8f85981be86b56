"""posenc._paths: output paths are checked, with the option and the reason, before any work."""

from __future__ import annotations

import os

import pytest

from posenc._paths import writable_file, writable_folder

as_root = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def test_a_new_file_in_new_folders_passes_and_only_the_folders_are_made(tmp_path):
    path = tmp_path / "a" / "b" / "out.json"
    assert writable_file(path, "--json") == path
    assert path.parent.is_dir() and list(path.parent.iterdir()) == []  # the probe file is gone


def test_an_existing_writable_file_passes_untouched(tmp_path):
    path = tmp_path / "out.json"
    path.write_text("old")
    writable_file(path, "--json")
    assert path.read_text() == "old"


def test_a_file_path_under_a_file_is_refused_naming_the_file_in_the_way(tmp_path):
    blocker = tmp_path / "x"
    blocker.write_text("")
    with pytest.raises(
        ValueError, match=rf"--json '{blocker}/y/out.json' cannot be written: '{blocker}' is a file"
    ):
        writable_file(blocker / "y" / "out.json", "--json")


def test_a_file_path_that_is_a_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match=rf"--json '{tmp_path}' is a folder; give a file name"):
        writable_file(tmp_path, "--json")


def test_a_folder_that_accepts_no_files_is_refused():
    with pytest.raises(
        ValueError, match=r"--json '/proc/x.json' cannot be written: cannot create files in '/proc'"
    ):
        writable_file("/proc/x.json", "--json")


@pytest.mark.skipif(as_root, reason="root writes into read-only folders; permission bits do not stop it")
def test_a_read_only_folder_and_a_read_only_file_are_refused(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "old.json").write_text("")
    (folder / "old.json").chmod(0o444)
    folder.chmod(0o555)
    try:
        with pytest.raises(ValueError, match="cannot create files in .*Permission denied"):
            writable_file(folder / "new.json", "--json")
        with pytest.raises(ValueError, match="cannot make folder .*Permission denied"):
            writable_folder(folder / "sub", "--out")
    finally:
        folder.chmod(0o755)
    with pytest.raises(ValueError, match="the file is read-only"):
        writable_file(folder / "old.json", "--json")


def test_a_folder_is_made_or_refused_when_a_file_stands_there(tmp_path):
    assert writable_folder(tmp_path / "new" / "figs", "--out").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(
        ValueError, match=rf"--out '{tmp_path}/file' cannot be written: '{tmp_path}/file' is a file"
    ):
        writable_folder(tmp_path / "file", "--out")
