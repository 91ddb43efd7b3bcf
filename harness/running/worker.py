"""Run the target in a child process, so that a crash or a hang is a reported failure and not
the end of the run.

The parent (pytest, the gate, the fuzzer) sends (law, case) requests; the child builds and
imports the target once, runs each law and answers with a verdict. A child that dies, breaks
its CUDA context or outlives the time limit is replaced by a fresh one; after a CUDA error that
left the context usable, the child carries on.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import traceback
from dataclasses import dataclass, field

from harness.running.spec import TargetSpec
import sys
import threading
import socket
from multiprocessing import connection, forkserver, resource_tracker, util
from harness.running import interrupts

DEFAULT_TIMEOUT_S = float(os.environ.get("RMSNORM_CASE_TIMEOUT", "120"))
# Targets whose calls may legitimately take longer than DEFAULT_TIMEOUT_S (unless
# RMSNORM_CASE_TIMEOUT says otherwise): torch.compile compiles afresh for each new dtype, layout
# and shape class, forward and backward; on the H200, with four gate sessions side by side, one
# such case took more than 120 s.
SLOW_TARGETS_S = {TargetSpec("peer", "compiled"): 900.0}


THREADS_ENV = "RMSNORM_CPU_THREADS"  # torch's CPU threads in the target's worker process
SHARERS_ENV = "RMSNORM_PROCESSES"  # processes of one run judging side by side (a fuzz campaign's workers)


def cpu_threads() -> int | None:
    """torch's CPU threads for this process's target worker: RMSNORM_CPU_THREADS when set; else,
    when K processes judge side by side (pytest-xdist's workers, a fuzz campaign's), the cores
    divided among them. Each would otherwise start a thread per core, and K times the cores'
    threads spinning against each other made `gate -n 2` on 2 cores take 40 s against 19 s
    without -n; one thread each, 17 s."""
    v = os.environ.get(THREADS_ENV, "")
    if v:
        if not v.isdigit() or int(v) < 1:
            raise ValueError(f"{THREADS_ENV}: expected a whole number >= 1, but got {v!r}")
        return int(v)
    k = os.environ.get("PYTEST_XDIST_WORKER_COUNT") or os.environ.get(SHARERS_ENV) or "1"
    return share_of_cores(int(k) if k.isdigit() else 1)


def share_of_cores(processes: int) -> int | None:
    """torch's CPU threads for each of `processes` judging side by side (None: one process, torch's own)."""
    return max(1, (os.cpu_count() or 1) // processes) if processes > 1 else None


def case_timeout_for(spec: TargetSpec) -> float:
    """How long one call of the target may take before it counts as a hang."""
    if "RMSNORM_CASE_TIMEOUT" in os.environ:
        return DEFAULT_TIMEOUT_S
    return SLOW_TARGETS_S.get(spec, DEFAULT_TIMEOUT_S)


LOAD_TIMEOUT_S = float(os.environ.get("RMSNORM_LOAD_TIMEOUT", "1800"))
# Workers kept loading in the background once a target has crashed: shrinking a crash restarts
# the worker at every step, faster than one worker can load.
SPARE_WORKERS = int(os.environ.get("RMSNORM_SPARE_WORKERS", "1"))
START_METHODS = ("forkserver", "spawn")
# What the fork server imports once (torch, the laws), so that a worker forked from it starts
# without importing torch again; harness.running.forkserver_preload ignores Ctrl-C first. None of it touches CUDA
# on import: each worker initialises CUDA itself.
_PRELOAD = ["harness.running.forkserver_preload"]


def start_method() -> str:
    """How worker processes start: RMSNORM_WORKER_START when set; else "forkserver": forked from
    a server that has imported torch (but not initialised CUDA), so a restart after a crash does
    not import torch again (benchmarks/worker_restart-*.txt). "spawn" starts a fresh interpreter."""
    v = os.environ.get("RMSNORM_WORKER_START", "")
    if v and v not in START_METHODS:
        raise ValueError(f"RMSNORM_WORKER_START: expected one of {START_METHODS}, but got {v!r}")
    v = v or "forkserver"
    return v if v in mp.get_all_start_methods() else "spawn"


# "0": a CPU run's fork server is a fresh interpreter, as a CUDA run's is (start_fork_server_here).
FORK_HERE_ENV = "RMSNORM_FORK_SERVER_HERE"
# The Pythons whose fork server start_fork_server_here knows (3.14 adds an authentication key to it).
_FORK_HERE_PYTHONS = ((3, 10), (3, 11), (3, 12), (3, 13))


def start_fork_server_here() -> bool:
    """Start multiprocessing's fork server as a fork of this process, which has imported torch and
    the laws, instead of a fresh interpreter that imports them again (about 2 s of CPU for each gate
    or fuzz session, and their wait for the first worker). For runs on the CPU only, called by the
    command line before anything has run here: no thread but this one, no CUDA touched (a fork after
    either is unsafe), nothing computed (a fork after torch's OpenMP threads started is too). The server
    then does what harness.running.forkserver_preload does in a fresh one: ignores Ctrl-C, keeps freed memory and
    freezes what the imports made. Returns whether it started one; where it did not (another start
    method, FORK_HERE_ENV=0, a thread running, a Python whose fork server this does not know, a server
    already running), the first worker starts the usual server."""
    if start_method() != "forkserver" or os.environ.get(FORK_HERE_ENV, "1") == "0":
        return False
    if sys.version_info[:2] not in _FORK_HERE_PYTHONS or threading.active_count() > 1:
        return False

    server = getattr(forkserver, "_forkserver", None)
    if server is None or not all(hasattr(server, a) for a in ("_lock", "_forkserver_pid", "_forkserver_address",
                                                                "_forkserver_alive_fd")):
        return False
    import torch  # noqa: F401  (what every worker needs, imported once here)

    import harness.judging.laws  # noqa: F401

    with server._lock:
        if server._forkserver_pid is not None:
            return False
        resource_tracker.ensure_running()
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()  # every client holds the write end: the server ends when all have
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
            pid = os.fork()
            if pid == 0:  # the server: it never returns into the run's code
                code = 0
                try:
                    os.close(alive_w)
                    signal.signal(signal.SIGINT, signal.SIG_IGN)
                    signal.signal(signal.SIGTERM, signal.SIG_DFL)
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    from harness.running.heap import keep_freed_memory, freeze_imported_objects  # the server's own

                    keep_freed_memory()
                    freeze_imported_objects()
                    forkserver.main(listener.fileno(), alive_r, [])
                except SystemExit:  # the clients are gone (its normal end)
                    pass
                except BaseException:  # noqa: BLE001
                    traceback.print_exc()
                    code = 1
                finally:
                    os._exit(code)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            os.close(alive_r)
            server._forkserver_address = address
            server._forkserver_alive_fd = alive_w
            server._forkserver_pid = pid
    return True


def start_cpu_fork_server() -> bool:
    """Where the run's workers run on the CPU (harness.running.loading.default_device), their fork server is a
    fork of this process (start_fork_server_here): the gate's and fuzz's command line and the pytest
    plugin call it before anything else runs."""
    from harness.running.loading import default_device  # torch's: this module stays light for a worker's start
    return default_device() == "cpu" and start_fork_server_here()


def context():
    """The multiprocessing context workers start in (start_method()); the fork server, when it is
    one, preloads torch and the laws."""
    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)  # takes effect when the server first starts
    return ctx


def _tell(conn, msg) -> None:
    """Send to the parent; if it is gone (interrupted, killed), end quietly: nobody is listening."""
    try:
        conn.send(msg)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        os._exit(0)


def _child(conn, spec: str, device: str, strict: bool | None, env: dict | None = None, crumb=None) -> None:
    """The worker process: load the target, then answer requests until told to stop. crumb:
    shared memory where each call into the target is named while it runs, so that the parent
    can say which call a dying worker was in."""
    # Imported here, in this order: a worker ignores Ctrl-C before anything slow (torch) is imported, keeps
    # freed memory before it allocates, and takes the parent's environment before it reads any of it.
    import faulthandler
    import signal

    # Ctrl-C is the parent's to handle (it stops this worker, and records nothing of the case in
    # progress): a worker that died of it would look like a crash of the target (a terminal's
    # Ctrl-C reaches the whole process group).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from harness.running.heap import keep_freed_memory

    keep_freed_memory()  # a spawned worker's own heap (a forked one has its server's already)
    if env is not None:  # a forked worker has its server's environment: take the parent's
        os.environ.clear()
        os.environ.update(env)
    faulthandler.enable()  # a crash prints the Python stack of where it happened
    spec = TargetSpec.parse(spec)
    # Triton code on the CPU runs under Triton's interpreter: set here, in the target's own process and
    # before it is imported (triton.jit reads it when a kernel is decorated), never in the run's.
    interpreted = spec.interpreted(device)
    if interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    import warnings

    # Warnings the target or torch raise while they are judged (gradcheck's, a compiler's) would land
    # in the middle of the run's progress; the verdicts say what matters.
    warnings.simplefilter("ignore")
    import torch  # noqa: F401  (import before the target, whose module needs it)

    threads = os.environ.get(THREADS_ENV)  # set by Session.runner when processes share the cores
    if threads:
        torch.set_num_threads(int(threads))

    from harness.judging import target as tgt
    from harness.running.loading import load
    from harness.judging.cases import Case

    tgt.BREADCRUMB = crumb

    try:
        t = load(spec, device, strict)
    except BaseException as e:  # noqa: BLE001
        _tell(conn, {"status": "load_error", "message": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"})
        return
    interp = None
    probe: dict = {}
    if interpreted:
        from harness.running import interpreter as interp

        t.interpreted = True
        try:
            interp.install()  # for the worker's life
        except (ImportError, ValueError) as e:
            _tell(conn, {"status": "load_error", "message": f"{type(e).__name__}: Triton's interpreter: {e}"})
            return
    from harness.judging.contract import Contract, from_env, from_module

    try:
        declared = from_module(t.module)
        if declared is not None:
            Contract.from_dict(declared, f"declared by {spec}")
    except (TypeError, ValueError) as e:
        _tell(conn, {"status": "load_error", "message": f"{type(e).__name__}: the target's RMSNORM_CONTRACT: {e}"})
        return
    if interp is not None:
        probe = interp.probe(t, declared if from_env() is None else from_env().to_dict())
        t.not_judged = dict(probe["not_judged"])
        t.calls = []
    _tell(conn, {"status": "ready", "note": t.note, "strict": t.strict, "has_backward": t.has_backward,
               "grads_by_autograd": t.grads_by_autograd,
               "contract": declared,
               "has_ops": t.has_ops, "device": str(t.device),
               "gpu": torch.cuda.get_device_name(t.device) if t.is_cuda else None,
               "interpreted": interpreted, "interpreter": probe})
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req is None:
            return
        law, case_d, kw = req
        case = Case.from_dict(case_d)
        t.calls = []
        if interp is not None:
            interp.SEEN.clear()
        try:
            facts = _run_law(t, law, case, kw)
            reply = {"status": "pass", "facts": facts}
        except tgt.NotJudged as e:
            reply = {"status": "not_judged", "message": str(e), "facts": {"dtype": e.dtype}}
        except tgt.CannotInterpret as e:
            reply = {"status": "cannot_interpret", "message": str(e)}
        except tgt.Rejected as e:
            if t.strict:
                reply = {"status": "fail", "message": f"{e}\n  (an input inside the contract was rejected; this "
                                                      f"target must support it)\n  case: {case.short()}"}
            else:
                reply = {"status": "rejected", "message": str(e)}
        except tgt.LawFailure as e:
            reply = {"status": "fail", "message": str(e)}
        except tgt.Crashed as e:
            reply = {"status": "crash", "message": f"{e}\n  case: {case.short()}"}
        except tgt.NotApplicable as e:
            reply = {"status": "not_applicable", "message": str(e)}
        except tgt.NoRoom as e:
            reply = {"status": "no_room", "message": str(e)}
        except BaseException as e:  # noqa: BLE001 - a fault of the harness, reported as such
            if t.is_cuda and tgt._CUDA_ERROR.search(str(e)):
                # A CUDA error surfacing in the harness's own work was left behind by the target.
                reply = {"status": "crash", "message": f"a CUDA error surfaced after the target ran: "
                                                       f"{str(e).strip().splitlines()[0]}\n  case: {case.short()}"}
            else:
                reply = {"status": "error", "message": f"{type(e).__name__}: {e}\n{traceback.format_exc()}"}
        if interp is not None and interp.SEEN and reply["status"] in ("pass", "fail"):
            # The kernel computed on bfloat16 values, which the interpreter does on their bits: whatever
            # came out says nothing of the kernel. Not judged, and its bfloat16 calls are not made again.
            why = interp.bfloat16_not_judged(interp.SEEN[0])
            t.not_judged.setdefault("bfloat16", why)
            reply = {"status": "not_judged", "message": why, "facts": {"dtype": "bfloat16"}}
        reply.setdefault("facts", {})["calls"] = t.calls  # how long each call into the target took
        if reply["status"] == "crash":
            # A CUDA error that was not sticky (an empty grid's launch error) leaves the context
            # usable: carry on. Otherwise the parent starts a fresh worker.
            reply["kept"] = t.is_cuda and t.context_usable()
        _tell(conn, reply)
        if reply["status"] == "crash" and not reply["kept"]:
            return


# How long a case that ran out of GPU memory waits, in all, for other processes on the GPU to free some
# (a kernel lane's mutate judges and sanitizer runs, a user's training job), well inside the hang limit.
# On an 80 GB H100 four mutants were once "killed" by an out-of-memory error that their kept case met
# while a case past 2^31 elements held the card; on the original the same case passed later.
MEMORY_WAIT_S = float(os.environ.get("RMSNORM_MEMORY_WAIT", "40"))
MEMORY_STEP_S = 4.0


def _run_law(t, law: str, case, kw: dict, sleep=time.sleep):
    """laws.run_law, run again while it runs short of GPU memory, at most MEMORY_WAIT_S: the machine's state,
    never the target's verdict. Still short after that: NoRoom (the law is not run on this GPU, and the
    report says so), never a failure, a crash or a refusal."""
    from harness.judging import laws, target as tgt

    if not t.is_cuda:
        return laws.run_law(t, law, case, **kw)
    import torch

    def release(_error, _waited):
        try:
            torch.cuda.synchronize(t.device)
            torch.cuda.empty_cache()
        except RuntimeError:
            pass

    total = torch.cuda.get_device_properties(t.device).total_memory
    try:
        return tgt.run_while_short_of_memory(lambda: laws.run_law(t, law, case, **kw), total=total,
                                             wait_s=MEMORY_WAIT_S, step_s=MEMORY_STEP_S, sleep=sleep,
                                             before_wait=release)[0]
    except BaseException as e:  # noqa: BLE001 - only a shortage that outlasted the wait is turned
        if not tgt.short_of_memory(e, total):
            raise
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise tgt.NoRoom(f"out of GPU memory, still after waiting {MEMORY_WAIT_S:.0f} s for other processes on "
                         f"this GPU to free some: {first}") from None


def _poll(conn, timeout_s: float) -> bool:
    """conn.poll(timeout_s) in slices: Python runs a signal's handler (Ctrl-C's KeyboardInterrupt)
    only when the main thread returns to it, and a signal delivered to another thread (torch's, the
    progress line's) does not wake a select() that waits for the whole timeout."""
    end = time.monotonic() + timeout_s
    while True:
        interrupts.check()
        remaining = end - time.monotonic()
        if remaining <= 0:
            return False
        if conn.poll(min(remaining, 0.2)):
            return True


class HarnessError(RuntimeError):
    """The suite itself could not run (target failed to build or load, a bug in a law)."""


@dataclass
class Verdict:
    status: str  # pass | rejected | fail | crash | hang | not_applicable | no_room | cut_short | not_judged
    #              | cannot_interpret (Triton's interpreter: harness.judging.target.NotJudged, CannotInterpret)
    message: str = ""
    facts: dict = field(default_factory=dict)
    seconds: float = 0.0


class Runner:
    """A worker process for one target on one device, restarted after crashes and hangs."""

    def __init__(self, spec: TargetSpec, device: str, *, strict: bool | None = None, timeout_s: float | None = None,
                 env: dict | None = None) -> None:
        self.spec = TargetSpec.parse(spec)  # a spec, or what a script or test wrote for one
        self.device = device
        self.strict = strict
        self.timeout_s = timeout_s if timeout_s is not None else case_timeout_for(self.spec)
        self.env = env or {}
        self.info: dict = {}
        self.restarts = 0
        self.kept_after_crash = 0  # crashes after which the worker carried on (context usable)
        self._proc = None
        self._conn = None
        self._crumb = None
        self._spares: list = []

    def _spawn(self):
        """Start a worker process; it loads the target on its own. Returns (process, connection,
        breadcrumb)."""
        ctx = context()
        parent, child = ctx.Pipe()
        crumb = ctx.Array("c", 512, lock=False)
        old = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)  # a spawned worker starts with this environment
        # Ctrl-C is blocked while the worker (and, the first time, the fork server, which imports
        # torch before it ignores Ctrl-C itself) is started: the new process inherits the block and
        # never dies of it, and a Ctrl-C meanwhile waits here until the block is lifted.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            proc = ctx.Process(target=_child, args=(child, self.spec, self.device, self.strict, dict(os.environ),
                                                    crumb), daemon=True)
            proc.start()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child.close()
        return proc, parent, crumb

    def start(self) -> dict:
        if self._spares:
            # A crash or hang happened before: spare workers have been loading meanwhile.
            self._proc, self._conn, self._crumb = self._spares.pop(0)
        else:
            self._proc, self._conn, self._crumb = self._spawn()
        parent = self._conn
        if self.restarts:
            while len(self._spares) < SPARE_WORKERS:
                self._spares.append(self._spawn())
        try:
            loaded = _poll(parent, LOAD_TIMEOUT_S)
        except BaseException:  # Ctrl-C while the target loads: the worker goes too
            self.stop()
            raise
        if not loaded:
            self.stop()
            raise HarnessError(f"target {self.spec!r} did not load within {LOAD_TIMEOUT_S:.0f} s")
        try:
            msg = parent.recv()
        except EOFError:
            code = self._proc.exitcode
            raise HarnessError(f"worker for target {self.spec!r} died while loading it (exit code {code})") from None
        if msg["status"] != "ready":
            self.stop()
            raise HarnessError(f"target {self.spec!r} could not be loaded:\n{msg['message']}")
        self.info = msg
        return msg

    def stop(self) -> None:
        while self._spares:
            proc, conn, _ = self._spares.pop()
            proc.kill()
            proc.join()
            conn.close()
        if self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        if self._proc is not None:
            # An idle worker ends at once; one still in a case (the run was interrupted) is killed.
            self._proc.join(timeout=1)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join()
        self._proc = self._conn = None

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._proc = self._conn = None

    def _restart(self) -> None:
        self._kill()
        self.restarts += 1
        self.start()

    def _last_call(self) -> str:
        """Which call into the target the dead worker was in, and whether this machine's
        toolchain is known to crash there (rmsnorm._toolchain)."""
        try:
            what = self._crumb.value.decode(errors="replace") if self._crumb is not None else ""
        except (OSError, ValueError):
            what = ""
        if not what:
            return ", outside any call into the target"
        out = f", in the call: {what}"
        from rmsnorm import _toolchain as toolchain  # torch's: only once a worker has died

        if "bad input" in what and toolchain.faulty():
            out += ("; this machine's toolchain crashes when an extension formats a number in a TORCH_CHECK "
                    "message (see the 'toolchain:' line), so this is a toolchain fault as well as a failure")
        return out

    def check(self, law: str, case, timeout_s: float | None = None, deadline: float | None = None,
              **kw) -> Verdict:
        """Run one law on one case in the worker. deadline (epoch seconds): the run's wall-time
        budget; a case still running then is cut short (the worker is stopped, and started again
        only if another case comes), not failed."""
        if self._proc is None:
            self.start()
        limit = timeout_s or self.timeout_s
        if not timeout_s and self.info.get("interpreted") and "RMSNORM_CASE_TIMEOUT" not in os.environ:
            # Under Triton's interpreter a call costs what the worker measured, not the compiled speed.
            from harness.running.interpreter import case_limit

            limit = case_limit((self.info.get("interpreter") or {}).get("speed"), case.rows, case.n, limit)
        cut = deadline is not None and deadline - time.time() < limit
        if cut:
            limit = max(deadline - time.time(), 0.0)
        t0 = time.perf_counter()
        try:
            self._conn.send((law, case.to_dict(), kw))
            ready = _poll(self._conn, limit)
            if not ready:
                if cut:
                    self._kill()
                    return Verdict("cut_short", f"{law} was still running when the wall-time budget ran out\n"
                                                f"  case: {case.short()}", seconds=time.perf_counter() - t0)
                self._restart()
                return Verdict("hang", f"the target did not finish {law} within {limit:.0f} s\n  case: {case.short()}",
                               seconds=time.perf_counter() - t0)
            reply = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            code = self._proc.exitcode if self._proc is not None else None
            if self._proc is not None:
                self._proc.join(timeout=5)
                code = self._proc.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            message = f"the worker process died during {law} ({how}){self._last_call()}\n  case: {case.short()}"
            self._restart()
            return Verdict("crash", message, seconds=time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        status = reply["status"]
        if status == "crash":
            if reply.get("kept"):
                self.kept_after_crash += 1
            else:
                self._restart()
        if status == "error":
            raise HarnessError(f"law {law} failed inside the harness:\n{reply['message']}")
        return Verdict(status, reply.get("message", ""), reply.get("facts", {}), dt)


def lane_of(device: str) -> str:
    return "CUDA" if device.startswith("cuda") else "CPU"
