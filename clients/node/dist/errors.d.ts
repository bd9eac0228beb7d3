/** Base of every error this library throws. `code` is the server's leading code word when the error is a reply. */
export declare class LockError extends Error {
    readonly code?: string;
    constructor(message: string, options?: {
        cause?: unknown;
        code?: string;
    });
}
/** The lock is held by another owner: a try without waiting, or the wait timed out. */
export declare class BusyError extends LockError {
    readonly key: string;
    constructor(key: string, message?: string);
}
/** The server says this owner holds no hold on the lock (`NOTOWNER`): released already, or its lease ended. */
export declare class NotOwnerError extends LockError {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/**
 * The module refused a wait that could never end (`DEADLOCK`): it would close a cycle of waits (the
 * message names each step: owner, key, next owner), or a reader asked for the write hold beside other
 * readers. The caller was not queued and keeps what it held: release, then take the locks again in
 * one fixed order.
 */
export declare class DeadlockError extends LockError {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/** Why a hold was lost. */
export type LostReason = "forced" | "gone" | "maxhold" | "moved" | "notowner" | "down" | "idle" | "demoted" | "connection" | "deadline";
/** A hold ended without its owner releasing it. It is the reason of `hold.signal`. */
export declare class LostError extends LockError {
    readonly key: string;
    readonly owner: string;
    readonly reason: LostReason;
    constructor(key: string, owner: string, reason: LostReason, what?: "lock" | "semaphore" | "election");
}
/** `GONE`: the latch a `wait()` waited on ended without reaching zero (deleted, flushed, overwritten, or expired). */
export declare class LatchGoneError extends LockError {
    readonly key: string;
    constructor(key: string, message: string, options?: {
        cause?: unknown;
    });
}
/** The server cannot be reached, or the connection broke while a command was in flight. */
export declare class UnavailableError extends LockError {
}
/** The server does not know the lock module's commands. */
export declare class ModuleNotLoadedError extends LockError {
    constructor(message?: string);
}
/**
 * The server refused the client's credentials or the command: a wrong password (`WRONGPASS`), no
 * password given (`NOAUTH`), or an ACL refusal (`NOPERM`). `code` is that code word. Never
 * retried: another try would be refused the same way.
 */
export declare class AuthenticationError extends LockError {
    constructor(message: string, options: {
        cause?: unknown;
        code: string;
    });
}
/**
 * A lease shorter than this server can keep alive: its `keepalive_min_lease_ms` (`INFO lock`), which
 * depends on its `hz` (about 704 ms at hz 10). Like a RangeError, refused before anything is held.
 */
export declare class LeaseTooShortError extends LockError {
    readonly leaseMs: number;
    readonly minLeaseMs: number;
    constructor(leaseMs: number, minLeaseMs: number, options?: {
        cause?: unknown;
    });
}
/** True for a credentials or ACL refusal (`WRONGPASS`, `NOAUTH`, `NOPERM`), as a reply or as this library's error. */
export declare function isAuthError(e: unknown): boolean;
/** True when `e` is an error reply from the server (ioredis or node-redis), not a connection failure. */
export declare function isReplyError(e: unknown): e is Error;
/** The leading code word of an error reply (`NOTOWNER`, `ERR`, `MOVED`...), or undefined for other errors. */
export declare function replyCode(e: unknown): string | undefined;
/** Turns an error from a client into this library's typed error. */
export declare function toLockError(e: unknown): Error;
