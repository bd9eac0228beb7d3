"use strict";
// The acquire path every object's wait takes (a lock's kinds, a semaphore's permits, a latch
// opening, an election's campaign): the command, a try through the user's client or a BLOCK wait
// on a pooled connection, the cancel of the contract (LOCK.CANCEL, then the release of a grant
// that crossed it), NOSESSION and cluster redirections, and the re-queue of a wait whose
// connection broke. Functions over a SessionCore: the core session never calls them, the objects do.
Object.defineProperty(exports, "__esModule", { value: true });
exports.acquireRaw = acquireRaw;
const errors_1 = require("../errors");
const slot_1 = require("../slot");
const node_session_1 = require("./node-session");
const util_1 = require("./util");
const ACQUIRE_CMD = {
    exclusive: "LOCK.ACQUIRE",
    read: "LOCK.RACQUIRE",
    write: "LOCK.WACQUIRE",
    multi: "LOCK.MACQUIRE",
};
/** The connection a wait was on broke mid-wait (`cause`: the client's error); a grant may have happened. */
class WaitBroken extends Error {
    constructor(cause) {
        super("the connection of a wait broke", { cause });
    }
}
/** The keys of one acquire: at least one, and in a cluster all in one slot (a multi-lock is one command). */
function checkKeys(s, keys) {
    if (keys.length === 0)
        throw new errors_1.LockError("no keys to lock");
    if (s.adapter.cluster && keys.length > 1) {
        const slot = (0, slot_1.keySlot)(keys[0]);
        if (keys.some((k) => (0, slot_1.keySlot)(k) !== slot))
            throw new errors_1.LockError(`a multi-lock's keys must hash to one cluster slot: give them one {hash tag}, e.g. '{order:7}:a', '{order:7}:b' (got ${keys.join(", ")})`);
    }
}
/**
 * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
 * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
 * in the time left) when the connection it waits on breaks while the server can still be reached.
 */
async function acquireRaw(s, spec) {
    if (s.closed)
        throw new errors_1.LockError("session closed");
    checkKeys(s, spec.keys);
    if (spec.bind && spec.kind !== "latch")
        s.checkLease(spec.leaseMs);
    spec.signal?.throwIfAborted();
    const deadline = spec.timeoutMs !== undefined && spec.timeoutMs > 0 ? performance.now() + spec.timeoutMs : undefined;
    let nosessionRetried = false;
    for (let attempt = 0;; attempt++) {
        // (nodeFor and nodeSession answer at once when they can: no await then.)
        const n = s.nodeFor(spec.keys[0]);
        const node = typeof n === "string" ? n : await n;
        let ns;
        if (spec.bind) {
            const x = s.nodeSession(node);
            ns = x instanceof node_session_1.NodeSession ? x : await x;
        }
        const epoch = ns?.epoch ?? 0;
        const args = acquireArgs(s, spec);
        try {
            const reply = await sendAcquire(s, node, spec, args);
            if (reply != null && ns && spec.kind !== "election" && (ns.epoch !== epoch || !ns.up)) {
                // Served while the session connection was being replaced: the grant may carry its lease only.
                await s.reattach(spec.keys, spec.owner, spec.leaseMs, spec.kind === "semaphore").catch(() => { });
            }
            return reply;
        }
        catch (e) {
            if (spec.signal?.aborted && e === spec.signal.reason)
                throw e;
            if (e instanceof WaitBroken) {
                await requeue(s, node, spec, e.cause);
                spec.signal?.throwIfAborted(); // aborted while the old owner was cleaned up: the fresh one was never queued
                if (deadline !== undefined) {
                    const left = Math.ceil(deadline - performance.now());
                    if (left <= 0)
                        return null; // timed out, as the server would have said
                    spec.timeoutMs = left;
                }
                continue;
            }
            const code = (0, errors_1.replyCode)(e);
            if (code === "NOSESSION" && spec.bind && !nosessionRetried) {
                nosessionRetried = true;
                if (s.adapter.cluster)
                    await s.loadSlots();
                const n2 = await s.nodeFor(spec.keys[0]);
                const ns2 = s.nodeSessionIfAny(n2);
                if (ns2 && ns2.up) {
                    ns2.recycle();
                    await (0, util_1.sleep)(10);
                }
                continue;
            }
            if ((code === "MOVED" || code === "ASK" || code === "TRYAGAIN") && attempt < 5) {
                await s.loadSlots();
                if (code === "TRYAGAIN")
                    await (0, util_1.sleep)(50);
                continue;
            }
            throw (0, errors_1.toLockError)(e);
        }
    }
}
/**
 * The connection a wait was on broke (CLIENT KILL, an idle reaper, a blip): on a fresh
 * connection, end the old owner's wait and release a grant that may have crossed the break
 * (the cancel of the contract), then give the wait a fresh owner for its next turn in line, or
 * keep the owner when it cannot change. Keeping it is safe only after the cleanup's release has
 * answered: a grant that crossed the break would otherwise make the next acquire a re-entry.
 * The release names exactly the side or kind waited for, so what the owner held before the wait
 * (its other side of a read-write lock, its other keys) stays; a re-entry never waits, so never
 * comes here. Rejects with the broken connection's error when the session is closing, with
 * AuthenticationError / UnavailableError when no fresh connection can be made.
 */
