"""Loopback peers that answer Mooncake's RPC probe as a master does, or almost (issue 27)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

# What the CPU wheel's mooncake_master 0.3.13.post1 answers RPC_PROBE with, read from the
# real binary: coro_rpc's 16-byte response header (magic 21, version 0, error 11, message
# type 0, sequence 1, body 40, attachment 0) and its body, "the rpc function not
# registered" serialised by struct_pack.
MASTER_ANSWER = bytes.fromhex(
    "15000b0001000000280000000000000077facf9d04800c001f") + b"the rpc function not registered"


@contextlib.contextmanager
def fake_peer(*sends: bytes, pause: float = 0.0, then: str = "hold") -> Iterator[int]:
    """A loopback peer that reads the probe, sends ``sends`` one after another with
    ``pause`` seconds before each, then hangs up (``then="close"``) or holds the
    connection open until the test ends."""
    stop = threading.Event()
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)

        def serve() -> None:
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                with conn:
                    conn.recv(64)
                    for chunk in sends:
                        if stop.wait(pause):
                            return
                        conn.sendall(chunk)
                    if then == "hold":
                        stop.wait()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            stop.set()
            thread.join(5)
