"""Serving: an HTTP endpoint on rank 0, every rank decoding in lockstep.

Tensor parallelism needs every rank in every forward pass, so rank 0 owns the
HTTP server (stdlib ``http.server``, loopback only) and broadcasts each command
over the world's CPU (gloo) group; all ranks decode, then gather their tokens
so that the response can say whether they agree.  While idle, rank 0
broadcasts a heartbeat every second: the other ranks wait inside a gloo
collective, which would otherwise time out.

The lockstep loop runs on a helper thread on every rank, and the main thread
waits for it in Python (:meth:`Server.serve_until_stopped`): a rank waiting
inside gloo's broadcast for rank 0's next command runs no Python on that
thread, so a SIGTERM's handler (the run's, which raises ``RunInterrupted``)
could not run there, and the watchdog would end the rank without a teardown
(issue 27).  On that interrupt every rank stops at a command boundary: rank 0
broadcasts ``stop``, the others leave on it, and only then does the interrupt
go on to the run's teardown, so that no rank tears down while a peer still
waits in a collective for it.  A rank other than 0 that alone is interrupted
asks rank 0 for that ``stop`` through the job's store (:data:`STOP_KEY`): the
others then leave the loop as on ``POST /shutdown``, and tear down.

Endpoints: ``POST /generate`` ``{"prompt": "...", "max_new_tokens": 16}``,
``GET /health``, ``GET /startup`` (the start-up report and critical chain),
``POST /shutdown`` (every rank leaves the loop; the launcher tears down).

The front end is one a server could deploy: the standard library's threaded
server (a thread per connection, a listen backlog of :data:`LISTEN_BACKLOG`), a
socket timeout per request (:data:`REQUEST_TIMEOUT_S`: a client that sends half a
body holds only its own thread, and not for long), bodies of at most
:data:`MAX_BODY_BYTES`, and a 4xx answer -- never a dropped connection and a
traceback -- for a malformed ``Content-Length``, a body that is not UTF-8 JSON, or
a prompt that is not valid Unicode.
"""

from __future__ import annotations

import contextlib
import json
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch.distributed as dist

from initorch.plugin import NumberError, parse_count
from tiny_server.kv_cache import KVPool
from tiny_server.model import TinyDecoder

HEARTBEAT_S = 1.0
REQUEST_TIMEOUT_S = 10.0  # socket timeout of one request: a stalled client lets go
MAX_BODY_BYTES = 1 << 20  # a prompt is bytes of text; a megabyte is generous
LISTEN_BACKLOG = 128  # connections the kernel queues while every thread is busy
POLL_S = 0.1  # how often the waiting main thread gives a signal's handler its turn
STOP_WAIT_S = 10.0
"""How long an interrupted rank waits for the loop to reach rank 0's ``stop`` (the
next heartbeat, or the end of the request being decoded) before it tears down anyway:
well within torchrun's and Kubernetes' 30 s."""
STOP_KEY = "stop"  # in the server's store: a rank other than 0 was interrupted


class HTTPFrontEnd(ThreadingHTTPServer):
    """A thread per connection (daemon threads: a stalled client never holds the
    process at exit) and a listen backlog for bursts of clients."""

    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def handle_error(self, request: Any, client_address: Any) -> None:
        """One line for a client that hung up before its answer (socketserver's default
        prints a traceback); anything else keeps the default."""
        error = sys.exc_info()[1]
        if isinstance(error, (BrokenPipeError, ConnectionResetError)):
            sys.stderr.write(f"tiny-server: the client at {client_address[0]} hung up before "
                             f"its answer ({type(error).__name__})\n")
            return
        super().handle_error(request, client_address)


@dataclass
class Job:
    """A command from rank 0's HTTP thread to the serving loop, and its answer."""

    command: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)


class BadRequest(ValueError):
    """A request rank 0 refuses before involving the other ranks."""


