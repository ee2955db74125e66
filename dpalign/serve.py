"""A resident process that runs ``dpalign`` commands with everything already loaded.

A fresh ``dpalign search`` of three proteins against 20,000 spends 0.1 s searching and
0.7 s starting: the interpreter, NumPy, Numba and its compiled kernels, reading and laying
out the database. ``dpalign serve`` pays that once; a ``dpalign`` command of the same
installation then hands itself over (see ``_dpalign_entry``) and runs here, in this
process, with the client's standard streams, working directory, environment and umask.
Search databases stay read and laid out between commands while their files are unchanged
(:func:`dpalign.cli.kept_database`).

A server process runs one command at a time; a client that finds it busy asks the next
one (``dpalign serve --workers N``), and runs its command itself when all are. A server ends
after ``idle`` seconds without a command, on ``dpalign serve --stop``, or on SIGINT/SIGTERM.
"""

from __future__ import annotations

import json
import logging
import marshal
import os
import queue
import signal
import socket
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from .errors import OptionError

log = logging.getLogger("dpalign-serve")  # not under "dpalign": a command resets that one

#: Commands a server does not run: they start processes or clusters that would outlive the
#: command inside the server (a Dask cluster), or are servers themselves.
_DECLINED_COMMANDS = ("serve", "bench")
_DECLINED_OPTIONS = ("--scheduler", "--dask-workers")

#: The warm-up commands' inputs: the kernels most commands take are loaded before the first
#: client comes.
_WARM_FILES = {
    "p.fa": ">p0\nMKVLAAGIVGLLLAAPAHA\n>p1\nMKTAYIAKQRQISFVKSHFSRQ\n>p2\nMSDNGPQNQRNAPRITFGG\n",
    "a.fa": ">a\nACGTACGTTGCA\n",
    "b.fa": ">b\nACGTTCGTTGCA\n",
    "t.nwk": "((A:0.1,B:0.1):0.05,(C:0.1,D:0.1):0.05);\n",
    "m.fa": ">A\nACGTACGTTGCAAC-GTACGTTGCA\n>B\nACGTACGATGCAACGGTACG-TGCA\n"
    ">C\nACGAACGTTGCTACGGTACGTTGGA\n>D\nACGAACGTTGCTAC-GTACGTAGGA\n",
    "r.fa": ">r1\nACGTTGCAACGG\n>r2\nGTACGTTGGA\n",
}


def declined(argv: list[str]) -> str | None:
    """Why a server will not run ``argv`` (None: it will)."""
    if not argv or argv[0] in _DECLINED_COMMANDS or argv[0].startswith("-"):
        return f"'{argv[0] if argv else ''}' runs in its own process"
    for k, item in enumerate(argv):
        option, _, value = item.partition("=")
        if option in _DECLINED_OPTIONS:
            return f"{option} runs in its own process"
        if option == "--backend" and _cluster(value or "".join(argv[k + 1 : k + 2])):
            return "a Dask backend runs in its own process"
    return None


def _cluster(backend: str) -> bool:
    from .engine import backend_class

    try:
        return backend != "auto" and backend_class(backend).kind == "cluster"
    except OptionError:  # an unknown name: the command says so
        return False


@dataclass
class _Request:
    connection: socket.socket
    fds: list[int]
    body: dict = field(default_factory=dict)


def _receive(connection: socket.socket) -> _Request:
    """A client's request: its descriptors and its body (a ``marshal``-ed dict: the
    client is this user's, and ``marshal`` costs it no import)."""
    head, fds, _flags, _addr = socket.recv_fds(connection, 8, 3)
    try:
        while 0 < len(head) < 8:
            more = connection.recv(8 - len(head))
            if not more:
                break
            head += more
        size = int.from_bytes(head, "little")
        if len(head) != 8 or size > 1 << 26:
            raise ValueError("a malformed request")
        chunks, left = [], size
        while left:
            chunk = connection.recv(min(left, 1 << 20))
            if not chunk:
                raise ValueError("a request cut short")
            chunks.append(chunk)
            left -= len(chunk)
        body = marshal.loads(b"".join(chunks))
        if not isinstance(body, dict):
            raise ValueError("a malformed request")
        return _Request(connection, fds, body)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _reply(connection: socket.socket, **answer) -> None:
    """A JSON line (``status``, ``stop``)."""
    _say(connection, json.dumps(answer))


