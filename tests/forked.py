"""``tfm ARGS`` as the tests run it, without paying for torch's import every time.

Each ``tfm`` process a test starts would first import torch: a second or two of CPU, more than
most commands then take on the tiny corpora here, and the suite starts a few hundred of them. So
each test worker keeps one *preloader*: a process that imports torch and the other slow
libraries and tfm once, then forks a child per command. The child takes the environment it is
given, leads a session of its own, takes the caller's standard streams and working directory,
and runs ``tfm`` as ``python -m tfm`` does: the same program, output and exit status, in a
process that can be signalled, killed and waited for like any other.

Two ways in:
- from a test, ``TfmPopen`` (``subprocess.Popen`` for such a child) and ``run``
  (``subprocess.run``);
- from a script (the recipes), the ``tfm`` of ``tests/bin`` put first on PATH: a small process
  that has the command forked, passes on the signals it gets (SIGINT, SIGTERM, SIGHUP) and ends
  as the command ends, with its status. Its command dies with it, however it ends (kill -9
  included), so a script's process tree behaves as with the real ``tfm``.

A test about how a process starts (the interpreter, an environment variable read before
torch's import) starts a real ``python -m tfm`` instead. The preloader needs Linux (pidfds,
SOCK_SEQPACKET); elsewhere ``popen`` and ``run`` start ``python -m tfm`` as usual.
"""

from __future__ import annotations

import functools
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading

# What a `tfm` command imports, loaded once, in the preloader, before any fork. None of it
# depends on the environment of the command (tfm.cli.app decides its consoles' width in run()).
# Some come late in a command, and cost more than the rest of it on a tiny corpus: torch's
# optimizers import torch._dynamo when the first is made, `tfm train` draws its learning curve
# with matplotlib at the end, and `tfm eval --lc-tok` imports sacremoses (an optional
# dependency: preloaded where it is installed), which compiles its patterns.
PRELOAD = ("torch", "numpy", "datasets", "tokenizers", "safetensors.torch", "sacrebleu", "typer",
           "rich", "tfm.cli", "tfm.data.prepare", "tfm.training.loop", "tfm.decoding.torch_engine",
           "tfm.decoding.engines", "typer.rich_utils", "torch._dynamo", "matplotlib.figure",
           "matplotlib.backends.backend_agg")
OPTIONAL_PRELOAD = ("sacremoses",)
# The environment variable that tells tests/bin/tfm where the preloader listens.
ADDRESS = "TFM_TEST_PRELOADER"
# An environment variable of a command: Python code its child runs before the command (a test
# that stops a run at a given step patches tfm's training loop with it: tests/test_faults.py).
PRELUDE = "TFM_TEST_PRELUDE"
BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")
PRELOADING = sys.platform.startswith("linux")


class Preloader:
    """The process that forks the ``tfm`` children of one test worker (see the module's text)."""

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="tfm-preloader-")
        self.address = os.path.join(self.folder.name, "socket")
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listening.bind(self.address)
        listening.listen(64)
        self.process = subprocess.Popen(
            [sys.executable, __file__, "serve", str(listening.fileno()), str(os.getpid())],
            pass_fds=[listening.fileno()], stdin=subprocess.DEVNULL, start_new_session=True)
        listening.close()
        self.socket = connect(self.address)
        self.lock = threading.Lock()

    def fork(self, argv: list[str], fds: list[int], cwd: str, env: dict[str, str]) -> int:
        """A child running ``tfm argv[1:]`` with ``fds`` as its stdin, stdout, stderr and the
        pipe its wait status is written to; its pid."""
        with self.lock:
            return request(self.socket, {"argv": argv, "cwd": cwd, "env": env}, fds)

    def environment(self, path: str) -> dict[str, str]:
        """What a script's environment needs for its ``tfm`` commands to be forked from this
        preloader: the search path ``path`` with tests/bin first, and the address."""
        return {ADDRESS: self.address, "PATH": f"{BIN}{os.pathsep}{path}"}

    def close(self) -> None:
        self.socket.close()
        self.process.terminate()  # its children are sessions of their own: they go on
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.folder.cleanup()


