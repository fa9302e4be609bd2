"""How a Pulumi plugin starts, as the engine expects of any plugin executable: it is given the
engine's address as its last argument, serves gRPC on a loopback port of its choosing, prints
that port alone on the first line of its standard output, and serves until it is told to stop
(SIGTERM or SIGINT from the engine) or the engine goes away."""

from __future__ import annotations

import signal
import sys
import threading
from concurrent import futures
from typing import Callable

import grpc

MAX_MESSAGE_BYTES = 400 * 1024 * 1024
"""The engine's own limit for plugin messages (rpcutil.MaxRPCMessageSize)."""


def engine_address(argv: list[str]) -> str:
    """The engine's address: the last argument that is not a flag (the engine passes it last)."""
    positional = [arg for arg in argv if not arg.startswith("-")]
    return positional[-1] if positional else ""


def serve(register: Callable[[grpc.Server], None]) -> None:
    """Serve the services ``register`` adds until the engine stops this process."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=16),
        options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ],
    )
    register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    stopped.wait()
    server.stop(grace=1).wait(5)
    sys.stdout.flush()
