"""Containment: every hostile program ends within its limits with the right status,
and the host (files, processes, sockets, environment) is left as it was."""

import dataclasses
import json
import os
import resource
import socket
import subprocess
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from rlvr_jax.sandbox import CodeJob, Limits, TestCase
from rlvr_jax.sandbox import jail as jail_lib
from rlvr_jax.sandbox.runner import run_test
from tests.sandbox.conftest import processes_with

REPO = Path(__file__).resolve().parents[2]


def _marker() -> str:
    return f"rlvr-sandbox-marker-{uuid.uuid4().hex}"


def test_no_network_to_localhost_or_outside(run1):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    program = textwrap.dedent(f"""
        import socket
        for addr in [("127.0.0.1", {port}), ("8.8.8.8", 53), ("1.1.1.1", 443)]:
            try:
                socket.create_connection(addr, timeout=2).close()
                print("connected", addr)
            except OSError as e:
                print("refused", e.errno)
        try:
            socket.getaddrinfo("example.com", 80)
            print("resolved")
        except OSError:
            print("no dns")
        print(open("/proc/net/dev").read().count(":"))  # interfaces: lo only
    """)
    r = run1(program)
    assert r.status == "passed", r.stderr
    assert "connected" not in r.stdout and "resolved" not in r.stdout
    assert r.stdout.count("refused") == 3 and r.stdout.split()[-1] == "1"
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_host_files_home_repo_and_secrets_are_invisible(run1, monkeypatch):
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLVR_SANDBOX_SECRET", secret)
    home = Path.home()
    paths = [
        "/etc/shadow",
        "/etc/passwd",
        str(home),
        str(REPO / "pyproject.toml"),
        str(REPO),
        "/work",
        "/root",
    ]
    program = textwrap.dedent(f"""
        import os
        for p in {paths!r}:
            try:
                print(p, "READ", os.listdir(p) if os.path.isdir(p) else open(p).read()[:50])
            except OSError as e:
                print(p, "denied", type(e).__name__)
        print(sorted(os.environ))
        for p in ("/proc/self/environ", "/proc/1/environ"):
            try:
                print(open(p, "rb").read())
            except OSError as e:
                print(p, "denied", type(e).__name__)
    """)
    r = run1(program)
    assert r.status == "passed", r.stderr
    assert secret not in r.stdout
    lines = r.stdout.splitlines()
    for p in paths:
        line = next(line for line in lines if line.startswith(p + " "))
        # /work is the sandbox's own empty working directory, not the host's /work.
        assert line.endswith("FileNotFoundError") or (p == "/work" and line == "/work READ []"), (
            line
        )
    assert "['HOME', 'LANG', 'PATH', 'PWD']" in r.stdout


