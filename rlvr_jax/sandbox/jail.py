"""Where the sandbox's tools are, and the bubblewrap command line that isolates one run.

The mechanism (docs/sandbox.md says why): bubblewrap (Debian package
`bubblewrap`) builds a fresh user, mount, pid, network, ipc, uts and cgroup
namespace for every run, with a root that holds only read-only /usr (and the
interpreter's prefix when it lives elsewhere), a new /proc and /dev, and two
small empty tmpfs (/work, the working directory, and /tmp). util-linux's
`prlimit` sets the rlimits inside the run's own user namespace, so the process
limit counts this run's processes only. Started as root, bubblewrap is started
as the user `nobody`, so the program is an unprivileged host user as well as
inside its namespace. `bwrap_argv` is pure; `find_jail` looks at the machine.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import pwd
import re
import shutil
import subprocess
import sys

from rlvr_jax.sandbox import seccomp
from rlvr_jax.sandbox.jobs import Limits

# Top-level host paths that may be (symlinks into) library/interpreter locations.
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PATH = "/usr/bin:/bin"
PROGRAM_PATH = "/input/main.py"
WORKDIR = "/work"


class SandboxUnavailable(RuntimeError):
    """Isolation cannot be provided on this machine; the message says what is missing."""


@dataclasses.dataclass(frozen=True)
class Jail:
    """The host tools a run needs.

    Attributes:
      bwrap: path of the bubblewrap binary.
      prlimit: path of util-linux's prlimit (run inside the sandbox, from /usr).
      python: the interpreter programs run with.
      run_as: (uid, gid) bubblewrap is started as; None to keep the caller's
        (an unprivileged caller).
      ro_binds: host paths bound read-only at the same place.
      symlinks: (target, link) pairs reproducing the host's /bin -> usr/bin etc.
      machine: platform.machine(), which picks the seccomp table.
      disable_userns: pass --disable-userns (bubblewrap >= 0.8); the seccomp filter
        forbids new user namespaces either way.
      tmpfs_size: bound /work and /tmp with --size (bubblewrap >= 0.7); without it
        only each file is bounded (RLIMIT_FSIZE), not their total.
    """

    bwrap: str
    prlimit: str
    python: str
    run_as: tuple[int, int] | None
    ro_binds: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    machine: str
    disable_userns: bool = True
    tmpfs_size: bool = True


MIN_BWRAP = (0, 6)  # Ubuntu 22.04's 0.6.1; the options used below all predate it


def bwrap_version(bwrap: str) -> tuple[int, ...] | None:
    """`bwrap --version` as numbers ("bubblewrap 0.8.0" -> (0, 8, 0)); None if unreadable."""
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out.stdout)
    return tuple(int(g) for g in match.groups() if g is not None) if match else None


def _which(name: str) -> str | None:
    """`name` on PATH or in /usr/bin, /bin (the caller's PATH may be minimal)."""
    return shutil.which(name) or shutil.which(name, path="/usr/bin:/bin:/usr/sbin:/sbin")


def default_python() -> str:
    """The system interpreter /usr/bin/python3 when present (already under the
    read-only /usr, and readable by `nobody`), else this process's base interpreter."""
    if os.path.exists("/usr/bin/python3"):
        return "/usr/bin/python3"
    return os.path.realpath(getattr(sys, "_base_executable", sys.executable))


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
        return entry.pw_uid, entry.pw_gid
    except KeyError:
        return 65534, 65534


def find_jail(python: str | None = None) -> Jail:
    """Locates bubblewrap, prlimit and the interpreter.

    Raises:
      SandboxUnavailable: naming every missing piece and how to install it.
    """
    missing = []
    if platform.system() != "Linux":
        missing.append(f"Linux namespaces (this is {platform.system()})")
    machine = platform.machine()
    if machine not in seccomp.DENIED:
        missing.append(f"a seccomp table for {machine!r} (known: {sorted(seccomp.DENIED)})")
    bwrap = _which("bwrap")
    version = bwrap_version(bwrap) if bwrap else None
    if bwrap is None:
        missing.append("bubblewrap (`apt-get install -y bubblewrap`)")
    elif version is None or version < MIN_BWRAP:
        missing.append(f"bubblewrap >= {'.'.join(map(str, MIN_BWRAP))} ({bwrap} is {version})")
    prlimit = _which("prlimit")
    if prlimit is None or not os.path.realpath(prlimit).startswith("/usr/"):
        missing.append("util-linux's prlimit under /usr (`apt-get install -y util-linux`)")
    python = python or default_python()
    real_python = os.path.realpath(python)
    if not os.access(real_python, os.X_OK):
        missing.append(f"an executable interpreter at {python!r}")
    if missing:
        raise SandboxUnavailable(
            "the code sandbox cannot isolate programs; missing: " + "; ".join(missing)
        )
    binds = ["/usr"]
    symlinks = []
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            symlinks.append((os.readlink(path), path))
        elif os.path.isdir(path):
            binds.append(path)
    if not real_python.startswith("/usr/"):
        prefix = os.path.dirname(os.path.dirname(real_python))  # <prefix>/bin/python3.x
        binds.append(prefix)
    run_as = _nobody() if os.geteuid() == 0 else None
    return Jail(
        bwrap=bwrap,
        prlimit=os.path.realpath(prlimit),
        python=real_python,
        run_as=run_as,
        ro_binds=tuple(binds),
        symlinks=tuple(symlinks),
        machine=machine,
        disable_userns=version >= (0, 8),
        tmpfs_size=version >= (0, 7),
    )


def cpu_limits(limits: Limits) -> tuple[int, int]:
    """(soft, hard) RLIMIT_CPU seconds: SIGXCPU at the soft limit, SIGKILL at the hard."""
    soft = max(1, math.ceil(limits.cpu_seconds))
    return soft, soft + 1


def bwrap_argv(
    jail: Jail, limits: Limits, *, program_fd: int, seccomp_fd: int, status_fd: int
) -> list[str]:
    """The command that runs the program (read from `program_fd`) in a fresh sandbox.

    Args:
      jail: the tools, from `find_jail`.
      limits: this run's limits.
      program_fd: an open file holding the program's source (copied to PROGRAM_PATH).
      seccomp_fd: an open file holding `seccomp.filter_bytes(jail.machine)`.
      status_fd: bubblewrap writes its JSON status lines here; "exit-code" only
        once the program has run (not when building the sandbox failed).
    """
    fs: list[str] = []
    for path in jail.ro_binds:
        fs += ["--ro-bind", path, path]
    for target, link in jail.symlinks:
        fs += ["--symlink", target, link]
    soft, hard = cpu_limits(limits)
    size = ["--size", str(limits.file_bytes)] if jail.tmpfs_size else []
    rlimits = [
        jail.prlimit,
        f"--cpu={soft}:{hard}",
        f"--as={limits.memory_mb << 20}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.file_bytes}",
        "--core=0",
        "--",
    ]
    return [
        jail.bwrap,
        "--unshare-all", "--unshare-user", *(["--disable-userns"] if jail.disable_userns else []),
        "--die-with-parent", "--new-session", "--hostname", "sandbox",
        "--setenv", "PATH", _PATH, "--setenv", "HOME", WORKDIR,
        "--setenv", "LANG", "C.UTF-8",
        *fs,
        "--proc", "/proc", "--dev", "/dev",
        *size, "--tmpfs", WORKDIR, *size, "--tmpfs", "/tmp",
        "--ro-bind-data", str(program_fd), PROGRAM_PATH,
        "--chdir", WORKDIR,
        "--seccomp", str(seccomp_fd), "--json-status-fd", str(status_fd),
        "--",
        *rlimits, jail.python, "-I", "-B", PROGRAM_PATH,
    ]  # fmt: skip
