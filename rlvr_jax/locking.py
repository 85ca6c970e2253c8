"""A lock file that names its holder: one live run per workdir, one trainer per warm start.

    lock = FileLock(workdir / "run.lock")
    lock.acquire()          # HeldError naming host, pid and start time if a live run holds it
    ...
    lock.release()          # or `with FileLock(path): ...`

The file holds one JSON line: the holder's host, pid and start time, and is
removed on release (a file left behind names a holder that died). On a local
(or NFS) file system the lock itself is an exclusive `fcntl.flock` on the open
file: the kernel releases it when the holder dies, however it dies, so a lock
left by a dead process is free and is taken over (logged with the dead holder's
details). The holder line is only there to name the holder in errors and logs.

Object stores (`gs://...`) have no flock: there the line is the lock, written
after reading none, so two runs starting within the same second can both win. A
line left by a process that died on this host (its pid is gone) is taken over;
one left by another host is refused, and the error says to delete the file once
that run is known to be dead.

Standard library and etils only: this module sits at the bottom of the package
layering, importable by `train` (warm-start SFT) and `run` (workdirs) alike.
"""

from __future__ import annotations

import datetime
import errno
import json
import logging
import os
import socket
import time
from typing import Any

from etils import epath

log = logging.getLogger(__name__)


def _same_file(fd: int, path) -> bool:
    """Whether the open file `fd` is still the file at `path` (not unlinked or replaced)."""
    try:
        st = os.stat(os.fspath(path))
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


class HeldError(RuntimeError):
    """The lock is held by a live process (the message names it and the file)."""


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this host (a zombie counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def _holder_line() -> str:
    start = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    return json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "start": start})


def describe(holder: dict[str, Any] | None) -> str:
    """'pid 123 on host h, started 2026-01-01T10:00:00+00:00' (or 'an unknown process')."""
    if not holder:
        return "an unknown process"
    return f"pid {holder.get('pid')} on host {holder.get('host')}, started {holder.get('start')}"


def _parse(text: str) -> dict[str, Any] | None:
    try:
        holder = json.loads(text)
    except ValueError:
        return None
    return holder if isinstance(holder, dict) else None


class FileLock:
    """An exclusive lock on `path`, with the holder's host, pid and start time in the file."""

    def __init__(self, path: str | os.PathLike, *, what: str = "lock"):
        """Prepares the lock (nothing is touched until `acquire`).

        Args:
          path: the lock file (its directory must exist); a local path or a URL.
          what: how errors and logs name what is locked, e.g. "run directory /x".
        """
        text = os.fspath(path)
        self.path = epath.Path(text)
        self.what = what
        self._local = "://" not in text
        self._fd: int | None = None
        self.held = False

    def holder(self) -> dict[str, Any] | None:
        """The holder line in the file (None if there is none or it is unreadable)."""
        try:
            return _parse(self.path.read_text())
        except (FileNotFoundError, OSError):
            return None

    def acquire(self, *, blocking: bool = False, poll_s: float = 5.0) -> FileLock:
        """Takes the lock.

        Args:
          blocking: wait for a live holder to finish (logging who it is once)
            instead of raising.
          poll_s: object stores: seconds between two looks at a held lock.
        Returns:
          self.
        Raises:
          HeldError: the lock is held by a live process and `blocking` is False.
        """
        if self.held:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        if self._local:
            self._acquire_local(blocking)
        else:
            self._acquire_url(blocking, poll_s)
        self.held = True
        return self

    def _acquire_local(self, blocking: bool) -> None:
        while not self._try_local(blocking):  # the file was removed by its releaser: again
            pass

    def _try_local(self, blocking: bool) -> bool:
        import fcntl  # lazy: POSIX only

        fd = os.open(os.fspath(self.path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                holder = self.holder()
                if not blocking:
                    raise HeldError(self._held_message(holder)) from None
                log.warning("waiting for %s to release %s", describe(holder), self.what)
                fcntl.flock(fd, fcntl.LOCK_EX)
            if not _same_file(fd, self.path):  # locked a file `release` has unlinked
                os.close(fd)
                return False
            previous = _parse(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            if previous:  # a holder that did not release: it died (the kernel freed its flock)
                log.warning("taking over %s from %s, which has exited", self.what,
                            describe(previous))  # fmt: skip
            line = (_holder_line() + "\n").encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, line, 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return True

    def _acquire_url(self, blocking: bool, poll_s: float) -> None:
        warned = False
        while True:
            holder = self.holder()
            if holder is None:
                break
            same_host = holder.get("host") == socket.gethostname()
            if same_host and not pid_alive(int(holder.get("pid", -1))):
                log.warning("taking over %s from %s, which has exited", self.what,
                            describe(holder))  # fmt: skip
                break
            if not blocking:
                raise HeldError(self._held_message(holder))
            if not warned:
                log.warning("waiting for %s to release %s", describe(holder), self.what)
                warned = True
            time.sleep(poll_s)
        self.path.write_text(_holder_line() + "\n")

    def _held_message(self, holder: dict[str, Any] | None) -> str:
        msg = f"{self.what} is in use by {describe(holder)} (lock file {self.path})"
        if holder and holder.get("host") != socket.gethostname():
            msg += "; if that run is dead, delete the lock file and start again"
        return msg

    def release(self) -> None:
        """Frees the lock and removes the file (idempotent).

        The file is unlinked while still locked; a waiter that then gets the flock
        sees that its file is gone (`_same_file`) and locks a new one.
        """
        if not self.held:
            return
        self.held = False
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            self.path.unlink(missing_ok=True)
            os.close(self._fd)  # closing the last descriptor frees the flock
            self._fd = None
        else:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