def parse_generate(body: bytes, max_new_tokens: int, pool_tokens: int) -> dict[str, Any]:
    """The command for a generate request; the prompt is tokenised as UTF-8 bytes."""
    try:
        request = json.loads((body or b"{}").decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("body is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"body is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadRequest("body must be a JSON object")
    prompt = request.get("prompt")
    if not isinstance(prompt, str) or not prompt:
        raise BadRequest("'prompt' must be a non-empty string")
    count = request.get("max_new_tokens", 16)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= max_new_tokens:
        raise BadRequest(f"'max_new_tokens' must be a whole number in 1..{max_new_tokens}")
    try:
        tokens = list(prompt.encode("utf-8"))
    except UnicodeEncodeError:  # JSON can carry a lone surrogate; UTF-8 cannot
        raise BadRequest("'prompt' is not valid Unicode (a lone surrogate)") from None
    if len(tokens) + count > pool_tokens:
        raise BadRequest(f"prompt and new tokens need {len(tokens) + count} KV slots; the "
                         f"pool has {pool_tokens}")
    return {"op": "generate", "prompt_tokens": tokens, "max_new_tokens": count}


def make_handler(jobs: queue.Queue[Job], startup: dict[str, Any], max_new_tokens: int,
                 pool_tokens: int) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S  # StreamRequestHandler sets it on the socket

        def log_message(self, format: str, *args: Any) -> None:
            return  # the launcher logs requests itself; keep stderr for initorch's events

        def _body(self) -> bytes | None:
            """The request's body, or ``None`` after answering why it cannot be read."""
            raw = self.headers.get("Content-Length") or "0"
            try:  # ASCII digits only: "²".isdigit() is True, and int("²") raises
                length = parse_count(raw, "Content-Length", maximum=MAX_BODY_BYTES)
            except NumberError as refused:
                too_large = raw.isascii() and raw.isdigit()
                self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE if too_large
                             else HTTPStatus.BAD_REQUEST,
                             f"the body may have at most {MAX_BODY_BYTES} bytes" if too_large
                             else f"Content-Length {raw!r} is not a whole number", refused)
                return None
            try:
                body = self.rfile.read(length)
            except TimeoutError:
                body = b""
            if len(body) < length:  # the client stopped sending (or timed out)
                self._reply(HTTPStatus.REQUEST_TIMEOUT,
                            {"error": f"the body ended after {len(body)} of {raw} bytes"})
                return None
            return body

        def _refuse(self, status: HTTPStatus, error: str, why: Exception) -> None:
            """Answer ``status`` with ``error``, and log one line (never a traceback)."""
            sys.stderr.write(f"tiny-server: {status.value} for {self.command} {self.path}: "
                             f"{why}\n")
            self._reply(status, {"error": error})

        def _reply(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _submit(self, command: dict[str, Any]) -> dict[str, Any]:
            job = Job(command)
            jobs.put(job)
            job.done.wait()
            return job.answer

        def do_GET(self) -> None:
            if self.path == "/health":
                self._reply(HTTPStatus.OK, {"ok": True})
            elif self.path == "/startup":
                self._reply(HTTPStatus.OK, startup)
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path}"})

        def do_POST(self) -> None:
            body = self._body()
            if body is None:
                return
            if self.path == "/shutdown":
                self._reply(HTTPStatus.OK, self._submit({"op": "stop"}))
            elif self.path == "/generate":
                try:
                    command = parse_generate(body, max_new_tokens, pool_tokens)
                except BadRequest as exc:
                    self._reply(HTTPStatus.BAD_REQUEST, {"error": str(exc)})
                    return
                answer = self._submit(command)
                failed = "error" in answer
                self._reply(HTTPStatus.INTERNAL_SERVER_ERROR if failed else HTTPStatus.OK,
                            answer)
            else:
                self._reply(HTTPStatus.NOT_FOUND, {"error": f"no such path {self.path}"})

    return Handler


def answer_generate(command: dict[str, Any], tokens_by_rank: list[list[int]]) -> dict[str, Any]:
    tokens = tokens_by_rank[0]
    return {
        "prompt_tokens": command["prompt_tokens"],
        "tokens": tokens,
        "text": bytes(tokens).decode("utf-8", errors="replace"),
        "ranks": len(tokens_by_rank),
        "ranks_agree": all(t == tokens for t in tokens_by_rank),
        "tokens_by_rank": tokens_by_rank,
    }


@dataclass
class Server:
    """One rank's serving loop; rank 0 also owns the HTTP server."""

    model: TinyDecoder
    pool: KVPool
    group: Any  # the world's CPU (gloo) group
    rank: int
    host: str = "127.0.0.1"
    port: int = 0
    max_new_tokens: int = 64
    startup: dict[str, Any] = field(default_factory=dict)
    jobs: queue.Queue[Job] = field(default_factory=queue.Queue)
    http: HTTPFrontEnd | None = None
    stopping: threading.Event = field(default_factory=threading.Event)
    store: Any = None  # the job's store, under this server's prefix: stop requests

    def open(self) -> str | None:
        """Rank 0: bind the HTTP server (loopback) and serve it from a thread; its URL."""
        if self.rank != 0:
            return None
        handler = make_handler(self.jobs, self.startup, self.max_new_tokens, self.pool.tokens)
        self.http = HTTPFrontEnd((self.host, self.port), handler)
        threading.Thread(target=self.http.serve_forever, name="tiny-server-http",
                         daemon=True).start()
        return f"http://{self.host}:{self.http.server_port}"

    def close(self) -> None:
        if self.http is not None:
            self.http.shutdown()
            self.http.server_close()
            self.http = None

    def _next(self) -> Job:
        """Rank 0 waits for a job (or a heartbeat tick) and broadcasts its command."""
        job: Job | None = None
        if self.rank == 0:
            try:
                job = None if self.stopping.is_set() else self.jobs.get(timeout=HEARTBEAT_S)
            except queue.Empty:
                job = None
            if self.store is not None and self.store.check([STOP_KEY]):
                self.stopping.set()  # another rank was interrupted and waits for stop
            if self.stopping.is_set() and (job is None or job.command["op"] != "stop"):
                if job is not None:  # queued before the interrupt: answer, never decode
                    self._refuse_stopping(job)
                job = Job({"op": "stop"})
        box = [job.command if job is not None else {"op": "idle"}]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return job if job is not None else Job(box[0])

    @staticmethod
    def _refuse_stopping(job: Job) -> None:
        job.answer = {"error": "the server is stopping"}
        job.done.set()

    def serve_until_stopped(self, on_request: Callable[[dict[str, Any]], None] | None = None,
                            stop_wait: float = STOP_WAIT_S) -> None:
        """:meth:`loop` on a helper thread until rank 0 broadcasts ``stop``, while this
        (main) thread waits where Python runs signal handlers.  Whatever interrupts
        the wait (the run's ``RunInterrupted``, a ``KeyboardInterrupt``) asks the loop to
        stop and is raised once it has, or after ``stop_wait`` seconds; a repeated
        signal meanwhile changes nothing.  The loop's own error is raised as it is."""
        failure: list[BaseException] = []

        def body() -> None:
            try:
                self.loop(on_request)
            except BaseException as exc:  # handed to the main thread below
                failure.append(exc)

        thread = threading.Thread(target=body, name="tiny-server-loop", daemon=True)
        thread.start()
        interrupt: BaseException | None = None
        deadline = float("inf")
        while thread.is_alive() and time.monotonic() < deadline:
            try:
                thread.join(POLL_S)
            except BaseException as exc:  # a signal's handler raised on this thread
                if interrupt is None:
                    interrupt, deadline = exc, time.monotonic() + stop_wait
                    self.stopping.set()  # rank 0 broadcasts stop; the others wait for it
                    self.jobs.put(Job({"op": "stop"}))  # wakes rank 0's wait for a job
                    if self.rank != 0 and self.store is not None:
                        self._ask_rank0_to_stop()
        if thread.is_alive():
            sys.stderr.write(f"tiny-server: rank {self.rank}: the serving loop did not reach "
                             f"rank 0's stop within {stop_wait:g}s; tearing down anyway\n")
        if interrupt is not None:
            raise interrupt
        if failure:
            raise failure[0]

    def _ask_rank0_to_stop(self) -> None:
        """Tell rank 0, which may not have been signalled, to broadcast ``stop``."""
        try:
            self.store.set(STOP_KEY, str(self.rank))
        except Exception as exc:  # no store: rank 0 is gone, and the wait ends anyway
            sys.stderr.write(f"tiny-server: rank {self.rank}: could not ask rank 0 to "
                             f"stop: {exc}\n")

    def loop(self, on_request: Callable[[dict[str, Any]], None] | None = None) -> None:
        """Serve until rank 0 broadcasts ``stop`` (what ``POST /shutdown`` and an
        interrupt both ask rank 0 for)."""
        while True:
            job = self._next()
            op = job.command["op"]
            if op == "stop":
                job.answer = {"stopping": True, "ranks": dist.get_world_size(self.group)}
                job.done.set()
                while self.rank == 0 and not self.jobs.empty():  # no HTTP thread hangs
                    with contextlib.suppress(queue.Empty):
                        self._refuse_stopping(self.jobs.get_nowait())
                return
            if op == "generate":
                try:
                    job.answer = self._generate(job.command)
                except Exception as exc:  # the handler answers 500; the launcher tears down
                    job.answer = {"error": f"{type(exc).__name__}: {exc}"}
                    raise
                finally:
                    job.done.set()
                if on_request is not None:
                    on_request(job.answer)

    def _generate(self, command: dict[str, Any]) -> dict[str, Any]:
        tokens = self.model.generate(command["prompt_tokens"], command["max_new_tokens"],
                                     self.pool)
        gathered: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, tokens, group=self.group)
        return answer_generate(command, gathered)
