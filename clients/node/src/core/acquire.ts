// The acquire path every object's wait takes (a lock's kinds, a semaphore's permits, a latch
// opening, an election's campaign): the command, a try through the user's client or a BLOCK wait
// on a pooled connection, the cancel of the contract (LOCK.CANCEL, then the release of a grant
// that crossed it), NOSESSION and cluster redirections, and the re-queue of a wait whose
// connection broke. Functions over a SessionCore: the core session never calls them, the objects do.

import { Connection } from "../adapter";
import { LockError, UnavailableError, replyCode, toLockError } from "../errors";
import { keySlot } from "../slot";
import { NodeSession } from "./node-session";
import { SessionCore } from "./session";
import { sleep } from "./util";

/** A lock's kinds: exclusive, one side of a read-write lock, a multi-lock. */
export type Kind = "exclusive" | "read" | "write" | "multi";
/** What a wait is for: a lock's kinds, a semaphore's permits, a latch opening, an election's campaign. */
export type WaitKind = Kind | "semaphore" | "latch" | "election";

const ACQUIRE_CMD: Record<Kind, string> = {
  exclusive: "LOCK.ACQUIRE",
  read: "LOCK.RACQUIRE",
  write: "LOCK.WACQUIRE",
  multi: "LOCK.MACQUIRE",
};

/** One acquire (or wait) as its object asks for it. */
export interface RunSpec {
  kind: WaitKind;
  keys: string[];
  /** The owner ("" for a latch wait, which has none). A wait re-queued after its connection broke sets the fresh one here. */
  owner: string;
  /**
   * A fresh owner for a wait whose connection broke: the old owner is cleaned up and the wait
   * queued again under this one. Absent when the owner cannot change (an owner given by the
   * caller, the other side of a read-write lock holding, an election's candidate): the same
   * owner is queued again once its cleanup has answered.
   */
  freshOwner?: () => string;
  leaseMs: number;
  /** Permits asked for (a semaphore). */
  permits?: number;
  /** The leader's value (an election). */
  value?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Bind to the session (SESSION token); false for plain leases (the redlock-shaped `acquire`). */
  bind: boolean;
}

/** The connection a wait was on broke mid-wait (`cause`: the client's error); a grant may have happened. */
class WaitBroken extends Error {
  constructor(cause: unknown) {
    super("the connection of a wait broke", { cause });
  }
}

/** The keys of one acquire: at least one, and in a cluster all in one slot (a multi-lock is one command). */
function checkKeys(s: SessionCore, keys: string[]): void {
  if (keys.length === 0) throw new LockError("no keys to lock");
  if (s.adapter.cluster && keys.length > 1) {
    const slot = keySlot(keys[0]);
    if (keys.some((k) => keySlot(k) !== slot))
      throw new LockError(
        `a multi-lock's keys must hash to one cluster slot: give them one {hash tag}, e.g. '{order:7}:a', '{order:7}:b' (got ${keys.join(", ")})`,
      );
  }
}

/**
 * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
 * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
 * in the time left) when the connection it waits on breaks while the server can still be reached.
 */
