"""A TCP proxy in front of a real server, at the network boundary, run as its own process:

    python tests/slow_proxy.py UPSTREAM_PORT      (prints the port it listens on, then reads stdin)

Commands on stdin, one a line: ``delay S`` (every chunk a client sends waits S seconds before it
goes on: a slow server), ``down`` (drop every connection and refuse new ones: a server
restarting), ``up``. Each command is acknowledged with ``ok`` on stdout. Its own process, so the
timing it adds does not depend on the test process's threads (a writer thread at nice 19 holding
the GIL on a loaded machine would otherwise stall the proxy too).
"""
from __future__ import annotations

import socket
import sys
import threading
import time

state = {"delay": 0.0, "down": False}
conns: list[socket.socket] = []


def pipe(src: socket.socket, dst: socket.socket, slow: bool) -> None:
    try:
        while data := src.recv(65536):
            if slow and state["delay"]:
                time.sleep(state["delay"])
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):  # shutdown, not just close: it wakes the other direction's blocked recv and
        try:  # tells the client, so it never sends its next request into a half-dead connection
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()


def accept(listener: socket.socket, upstream: int) -> None:
    while True:
        client, _ = listener.accept()
        if state["down"]:
            client.close()
            continue
        server = socket.create_connection(("127.0.0.1", upstream))
        conns.extend((client, server))
        threading.Thread(target=pipe, args=(client, server, True), daemon=True).start()
        threading.Thread(target=pipe, args=(server, client, False), daemon=True).start()


def main() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=accept, args=(listener, int(sys.argv[1])), daemon=True).start()
    print(listener.getsockname()[1], flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "delay":
            state["delay"] = float(arg[0])
        elif cmd in ("down", "up"):
            state["down"] = cmd == "down"
            while state["down"] and conns:
                try:
                    conns.pop().shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        print("ok", flush=True)


if __name__ == "__main__":
    main()
