"""pytest plugin of upstream/run.py: redis-py's lock tests that fail against
ModuleLock for a reason inherent to the module, each marked
``xfail(strict=True)`` by node id (every parametrization of it): one that
passes fails the run, and so does any failure not listed here.  The reasons
are the README's "Differences from redis-py's Lock".  One list for the
redis-py pinned in the venv (8.2.0), one for the compat lane's 5.0.x (whose
tests time the waits differently)."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
import redis

#: The key is the module's lock, a hash: the test reads it with GET (or
#: expects no expiry on a hold kept alive by a session, which has a lease).
HASH = ("the key is the module's lock (a hash, WRONGTYPE to GET), and a hold without timeout "
        "has the session's lease as its expiry")
#: No polling: the wait is in the server's queue, so the patched clock and
#: the ``sleep`` calls the test counts never happen.
NO_POLL = "no polling: the wait is BLOCK in the server's queue, `sleep` is never called"

#: redis-py 5.0 gives up at once when its next poll would come after
#: ``blocking_timeout``; the module's wait lasts the whole ``blocking_timeout``.
NO_EARLY_GIVE_UP = ("no polling: the wait lasts the whole blocking_timeout in the server's queue, "
                    "where redis-py gives up at once when `sleep` is longer")

_SYNC = "tests/test_lock.py::TestLock::"
_ASYNC = "tests/test_asyncio/test_lock.py::TestLock::"

_HASH_TESTS = [
    "test_lock",
    "test_lock_token",
    "test_lock_token_thread_local_false",
    "test_context_manager",
    "test_extend_lock_zero_additional_time_replace_ttl_raises_error",
    "test_extend_lock_zero_timeout_replace_ttl_keeps_existing_ttl",
    "test_extend_lock_negative_timeout_replace_ttl_keeps_existing_ttl",
    "test_extend_lock_negative_additional_time_without_replace_keeps_existing_ttl",
    "test_extend_lock_zero_timeout_without_replace_raises_error",
    "test_reacquire_lock_zero_timeout_keeps_lock",
]

#: The pinned redis-py (8.2.0; its tests patch the clock the lock polls with).
INHERENT: Dict[str, str] = {
    **{_SYNC + name: HASH for name in _HASH_TESTS},
    **{_SYNC + name: NO_POLL for name in ["test_blocking_timeout", "test_context_manager_blocking_timeout"]},
    **{_ASYNC + name: HASH for name in _HASH_TESTS},
    **{_ASYNC + name: NO_POLL for name in [
        "test_blocking_timeout",
        "test_acquire_sleep_overrides_constructor_sleep",
        "test_blocking_timeout_sleep_overrides_constructor_sleep",
    ]},
}
#: redis-py 5.0 (the compat lane): its tests time the waits with the real clock.
INHERENT_5_0: Dict[str, str] = {
    **{prefix + name: HASH for prefix in (_SYNC, _ASYNC) for name in _HASH_TESTS[:4]},
    **{prefix + "test_high_sleep_small_blocking_timeout": NO_EARLY_GIVE_UP for prefix in (_SYNC, _ASYNC)},
}
#: Tests that cannot run here at all (not a difference of the lock): skipped.
CANNOT_RUN_5_0: Dict[str, str] = {
    _ASYNC + "test_blocking_timeout": "needs pytest-asyncio's event_loop fixture, gone since pytest-asyncio 1.0",
}

if redis.__version__.startswith("5.0."):
    INHERENT, CANNOT_RUN = INHERENT_5_0, CANNOT_RUN_5_0
else:
    CANNOT_RUN = {}

_unmatched: List[str] = []


def pytest_collection_modifyitems(config: Any, items: List[Any]) -> None:
    seen = set()
    for item in items:
        nodeid = item.nodeid.split("[", 1)[0]  # every parametrization ([single], [pool])
        reason = INHERENT.get(nodeid)
        if reason is not None:
            seen.add(nodeid)
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
        reason = CANNOT_RUN.get(nodeid)
        if reason is not None:
            seen.add(nodeid)
            item.add_marker(pytest.mark.skip(reason=reason))
    _unmatched[:] = sorted((set(INHERENT) | set(CANNOT_RUN)) - seen)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    # (this redis-py has no such test: an older one, or the test was renamed)
    for nodeid in _unmatched:
        terminalreporter.write_line(f"inherent difference not collected here: {nodeid}")