def _say(connection: socket.socket, line: str) -> None:
    """A reply line; a command's are plain words ("accepted PID", "declined WHY",
    "exit CODE"), which a client reads without importing json."""
    try:
        connection.sendall(line.encode() + b"\n")
    except OSError:  # the client is gone (killed): nothing to tell
        pass


def _peer_is_us(connection: socket.socket) -> bool:
    """Whether the client runs as this user (the folder is private; this is belt and braces)."""
    import struct

    try:
        creds = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        return True
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


@contextmanager
def _as_client(request: _Request):
    """This process's standard streams, folder, environment and umask become the client's
    for the command, and are put back after it."""
    body = request.body
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    saved_streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_umask = os.umask(int(body.get("umask", 0o022)))
    try:
        for fd, target in zip(request.fds, (0, 1, 2), strict=False):
            os.dup2(fd, target)
        os.chdir(body["cwd"])
        os.environ.clear()
        os.environ.update(body["env"])
        sys.stdin = open(0, closefd=False, errors="surrogateescape")  # noqa: SIM115
        sys.stdout = open(1, "w", closefd=False, errors="surrogateescape")  # noqa: SIM115
        sys.stderr = open(2, "w", closefd=False, errors="backslashreplace", buffering=1)  # noqa: SIM115
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: the client reads no more
                pass
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        for fd, target in zip(saved_fds, (0, 1, 2), strict=True):
            os.dup2(fd, target)
            os.close(fd)
        for fd in request.fds:
            os.close(fd)
        os.umask(saved_umask)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