async function requeue(s, node, spec, broken) {
    if (s.closed) {
        await boundedCleanup(s, spec);
        throw (0, errors_1.toLockError)(broken);
    }
    let conn;
    try {
        conn = await s.pool.take(node);
    }
    catch (e) {
        void boundedCleanup(s, spec); // through the client, in case it reconnects before the lease ends
        throw (0, errors_1.toLockError)(e);
    }
    try {
        await cleanup(s, spec, (args) => conn.call(args));
    }
    finally {
        s.pool.give(node, conn);
    }
    if (spec.freshOwner)
        spec.owner = spec.freshOwner(); // (a latch wait has no owner and no freshOwner)
}
function acquireArgs(s, spec) {
    let args;
    if (spec.kind === "latch")
        args = ["LATCH.AWAIT", spec.keys[0]];
    else if (spec.kind === "election") {
        args = ["ELECT.CAMPAIGN", spec.keys[0], spec.owner];
        if (spec.value !== undefined)
            args.push("VALUE", spec.value);
        args.push("PX", String(spec.leaseMs));
    }
    else if (spec.kind === "semaphore")
        args = ["SEM.ACQUIRE", spec.keys[0], spec.owner, "PERMITS", String(spec.permits ?? 1), "PX", String(spec.leaseMs)];
    else {
        const cmd = ACQUIRE_CMD[spec.kind];
        args =
            spec.kind === "multi"
                ? [cmd, String(spec.keys.length), ...spec.keys, spec.owner]
                : [cmd, spec.keys[0], spec.owner];
        args.push("PX", String(spec.leaseMs));
    }
    if (spec.timeoutMs === undefined)
        args.push("BLOCK", "0");
    else if (spec.timeoutMs > 0)
        args.push("BLOCK", String(Math.ceil(spec.timeoutMs)));
    if (spec.kind !== "latch" && spec.kind !== "semaphore" && spec.kind !== "election")
        args.push("FENCE");
    if (spec.bind)
        args.push("SESSION", s.token);
    return args;
}
/**
 * After a cancelled wait: `LOCK.CANCEL key owner`, then `LOCK.RELEASE key owner` (MRELEASE for
 * a multi-lock, SEM.RELEASE for a semaphore) for a grant that crossed it. A latch wait has no
 * owner and is given nothing: closing its connection ended it.
 */
