"""``uvicorn --workers N`` on a listening socket that keeps TCP_NODELAY.

uvicorn's ``Config.bind_socket()`` (the ``--workers N`` path) creates its listener
with ``proto=0``; accepted sockets inherit it, and asyncio only sets TCP_NODELAY
when ``proto == IPPROTO_TCP``.  Nagle then holds the body of every keep-alive
response until the client's delayed ACK (~40 ms on Linux): Kludex/uvicorn#3149
(open at uvicorn 0.54).  This launcher binds the socket itself with
``IPPROTO_TCP`` and hands it to uvicorn's own multiprocess supervisor, so the
workers serve exactly as ``uvicorn --workers N`` but without the stall.

    python benchmarks/uvicorn_tcp.py collector.app:create_app PORT WORKERS
"""

from __future__ import annotations

import socket
import sys

import uvicorn
from uvicorn.supervisors import Multiprocess

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    """FACTORY PORT WORKERS: serve the ASGI factory on 127.0.0.1:PORT."""
    factory, port, workers = (argv or sys.argv[1:])[:3]
    config = uvicorn.Config(
        factory, factory=True, host="127.0.0.1", port=int(port), workers=int(workers),
        access_log=False, log_level="warning",
    )
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(port)))
    sock.set_inheritable(True)
    Multiprocess(config, sockets=[sock]).run()


if __name__ == "__main__":
    main()
