"use strict";
// The shape of node-redlock v5 (npm `redlock`) over one server with the lock module: swap
// `new Redlock([client], settings)` for `new ModuleRedlock([client], settings)` and keep the
// callers of `acquire`, `release`, `extend` and `using`.
//
// Differences, on purpose: one server, so no quorum; waiting is the server's FIFO queue (BLOCK)
// for as long as the retry settings would have retried, not polling; a lock is a hash (field: the
// lock's value, Redisson's layout), not a string; `using` with a duration the server can keep
// alive binds the lock to a session (the server renews it while this process lives) instead of
// extending it on a timer, and its signal aborts when the server reports the lock lost.
Object.defineProperty(exports, "__esModule", { value: true });
exports.ModuleRedlock = exports.RedlockLock = exports.ExecutionError = exports.ResourceLockedError = void 0;
const node_events_1 = require("node:events");
const errors_1 = require("./errors");
const session_1 = require("./session");
const defaultSettings = Object.freeze({
    driftFactor: 0.01,
    retryCount: 10,
    retryDelay: 200,
    retryJitter: 100,
    automaticExtensionThreshold: 500,
});
/** As redlock's: a resource is locked by another owner (or, for a release or an extension, no longer by this one). */
class ResourceLockedError extends errors_1.LockError {
    constructor(message) {
        super(message);
    }
}
exports.ResourceLockedError = ResourceLockedError;
const QUORUM_MESSAGE = "The operation was unable to achieve a quorum during its retry window.";
/**
 * As redlock's: the operation failed in every attempt. `attempts` has one entry per attempt
 * counted as redlock counts them (`retryCount + 1` after a full retry window); `cause` is this
 * library's error for the last one (`BusyError`, `UnavailableError`, `AuthenticationError`...).
 */
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
    /** `token` in decimal, for JSON (this module's addition). */
    get tokenString() {
        return this.hold.tokenString;
    }
}
exports.RedlockLock = RedlockLock;
function checkDuration(duration) {
    if (Math.floor(duration) !== duration)
        throw new Error("Duration must be an integer value in milliseconds.");
}
function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
}
/** redlock's vote against when none of `resources` was locked, released or extended. */
function notApplied(resources, cause) {
    const e = new ResourceLockedError(`The operation was applied to: 0 of the ${resources.length} requested resources.`);
    return cause === undefined ? e : Object.assign(e, { cause });
}
/** Runs `op` on a lock's hold; a hold the server no longer has is redlock's vote against. */
async function onHold(resources, op) {
    try {
        await op();
    }
    catch (e) {
        if (e instanceof errors_1.LostError || e instanceof errors_1.NotOwnerError)
            throw notApplied(resources, e);
        throw e;
    }
}
/**
 * A failure another attempt cannot change, not retried: anything but a connection failure (an
 * authentication, module or lease refusal, an argument the server refuses).
 */
