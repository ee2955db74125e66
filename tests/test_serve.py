"""``dpalign serve``: commands handed to a resident process give what they give alone.

Each test module run starts one real server (a child process) with a private socket folder
and an environment key of its own, and runs the ``dpalign`` entry point
(``python -m _dpalign_entry``) against it, comparing with the same command run in its own
process (``DPALIGN_SERVER=off``).
"""

from __future__ import annotations

import marshal
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import _dpalign_entry
from dpalign import serve
from dpalign.benchmarks.workloads import protein_database

ROOT = Path(__file__).resolve().parent.parent


def _write_fasta(path: Path, records) -> Path:
    path.write_text("".join(f">{name}\n{seq}\n" for name, seq in records))
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("run")
    out = {k: v for k, v in os.environ.items() if k != _dpalign_entry.SWITCH}
    out["XDG_RUNTIME_DIR"] = str(folder)
    out["DPALIGN_SERVE_TEST"] = str(folder)  # a key of its own, whatever else runs here
    out["PYTHONPATH"] = os.pathsep.join([str(ROOT), out.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return out


@pytest.fixture(scope="module")
def server(env):
    path = _dpalign_entry.socket_path(env)
    try:
        child = subprocess.Popen(
            [sys.executable, "-m", "dpalign.cli", "serve", "--idle", "120"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 600  # its warm-up compiles kernels on an empty cache
        while serve.ask(path, "status") is None:
            assert child.poll() is None, child.stderr.read()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield child, path
    finally:
        if serve.ask(path, "stop") is not None:
            child.wait(30)
        if child.poll() is None:
            child.kill()
            child.wait(30)
        child.stderr.close()


def _commands(server) -> int:
    return serve.ask(server[1], "status")["commands"]


def _dpalign(argv, env, cwd, served: bool, stdin: str | None = None):
    run_env = dict(env) if served else {**env, _dpalign_entry.SWITCH: "off"}
    return subprocess.run(
        [sys.executable, "-m", "_dpalign_entry", *argv],
        env=run_env, cwd=cwd, input=stdin, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _same(argv, env, cwd, server, stdin=None, outputs=()):
    """Run ``argv`` served and alone; both results (the served one's outputs read first)."""
    before = _commands(server)
    served = _dpalign(argv, env, cwd, True, stdin)
    assert _commands(server) == before + 1, served.stderr  # it did run in the server
    files = {name: (cwd / name).read_bytes() for name in outputs}
    for name in outputs:
        (cwd / name).unlink()
    alone = _dpalign(argv, env, cwd, False, stdin)
    assert served.returncode == alone.returncode
    assert served.stdout == alone.stdout
    for name in outputs:
        assert (cwd / name).read_bytes() == files[name], name
    return served, alone


def _only_first_line(text: str) -> str:
    # the summary line's times differ between runs
    return text.split(";")[0]


def test_search_served_equals_alone(server, env, tmp_path):
    db = _write_fasta(tmp_path / "db.fa", protein_database(300, seed=3))
    _write_fasta(tmp_path / "q.fa", protein_database(3, seed=4))
    for outfmt in ("dpalign", "6"):
        served, alone = _same(
            ["search", "--query", "q.fa", "--db", str(db), "--outfmt", outfmt, "--top", "4",
             "--out", "hits.tsv", "--threads", "1"],
            env, tmp_path, server, outputs=["hits.tsv"],
        )  # fmt: skip
        assert _only_first_line(served.stderr) == _only_first_line(alone.stderr)
    # the queries on standard input, the hits on standard output
    served, alone = _same(
        ["search", "--query", "-", "--db", "db.fa"], env, tmp_path, server,
        stdin=(tmp_path / "q.fa").read_text(),
    )  # fmt: skip
    assert served.stdout.count("\n") == 3 * 10


def test_device_search_served_equals_alone(server, env, tmp_path):
    """A device search (PoCL here) traces its hits back in the server's own process (alone
    it compiles the traceback kernels in children while the device searches)."""
    from conftest import opencl_devices

    if not opencl_devices():
        pytest.skip("no OpenCL device here")
    _write_fasta(tmp_path / "db.fa", protein_database(60, seed=8))
    _write_fasta(tmp_path / "q.fa", protein_database(2, seed=9))
    argv = ["search", "--query", "q.fa", "--db", "db.fa", "--backend", "opencl", "--top", "3"]
    served, alone = _same([*argv, "--out", "hits.tsv"], env, tmp_path, server, outputs=["hits.tsv"])
    assert served.returncode == 0, served.stderr


def test_a_changed_database_is_read_again(server, env, tmp_path):
    records = protein_database(50, seed=5)
    db = _write_fasta(tmp_path / "db.fa", records)
    _write_fasta(tmp_path / "q.fa", records[:1])
    argv = ["search", "--query", "q.fa", "--db", "db.fa", "--top", "1"]
    first = _dpalign(argv, env, tmp_path, True)
    assert first.stdout.split("\t")[1] == records[0][0]
    # the same length and the same second: only the inode and ctime tell (a rename)
    renamed = [(f"X{name[1:]}", seq) for name, seq in records]
    _write_fasta(tmp_path / "new.fa", renamed)
    os.utime(tmp_path / "new.fa", ns=(db.stat().st_atime_ns, db.stat().st_mtime_ns))
    os.replace(tmp_path / "new.fa", db)
    second = _dpalign(argv, env, tmp_path, True)
    assert second.stdout.split("\t")[1] == renamed[0][0]


def test_errors_served_equal_errors_alone(server, env, tmp_path):
    (tmp_path / "bad.fa").write_text(">x\nAC1GT\n")
    _write_fasta(tmp_path / "db.fa", protein_database(5, seed=1))
    served, alone = _same(["search", "--query", "bad.fa", "--db", "db.fa"], env, tmp_path, server)
    assert served.returncode == 1
    assert served.stderr == alone.stderr
    assert "bad.fa:2, record 'x', position 3" in served.stderr
    served, alone = _same(["search", "--query", "bad.fa"], env, tmp_path, server)
    assert served.returncode == 2 and served.stderr == alone.stderr  # argparse's usage error
    assert not list(tmp_path.glob("*.tmp*"))


def test_align_served_equals_alone(server, env, tmp_path):
    _write_fasta(tmp_path / "a.fa", [("a", "ACGTTGCAACGT")])
    _write_fasta(tmp_path / "b.fa", [("b", "ACGTGCAACCGT")])
    served, alone = _same(["align", "a.fa", "b.fa", "--mode", "local"], env, tmp_path, server)
    assert served.returncode == 0 and served.stdout


def test_interrupt_stops_the_command_not_the_server(server, env, tmp_path):
    db = _write_fasta(tmp_path / "db.fa", protein_database(4000, seed=6))
    _write_fasta(tmp_path / "q.fa", protein_database(400, seed=7))
    run_env = dict(env)
    child = subprocess.Popen(
        [sys.executable, "-m", "_dpalign_entry", "search", "--query", "q.fa", "--db", str(db),
         "--out", "hits.tsv", "--threads", "1"],
        env=run_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not serve.ask(server[1], "status")["busy"]:
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert child.returncode == 130, err
    assert "interrupted; no output was written" in err
    assert not (tmp_path / "hits.tsv").exists()
    while serve.ask(server[1], "status")["busy"]:  # and it still answers, ready for more
        assert time.monotonic() < deadline + 30
        time.sleep(0.05)


def test_a_busy_server_declines(tmp_path):
    """A second client while a command runs is told so (and runs its command itself)."""
    srv = serve.Server(str(tmp_path / "x.sock"))
    srv._busy = True
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    body = marshal.dumps({"op": "run", "argv": ["align"], "cwd": "/", "env": {}})
    socket.send_fds(theirs, [len(body).to_bytes(8, "little")], [0, 1, 2])
    theirs.sendall(body)
    srv._take(ours)
    with theirs, theirs.makefile("rb") as replies:
        assert replies.readline() == b"declined busy\n"
    assert srv._todo.empty()


def test_declined_commands():
    assert serve.declined(["bench", "quick"])
    assert serve.declined(["serve"])
    assert serve.declined(["search", "--query", "q", "--db", "d", "--scheduler", "tcp://x:1"])
    assert serve.declined(["search", "--dask-workers=2"])
    assert serve.declined(["search", "--backend", "dask"])
    assert serve.declined(["search", "--backend=dask"])
    assert serve.declined(["search", "--query", "q", "--db", "d", "--backend", "numba"]) is None
    assert serve.declined(["papara", "-t", "x", "-s", "y", "-q", "z"]) is None


def test_no_server_or_a_stale_socket_runs_here(monkeypatch):
    import tempfile

    monkeypatch.setenv("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="dps"))
    monkeypatch.delenv(_dpalign_entry.SWITCH, raising=False)
    assert _dpalign_entry._handed_over(["align", "a", "b"]) is None  # no folder
    folder = Path(_dpalign_entry.socket_folder())
    folder.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(_dpalign_entry.socket_path())  # a socket file nobody listens on
    stale.close()
    assert _dpalign_entry._handed_over(["align", "a", "b"]) is None
    folder.chmod(0o755)  # others may enter: never used
    assert not _dpalign_entry.private_folder(str(folder))
    monkeypatch.setenv(_dpalign_entry.SWITCH, "off")
    assert not _dpalign_entry._wanted(["align"])


def test_the_key_follows_the_environment_and_the_sources(monkeypatch):
    env = {"DPALIGN_THREADS": "1", "HOME": "/x"}
    key = _dpalign_entry.installation_key(env)
    assert _dpalign_entry.installation_key({**env, "HOME": "/y"}) == key
    assert _dpalign_entry.installation_key({**env, _dpalign_entry.SWITCH: "on"}) == key
    assert _dpalign_entry.installation_key({**env, "DPALIGN_THREADS": "2"}) != key
    assert _dpalign_entry.installation_key({**env, "NUMBA_NUM_THREADS": "2"}) != key
    assert _dpalign_entry.installation_key({**env, "LC_ALL": "C"}) != key
    monkeypatch.setattr(_dpalign_entry, "_newest_source", lambda folder: 1)
    assert _dpalign_entry.installation_key(env) != key


def test_handing_over_imports_no_numpy(server, env, tmp_path):
    _write_fasta(tmp_path / "a.fa", [("a", "ACGT")])
    probe = (
        "import sys, _dpalign_entry\n"
        "code = _dpalign_entry._handed_over(['align', 'a.fa', 'a.fa'])\n"
        "print(code, 'numpy' in sys.modules, 'dpalign' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert done.stdout.strip().splitlines()[-1] == "0 False False", done.stderr


def test_papara_served_equals_alone(server, env, tmp_path):
    examples = ROOT / "examples"
    argv = [
        "papara", "--ref", str(examples / "tree.nwk"), "--msa", str(examples / "ref.fasta"),
        "--reads", str(examples / "reads.fasta"), "--out", "aligned.phy",
        "--placements", "placements.tsv", "--threads", "1",
    ]  # fmt: skip
    served, _ = _same(argv, env, tmp_path, server, outputs=["aligned.phy", "placements.tsv"])
    assert served.returncode == 0


def test_detach_status_idle_and_stop(env, tmp_path):
    own = {**env, "DPALIGN_SERVE_TEST": str(tmp_path)}  # another key: another server

    def dpalign(*argv):
        return subprocess.run(
            [sys.executable, "-m", "dpalign.cli", *argv], env=own, cwd=tmp_path,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    assert dpalign("serve", "--status").returncode == 1
    started = dpalign("serve", "--detach", "--idle", "4")
    assert started.returncode == 0 and "ready (pid" in started.stdout, started.stderr
    again = dpalign("serve", "--detach")
    assert again.returncode == 1 and "already runs" in again.stderr
    status = dpalign("serve", "--status")
    assert status.returncode == 0 and "0 commands" in status.stdout
    path = _dpalign_entry.socket_path(own)
    deadline = time.monotonic() + 60
    while os.path.exists(path):  # no command for 4 s: it ends, and its socket goes
        assert time.monotonic() < deadline, "the idle server did not end"
        time.sleep(0.2)
    assert "no server runs" in dpalign("serve", "--stop").stdout
    dpalign("serve", "--detach", "--idle", "60")
    stopped = dpalign("serve", "--stop")
    assert stopped.returncode == 0 and "stopped the server" in stopped.stdout
    assert dpalign("serve", "--status").returncode == 1


def test_a_client_on_other_cores_runs_its_own(monkeypatch):
    key = _dpalign_entry.installation_key({})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {4095})
    assert _dpalign_entry.installation_key({}) != key


def test_a_killed_client_stops_its_command(server, env, tmp_path):
    """Alone, a killed command writes nothing: served, its command is interrupted too."""
    db = _write_fasta(tmp_path / "db.fa", protein_database(4000, seed=6))
    _write_fasta(tmp_path / "q.fa", protein_database(400, seed=7))
    child = subprocess.Popen(
        [sys.executable, "-m", "_dpalign_entry", "search", "--query", "q.fa", "--db", str(db),
         "--out", "hits.tsv", "--threads", "1"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not serve.ask(server[1], "status")["busy"]:
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    time.sleep(0.2)
    child.kill()
    child.wait(10)
    while serve.ask(server[1], "status")["busy"]:  # the command ends at once, not in ~5 s
        assert time.monotonic() < deadline + 10, "the orphaned command ran on"
        time.sleep(0.05)
    assert not (tmp_path / "hits.tsv").exists()


def test_device_processes_started_ahead_are_stopped(monkeypatch):
    from dpalign.hybrid import devproc

    stopped = []

    class Child:
        def close(self):
            stopped.append(self)

    children = {("opencl", 0, 0): Child(), ("opencl", 1, 0): Child()}
    monkeypatch.setattr(devproc, "_PRESTARTED", children)
    serve._end_helpers()
    assert len(stopped) == 2 and not devproc._PRESTARTED


def test_the_warm_up_runs_every_command(tmp_path):
    import gc

    try:
        seconds, failed = serve.warm_up(str(tmp_path))
    finally:
        gc.unfreeze()  # (this is the test process, not a server)
    assert failed == [] and seconds > 0
    assert list(tmp_path.iterdir()) == []  # its inputs removed


def test_several_workers_take_commands_side_by_side(env, tmp_path):
    """With --workers 2, a command that finds the first process busy runs in the second."""
    own = {**env, "DPALIGN_SERVE_TEST": str(tmp_path) + "-workers"}

    def dpalign(*argv):
        return subprocess.run(
            [sys.executable, "-m", "dpalign.cli", *argv], env=own, cwd=tmp_path,
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    started = dpalign("serve", "--detach", "--workers", "2", "--idle", "120")
    assert started.returncode == 0 and started.stdout.count("ready (pid") == 2, started.stderr
    try:
        first, second = (_dpalign_entry.socket_path(own, worker=k) for k in (0, 1))
        db = _write_fasta(tmp_path / "db.fa", protein_database(4000, seed=6))
        _write_fasta(tmp_path / "q.fa", protein_database(400, seed=7))
        _write_fasta(tmp_path / "a.fa", [("a", "ACGTTGCA")])
        long_one = subprocess.Popen(
            [sys.executable, "-m", "_dpalign_entry", "search", "--query", "q.fa", "--db",
             str(db), "--out", "hits.tsv", "--threads", "1"],
            env=own, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not serve.ask(first, "status")["busy"]:
            assert long_one.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        short = _dpalign(["align", "a.fa", "a.fa"], own, tmp_path, True)
        assert short.returncode == 0, short.stderr
        assert serve.ask(second, "status")["commands"] == 1  # the second process ran it
        assert "commands, busy" in dpalign("serve", "--status").stdout
        long_one.kill()
        long_one.wait(10)
    finally:
        stopped = dpalign("serve", "--stop")
    assert stopped.stdout.count("stopped the server") == 2
