"""How every cluster of this package ends: one piece of code, whatever ends the process.

Every cluster kind (:class:`~hybrid.HybridCluster`, the gateway's
:class:`~hybrid.gateway.HTCGatewayCluster`, the openff-evaluator-style backends; synchronous
and asynchronous) registers its ending here once, when it starts, and reports here when it is
closed. What ends the process then ends the clusters the same way:

- ``close()`` (or leaving the ``with`` block): the cluster's own close; nothing else.
- a script that ends without ``close()``: the open clusters are closed *before* Python shuts
  down the thread pools and event loops their closing needs (a
  ``threading._register_atexit`` hook, which runs before ``concurrent.futures``' own), newest
  first;
- Ctrl-C (``KeyboardInterrupt`` that nobody catches): the open clusters are closed and one
  line per cluster says so, instead of a traceback; a second Ctrl-C while they close says
  what is being waited for, a third one stops waiting (``hybrid gc`` finds what is left);
- SIGTERM (what batch systems and Kubernetes send): the open clusters are closed at once,
  one line per cluster says so, and the process then ends as SIGTERM ends it (status 143 in
  a shell). Only while a cluster is open, and only where nobody else handles SIGTERM
  (``hybrid.lifecycle.sigterm``). With an asynchronous cluster open, SIGTERM raises
  :class:`Terminated` (a ``SystemExit``, status 143) instead, so that the event loop ends
  and closes it;
- SIGHUP (the terminal or ssh session of a script on a submit node closed): the same, with
  status 129; not where it is ignored (``nohup``, ``setsid``'s daemons) or handled, nor with
  ``hybrid.lifecycle.sighup: false``;
- an asynchronous cluster left open when ``asyncio.run`` ends: closed on its loop when the
  loop cancels its remaining tasks, before the loop closes.

Whichever of the process's threads the kernel gives such a signal, the main thread handles
it at once: CPython only sets a flag where the signal lands, and a main thread asleep in one
long call (the user's ``time.sleep(600)``, a lock, a socket) would run the handler only when
that call returns. While hybrid's handlers are in place, a thread of its own (``_Waker``)
hears every signal through ``signal.set_wakeup_fd`` and then wakes the main thread with
SIGWINCH, whose handler does nothing (the interrupted call goes on, as PEP 475 has it, after
the pending handlers ran).

A process killed outright (SIGKILL, a notebook kernel restart) runs none of this: a gateway
cluster is then reclaimed by the server (``client_timeout`` counts hybrid's client heartbeat,
``idle_timeout``), and batch jobs stop with their scheduler (their workers' death timeout) or
are found by ``hybrid gc``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread  # noqa: F401  its exit hook first: ours then runs before it
import contextlib
import os
import queue
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from hybrid import config
from hybrid.errors import ClusterClosed
from hybrid.quiet_logs import hush_ended_gathers

__all__ = ["ClusterClosed", "Ending", "Terminated", "closed_error", "end_all", "open_endings",
           "outcome", "read_on_loop", "register", "sync", "terminating"]

#: Exit status of a process ended by SIGTERM (128 + 15, as a shell reports it).
SIGTERM_STATUS = 128 + signal.SIGTERM
INTERRUPTED = "interrupted (Ctrl-C)"
TERMINATED = "terminated (SIGTERM)"
HUNG_UP = "hung up (SIGHUP: its terminal closed)"
#: The signals that end the process after closing the open clusters: why, and the setting
#: that turns each off.
_ENDING_SIGNALS: dict[int, tuple[str, str]] = {signal.SIGTERM: (TERMINATED, "lifecycle.sigterm")}
if hasattr(signal, "SIGHUP"):
    _ENDING_SIGNALS[signal.SIGHUP] = (HUNG_UP, "lifecycle.sighup")


class Terminated(SystemExit):
    """SIGTERM (or SIGHUP) arrived: the process ends as on ``sys.exit(143)`` (129) with no
    traceback, after the open clusters are closed."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class Ending:
    """One registered cluster: how to close it, and whether it is still open.

    Made by :func:`register`. The owner is held weakly, as dask-gateway holds its clusters:
    one that its user dropped is collected where nothing else holds it, and its own
    ``__del__`` ends it then. A running ``HybridCluster`` is held by distributed's own tasks
    on its loop: dropped, it stays open until the process ends, when the exit hook closes it.
    """

    def __init__(self, label: str, close: Callable[[], Any], asynchronous: bool) -> None:
        self.label = label
        self._close: weakref.WeakMethod | None = weakref.WeakMethod(close)  # type: ignore
        self.asynchronous = asynchronous
        self.pid = os.getpid()
        self.open = True
        self._guard: asyncio.Task | None = None
        self._said_before: int | None = None

    @contextlib.contextmanager
    def closing(self) -> Iterator[None]:
        """Around the owner's synchronous close: see :func:`closing`. (A line another
        cluster printed meanwhile, e.g. the cluster a backend closes, is the one said.)"""
        if self._said_before is None:
            self._said_before = _said_count
        with closing():
            yield

    def finished(self, error: BaseException | None = None, note: str = "") -> None:
        """The owner's close ended (called once by its close, whatever the path).

        When the process is interrupted, terminated or exiting, one line says how it ended
        (``note``: how it ended, e.g. ``"closed, 2 job(s) removed"``; a failure's message
        names what is left). A failed ``close()`` that the caller sees raise prints
        nothing: its exception says it.
        """
        if not self.open:
            return
        self.open = False
        self._close = None
        _forget(self)
        guard, self._guard = self._guard, None
        if guard is not None and not guard.done():
            with contextlib.suppress(RuntimeError):  # its loop is already closed
                guard.get_loop().call_soon_threadsafe(guard.cancel)
        why = _why_now()
        if isinstance(error, KeyboardInterrupt):  # asked again: it stopped waiting
            _say(f"{why or INTERRUPTED}: stopped waiting for {self.label} to close; `hybrid "
                 "status` lists what is left, `hybrid gc` removes it.")
        elif error is not None:
            if why is not None:
                _say(f"{why}: closing {self.label} failed: {error}")
        elif why in (INTERRUPTED, TERMINATED, HUNG_UP) and (  # a normal exit closes quietly
                self._said_before is None or self._said_before == _said_count):
            _say(f"{why}: {self.label} {note or 'closed'}.")

    async def guard(self) -> None:
        """For an asynchronous owner, from a coroutine on its loop: close it on that loop when
        the loop cancels its remaining tasks (``asyncio.run`` does, before it closes the loop)."""
        if self._guard is None and self.open:
            self._guard = asyncio.ensure_future(self._watch())

    async def _watch(self) -> None:
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            close = self._close() if self._close is not None else None
            if close is not None and self.open:
                global _exiting
                previous, _exiting = _exiting, _exiting or "at the end of the event loop"
                try:
                    await close()
                except Exception as error:
                    self.finished(error)
                finally:
                    _exiting = previous


