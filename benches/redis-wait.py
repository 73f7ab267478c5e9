#!/usr/bin/env python3
"""What `WAIT 1 <timeout>` after each write costs: SET alone against SET + WAIT 1 1000
on a Redis master with one replica (BENCHMARKS.md, "Waiting for a replica").

    python3 benches/redis-wait.py [PORT]    # the master's port, default 16391

Values of 2 KiB (a typical stored webhook); 1 and 16 concurrent connections;
three runs each. Prints operations per second, p50 and p99 in milliseconds.
"""
import socket
import sys
import threading
import time

PORT = int(sys.argv[1]) if len(sys.argv) > 1 else 16391


def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def reply(f):
    line = f.readline()
    if line.startswith(b"-"):
        raise RuntimeError(line)
    return line


def worker(n, wait, latencies, tid, body):
    s = socket.create_connection(("127.0.0.1", PORT))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    for i in range(n):
        started = time.perf_counter()
        if wait:
            s.sendall(command("SET", f"k{tid}:{i}", body) + command("WAIT", 1, 1000))
            reply(f)
            acked = reply(f)
            if acked != b":1\r\n":
                raise RuntimeError(f"WAIT answered {acked!r}: is the replica online?")
        else:
            s.sendall(command("SET", f"k{tid}:{i}", body))
            reply(f)
        latencies.append(time.perf_counter() - started)


def run(connections, n, wait):
    latencies = []
    body = b"x" * 2048
    threads = [
        threading.Thread(target=worker, args=(n, wait, latencies, t, body))
        for t in range(connections)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return (
        len(latencies) / elapsed,
        latencies[len(latencies) // 2] * 1e3,
        latencies[int(len(latencies) * 0.99)] * 1e3,
    )


for connections in (1, 16):
    for wait in (False, True):
        runs = [run(connections, 3000 if connections == 1 else 600, wait) for _ in range(3)]
        print(
            f"connections={connections:2d} {'SET + WAIT 1 1000' if wait else 'SET              '}"
            f" ops/s={','.join(f'{r[0]:.0f}' for r in runs)}"
            f" p50_ms={','.join(f'{r[1]:.2f}' for r in runs)}"
            f" p99_ms={','.join(f'{r[2]:.2f}' for r in runs)}"
        )
