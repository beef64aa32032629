"""Owner-only shared-memory segments (pg_sparse._shm, the node stages of
hierarchy="node"): created exclusively with mode 0600, checked before they
are mapped; the planted-segment case across ranks is in test_hierarchy.py."""

from __future__ import annotations

import os
import stat

import pytest
import torch

from pg_sparse import _shm


@pytest.fixture
def root(tmp_path):
    return str(tmp_path)


def test_created_owner_only_whatever_the_umask(root):
    old = os.umask(0)  # the widest umask: the mode must still be 0600
    try:
        path = _shm.new_path(3, root)
        fd = _shm.create(path, 4096)
    finally:
        os.umask(old)
    st = os.fstat(fd)
    os.close(fd)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.geteuid()
    assert st.st_size == 4096 and path.endswith("-3")


def test_names_are_unpredictable(root):
    names = {_shm.new_path(0, root) for _ in range(100)}
    assert len(names) == 100
    assert all(len(os.path.basename(n)) >= len("pg_sparse--0") + 32 for n in names)


@pytest.mark.parametrize("planted", ["file", "symlink", "dangling symlink"])
def test_planted_path_refused(root, planted):
    path = _shm.new_path(0, root)
    target = os.path.join(root, "target")
    if planted == "file":
        with open(path, "wb") as f:
            f.write(b"planted")
    else:
        if planted == "symlink":
            with open(target, "wb") as f:
                f.write(b"x")
        os.symlink(target, path)
    with pytest.raises(_shm.SegmentError, match="existed before this job created it"):
        _shm.create(path, 64)
    assert not os.path.exists(target) or open(target, "rb").read() == b"x"
    if planted == "file":
        assert open(path, "rb").read() == b"planted"  # left as it was


def _plain(path: str, mode: int, size: int) -> None:
    with open(path, "wb") as f:
        f.write(b"\0" * size)
    os.chmod(path, mode)


@pytest.mark.parametrize("mode,size,owner,message", [
    (0o644, 64, None, "has mode 0644, not 0600"),
    (0o666, 64, None, "has mode 0666, not 0600"),
    (0o600, 32, None, "holds 32 bytes, not the 64"),
    (0o600, 64, 12345, "is owned by uid 12345"),
])
def test_open_checked_refuses(root, mode, size, owner, message):
    path = os.path.join(root, "seg")
    _plain(path, mode, size)
    if owner is not None:
        if os.geteuid() != 0:
            pytest.skip("chown to another user needs root")
        os.chown(path, owner, -1)
    with pytest.raises(_shm.SegmentError, match=message):
        _shm.open_checked(path, 64)


def test_open_checked_refuses_links_and_others(root):
    path = os.path.join(root, "seg")
    os.mkdir(path)
    with pytest.raises(_shm.SegmentError, match="is not a regular file"):
        _shm.open_checked(path, 64)
    link = os.path.join(root, "link")
    good = _shm.new_path(1, root)
    os.close(_shm.create(good, 64))
    os.symlink(good, link)
    with pytest.raises(_shm.SegmentError, match="is a symbolic link"):
        _shm.open_checked(link, 64)


def test_mappings_share_memory(root):
    path = _shm.new_path(2, root)
    a = _shm.map_rows(_shm.create(path, 2 * 8 * 4), 2, 8, torch.float32)
    b = _shm.map_rows(_shm.open_checked(path, 2 * 8 * 4), 2, 8, torch.float32)
    os.unlink(path)  # the mappings outlive the name
    a[1, 3] = 2.5
    b[0, 0] = -1.0
    assert b[1, 3].item() == 2.5 and a[0, 0].item() == -1.0
    assert a.shape == (2, 8) and torch.count_nonzero(a).item() == 2
