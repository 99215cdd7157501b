"""The soak's object storage: a real S3-compatible server (versitygw, its
posix backend in a folder of the soak's, as internal/objstore/s3test and
clients/python/tests/test_objects.py run it) and, in front of it, a proxy the
daemon reads through that injects the store's faults:

- a store that restarts: armed by the soak, the proxy kills the server
  (SIGKILL) when the next request under a prefix comes, so that it lands
  while the daemon reads, and starts it again a moment later; until it is
  back every request gets 502, as from a load balancer;
- throttling: a fraction of the requests under a key prefix answered with
  503 SlowDown, as S3 answers;
- sizes that lie: a HEAD or listing of the .bin objects under a prefix
  reports a size the object does not have;
- Range ignored: a ranged GET of a .bin object under a prefix answered 200
  with the whole object.

The proxy passes every request on as the client signed it (Host included,
since SigV4 signs it) and changes only the answers."""

from __future__ import annotations

import http.client
import http.server
import os
import random
import re
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Dict, List, Optional, Set, Tuple
from urllib.parse import parse_qs, unquote, urlsplit

BUCKET = "soak"
REGION = "us-east-1"

# Headers of one hop only: never passed on (the proxy reads each answer
# whole and sends it with a Content-Length of its own).
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
        "content-length"}
_SLOW_DOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
              b"<Message>Please reduce your request rate.</Message></Error>")