_lock = threading.RLock()
_endings: list[Ending] = []
_installed = False
#: What each ending signal did before hybrid's handler (while one is installed).
_previous_handlers: dict[int, Any] = {}
_previous_excepthook: Any = None
_exiting: str | None = None  # why the process is ending, once it is
_reported = False  # a line was printed for an interruption: the traceback is left out
_said_count = 0
_closing_depth = 0
_waker: _Waker | None = None


def register(label: str, close: Callable[[], Any], *, asynchronous: bool = False) -> Ending:
    """Register an open cluster (``label``, e.g. ``"cluster hybrid-1a2b"``) and its close
    method (``close()`` for a synchronous owner; a coroutine function for an asynchronous
    one, which also calls :meth:`Ending.guard` on its loop). The owner calls
    :meth:`Ending.finished` when it is closed."""
    ending = Ending(label, close, asynchronous)
    with _lock:
        _endings.append(ending)
        _install()
    hush_ended_gathers()  # a close under a client's gather leaves its waits' noise
    return ending


def open_endings() -> list[Ending]:
    """The registered clusters not closed yet, oldest first (this process's only)."""
    with _lock:
        for ending in [e for e in _endings if e._close is None or e._close() is None]:
            _forget(ending)  # its owner was collected (its own __del__ ended it, if any)
        return [e for e in _endings if e.open and e.pid == os.getpid()]


def terminating() -> bool:
    """Whether SIGTERM is ending the process: its handler closes the clusters at whatever
    point it interrupted the main thread, so a close then leaves the event loops running
    (the process ends with them): stopping one takes ``distributed``'s loop lock, which the
    interrupted code may hold (a Client starting its loop)."""
    return _exiting in (TERMINATED, HUNG_UP)


def closed_error(label: str, fix: str, kind: type[ClusterClosed] = ClusterClosed) -> ClusterClosed:
    """The one error every call on a closed cluster raises: it is closed, and what to do
    (``kind``: a subclass, such as the gateway cluster's)."""
    return kind(f"{label} is closed: {fix}")