def test_writes_and_deletes_outside_the_workdir_fail(run1, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("alive")
    program = textwrap.dedent(f"""
        import os, shutil
        for action, fn in [
            ("delete", lambda: os.remove({str(canary)!r})),
            ("rmtree", lambda: shutil.rmtree({str(tmp_path)!r})),
            ("write", lambda: open({str(canary)!r}, "w").write("dead")),
            ("usr", lambda: open("/usr/bin/owned", "w").write("x")),
            ("python", lambda: open(os.__file__, "a").write("x")),
            ("program", lambda: open("/input/main.py", "a").write("x")),
            ("stdin", lambda: os.write(0, b"x")),
        ]:
            try:
                fn()
                print(action, "DONE")
            except OSError as e:
                print(action, "denied")
        open("/work/out.txt", "w").write("mine")
        print(open("/work/out.txt").read())
    """)
    r = run1(program)
    assert r.status == "passed", r.stderr
    assert "DONE" not in r.stdout and r.stdout.count("denied") == 7 and "mine" in r.stdout
    assert canary.read_text() == "alive" and sorted(p.name for p in tmp_path.iterdir()) == [
        "canary.txt"
    ]
    assert not Path("/usr/bin/owned").exists()


def test_fork_bomb_is_bounded_and_does_not_starve_a_neighbour(pool):
    marker = _marker()
    bomb = textwrap.dedent(f"""
        import os, sys
        if len(sys.argv) == 1:
            os.execv(sys.executable, [sys.executable, "-I", "/input/main.py", "{marker}"])
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """)
    # The neighbour holds 9 processes at once under the same limit of 16: with one count
    # per host uid (both runs are `nobody`) the bomb's 16 would leave it none.
    neighbour = textwrap.dedent("""
        import subprocess
        children = [subprocess.Popen(["sleep", "0.5"]) for _ in range(8)]
        print(sum(c.wait() for c in children))
    """)
    limits = Limits(wall_seconds=3, max_processes=16)
    bombed, ok = pool.run(
        [CodeJob(bomb, (TestCase(),), limits), CodeJob(neighbour, (TestCase("", "0"),), limits)]
    )
    assert (bombed.status, bombed.tests[0].reason) == ("timeout", "wall_limit")
    assert bombed.tests[0].seconds < 6
    assert ok.status == "passed", ok.tests[0].stderr
    assert processes_with(marker) == []


def test_process_limit_ignores_host_processes_of_the_same_uid(run1):
    user = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    host = [subprocess.Popen(["sleep", "30"], **user) for _ in range(12)]
    try:
        program = "import subprocess\nfor _ in range(4): subprocess.run(['true'], check=True)"
        r = run1(program, max_processes=6)
        assert r.status == "passed", r.stderr
        # and the limit does bind inside: 8 children at once do not fit in 6
        r = run1("import subprocess\n[subprocess.Popen(['sleep', '1']) for _ in range(8)]",
                 max_processes=6)  # fmt: skip
        assert r.status == "crashed" and "BlockingIOError" in r.stderr, r.stderr
    finally:
        for h in host:
            h.kill()
            h.wait()


def test_memory_bomb_is_stopped(run1):
    r = run1("x = []\nwhile True:\n    x.append(bytearray(16 << 20))", memory_mb=256)
    assert (r.status, r.reason) == ("memory", "memory_limit") and r.seconds < 5


def test_infinite_loop_is_stopped_by_cpu_and_wall_limits(run1):
    assert run1("while True: pass", cpu_seconds=1).reason == "cpu_limit"
    r = run1("import time\nwhile True: time.sleep(0.01)", wall_seconds=1)
    assert (r.status, r.reason) == ("timeout", "wall_limit") and r.seconds < 3


def test_a_gigabyte_of_stdout_is_cut_at_the_output_limit(run1):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    program = (
        "import sys\nb = b'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.buffer.write(b)"
    )
    r = run1(program, output_bytes=1 << 20)
    assert (r.status, r.reason) == ("crashed", "output_limit") and r.seconds < 5
    assert set(r.stdout) == {"x"}
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    assert after - before < 64 << 10
    # Into a file instead: the workdir is a small tmpfs and files are size-limited.
    r = run1(
        "b = b'x' * (1 << 20)\nwith open('big', 'wb') as f:\n    for _ in range(1024): f.write(b)"
    )
    assert r.status == "crashed" and r.seconds < 5


@pytest.mark.parametrize("ending", ["exit", "timeout"])
def test_children_left_running_are_killed(run1, ending):
    marker = _marker()
    program = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
        subprocess.Popen([sys.executable, "-c", code, "{marker}"], start_new_session=True)
        if os.fork() == 0:  # a double-forked daemon too
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", code, "{marker}"])
            os._exit(0)
        time.sleep(0.3)
        print("spawned", flush=True)
        if {ending == "timeout"}:
            time.sleep(60)
    """)
    r = run1(program, wall_seconds=2)
    assert r.status == ("passed" if ending == "exit" else "timeout"), r.stderr
    assert "spawned" in r.stdout
    deadline = time.monotonic() + 1.0
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with(marker) == []


def test_signals_and_ptrace_do_not_reach_the_host(run1):
    # A host process with the sandbox's own host uid: without a pid namespace the
    # program could kill it.
    user = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
    host = subprocess.Popen(["sleep", "30"], **user)
    try:
        program = textwrap.dedent(f"""
            import ctypes, os, signal
            libc = ctypes.CDLL(None, use_errno=True)
            for pid in (os.getppid(), 1, {host.pid}, {os.getpid()}):
                rc = libc.ptrace(16, pid, 0, 0)  # PTRACE_ATTACH
                print("ptrace", pid, rc, ctypes.get_errno(), flush=True)
            for pid in ({host.pid}, {os.getpid()}, os.getppid()):
                try:
                    os.kill(pid, signal.SIGKILL)
                    print("kill sent", pid, flush=True)
                except OSError as e:
                    print("kill", pid, type(e).__name__, flush=True)
            try:
                os.kill(-1, signal.SIGKILL)  # everything this user may signal
            except OSError as e:
                print("kill -1", type(e).__name__, flush=True)
            print("survived", flush=True)
        """)
        r = run1(program)
        # Only pid 1 shares the namespace, and the kernel shields it: nothing is hit.
        assert r.status == "passed", r.stderr
        assert "kill -1 ProcessLookupError" in r.stdout and "survived" in r.stdout
        ptrace = [line.split() for line in r.stdout.splitlines() if line.startswith("ptrace")]
        assert len(ptrace) == 4 and all(rc == "-1" and errno == "1" for _, _, rc, errno in ptrace)
        assert f"kill {host.pid} ProcessLookupError" in r.stdout
        assert f"kill {os.getpid()} ProcessLookupError" in r.stdout
        assert host.poll() is None  # the host process survived
    finally:
        host.kill()
        host.wait()


def test_ctypes_os_system_and_subprocess_run_but_stay_contained(run1, monkeypatch):
    monkeypatch.setenv("RLVR_SANDBOX_SECRET", "leaked")
    program = textwrap.dedent("""
        import ctypes, json, os, subprocess
        libc = ctypes.CDLL(None)
        os.system("echo from-shell; cat /etc/shadow 2>/dev/null || echo no-shadow")
        ls = subprocess.run(["ls", "/"], capture_output=True, text=True)
        root = subprocess.run(["ls", "/root"], capture_output=True, text=True)
        env = subprocess.run(["sh", "-c", "echo x${RLVR_SANDBOX_SECRET}x"],
                             capture_output=True, text=True)
        s = libc.socket(2, 1, 0)  # AF_INET, SOCK_STREAM through raw libc
        addr = bytes([2, 0, 0, 53, 8, 8, 8, 8]) + bytes(8)  # sockaddr_in 8.8.8.8:53
        print(json.dumps({"uid": libc.getuid(), "ls": ls.stdout.split(), "root": root.returncode,
                          "env": env.stdout.strip(), "connect": libc.connect(s, addr, 16)}))
    """)
    r = run1(program)
    assert r.status == "passed", r.stderr
    shell, shadow, report = r.stdout.splitlines()
    assert (shell, shadow) == ("from-shell", "no-shadow")
    report = json.loads(report)
    assert (
        report["uid"] != 0
        and report["root"] != 0
        and report["env"] == "xx"
        and report["connect"] == -1
    )
    assert {"usr", "work", "tmp", "proc", "dev"} <= set(report["ls"])
    assert not {"root", "etc", "home", "opt", "var"} & set(report["ls"])


def test_a_program_of_several_megabytes_runs(run1):
    table = ", ".join(str(i * 7919 % 100_003) for i in range(200_000))
    program = f"T = [{table}]\n" + "# padding\n" * 300_000 + "print(len(T), sum(T) % 1000)\n"
    assert len(program) > 4_000_000
    expected = f"200000 {sum(i * 7919 % 100_003 for i in range(200_000)) % 1000}"
    r = run1(program, TestCase("", expected), wall_seconds=20)
    assert r.status == "passed", r.stderr


def test_invalid_utf8_in_output_program_and_stdin(run1):
    r = run1(
        "import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok\\n')\n"
        "sys.stderr.buffer.write(b'\\xc3(')"
    )
    assert r.status == "passed" and r.stdout == "\ufffd\ufffd ok\n" and "\ufffd" in r.stderr
    bad_program = b"print('a')\n# \xff\xfe\n".decode("utf-8", "surrogateescape")
    r = run1(bad_program)
    assert r.status == "crashed" and "SyntaxError" in r.stderr
    stdin = b"\xff\n".decode("utf-8", "surrogateescape")
    r = run1("import sys\nprint(sys.stdin.buffer.read())", TestCase(stdin, "b'\\xff\\n'"))
    assert r.status == "passed", r.stdout


@pytest.mark.parametrize("old_bwrap", [False, True])
def test_no_new_namespaces_and_threads_still_work(old_bwrap):
    # True: the options bubblewrap 0.6 has (no --disable-userns, no tmpfs --size);
    # seccomp alone must forbid new user namespaces.
    jail = dataclasses.replace(
        jail_lib.find_jail(), disable_userns=not old_bwrap, tmpfs_size=not old_bwrap
    )
    program = textwrap.dedent("""
        import ctypes, os, threading
        libc = ctypes.CDLL(None, use_errno=True)
        print("unshare", libc.unshare(0x10000000), ctypes.get_errno())  # CLONE_NEWUSER
        nr = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
        print("clone", libc.syscall(nr, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())
        t = threading.Thread(target=print, args=("thread ok",))
        t.start(); t.join()
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        print("fork", os.waitpid(pid, 0)[1] >> 8)
    """)
    r = run_test(jail, program, TestCase(), Limits())
    assert r.status == "passed", r.stderr
    assert r.stdout.split("\n")[:4] == ["unshare -1 1", "clone -1 1", "thread ok", "fork 7"]
