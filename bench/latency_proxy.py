"""An HTTP proxy that answers every request after a fixed delay: object-store latency
in front of a local GCS emulator.

    python bench/latency_proxy.py --upstream 127.0.0.1:9023 --port 9024 --delay-ms 30

Each request is held ``--delay-ms`` before it is forwarded; requests are served by one
thread each, so concurrent requests wait their delays side by side, as they would
against Cloud Storage. ``serve()`` runs it in a thread for the benchmarks.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import sys
import threading
import time
import urllib.parse

#: Headers that belong to one connection, not to the message.
_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
        "proxy-authorization", "proxy-authenticate", "content-length"}


def handler(upstream: str, delay: float, log: list | None = None,
            in_flight: dict | None = None):
    host, port = upstream.rsplit(":", 1)
    counting = threading.Lock()

    def count(step: int) -> None:
        if in_flight is not None:
            with counting:
                now = in_flight["now"] = in_flight.get("now", 0) + step
                in_flight["most"] = max(in_flight.get("most", 0), now)

    class Delayed(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if log is not None:  # list.append is atomic: handler threads share it
                log.append((self.command, self.path, self.headers.get("Range")))
            count(1)
            try:
                time.sleep(delay)
                conn = http.client.HTTPConnection(host, int(port), timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in _HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    reply = conn.getresponse()
                    data = reply.read()
                finally:
                    conn.close()
            finally:
                count(-1)
            self.send_response(reply.status, reply.reason)
            for k, v in reply.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _forward

        def log_message(self, *args):  # quiet: a benchmark prints its own figures
            pass

    return Delayed


class _Server(http.server.ThreadingHTTPServer):
    # Every request in flight at once is a connection to accept (a reader fetching
    # shards has dozens): a queue of 5 had the kernel drop some, for a second each.
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # A client that hangs up (a worker process ending) is no error of the proxy's.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(upstream: str, port: int, delay_ms: float, log: list | None = None,
          in_flight: dict | None = None) -> http.server.ThreadingHTTPServer:
    """Starts the proxy on 127.0.0.1:``port`` in a daemon thread; returns the server.
    With ``log``, each request is appended to it as ``(method, path, Range header)``:
    what a benchmark or a test counts (the fetches of a shard, say). With
    ``in_flight``, its ``"now"`` is the requests being held or forwarded and its
    ``"most"`` the most there were at once."""
    server = _Server(("127.0.0.1", port),
                     handler(upstream, delay_ms / 1000, log, in_flight))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def shard_fetches(log: list, since: int = 0) -> dict[str, int]:
    """Reads of whole shards (a range from byte 0, or no range) per shard name, in the
    requests ``log`` holds from ``since`` on: what a shard cache fetched."""
    out: dict[str, int] = {}
    for method, path, span in log[since:]:
        name = urllib.parse.unquote(path.split("?")[0]).rsplit("/", 1)[-1]
        if method == "GET" and "alt=media" in path and ".tfrecord-" in name \
                and "/index/" not in urllib.parse.unquote(path) \
                and (span is None or span.startswith("bytes=0-")):
            out[name] = out.get(name, 0) + 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--upstream", required=True, help="host:port of the emulator")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-ms", type=float, default=30.0)
    args = ap.parse_args()
    server = serve(args.upstream, args.port, args.delay_ms)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.shutdown()


if __name__ == "__main__":
    main()
