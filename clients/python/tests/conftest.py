"""Real servers for the tests: redis-server (or valkey-server) from
$REDIS_SERVER with the module from $LOCK_MODULE, on free loopback ports,
each killed by its PID when its fixture ends."""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis

# The lease of a hold a test keeps alive past its lease: the server renews it at half the lease,
# and a server held up for longer than the half left ends a kept hold, as it ends any lease
# (docs/guarantees.md, KEEPALIVE). make test runs every suite at once on two cores, where a
# server was held up past half a second: with 1000 ms a hold was gone at 1.2 s. 3000 ms keeps it
# through a 1.5 s hold-up.
KEPT_LEASE_MS = 3000

REPO = Path(__file__).resolve().parents[3]
SERVER = os.environ.get("REDIS_SERVER", "redis-server")
MODULE = os.environ.get("LOCK_MODULE", str(REPO / "target" / "release" / "liblock.so"))


# The Ctrl-C tests raise KeyboardInterrupt with SIGINT. Python installs that
# handler only when SIGINT is not ignored at start, and a shell running the
# suite in the background without job control (make test runs the Python and
# Node suites side by side) starts it with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


class Server:
    def __init__(self, module=True, args=(), port=None, password=None):
        self.module = module
        self.args = list(args)
        self.port = port
        self.password = password  # --requirepass
        self.dir = tempfile.mkdtemp(prefix="lockpy-")
        self.proc = None

    def start(self):
        for attempt in range(3):
            port = self.port or free_port()
            cmd = [SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", self.dir, "--logfile", "server.log"]
            if self.module:
                cmd += ["--loadmodule", MODULE]
            if self.password is not None:
                cmd += ["--requirepass", self.password]
            cmd += self.args
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    if redis.Redis(port=port, password=self.password, socket_timeout=1).ping():
                        self.port = port
                        return self
                except redis.ConnectionError:
                    time.sleep(0.01)
            self.kill()
            if self.port:
                break
        raise RuntimeError(f"{SERVER} did not start: {self.log()}")

    def log(self):
        try:
            return Path(self.dir, "server.log").read_text()[-3000:]
        except OSError:
            return ""

    def client(self, **kw):
        kw.setdefault("password", self.password)
        return redis.Redis(port=self.port, **kw)

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    srv = Server().start()
    try:
        yield srv
    finally:
        srv.cleanup()


@pytest.fixture
def r(server):
    client = server.client()
    client.flushall()
    yield client
    client.close()


def info(client, key):
    reply = client.execute_command("LOCK.INFO", key)
    if reply is None:
        return None
    if isinstance(reply, dict):
        return {k.decode() if isinstance(k, bytes) else k: v for k, v in reply.items()}
    return {k.decode(): v for k, v in zip(reply[::2], reply[1::2])}


def waiters(client, key):
    i = info(client, key)
    return 0 if i is None else i["waiters"]
