"use strict";
Object.defineProperty(exports, "__esModule", { value: true });
exports.LeaseTooShortError = exports.AuthenticationError = exports.ModuleNotLoadedError = exports.UnavailableError = exports.LatchGoneError = exports.LostError = exports.DeadlockError = exports.NotOwnerError = exports.BusyError = exports.LockError = void 0;
exports.isAuthError = isAuthError;
exports.isReplyError = isReplyError;
exports.replyCode = replyCode;
exports.toLockError = toLockError;
/** Base of every error this library throws. `code` is the server's leading code word when the error is a reply. */
class LockError extends Error {
    code;
    constructor(message, options) {
        super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
        this.name = new.target.name;
        if (options?.code !== undefined)
            this.code = options.code;
    }
}
exports.LockError = LockError;
/** The lock is held by another owner: a try without waiting, or the wait timed out. */
class BusyError extends LockError {
    key;
    constructor(key, message) {
        super(message ?? `lock '${key}' is held by another owner`);
        this.key = key;
    }
}
exports.BusyError = BusyError;
/** The server says this owner holds no hold on the lock (`NOTOWNER`): released already, or its lease ended. */
class NotOwnerError extends LockError {
    constructor(message, options) {
        super(message, { ...options, code: "NOTOWNER" });
    }
}
exports.NotOwnerError = NotOwnerError;
/**
 * The module refused a wait that could never end (`DEADLOCK`): it would close a cycle of waits (the
 * message names each step: owner, key, next owner), or a reader asked for the write hold beside other
 * readers. The caller was not queued and keeps what it held: release, then take the locks again in
 * one fixed order.
 */
class DeadlockError extends LockError {
    constructor(message, options) {
        super(message, { ...options, code: "DEADLOCK" });
    }
}
exports.DeadlockError = DeadlockError;
/** A hold ended without its owner releasing it. It is the reason of `hold.signal`. */
class LostError extends LockError {
    key;
    owner;
    reason;
    constructor(key, owner, reason, what = "lock") {
        super(what === "lock"
            ? `lock '${key}' held by '${owner}' was lost (${reason})`
            : what === "semaphore"
                ? `permits of semaphore '${key}' held by '${owner}' were lost (${reason})`
                : `leadership of '${key}' by candidate '${owner}' was lost (${reason})`);
        this.key = key;
        this.owner = owner;
        this.reason = reason;
    }
}
exports.LostError = LostError;
/** `GONE`: the latch a `wait()` waited on ended without reaching zero (deleted, flushed, overwritten, or expired). */
class LatchGoneError extends LockError {
    key;
    constructor(key, message, options) {
        super(message, { ...options, code: "GONE" });
        this.key = key;
    }
}
exports.LatchGoneError = LatchGoneError;
/** The server cannot be reached, or the connection broke while a command was in flight. */
class UnavailableError extends LockError {
}
exports.UnavailableError = UnavailableError;
/** The server does not know the lock module's commands. */
class ModuleNotLoadedError extends LockError {
    constructor(message) {
        super(message ??
            "the lock module is not loaded on this server: start the server with --loadmodule /path/to/liblock.so");
    }
}
exports.ModuleNotLoadedError = ModuleNotLoadedError;
/**
 * The server refused the client's credentials or the command: a wrong password (`WRONGPASS`), no
 * password given (`NOAUTH`), or an ACL refusal (`NOPERM`). `code` is that code word. Never
 * retried: another try would be refused the same way.
 */
class AuthenticationError extends LockError {
    constructor(message, options) {
        super(message, options);
    }
}
exports.AuthenticationError = AuthenticationError;
/**
 * A lease shorter than this server can keep alive: its `keepalive_min_lease_ms` (`INFO lock`), which
 * depends on its `hz` (about 704 ms at hz 10). Like a RangeError, refused before anything is held.
 */
class LeaseTooShortError extends LockError {
    leaseMs;
    minLeaseMs;
    constructor(leaseMs, minLeaseMs, options) {
        super(`lease ${leaseMs} ms is below this server's minimum of ${minLeaseMs} ms ` +
            `(keepalive_min_lease_ms; raise the lease or the server's hz)`, options);
        this.leaseMs = leaseMs;
        this.minLeaseMs = minLeaseMs;
    }
}
exports.LeaseTooShortError = LeaseTooShortError;
const AUTH_CODES = new Set(["WRONGPASS", "NOAUTH", "NOPERM"]);
/** True for a credentials or ACL refusal (`WRONGPASS`, `NOAUTH`, `NOPERM`), as a reply or as this library's error. */
function isAuthError(e) {
    if (e instanceof AuthenticationError)
        return true;
    const code = replyCode(e);
    return code !== undefined && AUTH_CODES.has(code);
}
const REPLY_ERROR_NAMES = new Set(["ReplyError", "ErrorReply", "SimpleError", "BlobError", "MultiErrorReply"]);
/** True when `e` is an error reply from the server (ioredis or node-redis), not a connection failure. */
function isReplyError(e) {
    if (!(e instanceof Error))
        return false;
    if (REPLY_ERROR_NAMES.has(e.name))
        return true;
    let proto = Object.getPrototypeOf(e);
    while (proto && proto !== Error.prototype) {
        const ctor = proto.constructor;
        if (ctor?.name && REPLY_ERROR_NAMES.has(ctor.name))
            return true;
        proto = Object.getPrototypeOf(proto);
    }
    return false;
}
/** The leading code word of an error reply (`NOTOWNER`, `ERR`, `MOVED`...), or undefined for other errors. */
function replyCode(e) {
    if (!isReplyError(e))
        return undefined;
    const m = /^([A-Z][A-Z_-]*)\b/.exec(e.message);
    return m ? m[1] : undefined;
}
/** Turns an error from a client into this library's typed error. */
function toLockError(e) {
    if (e instanceof LockError)
        return e;
    const code = replyCode(e);
    const msg = e instanceof Error ? e.message : String(e);
    if (code === undefined) {
        if (e instanceof Error && e.name === "AbortError")
            return e;
        return new UnavailableError(`server unavailable: ${msg}`, { cause: e });
    }
    if (AUTH_CODES.has(code))
        return new AuthenticationError(msg, { cause: e, code });
    switch (code) {
        case "NOTOWNER":
            return new NotOwnerError(msg, { cause: e });
        case "DEADLOCK":
            return new DeadlockError(msg, { cause: e });
        case "LOADING":
        case "MASTERDOWN":
        case "CLUSTERDOWN":
        case "TRYAGAIN":
        case "READONLY":
            return new UnavailableError(msg, { cause: e, code });
        default:
            return new LockError(msg, { cause: e, code });
    }
}
//# sourceMappingURL=errors.js.map