"use strict";
// The public Session: the session core (./core/session.ts) plus the factories of every object
// (locks, semaphores, latches, elections) and `using`. It sits on top of the objects, so that
// neither the core nor any object imports it.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Session = void 0;
const session_1 = require("./core/session");
const election_1 = require("./election");
const latch_1 = require("./latch");
const lock_1 = require("./lock");
const semaphore_1 = require("./semaphore");
/**
 * A session: one dedicated connection per server that every hold is bound to. The server
 * keeps the holds alive while it lives; holds live out their lease once it is gone.
 */
class Session extends session_1.SessionCore {
    constructor(client, opts) {
        super(client, opts);
    }
    /**
     * Opens a session over `client` (an ioredis `Redis`/`Cluster` or a node-redis client/cluster):
     * a dedicated session connection (`client.duplicate()`), `LOCK.SESSION <token>`, subscribed to
     * its loss channel. Reads the server's shortest kept-alive lease (`INFO lock`) first.
     * Rejects with `LeaseTooShortError` (`leaseMs` below it), `AuthenticationError`,
     * `ModuleNotLoadedError` or `UnavailableError`.
     */
    static async open(client, opts = {}) {
        const s = new Session(client, opts);
        await s.start();
        return s;
    }
    /** An exclusive, reentrant lock named `key`. */
    lock(key) {
        return new lock_1.Lock(this, "exclusive", [key], new lock_1.OwnerSlot(this));
    }
    /** A read-write lock named `key`: `.read` and `.write` share one owner (downgrade, upgrade). */
    rwlock(key) {
        return new lock_1.RWLock(this, key);
    }
    /** All of `keys` at once, or none (in a cluster they must share a `{hash tag}`). */
    multiLock(keys) {
        return new lock_1.MultiLock(this, keys);
    }
    /**
     * A counting semaphore named `key` (Redisson's layout). With `permits`, its permits are set
     * once (`SEM.INIT`: nothing changes if it exists), before this object's first command runs.
     */
    semaphore(key, permits) {
        return new semaphore_1.Semaphore(this, key, permits);
    }
    /** The election of a leader for `name` (`ELECT.*`), its leaderships kept by this session. */
    election(name, opts = {}) {
        return new election_1.Election(this, name, opts);
    }
    /** A count-down latch named `key` (Redisson's `RCountDownLatch` layout). */
    latch(key) {
        return new latch_1.Latch(this, key);
    }
    using(key, a, b) {
        const opts = typeof a === "function" ? {} : a;
        const fn = typeof a === "function" ? a : b;
        const lock = Array.isArray(key) ? this.multiLock(key) : this.lock(key);
        return lock.using(opts, fn);
    }
}
exports.Session = Session;
//# sourceMappingURL=session.js.map