"use strict";
// The shape of node-redlock v5 (npm `redlock`) over one server with the lock module: swap
// `new Redlock([client], settings)` for `new ModuleRedlock(client, settings)` and keep the
// callers of `acquire`, `release`, `extend` and `using`.
//
// Differences, on purpose: one server, so no quorum; waiting is the server's FIFO queue (BLOCK)
// for as long as the retry settings would have retried, not polling; `using` binds the lock to
// a session (the server renews it while this process lives) instead of extending it on a timer,
// and its signal aborts when the server reports the lock lost.
Object.defineProperty(exports, "__esModule", { value: true });
exports.ModuleRedlock = exports.RedlockLock = exports.ExecutionError = exports.ResourceLockedError = void 0;
const node_events_1 = require("node:events");
const errors_1 = require("./errors");
const session_1 = require("./session");
const defaultSettings = {
    driftFactor: 0.01,
    retryCount: 10,
    retryDelay: 200,
    retryJitter: 100,
    automaticExtensionThreshold: 500,
};
/** As redlock's: a resource is locked by another owner. */
class ResourceLockedError extends errors_1.LockError {
    constructor(message) {
        super(message);
    }
}
exports.ResourceLockedError = ResourceLockedError;
/** As redlock's: the operation failed (here: the lock stayed busy for the whole retry window, or the server refused). */
class ExecutionError extends errors_1.LockError {
    attempts;
    constructor(message, attempts, options) {
        super(message, options);
        this.attempts = attempts;
    }
}
exports.ExecutionError = ExecutionError;
/** As redlock's `Lock`: `value` is the owner id, `expiration` a ms timestamp (0 once released or replaced). */
class RedlockLock {
    redlock;
    resources;
    value;
    attempts;
    expiration;
    hold;
    constructor(redlock, resources, value, attempts, expiration, 
    /** @internal */ hold) {
        this.redlock = redlock;
        this.resources = resources;
        this.value = value;
        this.attempts = attempts;
        this.expiration = expiration;
        this.hold = hold;
    }
    release() {
        return this.redlock.release(this);
    }
    extend(duration) {
        return this.redlock.extend(this, duration);
    }
    /** The fencing token of the first resource (this module's addition). */
    get token() {
        return this.hold.token;
    }
}
exports.RedlockLock = RedlockLock;
function checkDuration(duration) {
    if (Math.floor(duration) !== duration)
        throw new Error("Duration must be an integer value in milliseconds.");
}
class ModuleRedlock extends node_events_1.EventEmitter {
    client;
    sessionOptions;
    settings;
    session;
    constructor(client, settings = {}, sessionOptions = {}) {
        super();
        this.client = client;
        this.sessionOptions = sessionOptions;
        this.settings = { ...defaultSettings, ...settings };
    }
    /** The session used under the hood (opened on first use). */
    getSession() {
        if (!this.session) {
            this.session = session_1.Session.open(this.client, this.sessionOptions);
            this.session.catch(() => {
                this.session = undefined;
            });
        }
        return this.session;
    }
    waitMs(s) {
        if (s.retryCount < 0)
            return undefined; // retry forever
        return s.retryCount * (s.retryDelay + s.retryJitter / 2);
    }
    async take(resources, duration, settings, bind) {
        checkDuration(duration);
        const s = { ...this.settings, ...settings };
        const session = await this.getSession();
        const lock = resources.length === 1 ? session.lock(resources[0]) : session.multiLock(resources);
        const start = Date.now();
        try {
            const hold = await lock.acquireNow({ leaseMs: duration, timeoutMs: this.waitMs(s) }, bind);
            const drift = Math.round(s.driftFactor * duration) + 2;
            return new RedlockLock(this, resources, hold.owner, [], start + duration - drift, hold);
        }
        catch (e) {
            const err = new ExecutionError("The operation was unable to achieve a quorum during its retry window.", [], { cause: e });
            // As redlock, each failure is also an "error" event (emitted only when someone listens).
            if (this.listenerCount("error") > 0)
                this.emit("error", e instanceof errors_1.BusyError ? new ResourceLockedError(e.message) : e);
            throw err;
        }
    }
    /** Takes `resources` (all at once for several) for `duration` ms. The lock ends with its lease unless extended. */
    acquire(resources, duration, settings) {
        return this.take(resources, duration, settings, false);
    }
    async release(lock, _settings) {
        lock.expiration = 0;
        try {
            await lock.hold.releaseAll();
        }
        catch (e) {
            throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", [], { cause: e });
        }
        return { attempts: [] };
    }
    async extend(existing, duration, settings) {
        checkDuration(duration);
        const s = { ...this.settings, ...settings };
        if (existing.expiration < Date.now())
            throw new ExecutionError("Cannot extend an already-expired lock.", []);
        const start = Date.now();
        try {
            await existing.hold.extend(duration);
        }
        catch (e) {
            throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", [], { cause: e });
        }
        existing.expiration = 0;
        const drift = Math.round(s.driftFactor * duration) + 2;
        return new RedlockLock(this, existing.resources, existing.value, [], start + duration - drift, existing.hold);
    }
    async using(resources, duration, settingsOrRoutine, optionalRoutine) {
        const settings = settingsOrRoutine && typeof settingsOrRoutine !== "function" ? settingsOrRoutine : undefined;
        const routine = optionalRoutine ?? settingsOrRoutine;
        if (typeof routine !== "function")
            throw new Error("INVARIANT: routine is not a function.");
        const lock = await this.take(resources, duration, settings, true);
        const controller = new AbortController();
        const signal = controller.signal;
        const onLost = (err) => {
            signal.error = err;
            controller.abort(err);
        };
        lock.hold.onLost(onLost);
        try {
            return await routine(signal);
        }
        finally {
            lock.hold.off("lost", onLost);
            await lock.release().catch(() => { });
        }
    }
    /** Closes the session (releasing what it holds); the client given stays open. */
    async quit() {
        const s = this.session;
        this.session = undefined;
        if (s)
            await (await s).close();
    }
}
exports.ModuleRedlock = ModuleRedlock;
//# sourceMappingURL=redlock.js.map