def end_all(why: str) -> None:
    """Close every open synchronous cluster, newest first; a line per problem (and, when the
    process is interrupted or terminated, a line per cluster). Never raises."""
    global _exiting
    _exiting = _exiting or why
    for ending in reversed(open_endings()):
        close = ending._close() if ending._close is not None else None
        if ending.asynchronous or close is None:
            continue  # its loop closes it (Ending.guard); no other thread may drive it
        try:
            with ending.closing():
                close()
        except BaseException as error:
            ending.finished(error)
            if isinstance(error, KeyboardInterrupt):
                break  # asked to stop waiting: `hybrid gc` finds what is left
        else:
            ending.finished()  # (nothing more when the owner reported already)


@contextlib.contextmanager
def closing() -> Iterator[None]:
    """Around a synchronous close: a Ctrl-C (or SIGTERM) while it runs does not cut it short.
    The first is answered by one line saying what is waited for, and goes on once the close
    is done (the script is interrupted, the process terminated), unless the process is
    ending already; the next one interrupts the close."""
    global _closing_depth
    main = threading.current_thread() is threading.main_thread()
    previous: dict[int, Any] = {}
    pressed: list[int] = []  # the signals that came while it closed
    if main and _closing_depth == 0:

        def patience(signum: int, frame: Any) -> None:
            pressed.append(signum)
            if len(pressed) > 1:  # asked again: stop waiting
                if signum in _ENDING_SIGNALS:
                    signal.signal(signum, signal.SIG_DFL)
                    os.kill(os.getpid(), signum)
                raise KeyboardInterrupt
            _say("still closing: removing the cluster's jobs (at most a minute). Press "
                 "Ctrl-C again to stop waiting; `hybrid gc` then finds what is left.")

        # only where the signal does what Python does by default (or hybrid's handler)
        defaults = {signal.SIGINT: (signal.default_int_handler,),
                    **{number: (signal.SIG_DFL, _on_ending_signal)
                       for number in _ENDING_SIGNALS}}
        for number, ours in defaults.items():
            with contextlib.suppress(ValueError, OSError):
                if signal.getsignal(number) in ours:
                    previous[number] = signal.signal(number, patience)
    _closing_depth += 1
    try:
        yield
    finally:
        _closing_depth -= 1
        for number, handler in previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(number, handler)
        if previous:
            _release_signals()
    if len(pressed) == 1 and _exiting is None:  # the close is done: the signal goes on
        if pressed[0] not in _ENDING_SIGNALS:
            raise KeyboardInterrupt
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os.kill(os.getpid(), pressed[0])  # (its own handler again, or its default)


def sync(loop: Any, function: Callable[..., Any], *args: Any,
         callback_timeout: float | None = None, **kwargs: Any) -> Any:
    """Run ``function(*args, **kwargs)`` (a coroutine function) on ``loop`` (a Tornado
    ``IOLoop`` running in another thread) and wait for it; on any interruption of the wait
    (Ctrl-C, :class:`Terminated`), the coroutine is cancelled before the interruption goes
    on, so nothing keeps running on the loop behind the caller's back.

    The wait holds no lock that the loop's thread needs to hand the result over (a
    ``queue.SimpleQueue``, whose ``put`` never blocks): a signal handler that interrupts it
    and waits on the same loop (SIGTERM closing the open clusters) cannot deadlock, as it
    could inside a ``concurrent.futures`` result or a ``threading.Event`` wait.
    """
    asyncio_loop = loop.asyncio_loop
    if asyncio_loop.is_closed():
        raise RuntimeError("IOLoop is closed")
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is asyncio_loop:
        raise RuntimeError("sync() called from thread of running loop")

    handed: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
    state: dict[str, Any] = {"task": None, "cancelled": False}

    async def call() -> None:
        try:
            if callback_timeout is not None:
                result = await asyncio.wait_for(function(*args, **kwargs), callback_timeout)
            else:
                result = await function(*args, **kwargs)
        except BaseException as error:  # (a cancelled call's error is read by nobody)
            handed.put((False, error))
        else:
            handed.put((True, result))

    def start() -> None:  # (start and cancel run on the loop's thread, in this order)
        if not state["cancelled"]:
            state["task"] = asyncio_loop.create_task(call())

    def cancel() -> None:
        state["cancelled"] = True
        if state["task"] is not None:
            state["task"].cancel()

    asyncio_loop.call_soon_threadsafe(start)
    try:
        while True:
            # (in turns: a signal the kernel gave another of the process's threads only
            # sets Python's flag, and the main thread runs its handler, Ctrl-C's
            # KeyboardInterrupt included, once it wakes; distributed's sync waits so too)
            try:
                ok, value = handed.get(timeout=0.5)
                break
            except queue.Empty:
                continue
    except BaseException:
        with contextlib.suppress(RuntimeError):  # its loop is closed: nothing runs on it
            asyncio_loop.call_soon_threadsafe(cancel)
        raise
    if ok:
        return value
    try:
        raise value
    finally:
        value = None  # (no reference cycle through the traceback)


