"""The seccomp filter, run through a small classic-BPF interpreter written here."""

import struct

import pytest

from rlvr_jax.sandbox import seccomp

KILL, ALLOW, EPERM, ENOSYS = 0x80000000, 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def run_bpf(prog: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """Executes a filter of LD|W|ABS, JEQ/JGE/JSET|K and RET|K on seccomp_data."""
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    data = {0: nr, 4: arch, 16: arg0 & 0xFFFFFFFF, 20: arg0 >> 32}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            acc = data[k]
        elif code in (0x15, 0x35, 0x45):
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")
        pc += 1


@pytest.mark.parametrize("machine", sorted(seccomp.DENIED))
def test_filter_denies_exactly_the_table(machine):
    arch, table = seccomp.DENIED[machine]
    prog = seccomp.filter_bytes(machine)
    denied = set(table.values())
    clone, clone3 = seccomp.CLONE[machine]
    for nr in set(range(0, 460)) - {clone, clone3}:
        assert run_bpf(prog, nr, arch) == (EPERM if nr in denied else ALLOW), nr
    assert run_bpf(prog, clone3, arch) == ENOSYS
    fork_flags = 0x01200011  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD (fork)
    assert run_bpf(prog, clone, arch, fork_flags) == ALLOW
    assert run_bpf(prog, clone, arch, fork_flags | 0x10000000) == EPERM  # CLONE_NEWUSER
    assert run_bpf(prog, clone, arch, 0x00020000 | 17) == ALLOW  # CLONE_NEWNS: needs caps
    assert run_bpf(prog, table["ptrace"], arch) == EPERM
    assert run_bpf(prog, 0, 0x40000003) == KILL  # i386 on x86_64, or any foreign ABI


def test_x32_calls_are_refused():
    arch, _ = seccomp.DENIED["x86_64"]
    assert run_bpf(seccomp.filter_bytes("x86_64"), 0x40000000 + 1, arch) == EPERM


def test_unknown_machine_is_an_error():
    with pytest.raises(ValueError, match="riscv64"):
        seccomp.filter_bytes("riscv64")
