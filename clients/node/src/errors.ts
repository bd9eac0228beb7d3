/** Base of every error this library throws. `code` is the server's leading code word when the error is a reply. */
export class LockError extends Error {
  readonly code?: string;
  constructor(message: string, options?: { cause?: unknown; code?: string }) {
    super(message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    if (options?.code !== undefined) this.code = options.code;
  }
}

/** The lock is held by another owner: a try without waiting, or the wait timed out. */
export class BusyError extends LockError {
  readonly key: string;
  constructor(key: string, message?: string) {
    super(message ?? `lock '${key}' is held by another owner`);
    this.key = key;
  }
}

/** The server says this owner holds no hold on the lock (`NOTOWNER`): released already, or its lease ended. */
export class NotOwnerError extends LockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { ...options, code: "NOTOWNER" });
  }
}

/**
 * The module refused a wait that could never end (`DEADLOCK`): it would close a cycle of waits (the
 * message names each step: owner, key, next owner), or a reader asked for the write hold beside other
 * readers. The caller was not queued and keeps what it held: release, then take the locks again in
 * one fixed order.
 */
export class DeadlockError extends LockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { ...options, code: "DEADLOCK" });
  }
}

/** Why a hold was lost. */
export type LostReason =
  | "forced" // LOCK.FORCERELEASE
  | "gone" // the key was deleted, flushed, overwritten, or its lease ran out
  | "maxhold" // lock.keepalive-max-hold-ms passed
  | "moved" // the slot moved to another cluster node
  | "notowner" // a re-attach or an extend was answered NOTOWNER
  | "down" // the session connection was down longer than the lease
  // elections
  | "idle" // the server heard nothing from the session connection for a lease: renewals stopped
  | "demoted" // the server became a replica
  | "connection" // the session connection dropped
  | "deadline"; // no PING answered within half a lease: the server may hand over from then on

/** A hold ended without its owner releasing it. It is the reason of `hold.signal`. */
export class LostError extends LockError {
  readonly key: string;
  readonly owner: string;
  readonly reason: LostReason;
  constructor(key: string, owner: string, reason: LostReason, what: "lock" | "semaphore" | "election" = "lock") {
    super(
      what === "lock"
        ? `lock '${key}' held by '${owner}' was lost (${reason})`
        : what === "semaphore"
          ? `permits of semaphore '${key}' held by '${owner}' were lost (${reason})`
          : `leadership of '${key}' by candidate '${owner}' was lost (${reason})`,
    );
    this.key = key;
    this.owner = owner;
    this.reason = reason;
  }
}

/** `GONE`: the latch a `wait()` waited on ended without reaching zero (deleted, flushed, overwritten, or expired). */
export class LatchGoneError extends LockError {
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super(message, { ...options, code: "GONE" });
    this.key = key;
  }
}

/** The server cannot be reached, or the connection broke while a command was in flight. */
export class UnavailableError extends LockError {}

/** The server does not know the lock module's commands. */
export class ModuleNotLoadedError extends LockError {
  constructor(message?: string) {
    super(
      message ??
        "the lock module is not loaded on this server: start the server with --loadmodule /path/to/liblock.so",
    );
  }
}

/**
 * The server refused the client's credentials or the command: a wrong password (`WRONGPASS`), no
 * password given (`NOAUTH`), or an ACL refusal (`NOPERM`). `code` is that code word. Never
 * retried: another try would be refused the same way.
 */
export class AuthenticationError extends LockError {
  constructor(message: string, options: { cause?: unknown; code: string }) {
    super(message, options);
  }
}

/**
 * A lease shorter than this server can keep alive: its `keepalive_min_lease_ms` (`INFO lock`), which
 * depends on its `hz` (about 704 ms at hz 10). Like a RangeError, refused before anything is held.
 */
export class LeaseTooShortError extends LockError {
  readonly leaseMs: number;
  readonly minLeaseMs: number;
  constructor(leaseMs: number, minLeaseMs: number, options?: { cause?: unknown }) {
    super(
      `lease ${leaseMs} ms is below this server's minimum of ${minLeaseMs} ms ` +
        `(keepalive_min_lease_ms; raise the lease or the server's hz)`,
      options,
    );
    this.leaseMs = leaseMs;
    this.minLeaseMs = minLeaseMs;
  }
}

const AUTH_CODES = new Set(["WRONGPASS", "NOAUTH", "NOPERM"]);

/** True for a credentials or ACL refusal (`WRONGPASS`, `NOAUTH`, `NOPERM`), as a reply or as this library's error. */
export function isAuthError(e: unknown): boolean {
  if (e instanceof AuthenticationError) return true;
  const code = replyCode(e);
  return code !== undefined && AUTH_CODES.has(code);
}

const REPLY_ERROR_NAMES = new Set(["ReplyError", "ErrorReply", "SimpleError", "BlobError", "MultiErrorReply"]);

/** True when `e` is an error reply from the server (ioredis or node-redis), not a connection failure. */
export function isReplyError(e: unknown): e is Error {
  if (!(e instanceof Error)) return false;
  if (REPLY_ERROR_NAMES.has(e.name)) return true;
  let proto: unknown = Object.getPrototypeOf(e);
  while (proto && proto !== Error.prototype) {
    const ctor = (proto as { constructor?: { name?: string } }).constructor;
    if (ctor?.name && REPLY_ERROR_NAMES.has(ctor.name)) return true;
    proto = Object.getPrototypeOf(proto);
  }
  return false;
}

/** The leading code word of an error reply (`NOTOWNER`, `ERR`, `MOVED`...), or undefined for other errors. */
export function replyCode(e: unknown): string | undefined {
  if (!isReplyError(e)) return undefined;
  const m = /^([A-Z][A-Z_-]*)\b/.exec(e.message);
  return m ? m[1] : undefined;
}

/** Turns an error from a client into this library's typed error. */
export function toLockError(e: unknown): Error {
  if (e instanceof LockError) return e;
  const code = replyCode(e);
  const msg = e instanceof Error ? e.message : String(e);
  if (code === undefined) {
    if (e instanceof Error && e.name === "AbortError") return e;
    return new UnavailableError(`server unavailable: ${msg}`, { cause: e });
  }
  if (AUTH_CODES.has(code)) return new AuthenticationError(msg, { cause: e, code });
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