@functools.cache
def preloader() -> Preloader:
    """This test worker's preloader, started on first use (closed by conftest at the end)."""
    return Preloader()


def connect(address: str) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    connection.connect(address)
    return connection


def request(connection: socket.socket, command: dict, fds: list[int]) -> int:
    socket.send_fds(connection, [json.dumps(command).encode()], fds)
    reply = connection.recv(64)
    if not reply:
        raise RuntimeError("the tfm preloader has gone")
    return int(reply)


class TfmPopen(subprocess.Popen):
    """``subprocess.Popen(["tfm", *args], ...)`` forked from the preloader: every Popen
    option about the standard streams, ``cwd``, ``env``, ``text``, ``communicate``, ``wait``,
    ``poll``, ``send_signal`` and ``kill`` as usual. The child leads a session of its own."""

    def __init__(self, args: list[str], **options) -> None:
        super().__init__(["tfm", *map(str, args)], **options)

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env,
                       startupinfo, creationflags, shell, p2cread, p2cwrite, c2pread, c2pwrite,
                       errread, errwrite, *rest) -> None:
        if preexec_fn is not None or pass_fds or shell:
            raise ValueError("TfmPopen runs tfm alone: no preexec_fn, pass_fds or shell")
        streams = [p2cread, c2pwrite, errwrite]
        streams = [fd if fd != -1 else default for fd, default in zip(streams, (0, 1, 2))]
        self._status, status = os.pipe()
        try:
            self.pid = preloader().fork(
                list(args), [*streams, status], os.fspath(cwd) if cwd else os.getcwd(),
                dict(os.environ if env is None else env))
            self._child_created = True
        finally:
            os.close(status)
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _read_status(self) -> None:
        self.returncode = read_status(self._status, self.pid)

    def _internal_poll(self, _deadstate=None, *_) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self._read_status()
        return self.returncode


def read_status(fd: int, pid: int) -> int:
    """The exit code (negative: the signal that ended it) the preloader wrote to ``fd``."""
    data = os.read(fd, 16)
    os.close(fd)
    if not data:
        raise RuntimeError(f"the tfm preloader went before process {pid} ended")
    return os.waitstatus_to_exitcode(int(data))


def popen(args: list[str], **options) -> subprocess.Popen:
    """``tfm ARGS`` started in a session of its own: forked from the preloader (TfmPopen) where
    there is one, else ``python -m tfm``."""
    if PRELOADING:
        return TfmPopen(args, **options)
    return subprocess.Popen([sys.executable, "-m", "tfm", *map(str, args)],
                            start_new_session=True, **options)


def script_environment(path: str) -> dict[str, str]:
    """What a script's environment needs for its ``tfm`` commands to be forked from this
    worker's preloader (nothing where there is none): see Preloader.environment."""
    return preloader().environment(path) if PRELOADING else {}


def run(args: list[str], *, input: str | bytes | None = None, timeout: float | None = None,
        check: bool = False, **options) -> subprocess.CompletedProcess:
    """``subprocess.run(["tfm", *args], ...)``, started by ``popen``."""
    if input is not None:
        options["stdin"] = subprocess.PIPE
    if options.pop("capture_output", False):
        options["stdout"] = options["stderr"] = subprocess.PIPE
    with popen(args, **options) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


# --- tests/bin/tfm ----------------------------------------------------------------------------

def _client(args: list[str]) -> None:
    """``tfm ARGS`` forked from the preloader at $TFM_TEST_PRELOADER, standing in for it:
    signals passed on, its exit status returned."""
    status, theirs = os.pipe()
    pid = request(connect(os.environ[ADDRESS]),
                  {"argv": ["tfm", *args], "cwd": os.getcwd(), "env": dict(os.environ),
                   "watch": os.getpid()}, [0, 1, 2, theirs])
    os.close(theirs)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, lambda number, _: os.kill(pid, number))
    code = read_status(status, pid)
    if code < 0:  # ended by a signal: so does this process
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


