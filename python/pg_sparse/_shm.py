"""Owner-only shared-memory segments: the node stages of ``hierarchy="node"``
put each bucket's rows in a file under /dev/shm that every local rank maps.

Another local user must not read a job's gradients through such a file, nor
write into it. So the leader creates it exclusively (``O_CREAT | O_EXCL``,
``O_NOFOLLOW``) with mode 0600 under a name nobody can guess (128 random
bits); a file already there under that name (planted, or a symlink) is
refused. The other local ranks open it without ``O_CREAT`` and map it only
after ``fstat`` on the open descriptor shows a regular file of the expected
size, owned by this user, mode 0600: the check and the map see the same
file. The leader unlinks it as soon as every local rank holds its mapping.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import stat

import torch

ROOT = "/dev/shm"
MODE = 0o600
_FLAGS = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


class SegmentError(RuntimeError):
    """A shared-memory segment that is not this job's own: refused."""


def new_path(index: int, root: str = ROOT) -> str:
    """An unpredictable path for bucket ``index``'s segment."""
    return f"{root}/pg_sparse-{secrets.token_hex(16)}-{index}"


def create(path: str, nbytes: int) -> int:
    """A new segment of ``nbytes`` at ``path``, mode 0600 whatever the
    umask; its open descriptor. Raises :class:`SegmentError` when ``path``
    exists (a planted file or link), ``OSError`` when /dev/shm cannot hold it."""
    try:
        fd = os.open(path, _FLAGS | os.O_CREAT | os.O_EXCL, MODE)
    except FileExistsError:
        raise SegmentError(f"{path} existed before this job created it") from None
    try:
        os.fchmod(fd, MODE)  # a umask can only have taken bits away
        os.ftruncate(fd, nbytes)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    return fd


def open_checked(path: str, nbytes: int) -> int:
    """The leader's segment at ``path``, opened and checked: a regular
    file of ``nbytes``, owned by this process's user, mode 0600. Raises
    :class:`SegmentError` naming what differs."""
    try:
        fd = os.open(path, _FLAGS)
    except IsADirectoryError:
        raise SegmentError(f"{path} is not a regular file") from None
    except OSError as e:
        if e.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise SegmentError(f"{path} is a symbolic link") from None
        raise
    problem = check(os.fstat(fd), nbytes)
    if problem:
        os.close(fd)
        raise SegmentError(f"{path} {problem}")
    return fd


def check(st: os.stat_result, nbytes: int) -> str | None:
    """What makes ``st`` not this job's segment of ``nbytes``, or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_uid != os.geteuid():
        return f"is owned by uid {st.st_uid}, not this job's uid {os.geteuid()}"
    if stat.S_IMODE(st.st_mode) != MODE:
        return f"has mode {stat.S_IMODE(st.st_mode):04o}, not {MODE:04o}"
    if st.st_size != nbytes:
        return f"holds {st.st_size} bytes, not the {nbytes} this job made it with"
    return None


def map_rows(fd: int, rows: int, cols: int, dtype: torch.dtype) -> torch.Tensor:
    """A ``rows x cols`` tensor over the segment open at ``fd`` (shared:
    every local rank's writes are seen by the others). Closes ``fd``; the
    mapping stays until the tensor is freed."""
    nbytes = rows * cols * torch.empty((), dtype=dtype).element_size()
    try:
        region = mmap.mmap(fd, nbytes, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    # frombuffer keeps ``region`` alive as long as the tensor is.
    return torch.frombuffer(region, dtype=dtype, count=rows * cols).view(rows, cols)