class Server:
    """The resident process (see the module's docstring).

    Parameters
    ----------
    path : str
        The Unix socket to listen on (its folder private to this user).
    idle : float
        Seconds without a command after which the server ends.
    """

    def __init__(self, path: str, idle: float = 900.0) -> None:
        self.path = path
        self.idle = idle
        self.started = time.time()
        self.commands = 0
        self._lock = threading.Lock()
        self._busy = False
        self._in_command = False
        self._todo: queue.Queue[_Request | None] = queue.Queue()
        self._listener: socket.socket | None = None

    # -- the listening side (a thread of its own) ------------------------------------------

    def bind(self) -> None:
        """Listen on :attr:`path`; a stale socket (its server gone) is replaced."""
        make_folder(self.path)
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(self.path)
            except OSError:
                os.unlink(self.path)  # its server ended without cleaning up
            else:
                raise OptionError(f"a dpalign server already listens on {self.path}")
            finally:
                probe.close()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.path)
        listener.listen(16)
        self._listener = listener
        self._inode = os.stat(self.path).st_ino

    def _accept_forever(self) -> None:
        assert self._listener is not None
        while True:
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed at the end
                return
            try:
                self._take(connection)
            except (OSError, ValueError) as exc:
                log.warning("a request failed: %s", exc)
                connection.close()

    def _take(self, connection: socket.socket) -> None:
        connection.settimeout(5.0)  # a client sends its request at once
        if not _peer_is_us(connection):
            connection.close()
            return
        request = _receive(connection)
        connection.settimeout(None)
        op = request.body.get("op")
        if op == "stop":
            _reply(connection, stopped=os.getpid())
            connection.close()
            self._todo.put(None)
            return
        if op == "status":
            _reply(
                connection, pid=os.getpid(), since=self.started, commands=self.commands,
                busy=self._busy, idle=self.idle,
            )  # fmt: skip
            connection.close()
            return
        with self._lock:
            busy, self._busy = self._busy, True
        if busy:
            _say(connection, "declined busy")
            for fd in request.fds:
                os.close(fd)
            connection.close()
            return
        self._todo.put(request)

    # -- the commands (the main thread: signals arrive here) -------------------------------

    def _interrupt(self, signum, frame) -> None:
        if self._in_command:
            raise KeyboardInterrupt

    def _stop(self, signum, frame) -> None:
        self._todo.put(None)
        if self._in_command:
            raise KeyboardInterrupt

    def _handle_signals(self) -> None:
        # Again before every command: an OpenCL driver built on LLVM (PoCL) installs LLVM's
        # signal handlers when its first context is made, and LLVM's SIGUSR1 handler does
        # not pass the signal on, so a client's Ctrl-C would no longer reach a command.
        signal.signal(signal.SIGUSR1, self._interrupt)
        signal.signal(signal.SIGINT, self._stop)
        signal.signal(signal.SIGTERM, self._stop)

    def run(self) -> None:
        """Serve commands until stopped or idle (the caller has :meth:`bind`-ed)."""
        self._handle_signals()
        threading.Thread(target=self._accept_forever, name="dpalign-serve", daemon=True).start()
        try:
            while True:
                try:
                    request = self._todo.get(timeout=self.idle)
                except queue.Empty:
                    log.info("no command for %.0f s: ending", self.idle)
                    return
                if request is None:
                    return
                try:
                    self._serve(request)
                except Exception:  # one request's failure is not the server's end
                    log.exception("a request failed")
                    request.connection.close()
                finally:
                    with self._lock:
                        self._busy = False
        finally:
            self.close()

    def _serve(self, request: _Request) -> None:
        connection = request.connection
        argv = [str(a) for a in request.body.get("argv", [])]
        reason = declined(argv) if len(request.fds) == 3 else "no standard streams"
        if reason is not None:
            _say(connection, f"declined {reason}")
            for fd in request.fds:
                os.close(fd)
            connection.close()
            return
        client = ExitStack()
        try:
            client.enter_context(_as_client(request))
        except OSError as exc:  # e.g. its folder is gone: it runs (and fails) there
            _say(connection, f"declined {exc}")
            connection.close()
            return
        _say(connection, f"accepted {os.getpid()}")
        start = time.perf_counter()
        done = threading.Event()
        threading.Thread(
            target=self._watch, args=(connection, done), name="dpalign-serve-client", daemon=True
        ).start()
        with client:
            try:
                code = self.command(argv)
            finally:
                done.set()
        self.commands += 1
        log.info("%s: exit %d in %.3f s", " ".join(argv[:1]), code, time.perf_counter() - start)
        _say(connection, f"exit {code}")
        try:
            connection.shutdown(socket.SHUT_RDWR)  # wakes the watching thread
        except OSError:
            pass
        connection.close()
        _end_helpers()  # after the answer: the client need not wait for it
        with self._lock:
            self._busy = False

    def _watch(self, connection: socket.socket, done: threading.Event) -> None:
        """Interrupt the command if its client goes away first (killed, or its terminal
        closed): alone, the command would have ended with its process, writing nothing."""
        try:
            gone = connection.recv(1) == b""  # a client sends nothing more: EOF is its end
        except OSError:
            gone = True
        if gone and not done.is_set():
            log.info("the client went away: interrupting its command")
            signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)

    def command(self, argv: list[str]) -> int:
        """Run one command here, as ``dpalign argv`` would; its exit status."""
        from . import cli

        self._handle_signals()
        self._in_command = True
        try:
            return cli.main_served(argv)
        finally:
            self._in_command = False

    def close(self) -> None:
        """Stop listening and remove the socket (if it is still this server's)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            try:
                if os.stat(self.path).st_ino == self._inode:
                    os.unlink(self.path)
            except OSError:
                pass


def _end_helpers() -> None:
    """End what a command started and did not stop, before the next one: processes started
    during a command hold its client's standard streams (a reader of them waits for their
    end), and objects that own processes stop them when collected."""
    import gc

    from .hybrid.devproc import drop_prestarted

    gc.collect()  # ~2 ms: what the warm-up loaded is frozen (gc.freeze)
    if drop_prestarted():
        log.info("stopped device processes started ahead and never taken")


def make_folder(path: str) -> str:
    """The folder of the socket ``path``, made private to this user where missing."""
    from _dpalign_entry import private_folder

    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if not private_folder(folder):
        raise OptionError(
            f"{folder} must be a folder of this user that nobody else may enter (mode 700)"
        )
    return folder


def log_to_stderr(verbose: int) -> None:
    """The server's own messages to its standard error as it is now (a copy of the
    descriptor: during a command, descriptor 2 is the client's)."""
    stream = os.fdopen(os.dup(2), "w", buffering=1)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("dpalign serve: %(message)s"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO if verbose else logging.WARNING)
    log.propagate = False


def running(key: str) -> list[str]:
    """The sockets of this key's server processes that answer, in worker order."""
    from _dpalign_entry import _MAX_WORKERS, socket_path

    found = []
    for worker in range(_MAX_WORKERS):
        path = socket_path(worker=worker, key=key)
        if not os.path.exists(path):
            break
        if ask(path, "status") is not None:
            found.append(path)
    return found


def _serve_command(idle: float, verbose: int, worker: int) -> list[str]:
    command = [sys.executable, "-m", "dpalign.cli", "serve", "--idle", str(idle)]
    return command + ["--worker", str(worker)] + ["-v"] * verbose


