"""A seccomp filter, compiled here to classic BPF, that bubblewrap loads (--seccomp FD).

Namespaces already hide the host; the filter removes the system calls a program
has no use for and that would let it reach beyond them: ptrace and
process_vm_* (bubblewrap's pid-1 monitor runs as the same user and could
otherwise be attached to), mount/namespace calls, kernel keyrings, BPF,
perf events, userfaultfd, io_uring, module and kexec loading. They fail with
EPERM, and so does a clone that would create a user namespace (bubblewrap's
--disable-userns does that too, but only from 0.8 on); clone3 fails with
ENOSYS. A foreign architecture (e.g. i386 on x86_64) is killed; x32 calls fail.
Pure: `filter_bytes(machine)` returns the program as bytes.
"""

from __future__ import annotations

import errno
import struct

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_X32_SYSCALL_BIT = 0x40000000
# offsetof(struct seccomp_data, nr / arch)
_NR, _ARCH = 0, 4

# Denied system calls by architecture: (AUDIT_ARCH value, {name: number}).
DENIED = {
    "x86_64": (
        0xC000003E,
        {
            "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
            "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
            "unshare": 272, "setns": 308, "add_key": 248, "request_key": 249,
            "keyctl": 250, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
            "kexec_load": 246, "init_module": 175, "finit_module": 313,
            "delete_module": 176, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "swapon": 167, "reboot": 169,
            "name_to_handle_at": 303, "open_by_handle_at": 304,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
            "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
            "unshare": 97, "setns": 268, "add_key": 217, "request_key": 218,
            "keyctl": 219, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
            "kexec_load": 104, "init_module": 105, "finit_module": 273,
            "delete_module": 106, "io_uring_setup": 425, "io_uring_enter": 426,
            "io_uring_register": 427, "swapon": 224, "reboot": 142,
            "name_to_handle_at": 264, "open_by_handle_at": 265,
        },
    ),
}  # fmt: skip


# clone and clone3 per architecture: clone may not create a user namespace (its
# flags are argument 0); clone3 passes its flags in memory, which a filter cannot
# read, so it fails with ENOSYS and the C library falls back to clone.
CLONE = {"x86_64": (56, 435), "aarch64": (220, 435)}
CLONE_NEWUSER = 0x10000000
_JSET_K = 0x45
_ARG0_LOW = 16  # offsetof(struct seccomp_data, args[0]); the low word on little-endian


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One `struct sock_filter` {u16 code; u8 jt; u8 jf; u32 k} in native order."""
    return struct.pack("=HBBI", code, jt, jf, k)


def _assemble(prog: list[tuple]) -> bytes:
    """(label,) marks a place; (code, k, jt, jf) with labels or 0 as jump targets."""
    where, count = {}, 0
    for item in prog:
        if len(item) == 1:
            where[item[0]] = count
        else:
            count += 1
    out, pc = [], 0
    for item in prog:
        if len(item) == 1:
            continue
        code, k, jt, jf = item
        jt = where[jt] - pc - 1 if isinstance(jt, str) else jt
        jf = where[jf] - pc - 1 if isinstance(jf, str) else jf
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError(f"instruction {pc}: jump out of range (BPF jumps forward only)")
        out.append(_insn(code, k, jt, jf))
        pc += 1
    return b"".join(out)


def filter_bytes(machine: str) -> bytes:
    """The filter for `machine` (platform.machine()); ValueError if it has no table."""
    if machine not in DENIED:
        raise ValueError(f"no seccomp table for machine {machine!r}; known: {sorted(DENIED)}")
    arch, table = DENIED[machine]
    clone, clone3 = CLONE[machine]
    prog = [
        (_LD_W_ABS, _ARCH, 0, 0),
        (_JEQ_K, arch, "native", 0),
        (_RET_K, _RET_KILL_PROCESS, 0, 0),
        ("native",),
        (_LD_W_ABS, _NR, 0, 0),
    ]
    if machine == "x86_64":  # x32 calls share the arch value: refuse them all
        prog.append((_JGE_K, _X32_SYSCALL_BIT, "eperm", 0))
    prog += [(_JEQ_K, clone3, "enosys", 0), (_JEQ_K, clone, "clone", 0)]
    prog += [(_JEQ_K, nr, "eperm", 0) for nr in sorted(set(table.values()))]
    prog += [  # classic BPF jumps only forward
        (_RET_K, _RET_ALLOW, 0, 0),
        ("clone",),
        (_LD_W_ABS, _ARG0_LOW, 0, 0),
        (_JSET_K, CLONE_NEWUSER, "eperm", 0),
        (_RET_K, _RET_ALLOW, 0, 0),
        ("eperm",),
        (_RET_K, _RET_ERRNO | errno.EPERM, 0, 0),
        ("enosys",),
        (_RET_K, _RET_ERRNO | errno.ENOSYS, 0, 0),
    ]
    return _assemble(prog)
