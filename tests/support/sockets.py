"""Real socket servers that misbehave the way a hung or foreign service does."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def silent_server(answers: tuple[bytes, ...] = ()) -> Iterator[int]:
    """A loopback TCP server whose port is yielded.  The n-th connection gets
    ``answers[n]`` after its first bytes arrive; a connection past ``answers`` is
    accepted and never answered (a hung master, a proxy with nothing behind it).
    Every connection stays open until the server stops."""
    held: list[socket.socket] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return  # the listener was closed
                held.append(conn)
                if len(held) <= len(answers):
                    with contextlib.suppress(OSError):
                        conn.recv(64)
                        conn.sendall(answers[len(held) - 1])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()[1]
        finally:
            listener.shutdown(socket.SHUT_RDWR)
            listener.close()
            thread.join(5)
            for conn in held:
                conn.close()