_CONTENTS = re.compile(rb"<Contents>.*?</Contents>", re.S)
_KEY = re.compile(rb"<Key>([^<]*)</Key>")
_SIZE = re.compile(rb"<Size>\d+</Size>")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class S3Server:
    """versitygw over a posix folder: each folder under `root` is a bucket
    and each file below one an object. It keeps its port across restarts."""

    def __init__(self, binary: str, work: str):
        if not os.path.isfile(binary):
            raise FileNotFoundError(
                f"no S3 server binary at {binary} (--s3-server, $DATALOADERD_S3_SERVER): run `make {binary}` "
                "to build versitygw, or leave the s3_* faults out with --faults")
        self.bin = binary
        self.root = os.path.join(work, "s3root")
        self.meta = os.path.join(work, "s3meta")
        os.makedirs(os.path.join(self.root, BUCKET))
        os.makedirs(self.meta)
        self.port = free_port()
        self.access, self.secret = "SOAK" + secrets.token_hex(8).upper(), secrets.token_hex(20)
        self.log = open(os.path.join(work, "versitygw.log"), "ab")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.starts = 0

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items()
               if not (k.startswith("VGW_") or k.startswith("ROOT_") or k in ("LOGFILE", "WEBHOOK"))}
        # --sidecar keeps object metadata in files of its own (no user
        # xattrs needed); --keep-alive: versitygw closes every connection
        # after one answer without it, unlike S3.
        self.proc = subprocess.Popen(
            [self.bin, "--port", f"127.0.0.1:{self.port}", "--access", self.access, "--secret", self.secret,
             "--region", REGION, "--keep-alive", "posix", "--sidecar", self.meta, self.root],
            stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.starts += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.02)
        raise RuntimeError(f"versitygw did not start on port {self.port} (exit {self.proc.poll()}): "
                           f"see {self.log.name}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()

    def object_path(self, bucket: str, key: str) -> str:
        return os.path.join(self.root, bucket, key)


class FaultProxy:
    """An HTTP proxy to an S3Server on a port of its own. The soak sets its
    faults while it runs (by key prefix); what it did is in `counts`."""

    def __init__(self, server: S3Server, seed: int):
        self.s3 = server
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.throttle: Dict[str, float] = {}  # key prefix: fraction answered 503 SlowDown
        self.sizes: Dict[str, int] = {}  # key prefix: size reported for its .bin objects
        self.whole: Set[str] = set()  # key prefixes whose ranged GETs of .bin objects get the whole object
        self.counts: Counter[str] = Counter()
        self.armed: Optional[Tuple[str, float]] = None  # (key prefix, seconds down) of the next restart
        self.restarter: Optional[threading.Thread] = None
        self.errors: List[str] = []
        self.httpd = _Server(("127.0.0.1", 0), _Handler)
        setattr(self.httpd, "proxy", self)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def arm_restart(self, prefix: str, down: float) -> bool:
        """Restarts the server when the next request under prefix comes,
        starting it again after `down` seconds; False when one is already
        armed or under way."""
        with self.lock:
            if self.armed is not None or (self.restarter is not None and self.restarter.is_alive()):
                return False
            self.armed = (prefix, down)
            return True

    def disarm(self, timeout: float = 60) -> None:
        """Drops an armed restart and waits for one under way to finish."""
        with self.lock:
            self.armed = None
            t = self.restarter
        if t is not None:
            t.join(timeout)

    def restart_if_armed(self, key: str) -> None:
        with self.lock:
            if self.armed is None or not key.startswith(self.armed[0]):
                return
            down = self.armed[1]
            self.armed = None
            self.s3.kill9()
            self.counts["restarts"] += 1
            self.restarter = threading.Thread(target=self.start_later, args=(down,), daemon=True)
            self.restarter.start()

    def start_later(self, down: float) -> None:
        time.sleep(down)
        try:
            self.s3.start()
        except (RuntimeError, OSError) as e:
            with self.lock:
                self.errors.append(f"the S3 server did not come back: {e}")

    def environ(self) -> Dict[str, str]:
        """The standard AWS environment pointing a client at the proxy."""
        return {"AWS_ACCESS_KEY_ID": self.s3.access, "AWS_SECRET_ACCESS_KEY": self.s3.secret,
                "AWS_SESSION_TOKEN": "", "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
                "AWS_ENDPOINT_URL": self.url, "AWS_ENDPOINT_URL_S3": self.url, "AWS_EC2_METADATA_DISABLED": "true",
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_PROFILE": ""}

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def taken(self, what: str) -> int:
        """The count of `what` since the last call, reset to 0."""
        with self.lock:
            return self.counts.pop(what, 0)

    def throttled(self, key: str) -> bool:
        with self.lock:
            fraction = next((f for p, f in self.throttle.items() if key.startswith(p)), 0.0)
            return fraction > 0 and self.rng.random() < fraction

    def lie(self, key: str) -> Optional[int]:
        with self.lock:
            if not key.endswith(".bin"):
                return None
            return next((s for p, s in self.sizes.items() if key.startswith(p)), None)

    def ignores_range(self, key: str) -> bool:
        with self.lock:
            return key.endswith(".bin") and any(key.startswith(p) for p in self.whole)

    def forward(self, method: str, path: str, headers: List[Tuple[str, str]],
                body: bytes) -> Tuple[int, List[Tuple[str, str]], bytes]:
        """The request as the client sent it, to the server; its answer read
        whole. Raises OSError or HTTPException when the server is down."""
        conn = http.client.HTTPConnection("127.0.0.1", self.s3.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for k, v in headers:
                if k.lower() not in _HOP:
                    conn.putheader(k, v)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body or None)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, [(k, v) for k, v in resp.getheaders()], data
        finally:
            conn.close()


def _lie_in_listing(proxy: FaultProxy, data: bytes) -> Tuple[bytes, int]:
    """The listing with the sizes of the .bin objects under a lying prefix
    replaced; and how many were."""
    lied = 0

    def one(m: re.Match[bytes]) -> bytes:
        nonlocal lied
        k = _KEY.search(m.group(0))
        size = proxy.lie(unquote(k.group(1).decode())) if k else None
        if size is None:
            return m.group(0)
        lied += 1
        return _SIZE.sub(f"<Size>{size}</Size>".encode(), m.group(0))

    return _CONTENTS.sub(one, data), lied


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    # The daemon opens dozens of connections at once; with the default
    # backlog of 5 the kernel drops handshakes past it and some requests
    # wait many seconds to be accepted.
    request_queue_size = 256

    def handle_error(self, request: object, client_address: object) -> None:
        # A daemon killed (-9) mid-request resets its connections: that is
        # the soak's own fault, not news; anything else is printed as before.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # A connection idle this long is closed, as S3 does (after about 20 s):
    # the daemon's pool of idle connections to the store then empties
    # within a round, and its files and goroutines come back to baseline.
    timeout = 3

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.relay()

    def do_HEAD(self) -> None:
        self.relay()

    def do_PUT(self) -> None:
        self.relay()

    def do_POST(self) -> None:
        self.relay()

    def do_DELETE(self) -> None:
        self.relay()

    def relay(self) -> None:
        proxy: FaultProxy = getattr(self.server, "proxy")
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        url = urlsplit(self.path)
        bucket, _, key = url.path.lstrip("/").partition("/")
        key = unquote(key)
        listing = not key and self.command == "GET"
        if listing:
            key = parse_qs(url.query).get("prefix", [""])[0]
        proxy.count("requests")
        proxy.restart_if_armed(key)
        if proxy.throttled(key):
            proxy.count("throttled")
            return self.answer(503, [("Content-Type", "application/xml")], _SLOW_DOWN)
        try:
            status, headers, data = proxy.forward(self.command, self.path, list(self.headers.items()), body)
        except (OSError, http.client.HTTPException):
            proxy.count("refused_while_down")
            return self.answer(502, [], b"")
        length: Optional[int] = None
        if self.command == "HEAD" and status == 200:
            length = proxy.lie(key)
            if length is not None:
                proxy.count("size_lies")
        elif listing and status == 200:
            data, lied = _lie_in_listing(proxy, data)
            proxy.count("size_lies", lied)
        elif self.command == "GET" and status == 206 and proxy.ignores_range(key):
            with open(proxy.s3.object_path(bucket, key), "rb") as f:
                data = f.read()
            status = 200
            headers = [(k, v) for k, v in headers if k.lower() not in ("content-range", "content-encoding")]
            proxy.count("ranges_ignored")
        if length is None and self.command == "HEAD":
            length = int(next((v for k, v in headers if k.lower() == "content-length"), "0"))
        self.answer(status, headers, data, length)

    def answer(self, status: int, headers: List[Tuple[str, str]], data: bytes, length: Optional[int] = None) -> None:
        try:
            self.send_response_only(status)
            for k, v in headers:
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data) if length is None else length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except OSError:
            self.close_connection = True