# --- the preloader itself ---------------------------------------------------------------------

def _serve(fd: int, owner: int) -> None:
    """Fork a child for each command that comes in on the socket ``fd``; end with the process
    ``owner`` (the test worker)."""
    listening = socket.socket(fileno=fd)
    owner_ended = os.pidfd_open(owner)
    for name in PRELOAD:
        __import__(name)
    for name in OPTIONAL_PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    _warm_commands()
    # SIGCHLD wakes the loop to reap a child and pass its status on.
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    clients: list[socket.socket] = []
    statuses: dict[int, int] = {}  # pid -> the pipe its wait status goes to
    while True:
        ready = select.select([listening, wake_read, owner_ended, *clients], [], [])[0]
        if owner_ended in ready:
            return
        if wake_read in ready:
            while True:
                try:
                    os.read(wake_read, 512)
                except BlockingIOError:
                    break
        while statuses:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if not pid:
                break
            os.write(statuses[pid], str(status).encode())
            os.close(statuses.pop(pid))
        if listening in ready:
            clients.append(listening.accept()[0])
        for client in [c for c in clients if c in ready]:
            message, fds, _, _ = socket.recv_fds(client, 1 << 20, 4)
            if not message:  # that caller has gone
                clients.remove(client)
                client.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(json.loads(message), fds)
            for stream in fds[:3]:
                os.close(stream)
            statuses[pid] = fds[3]
            client.send(str(pid).encode())


def _warm_commands() -> None:
    """Make what every command would make again before running: the click command of tfm's
    app (tfm.cli.help_layout.App.click_command) and each option's converter, which typer builds
    from the option's type with pydantic on first use (docs/BENCHMARKS.md, the test suite)."""
    from tfm.cli.app import app

    def warm(command) -> None:
        for param in command.params:
            if hasattr(param, "get_runtime_param"):  # typer's own options and arguments
                param.get_runtime_param()
        for sub in getattr(command, "commands", {}).values():
            warm(sub)

    warm(app.click_command)
    # The first picture a process draws loads its fonts: `tfm train` draws its learning curve.
    from tfm.plotting import learning_curve_figure

    records = [{"kind": "train", "step": 1, "loss": 2.0}, {"kind": "valid", "step": 1,
                                                            "loss": 2.0, "bleu": 1.0}]
    learning_curve_figure(records, "warm").savefig(io.BytesIO(), format="png")


def _die_with(pid: int) -> None:
    """Kill this process when process ``pid`` ends (a thread waiting on it)."""
    handle = os.pidfd_open(pid)

    def watch() -> None:
        select.select([handle], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def _child(command: dict, fds: list[int]) -> None:
    """In the forked child: become ``python -m tfm`` with the command's argv; never returns."""
    import atexit
    import runpy
    import traceback

    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        if command.get("watch"):
            _die_with(command["watch"])
        os.chdir(command["cwd"])
        os.environ.clear()
        os.environ.update(command["env"])
        sys.argv = list(command["argv"])
        atexit._clear()  # the preloader's exit handlers are not this program's
        prelude = command["env"].get(PRELUDE)
        if prelude:  # a test's patch of tfm, made in this process before the command runs
            exec(prelude, {"__name__": "tfm_test_prelude"})
        try:
            runpy.run_module("tfm", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            if exit.code is None:
                code = 0
            elif isinstance(exit.code, int):
                code = exit.code
            else:
                print(exit.code, file=sys.stderr)
        except KeyboardInterrupt:  # as Python does: killed by the SIGINT it did not handle
            traceback.print_exc()
            _flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
        _flush()
    finally:
        os._exit(code)


def _flush() -> None:
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        _serve(int(sys.argv[2]), int(sys.argv[3]))
    else:
        _client(sys.argv[2:])