export async function acquireRaw(s: SessionCore, spec: RunSpec): Promise<unknown> {
  if (s.closed) throw new LockError("session closed");
  checkKeys(s, spec.keys);
  if (spec.bind && spec.kind !== "latch") s.checkLease(spec.leaseMs);
  spec.signal?.throwIfAborted();
  const deadline = spec.timeoutMs !== undefined && spec.timeoutMs > 0 ? performance.now() + spec.timeoutMs : undefined;
  let nosessionRetried = false;
  for (let attempt = 0; ; attempt++) {
    // (nodeFor and nodeSession answer at once when they can: no await then.)
    const n = s.nodeFor(spec.keys[0]);
    const node = typeof n === "string" ? n : await n;
    let ns: NodeSession | undefined;
    if (spec.bind) {
      const x = s.nodeSession(node);
      ns = x instanceof NodeSession ? x : await x;
    }
    const epoch = ns?.epoch ?? 0;
    const args = acquireArgs(s, spec);
    try {
      const reply = await sendAcquire(s, node, spec, args);
      if (reply != null && ns && spec.kind !== "election" && (ns.epoch !== epoch || !ns.up)) {
        // Served while the session connection was being replaced: the grant may carry its lease only.
        await s.reattach(spec.keys, spec.owner, spec.leaseMs, spec.kind === "semaphore").catch(() => {});
      }
      return reply;
    } catch (e) {
      if (spec.signal?.aborted && e === spec.signal.reason) throw e;
      if (e instanceof WaitBroken) {
        await requeue(s, node, spec, e.cause);
        spec.signal?.throwIfAborted(); // aborted while the old owner was cleaned up: the fresh one was never queued
        if (deadline !== undefined) {
          const left = Math.ceil(deadline - performance.now());
          if (left <= 0) return null; // timed out, as the server would have said
          spec.timeoutMs = left;
        }
        continue;
      }
      const code = replyCode(e);
      if (code === "NOSESSION" && spec.bind && !nosessionRetried) {
        nosessionRetried = true;
        if (s.adapter.cluster) await s.loadSlots();
        const n2 = await s.nodeFor(spec.keys[0]);
        const ns2 = s.nodeSessionIfAny(n2);
        if (ns2 && ns2.up) {
          ns2.recycle();
          await sleep(10);
        }
        continue;
      }
      if ((code === "MOVED" || code === "ASK" || code === "TRYAGAIN") && attempt < 5) {
        await s.loadSlots();
        if (code === "TRYAGAIN") await sleep(50);
        continue;
      }
      throw toLockError(e);
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
async function requeue(s: SessionCore, node: string, spec: RunSpec, broken: unknown): Promise<void> {
  if (s.closed) {
    await boundedCleanup(s, spec);
    throw toLockError(broken);
  }
  let conn: Connection;
  try {
    conn = await s.pool.take(node);
  } catch (e) {
    void boundedCleanup(s, spec); // through the client, in case it reconnects before the lease ends
    throw toLockError(e);
  }
  try {
    await cleanup(s, spec, (args) => conn.call(args));
  } finally {
    s.pool.give(node, conn);
  }
  if (spec.freshOwner) spec.owner = spec.freshOwner(); // (a latch wait has no owner and no freshOwner)
}

function acquireArgs(s: SessionCore, spec: RunSpec): string[] {
  let args: string[];
  if (spec.kind === "latch") args = ["LATCH.AWAIT", spec.keys[0]];
  else if (spec.kind === "election") {
    args = ["ELECT.CAMPAIGN", spec.keys[0], spec.owner];
    if (spec.value !== undefined) args.push("VALUE", spec.value);
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
  if (spec.timeoutMs === undefined) args.push("BLOCK", "0");
  else if (spec.timeoutMs > 0) args.push("BLOCK", String(Math.ceil(spec.timeoutMs)));
  if (spec.kind !== "latch" && spec.kind !== "semaphore" && spec.kind !== "election") args.push("FENCE");
  if (spec.bind) args.push("SESSION", s.token);
  return args;
}

/**
 * After a cancelled wait: `LOCK.CANCEL key owner`, then `LOCK.RELEASE key owner` (MRELEASE for
 * a multi-lock, SEM.RELEASE for a semaphore) for a grant that crossed it. A latch wait has no
 * owner and is given nothing: closing its connection ended it.
 */
async function cleanup(
  s: SessionCore,
  spec: RunSpec,
  send: (args: string[]) => Promise<unknown> = (args) => s.adapter.call(spec.keys[0], args),
): Promise<void> {
  if (spec.kind === "latch") return;
  // First end the wait in the server: once LOCK.CANCEL has answered no grant can reach the
  // owner, so the release below drops exactly what crossed the cancel. (Closing the waiting
  // connection alone leaves a window: a grant written into a socket just closed looks
  // delivered to the server.) A multi-lock waiter leaves every key's queue through one key.
  for (let i = 0; i < 3; i++) {
    try {
      await send(["LOCK.CANCEL", spec.keys[0], spec.owner]);
      break;
    } catch (e) {
      if (replyCode(e) !== undefined) break;
      await sleep(50);
    }
  }
  const args =
    spec.kind === "multi"
      ? ["LOCK.MRELEASE", String(spec.keys.length), ...spec.keys, spec.owner]
      : spec.kind === "election"
        ? ["ELECT.RESIGN", spec.keys[0], spec.owner]
        : [spec.kind === "semaphore" ? "SEM.RELEASE" : "LOCK.RELEASE", spec.keys[0], spec.owner];
  if (spec.kind === "read") args.push("READ");
  if (spec.kind === "write") args.push("WRITE");
  for (let i = 0; i < 3; i++) {
    try {
      await send(args);
      return;
    } catch (e) {
      const code = replyCode(e);
      if (code !== undefined) return; // NOTOWNER: it was never granted (EXPIRED: its lease ended, the permits are back)
      await sleep(50);
    }
  }
}

/** The cleanup, waited for at most 2 s (a client queueing offline goes on in the background). */
function boundedCleanup(s: SessionCore, spec: RunSpec): Promise<void> {
  return Promise.race([cleanup(s, spec), sleep(2000)]);
}

function sendAcquire(s: SessionCore, node: string, spec: RunSpec, args: string[]): Promise<unknown> {
  const waits = spec.timeoutMs === undefined || spec.timeoutMs > 0;
  if (!waits) {
    // A try: through the user's client, which follows MOVED.
    return s.adapter.call(spec.keys[0], args);
  }
  const taken = s.pool.take(node);
  if (taken instanceof Promise) {
    return taken.then(
      (conn) => waitOn(s, node, spec, args, conn),
      (e) => {
        throw toLockError(e);
      },
    );
  }
  return waitOn(s, node, spec, args, taken);
}

/** The wait on a pooled connection: its answer, or the cancel of the contract (close the connection, release the owner). */
function waitOn(s: SessionCore, node: string, spec: RunSpec, args: string[], conn: Connection): Promise<unknown> {
  if (!spec.signal && spec.timeoutMs === undefined) {
    // Nothing can cancel this wait but a broken connection: no guard, no listener.
    return conn.call(args).then(
      (reply) => {
        s.pool.give(node, conn);
        return reply;
      },
      (e) => waitFailed(s, node, spec, conn, e),
    );
  }
  return new Promise<unknown>((resolve, reject) => {
    let settled = false;
    let guard: NodeJS.Timeout | undefined;
    const onAbort = () => cancel(spec.signal!.reason ?? new DOMException("aborted", "AbortError"));
    const finish = () => {
      settled = true;
      clearTimeout(guard);
      spec.signal?.removeEventListener("abort", onAbort);
    };
    const cancel = (reason: unknown) => {
      if (settled) return;
      finish();
      // Closing the connection drops the waiter at once; a grant whose answer was in flight is
      // released by the module; the RELEASE covers one that arrived as the connection closed.
      s.pool.discard(conn);
      boundedCleanup(s, spec).finally(() => reject(reason));
    };
    spec.signal?.addEventListener("abort", onAbort, { once: true });
    if (spec.timeoutMs !== undefined) {
      // The server ends the wait at BLOCK time; this guard only covers a server that stopped answering.
      guard = setTimeout(
        () => cancel(new UnavailableError(`no answer from the server ${spec.timeoutMs! + 5000} ms into a wait`)),
        spec.timeoutMs + 5000,
      );
    }
    conn.call(args).then(
      (reply) => {
        if (settled) return;
        finish();
        s.pool.give(node, conn);
        resolve(reply);
      },
      (e) => {
        if (settled) return;
        finish();
        waitFailed(s, node, spec, conn, e).catch(reject);
      },
    );
  });
}

/**
 * A wait answered with an error (the connection goes back: rejects with `e`) or broken (it is
 * closed; rejects with WaitBroken, for acquireRaw to clean up and queue again).
 */
function waitFailed(s: SessionCore, node: string, spec: RunSpec, conn: Connection, e: unknown): Promise<never> {
  if (replyCode(e) !== undefined) {
    s.pool.give(node, conn);
    return Promise.reject(e);
  }
  s.pool.discard(conn);
  return Promise.reject(new WaitBroken(e));
}