def start_worker(idle: float, verbose: int, worker: int):
    """A further server process of a foreground ``dpalign serve --workers N`` (its
    ``Popen``): it shares this terminal, so Ctrl-C there ends it too."""
    import subprocess

    return subprocess.Popen(_serve_command(idle, verbose, worker), stdin=subprocess.DEVNULL)


def start_detached(
    path: str, idle: float, verbose: int, wait: float = 600.0, worker: int = 0
) -> int:
    """Start a server process (the ``worker``-th) in a new session in the background; its
    pid once it answers (after its warm-up: up to minutes where Numba's cache is empty).
    Its messages go to ``<socket>.log``."""
    import subprocess

    folder = make_folder(path)
    logfile = path[: -len(".sock")] + ".log" if path.endswith(".sock") else path + ".log"
    command = _serve_command(idle, verbose, worker)
    with open(logfile, "ab") as out:
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=folder,
            start_new_session=True,
        )  # fmt: skip
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        answer = ask(path, "status")
        if answer is not None:
            return int(answer["pid"])
        if child.poll() is not None:
            with open(logfile, errors="replace") as text:
                tail = text.read()[-2000:].strip()
            raise OptionError(f"the server did not start (exit {child.returncode}): {tail}")
        time.sleep(0.05)
    child.kill()
    raise OptionError(f"the server did not answer within {wait:.0f} s (its log: {logfile})")


def warm_up(folder: str) -> tuple[float, list[str]]:
    """Run the commonest commands once on tiny inputs in ``folder`` (their kernels loaded,
    their modules imported, on a GPU host its context and programs made and the fork
    server of the traceback workers started, while the standard streams are still this
    process's own); the seconds it took and the commands that failed."""
    import shutil
    import tempfile

    from . import cli

    start = time.perf_counter()
    own = tempfile.mkdtemp(prefix="warm-", dir=folder)  # several workers warm up at once
    files = {name: os.path.join(own, name) for name in _WARM_FILES}
    for name, text in _WARM_FILES.items():
        with open(files[name], "w") as out:
            out.write(text)
    null = os.devnull
    search = ["search", "--query", files["p.fa"], "--db", files["p.fa"], "--out", null]
    commands = [
        [*search, "--threads", "1"],
        search,
        ["align", files["a.fa"], files["b.fa"], "--out", null],
        ["papara", "--ref", files["t.nwk"], "--msa", files["m.fa"], "--reads", files["r.fa"],
         "--out", null],
    ]  # fmt: skip
    if not _no_gpu():
        _start_fork_server()
        commands.append([*search, "--backend", "opencl"])
    failed = []
    saved = sys.stdout, sys.stderr
    with open(null, "w") as quiet:
        sys.stdout = sys.stderr = quiet
        try:
            for argv in commands:
                try:
                    code = cli.main(argv, serving=True)
                except (Exception, SystemExit) as exc:  # noqa: BLE001 - warm-up only
                    code = exc
                if code != 0:
                    failed.append(" ".join(argv[:1] + argv[-2:]))
                    log.warning("warm-up %s failed (%s)", argv[0], code)
        finally:
            sys.stdout, sys.stderr = saved
            shutil.rmtree(own, ignore_errors=True)
    import gc

    gc.collect()
    gc.freeze()  # the modules and kernels loaded: later collections skip them (~30 ms each)
    return time.perf_counter() - start, failed


def _no_gpu() -> bool:
    from .hybrid.backend import no_gpu_device_nodes

    return no_gpu_device_nodes()


def _start_fork_server() -> None:
    """Start the fork server that a device search's traceback workers come from
    (:func:`dpalign.cli._start_trace_workers`) now, while the standard streams are this
    process's: started during a command, it would hold that client's streams open for as
    long as the server lives (a reader of its output would wait for their end)."""
    import multiprocessing
    from multiprocessing import forkserver

    from . import cli

    try:
        multiprocessing.get_context("forkserver").set_forkserver_preload(cli.TRACE_PRELOAD)
        forkserver.ensure_running()
    except (ValueError, OSError) as exc:  # pragma: no cover - no fork server here
        log.warning("no fork server: %s", exc)


def ask(path: str, op: str) -> dict | None:
    """A running server's answer to ``op`` ("status" or "stop"); None where none listens."""
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10.0)
    try:
        client.connect(path)
        body = marshal.dumps({"op": op})
        client.sendall(len(body).to_bytes(8, "little") + body)
        line = client.makefile("rb").readline()
        return json.loads(line) if line else None
    except (OSError, ValueError):
        return None
    finally:
        client.close()
