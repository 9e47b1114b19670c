"""A minimal Python Lambda runtime for the init comparison in scripts/lambda-artifacts.sh.

It does what the managed Python runtime does before its first request, and no more:
import the handler module named by _HANDLER ("module.function", from LAMBDA_TASK_ROOT),
then GET /runtime/invocation/next. It speaks HTTP over a bare socket (http.client alone
costs tens of milliseconds to import; the managed runtime's client is a C extension),
and the managed runtime imports more of its own first, so a figure measured with this
one is a lower bound for Python. With _HANDLER empty it imports nothing: the
interpreter's own start-up.
"""

import importlib
import os
import socket
import sys

NEXT = "/2018-06-01/runtime/invocation/next"


def exchange(conn, method, path, body=b""):
    """One HTTP/1.1 request on the kept-alive connection: (status, headers, body)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: runtime\r\nContent-Length: {len(body)}\r\n\r\n"
    conn.sendall(head.encode() + body)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            sys.exit("runtime API closed the connection")
        data += chunk
    raw_head, _, rest = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def main():
    handler_name = os.environ.get("_HANDLER", "")
    handler = None
    if handler_name:
        sys.path.insert(0, os.environ.get("LAMBDA_TASK_ROOT", "."))
        module_name, _, function_name = handler_name.rpartition(".")
        handler = getattr(importlib.import_module(module_name), function_name)
    host, _, port = os.environ["AWS_LAMBDA_RUNTIME_API"].partition(":")
    conn = socket.create_connection((host, int(port or 80)))
    while True:
        status, headers, body = exchange(conn, "GET", NEXT)
        request_id = headers.get("lambda-runtime-aws-request-id")
        if status != 200 or request_id is None:
            sys.exit(f"runtime API answered {status} to /next")
        result = handler(body, None) if handler else None
        path = f"/2018-06-01/runtime/invocation/{request_id}/response"
        exchange(conn, "POST", path, repr(result).encode())


if __name__ == "__main__":
    main()
