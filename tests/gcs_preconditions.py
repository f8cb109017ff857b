"""An HTTP proxy in front of the GCS emulator that enforces Cloud Storage's generation
preconditions, which the emulator ignores.

Requests are served one at a time, so the check and the request it guards are one step,
as on Cloud Storage. A request with ``ifGenerationMatch`` or ``ifGenerationNotMatch``
(an upload, a rewrite's destination, a removal) is answered 412 when the object's
current generation (0: no object), read from the emulator's metadata, does not satisfy
it; a media read of a given ``generation`` that is not the current one is answered 404,
as Cloud Storage answers for a replaced object without versioning. ``state.before``,
when set, is called with each request's method and path before it is served (and
before the one-at-a-time lock, so it may make requests of its own): what a test uses to
put another client's request at the worst point of the one it watches.
"""

from __future__ import annotations

import http.client
import http.server
import json
import re
import threading
import urllib.parse

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
        "content-length"}
_UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")
_REWRITE = re.compile(r"^/storage/v1/b/[^/]+/o/.+/(?:rewriteTo|copyTo)/b/([^/]+)/o/(.+)$")
_OBJECT = re.compile(r"^/storage/v1/b/([^/]+)/o/(.+)$")
_NAME = re.compile(rb'"name": ?"((?:[^"\\]|\\.)*)"')


def _target(method: str, path: str, query: dict, body: bytes | None):
    """The (bucket, object) a request writes, removes or reads, or None."""
    m = _UPLOAD.match(path)
    if m:
        if "name" in query:
            return m.group(1), query["name"][0]
        found = _NAME.search(body or b"")
        return (m.group(1), json.loads(b'"' + found.group(1) + b'"')) if found else None
    m = _REWRITE.match(path)
    if m:
        return m.group(1), urllib.parse.unquote(m.group(2))
    m = _OBJECT.match(path)
    if m and "/" not in m.group(2).replace("%2F", ""):
        return m.group(1), urllib.parse.unquote(m.group(2))
    return None


def handler(host: str, port: int, state):
    serial = threading.Lock()

    def send(method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(host, port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            reply = conn.getresponse()
            return reply.status, reply.reason, reply.getheaders(), reply.read()
        finally:
            conn.close()

    def generation(bucket, key) -> int:
        status, _, _, data = send(
            "GET", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}")
        return int(json.loads(data)["generation"]) if status == 200 else 0

    class Fenced(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if state.before is not None:
                state.before(self.command, self.path)
            url = urllib.parse.urlsplit(self.path)
            query = urllib.parse.parse_qs(url.query)
            with serial:
                reply = self._refusal(url.path, query, body)
                if reply is None:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
                    reply = send(self.command, self.path, body, headers)
            status, reason, headers, data = reply
            self.send_response(status, reason)
            for k, v in headers:
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _refusal(self, path, query, body):
            conditions = {k: int(query[k][0]) for k in ("ifGenerationMatch",
                                                        "ifGenerationNotMatch") if k in query}
            reading = self.command == "GET" and "generation" in query
            if not conditions and not reading:
                return None
            target = _target(self.command, path, query, body)
            if target is None:
                return None
            now = generation(*target)
            if reading and now != int(query["generation"][0]):
                state.refused.append((self.command, target, "generation"))
                return 404, "Not Found", [], b'{"error": {"code": 404, "message": "No such object"}}'
            if ("ifGenerationMatch" in conditions and conditions["ifGenerationMatch"] != now) or (
                    "ifGenerationNotMatch" in conditions
                    and conditions["ifGenerationNotMatch"] == now):
                state.refused.append((self.command, target, conditions))
                return (412, "Precondition Failed", [("Content-Type", "application/json")],
                        b'{"error": {"code": 412, "message": "Precondition Failed"}}')
            return None

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

        def log_message(self, *args):
            pass

    return Fenced


def serve(upstream: str, port: int, state) -> http.server.ThreadingHTTPServer:
    """Starts the proxy on 127.0.0.1:``port`` in front of ``upstream`` (host:port) in a
    daemon thread; each refused request is appended to ``state.refused``."""
    host, up_port = upstream.rsplit(":", 1)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port),
                                             handler(host, int(up_port), state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
