"""redis-py's own lock tests against the drop-in ``ModuleLock``.

Takes the sdist of the redis-py installed here from PyPI (cached in
clients/python/.upstream), copies its ``tests/test_lock.py`` and
``tests/test_asyncio/test_lock.py`` with one change, the lock class
(``redis.lock.Lock`` -> ``redis_lock_client.ModuleLock``, ``redis.asyncio.lock.Lock``
-> ``redis_lock_client.asyncio.ModuleLock``), starts a server with the module
on a free port and runs them under pytest with redis-py's own conftest.  The
tests that fail for a reason inherent to the module (listed in ``inherent.py``)
are marked ``xfail(strict=True)``: one that passes, or any other failure,
fails the run.

    python upstream/run.py [pytest args]
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import List

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CACHE = ROOT / ".upstream"
sys.path.insert(0, str(ROOT / "tests"))

from conftest import Server  # type: ignore[import-not-found]  # noqa: E402 - the suite's own harness

#: (file, text redis-py has, what the copy gets): the lock class, nothing else.
REWRITES = [
    ("test_lock.py", "from redis.lock import Lock\n",
     "from redis_lock_client.dropin import ModuleLock as Lock\n"),
    ("test_asyncio/test_lock.py", "from redis.asyncio.lock import Lock\n",
     "from redis_lock_client.asyncio.dropin import ModuleLock as Lock\n"),
]
#: What redis-py's conftest imports besides itself.
SUPPORT = ["__init__.py", "conftest.py", "helpers.py", "ssl_utils.py", "mocks.py",
           "entraid_utils.py", "test_asyncio/__init__.py", "test_asyncio/conftest.py",
           "test_asyncio/compat.py", "test_asyncio/mocks.py"]


def sdist_tests(version: str) -> Path:
    """redis-py ``version``'s ``tests/`` directory, from its sdist (downloaded once)."""
    src = CACHE / f"redis-{version}"
    if not (src / "tests" / "test_lock.py").is_file():
        CACHE.mkdir(exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
             "--no-binary", ":all:", "--no-deps", f"redis=={version}",
             "-d", str(CACHE)],
            check=True,
        )
        (sdist,) = [p for p in CACHE.glob(f"redis-{version}.tar.gz")]
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"redis-{version}/tests/")]
            tar.extractall(CACHE, members=members)
    return src / "tests"


def prepare(version: str) -> Path:
    """A copy of the tests that matter, the lock class rewritten; returns its root."""
    tests = sdist_tests(version)
    run = CACHE / f"run-{version}"
    shutil.rmtree(run, ignore_errors=True)
    (run / "tests" / "test_asyncio").mkdir(parents=True)
    for name in SUPPORT:
        if (tests / name).is_file():
            shutil.copy(tests / name, run / "tests" / name)
    for name, before, after in REWRITES:
        text = (tests / name).read_text()
        if text.count(before) != 1:
            raise SystemExit(f"{name} of redis-py {version}: no single {before.strip()!r} to rewrite")
        text = text.replace(before, after)
        # ``lock_class=Lock`` and ``Lock(...)`` now name the drop-in
        (run / "tests" / name).write_text(text)
    return run


def main(argv: List[str]) -> int:
    version = redis.__version__
    run = prepare(version)
    server = Server().start()
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(run)]))
        cmd = [sys.executable, "-m", "pytest", "-p", "inherent", "-p", "no:cacheprovider",
               "--rootdir", str(run), "-c", os.devnull,
               "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
               f"--redis-url=redis://127.0.0.1:{server.port}/0",
               "tests/test_lock.py", "tests/test_asyncio/test_lock.py", *argv]
        print(f"redis-py {version}'s lock tests against ModuleLock:", " ".join(cmd[3:]), flush=True)
        return subprocess.run(cmd, cwd=run, env=env).returncode
    finally:
        server.cleanup()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