function isFinal(e) {
    return !(e instanceof errors_1.UnavailableError);
}
/** The error an attempt reports (vote against, `error` event): the client's own error for a connection failure, as redlock reports it. */
function voteError(e) {
    if (e instanceof errors_1.UnavailableError && e.cause instanceof Error)
        return e.cause;
    return e instanceof Error ? e : new Error(String(e));
}
/** Accepts redlock's `[client]` (an array, or any iterable, of exactly one client) or one client. */
function oneClient(clients) {
    if (clients === null || typeof clients !== "object")
        throw new TypeError("expected a redis client or an array of one");
    if (!(Symbol.iterator in clients))
        return clients;
    const set = new Set(clients);
    if (set.size === 0)
        throw new Error("Redlock must be instantiated with at least one redis client.");
    if (set.size > 1)
        throw new Error(`ModuleRedlock takes one server (the lock module's queue replaces redlock's quorum): got ${set.size} clients; ` +
            "pass [client] for the server that has the module");
    return [...set][0];
}
class ModuleRedlock extends node_events_1.EventEmitter {
    sessionOptions;
    settings;
    client;
    session;
    /**
     * `clients`: `[client]` as redlock takes it (more than one is refused: the module is one
     * server), or the client itself. `sessionOptions` configure the session under the hood.
     */
    constructor(clients, settings = {}, sessionOptions = {}) {
        super();
        this.sessionOptions = sessionOptions;
        // As redlock: an "error" event per failed attempt, never a crash for want of a listener.
        this.on("error", () => { });
        this.client = oneClient(clients);
        this.settings = { ...defaultSettings, ...settings };
    }
    /** The session used under the hood (opened on first use). */
    getSession() {
        if (!this.session) {
            const p = session_1.Session.open(this.client, this.sessionOptions);
            this.session = p;
            p.catch(() => {
                if (this.session === p)
                    this.session = undefined;
            });
        }
        return this.session;
    }
    stats(vote, error) {
        const votesFor = new Set();
        const votesAgainst = new Map();
        if (vote === "for")
            votesFor.add(this.client);
        else
            votesAgainst.set(this.client, error);
        return Promise.resolve({ membershipSize: 1, quorumSize: 1, votesFor, votesAgainst });
    }
    /**
     * redlock's retry loop around `op`. `op` gets the ms it may wait in the server's queue (the
     * retry window left) and returns a value, or throws. A `ResourceLockedError` (busy for the whole
     * window, or an answer retrying cannot change) counts every attempt left; a connection failure
     * counts one and is retried after `retryDelay ± retryJitter`, as redlock does; an
     * authentication, module or lease refusal (any reply but busy) is not retried.
     */
    async execute(s, op) {
        const maxAttempts = s.retryCount === -1 ? Infinity : s.retryCount + 1;
        const attempts = [];
        for (;;) {
            const left = maxAttempts - attempts.length - 1; // retries redlock still has
            const windowMs = left === Infinity ? undefined : Math.max(0, left * s.retryDelay);
            try {
                const value = await op(windowMs);
                attempts.push(this.stats("for"));
                return { value, attempts };
            }
            catch (e) {
                const vote = voteError(e);
                const counted = vote instanceof ResourceLockedError ? maxAttempts - attempts.length : 1;
                for (let i = 0; i < counted && attempts.length < maxAttempts; i++) {
                    attempts.push(this.stats("against", vote));
                    this.emit("error", vote);
                }
                if (attempts.length >= maxAttempts || isFinal(e))
                    throw new ExecutionError(QUORUM_MESSAGE, attempts, { cause: e });
                await sleep(Math.max(0, s.retryDelay + Math.floor((Math.random() * 2 - 1) * s.retryJitter)));
            }
        }
    }
    async take(resources, duration, s, bind) {
        const start = Date.now();
        const { value: hold, attempts } = await this.execute(s, async (windowMs) => {
            const session = await this.getSession();
            const lock = resources.length === 1 ? session.lock(resources[0]) : session.multiLock(resources);
            try {
                return await lock.acquireNow({ leaseMs: duration, timeoutMs: windowMs }, bind);
            }
            catch (e) {
                if (e instanceof errors_1.BusyError)
                    throw notApplied(resources, e);
                throw e;
            }
        });
        const drift = Math.round(s.driftFactor * duration) + 2;
        return new RedlockLock(this, resources, hold.owner, attempts, start + duration - drift, hold);
    }
    /**
     * Takes `resources` (all at once for several) for `duration` ms: a plain lease, as redlock's,
     * that ends unless extended. Waits in the server's queue for the retry window.
     */
    async acquire(resources, duration, settings) {
        checkDuration(duration);
        return this.take(resources, duration, { ...this.settings, ...settings }, false);
    }
    /**
     * Releases the lock. As redlock: `ExecutionError` (its attempts `ResourceLockedError`) when
     * this lock no longer holds (force-released, expired, taken over): the server's answer is
     * final, so the attempts are counted without waiting between them.
     */
    async release(lock, settings) {
        lock.expiration = 0;
        const releasedBefore = lock.hold.released;
        const { attempts } = await this.execute({ ...this.settings, ...settings }, async () => {
            if (releasedBefore)
                throw notApplied(lock.resources);
            await onHold(lock.resources, () => lock.hold.releaseAll());
            if (lock.hold.lost)
                throw notApplied(lock.resources);
        });
        return { attempts };
    }
    /** Sets the lease to `duration` ms from now: a new Lock (this one's `expiration` becomes 0). */
    async extend(existing, duration, settings) {
        checkDuration(duration);
        const s = { ...this.settings, ...settings };
        const start = Date.now();
        if (existing.expiration < Date.now())
            throw new ExecutionError("Cannot extend an already-expired lock.", []);
        const { attempts } = await this.execute(s, () => onHold(existing.resources, () => existing.hold.extend(duration)));
        existing.expiration = 0;
        const drift = Math.round(s.driftFactor * duration) + 2;
        return new RedlockLock(this, existing.resources, existing.value, attempts, start + duration - drift, existing.hold);
    }
    async using(resources, duration, settingsOrRoutine, optionalRoutine) {
        checkDuration(duration);
        const settings = settingsOrRoutine && typeof settingsOrRoutine !== "function" ? { ...this.settings, ...settingsOrRoutine } : this.settings;
        const routine = optionalRoutine ?? settingsOrRoutine;
        if (typeof routine !== "function")
            throw new Error("INVARIANT: routine is not a function.");
        if (settings.automaticExtensionThreshold > duration - 100)
            throw new Error("A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.");
        const controller = new AbortController();
        const signal = controller.signal;
        const abort = (error) => {
            signal.error = error;
            controller.abort(error);
        };
        let floor;
        try {
            floor = (await this.getSession()).minLeaseMs;
        }
        catch {
            // Unreachable for now: take() retries and reports it as redlock does.
        }
        const bound = floor !== undefined && duration >= floor;
        let lock = await this.take(resources, duration, settings, bound);
        let timer;
        let extension;
        const queue = () => {
            timer = setTimeout(() => (extension = extend()), lock.expiration - Date.now() - settings.automaticExtensionThreshold);
        };
        const extend = async () => {
            timer = undefined;
            try {
                lock = await lock.extend(duration);
                queue();
            }
            catch (e) {
                if (lock.expiration > Date.now())
                    return (extension = extend());
                abort(e instanceof Error ? e : new Error(String(e)));
            }
        };
        const onLost = (err) => abort(err);
        if (bound)
            lock.hold.onLost(onLost);
        else
            queue();
        try {
            return await routine(signal);
        }
        finally {
            if (timer)
                clearTimeout(timer);
            if (extension)
                await extension.catch(() => { });
            lock.hold.off("lost", onLost);
            await lock.release();
        }
    }
    /** Closes the session (releasing what it holds); the client given stays open (redlock quits it). */
    async quit() {
        const s = this.session;
        this.session = undefined;
        if (s)
            await (await s).close();
    }
}
exports.ModuleRedlock = ModuleRedlock;
//# sourceMappingURL=redlock.js.map