"""The ``dpalign`` command's entry point.

A command runs in a ``dpalign serve`` process of this installation when one is up (its
kernels loaded, its last search databases read and laid out), else in this process. The
module sits outside the ``dpalign`` package on purpose: importing the package costs NumPy
(~0.1 s), more than handing a command over may cost.

The hand-over: this process connects to the server's Unix socket, passes its standard
input, output and error (the descriptors themselves), its arguments, working directory,
environment and umask, and waits for the command's exit status. Ctrl-C here interrupts the
command there. A server that is busy with another command, or that will not run this one
(``bench``, Dask options), says so and the command runs here instead.
"""

from __future__ import annotations

import os
import sys

#: ``DPALIGN_SERVER=off`` runs every command in its own process, even with a server up.
SWITCH = "DPALIGN_SERVER"

#: Variables a process may read once, at import (Numba's threads, an OpenCL platform, ...):
#: a server serves only clients whose values of these equal its own.
_KEYED_PREFIXES = (
    "DPALIGN_",
    "NUMBA_",
    "PYOPENCL_",
    "POCL_",
    "OCL_",
    "CUDA_",
    "OMP_",
    "PYTHON",
    "LD_",
    "LANG",  # the standard streams' encoding
    "LC_",
)

#: Package files whose change makes a running server stale.
_SOURCE_SUFFIXES = (".py", ".cl", ".txt")


def _package_dir() -> str | None:
    import importlib.util

    spec = importlib.util.find_spec("dpalign")
    locations = spec.submodule_search_locations if spec is not None else None
    return locations[0] if locations else None


def _newest_source(package_dir: str) -> int:
    """The newest modification time (ns) of the package's sources."""
    newest, folders = 0, [package_dir]
    while folders:
        with os.scandir(folders.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name != "__pycache__":
                        folders.append(entry.path)
                elif entry.name.endswith(_SOURCE_SUFFIXES):
                    newest = max(newest, entry.stat().st_mtime_ns)
    return newest


def installation_key(environ=os.environ) -> str:
    """What a server and its clients must share: the interpreter, the package's sources
    (path and newest change), the variables read at import (:data:`_KEYED_PREFIXES`) and
    the cores this process may run on."""
    import zlib

    package = _package_dir() or ""
    keyed = sorted(
        (name, value)
        for name, value in environ.items()
        if name.startswith(_KEYED_PREFIXES) and name != SWITCH
    )
    interpreter = (sys.prefix, os.path.realpath(sys.executable), sys.version)
    try:  # a client limited to some cores (taskset, a batch job's share) runs its own
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = []
    newest = _newest_source(package) if package else 0
    text = repr((interpreter, package, newest, keyed, cores)).encode()
    # zlib, not hashlib (2.5 ms to import): a name, not a secret (the folder is private)
    return f"{zlib.crc32(text):08x}{zlib.adler32(text):08x}{len(text):x}"


def socket_folder(environ=os.environ) -> str:
    """The folder of this user's server sockets (not made here)."""
    base = environ.get("XDG_RUNTIME_DIR") or ""
    if not base or not os.path.isdir(base) or len(base) > 64:  # a socket's path: < 108 bytes
        base = "/tmp"
    return os.path.join(base, f"dpalign-{os.getuid()}")


def private_folder(path: str) -> bool:
    """Whether ``path`` is a real folder of this user that nobody else may enter."""
    import stat

    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077
    )


def socket_path(environ=os.environ, worker: int = 0, key: str | None = None) -> str:
    """Where this installation's server (its ``worker``-th process) listens, for this
    environment."""
    key = key or installation_key(environ)
    name = f"{key}.sock" if worker == 0 else f"{key}.{worker}.sock"
    return os.path.join(socket_folder(environ), name)


def _wanted(argv: list[str]) -> bool:
    if not hasattr(os, "getuid") or os.environ.get(SWITCH, "").lower() in (
        "off", "0", "no", "false",
    ):  # fmt: skip
        return False  # (no Unix sockets with descriptors on Windows)
    return bool(argv) and argv[0] not in ("serve", "bench", "-h", "--help", "--version")


def _handed_over(argv: list[str]) -> int | None:
    """The command's exit status from a running server, or None to run it here: the
    server's processes are asked in turn (``dpalign serve --workers N``), and a busy one
    passes to the next.

    Only built-in modules are imported on this path (``_socket``, ``marshal``): ``socket``
    and ``json`` would add ~5 ms to a hand-over of ~25 ms.
    """
    if not _wanted(argv) or not private_folder(socket_folder()):
        return None
    key = installation_key()
    request = None
    for worker in range(_MAX_WORKERS):
        path = socket_path(worker=worker, key=key)
        if not os.path.exists(path):
            return None
        if request is None:
            import marshal

            umask = os.umask(0o022)
            os.umask(umask)
            request = marshal.dumps(
                {"op": "run", "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                 "umask": umask}
            )  # fmt: skip
        answer = _ask_to_run(path, request)
        if answer is None:
            continue  # a stale socket: its server is gone
        client, replies, word, value = answer
        if word == "accepted":
            return _wait_for_exit(client, replies, int(value))
        client.close()
        if value != "busy":
            return None  # a command no server runs (bench, Dask)
    return None


#: The most server processes a client asks (``dpalign serve --workers``).
_MAX_WORKERS = 64


def _ask_to_run(path: str, request: bytes):
    """``(connection, replies, first word, rest)`` of a server's answer to ``request``,
    or None where none listens."""
    import _socket

    client = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        client.connect(path)
        descriptors = (0).to_bytes(4, sys.byteorder) + (1).to_bytes(4, sys.byteorder)
        descriptors += (2).to_bytes(4, sys.byteorder)
        client.sendmsg(
            [len(request).to_bytes(8, "little")],
            [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, descriptors)],
        )
        client.sendall(request)
        replies = _Lines(client)
        word, _, value = replies.next().partition(" ")
    except (OSError, ValueError):
        client.close()
        return None  # no server after all (a stale socket), or a closed standard stream
    return client, replies, word, value


class _Lines:
    """The server's reply lines ("accepted PID", "declined WHY", "exit CODE")."""

    def __init__(self, client) -> None:
        self.client, self.data = client, b""

    def next(self) -> str:
        while b"\n" not in self.data:
            chunk = self.client.recv(256)
            if not chunk:
                break
            self.data += chunk
        line, _, self.data = self.data.partition(b"\n")
        return line.decode(errors="replace").strip()


def _wait_for_exit(client, replies: _Lines, pid: int) -> int:
    import signal

    def interrupt(signum, frame):  # the command stops there; its status still comes here
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)
    try:
        word, _, value = replies.next().partition(" ")
    except OSError:
        word = value = ""
    client.close()
    if word == "exit" and value.lstrip("-").isdigit():
        return int(value)
    print("dpalign: error: the dpalign server ended during the command", file=sys.stderr)
    return 1


def run() -> None:
    """The ``dpalign`` command."""
    code = _handed_over(sys.argv[1:])
    if code is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # nothing of this process's to tear down: the command ran there
    from dpalign.cli import run as run_here

    run_here()


if __name__ == "__main__":
    run()
