"""A loopback TCP proxy that can withhold one answer: "stored, but never heard back".

Placed between a device and the collector, it forwards both ways until it is
armed; then the next answer to a ``POST /v1/reports`` is read from the
collector (so that batch is stored) and never forwarded.  A test kills the
device at that moment: the batch is stored, and the device cannot know it.

>>> with HoldingProxy(collector_port) as proxy:            # doctest: +SKIP
...     device = start_device(proxy.url)
...     proxy.arm()
...     assert proxy.held.wait(30)                           # a stored answer is held
...     os.kill(device.pid, signal.SIGKILL)
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["HoldingProxy"]

_REQUEST_STARTS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")


class HoldingProxy:
    """Forward 127.0.0.1:<port> to 127.0.0.1:``upstream_port``, one thread per direction."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.held = threading.Event()
        self._armed = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self) -> None:
        """Withhold the next answer to a POST /v1/reports (and all after it on that link)."""
        self._armed.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for sock in [self._listener, *self._sockets]:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                return
            with self._lock:
                self._sockets += [client, upstream]
            last_request = [b""]
            threading.Thread(target=self._requests, args=(client, upstream, last_request),
                             daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client, last_request),
                             daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket, last: list[bytes]) -> None:
        try:
            while data := src.recv(65536):
                if data.startswith(_REQUEST_STARTS):
                    last[0] = data[:64]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _shut(dst)

    def _answers(self, src: socket.socket, dst: socket.socket, last: list[bytes]) -> None:
        holding = False
        try:
            while data := src.recv(65536):
                if self._armed.is_set() and last[0].startswith(b"POST /v1/reports"):
                    # The collector has answered, so the batch is stored: hold it here,
                    # and leave the device's side open (it waits, as for a lost packet).
                    holding = True
                    self.held.set()
                    return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            if not holding:
                _shut(dst)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