def read_on_loop(read: Callable[[], Any], sync: Callable[..., Any], on_loop_now: bool) -> Any:
    """``read()`` run on the event loop whose tasks change what it reads, so that it never
    sees half of a change (a pool refresh applies each at once there); ``sync``: the
    object's own (its caller waits); ``on_loop_now``: the caller is on that loop already."""
    if on_loop_now:
        return read()

    async def on_its_loop() -> Any:
        return read()

    return sync(on_its_loop)


async def outcome(future: asyncio.Future, timeout: float) -> Any:
    """``future``'s result, waited for up to ``timeout`` s even while the caller is being
    cancelled (again): ``None`` if it fails or does not finish in time."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not future.done():
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            return None
        try:
            await asyncio.wait([future], timeout=left)
        except asyncio.CancelledError:
            continue
    if future.cancelled() or future.exception() is not None:
        return None
    return future.result()


# ---------------------------------------------------------------------- the process's hooks
def _install() -> None:
    """Hook the process's ending once: before the thread pools shut down, SIGTERM and SIGHUP
    (where they still do what they do by default), and an uncaught Ctrl-C."""
    global _installed, _previous_excepthook
    if not _installed:
        _installed = True
        try:
            threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):  # another Python, or already shutting down
            import atexit

            atexit.register(_at_exit)
        _previous_excepthook = sys.excepthook
        sys.excepthook = _excepthook
        os.register_at_fork(after_in_child=_forget_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for number, (_, setting) in _ENDING_SIGNALS.items():
        if number in _previous_handlers or not config.get(setting, True):
            continue
        with contextlib.suppress(ValueError, OSError):
            if signal.getsignal(number) == signal.SIG_DFL:  # (not nohup's SIG_IGN)
                _previous_handlers[number] = signal.signal(number, _on_ending_signal)
    global _waker
    if _previous_handlers and _waker is None:
        _waker = _Waker.start()


def _forget(ending: Ending) -> None:
    with _lock:
        if ending in _endings:
            _endings.remove(ending)
        _release_signals()


def _release_signals() -> None:
    """No cluster open any more: SIGTERM and SIGHUP do again what they did before the first
    one (inside :func:`closing`, whose own handler is in place, its end does this)."""
    with _lock:
        if _endings or not _previous_handlers or _exiting is not None:
            return
        if threading.current_thread() is not threading.main_thread():
            return
        for number, previous in list(_previous_handlers.items()):
            if signal.getsignal(number) is _on_ending_signal:
                signal.signal(number, previous)
                del _previous_handlers[number]
        global _waker
        if _waker is not None and not _previous_handlers:
            _waker.stop()
            _waker = None


def _forget_all() -> None:
    """In a forked child: its parent's clusters are not its own to close."""
    global _waker
    with _lock:
        _endings.clear()
        _previous_handlers.clear()
        if _waker is not None:  # (its thread is the parent's: the pipe too)
            _waker.stop(in_child=True)
            _waker = None