async function cleanup(s, spec, send = (args) => s.adapter.call(spec.keys[0], args)) {
    if (spec.kind === "latch")
        return;
    // First end the wait in the server: once LOCK.CANCEL has answered no grant can reach the
    // owner, so the release below drops exactly what crossed the cancel. (Closing the waiting
    // connection alone leaves a window: a grant written into a socket just closed looks
    // delivered to the server.) A multi-lock waiter leaves every key's queue through one key.
    for (let i = 0; i < 3; i++) {
        try {
            await send(["LOCK.CANCEL", spec.keys[0], spec.owner]);
            break;
        }
        catch (e) {
            if ((0, errors_1.replyCode)(e) !== undefined)
                break;
            await (0, util_1.sleep)(50);
        }
    }
    const args = spec.kind === "multi"
        ? ["LOCK.MRELEASE", String(spec.keys.length), ...spec.keys, spec.owner]
        : spec.kind === "election"
            ? ["ELECT.RESIGN", spec.keys[0], spec.owner]
            : [spec.kind === "semaphore" ? "SEM.RELEASE" : "LOCK.RELEASE", spec.keys[0], spec.owner];
    if (spec.kind === "read")
        args.push("READ");
    if (spec.kind === "write")
        args.push("WRITE");
    for (let i = 0; i < 3; i++) {
        try {
            await send(args);
            return;
        }
        catch (e) {
            const code = (0, errors_1.replyCode)(e);
            if (code !== undefined)
                return; // NOTOWNER: it was never granted (EXPIRED: its lease ended, the permits are back)
            await (0, util_1.sleep)(50);
        }
    }
}
/** The cleanup, waited for at most 2 s (a client queueing offline goes on in the background). */
function boundedCleanup(s, spec) {
    return Promise.race([cleanup(s, spec), (0, util_1.sleep)(2000)]);
}
function sendAcquire(s, node, spec, args) {
    const waits = spec.timeoutMs === undefined || spec.timeoutMs > 0;
    if (!waits) {
        // A try: through the user's client, which follows MOVED.
        return s.adapter.call(spec.keys[0], args);
    }
    const taken = s.pool.take(node);
    if (taken instanceof Promise) {
        return taken.then((conn) => waitOn(s, node, spec, args, conn), (e) => {
            throw (0, errors_1.toLockError)(e);
        });
    }
    return waitOn(s, node, spec, args, taken);
}
/** The wait on a pooled connection: its answer, or the cancel of the contract (close the connection, release the owner). */
function waitOn(s, node, spec, args, conn) {
    if (!spec.signal && spec.timeoutMs === undefined) {
        // Nothing can cancel this wait but a broken connection: no guard, no listener.
        return conn.call(args).then((reply) => {
            s.pool.give(node, conn);
            return reply;
        }, (e) => waitFailed(s, node, spec, conn, e));
    }
    return new Promise((resolve, reject) => {
        let settled = false;
        let guard;
        const onAbort = () => cancel(spec.signal.reason ?? new DOMException("aborted", "AbortError"));
        const finish = () => {
            settled = true;
            clearTimeout(guard);
            spec.signal?.removeEventListener("abort", onAbort);
        };
        const cancel = (reason) => {
            if (settled)
                return;
            finish();
            // Closing the connection drops the waiter at once; a grant whose answer was in flight is
            // released by the module; the RELEASE covers one that arrived as the connection closed.
            s.pool.discard(conn);
            boundedCleanup(s, spec).finally(() => reject(reason));
        };
        spec.signal?.addEventListener("abort", onAbort, { once: true });
        if (spec.timeoutMs !== undefined) {
            // The server ends the wait at BLOCK time; this guard only covers a server that stopped answering.
            guard = setTimeout(() => cancel(new errors_1.UnavailableError(`no answer from the server ${spec.timeoutMs + 5000} ms into a wait`)), spec.timeoutMs + 5000);
        }
        conn.call(args).then((reply) => {
            if (settled)
                return;
            finish();
            s.pool.give(node, conn);
            resolve(reply);
        }, (e) => {
            if (settled)
                return;
            finish();
            waitFailed(s, node, spec, conn, e).catch(reject);
        });
    });
}
/**
 * A wait answered with an error (the connection goes back: rejects with `e`) or broken (it is
 * closed; rejects with WaitBroken, for acquireRaw to clean up and queue again).
 */
function waitFailed(s, node, spec, conn, e) {
    if ((0, errors_1.replyCode)(e) !== undefined) {
        s.pool.give(node, conn);
        return Promise.reject(e);
    }
    s.pool.discard(conn);
    return Promise.reject(new WaitBroken(e));
}
//# sourceMappingURL=acquire.js.map