class _Waker:
    """Wakes the main thread for a signal that another thread took (or that came just before
    the main thread went to sleep in a call): see the module's docstring.

    ``signal.set_wakeup_fd`` has CPython write each signal's number to a pipe, from whichever
    thread took it; this object's thread reads the pipe, hands each byte on to the wakeup
    file a program had set before (if any), and for every signal with a Python handler
    (hybrid's, Ctrl-C's ``KeyboardInterrupt``) sends the main thread :data:`WAKE_SIGNAL`, a
    few times over a couple of seconds: a main thread already awake only runs the no-op
    handler again. Another program's wakeup file set later replaces this one: its own loop
    then wakes the main thread.
    """

    #: Its handler does nothing; its default is to be ignored, so a late one harms nothing.
    WAKE_SIGNAL = getattr(signal, "SIGWINCH", None)
    #: When the main thread is woken, in seconds after the signal was read.
    WAKE_AFTER = (0.05, 0.5, 2.0)

    def __init__(self, read: int, write: int, previous: int, wake_handler: Any) -> None:
        self._read, self._write, self._previous = read, write, previous
        self._wake_handler = wake_handler  # (what WAKE_SIGNAL did before: ours replaced it)
        self._main = threading.main_thread().ident
        self._thread = threading.Thread(target=self._listen, name="hybrid-signal-waker",
                                        daemon=True)

    @classmethod
    def start(cls) -> _Waker | None:
        """From the main thread: the waker, listening (``None`` where it cannot work: no
        ``pthread_kill``, or a program of the user's own handles ``WAKE_SIGNAL``)."""
        if cls.WAKE_SIGNAL is None or not hasattr(signal, "pthread_kill"):
            return None
        if signal.getsignal(cls.WAKE_SIGNAL) not in (signal.SIG_DFL, _on_wake):
            return None
        read, write = os.pipe()
        os.set_blocking(write, False)  # (set_wakeup_fd requires it)
        try:
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            wake_handler = signal.signal(cls.WAKE_SIGNAL, _on_wake)
        except (ValueError, OSError):
            os.close(read)
            os.close(write)
            return None
        waker = cls(read, write, previous, wake_handler)
        waker._thread.start()
        return waker

    def stop(self, in_child: bool = False) -> None:
        """From the main thread: the wakeup file and ``WAKE_SIGNAL`` as they were before, and
        the pipe closed, which ends the thread. Where another program set its own wakeup file
        since, the pipe stays open (that program may set this one's back later)."""
        with contextlib.suppress(ValueError, OSError):
            current = signal.set_wakeup_fd(self._previous)
            if current != self._write:  # (someone else's since: theirs is kept)
                signal.set_wakeup_fd(current)
                return
            if signal.getsignal(self.WAKE_SIGNAL) is _on_wake:
                signal.signal(self.WAKE_SIGNAL, self._wake_handler)
        for fd in (self._write, self._read) if in_child else (self._write,):
            with contextlib.suppress(OSError):
                os.close(fd)  # (the thread sees the end of the pipe and closes its side)

    def _listen(self) -> None:
        try:
            while data := os.read(self._read, 512):
                if self._previous >= 0:
                    with contextlib.suppress(OSError):
                        os.write(self._previous, data)
                if any(self._handled(number) for number in set(data)):
                    self._wake_main()
        except OSError:  # (closed)
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self._read)

    def _handled(self, number: int) -> bool:
        """Whether signal ``number`` has a Python handler for the main thread to run."""
        if number == self.WAKE_SIGNAL:
            return False
        with contextlib.suppress(ValueError):
            return callable(signal.getsignal(number))
        return False

    def _wake_main(self) -> None:
        waited = 0.0
        for after in self.WAKE_AFTER:
            time.sleep(after - waited)
            waited = after
            with contextlib.suppress(OSError, ProcessLookupError):
                signal.pthread_kill(self._main, self.WAKE_SIGNAL)


def _on_wake(signum: int, frame: Any) -> None:
    """The main thread was woken for a signal another thread took: its handler has run."""


def _on_ending_signal(signum: int, frame: Any) -> None:
    """Close the open clusters here and now, then end as SIGTERM (SIGHUP) ends a process
    (whatever the main thread was doing: no exception a framework could catch and go on
    after). With an asynchronous cluster open, :class:`Terminated` ends its event loop
    instead, which closes it (:meth:`Ending.guard`)."""
    global _exiting
    why = _ENDING_SIGNALS[signum][0]
    _exiting = _exiting or why
    if any(ending.asynchronous for ending in open_endings()):
        raise Terminated(signum)
    end_all(why)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _at_exit() -> None:
    end_all("at exit")


def _excepthook(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
    global _exiting
    previous = _previous_excepthook or sys.__excepthook__
    if not issubclass(kind, KeyboardInterrupt) or config.get("logging.verbose", False):
        previous(kind, value, traceback)
        return
    if open_endings():
        _exiting = _exiting or INTERRUPTED
        end_all(_exiting)
    original = value.__cause__  # (errors.cleanup_after's: the error a close cleaned up after)
    if not _reported:  # no cluster of hybrid's was ended by this interruption
        previous(kind, value, traceback)
    elif isinstance(original, Exception):
        previous(type(original), original, original.__traceback__)


def _why_now() -> str | None:
    """Why a cluster is closing now, when it is more than a ``close()``: the process is
    interrupted, terminated or exiting (``None`` otherwise)."""
    error = sys.exc_info()[1]
    if isinstance(error, Terminated):
        return _ENDING_SIGNALS.get(error.signum, (TERMINATED, ""))[0]
    if isinstance(error, KeyboardInterrupt):
        return INTERRUPTED
    return _exiting


def _say(line: str) -> None:
    """One line to the user's terminal (stderr), whatever logging is set up."""
    global _reported, _said_count
    _reported = True
    _said_count += 1
    with contextlib.suppress(Exception):
        sys.stderr.write(f"hybrid: {line}\n")
        sys.stderr.flush()
