// The shape of node-redlock v5 (npm `redlock`) over one server with the lock module: swap
// `new Redlock([client], settings)` for `new ModuleRedlock([client], settings)` and keep the
// callers of `acquire`, `release`, `extend` and `using`.
//
// Differences, on purpose: one server, so no quorum; waiting is the server's FIFO queue (BLOCK)
// for as long as the retry settings would have retried, not polling; a lock is a hash (field: the
// lock's value, Redisson's layout), not a string; `using` with a duration the server can keep
// alive binds the lock to a session (the server renews it while this process lives) instead of
// extending it on a timer, and its signal aborts when the server reports the lock lost.

import { EventEmitter } from "node:events";

import { BusyError, LockError, LostError, NotOwnerError, UnavailableError } from "./errors";
import type { SessionOptions } from "./core/session";
import type { Hold } from "./lock";
import { Session } from "./session";
import type { RedisClientLike } from "./adapter";

export interface Settings {
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly automaticExtensionThreshold: number;
}

const defaultSettings: Settings = Object.freeze({
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
});

/** As redlock's: what one attempt got from the servers (here always one: membership and quorum 1). */
export type ExecutionStats = {
  readonly membershipSize: number;
  readonly quorumSize: number;
  readonly votesFor: Set<RedisClientLike>;
  readonly votesAgainst: Map<RedisClientLike, Error>;
};

export type ExecutionResult = { attempts: ReadonlyArray<Promise<ExecutionStats>> };

export type RedlockAbortSignal = AbortSignal & { error?: Error };

/** As redlock's: a resource is locked by another owner (or, for a release or an extension, no longer by this one). */
export class ResourceLockedError extends LockError {
  constructor(message: string) {
    super(message);
  }
}

const QUORUM_MESSAGE = "The operation was unable to achieve a quorum during its retry window.";

/**
 * As redlock's: the operation failed in every attempt. `attempts` has one entry per attempt
 * counted as redlock counts them (`retryCount + 1` after a full retry window); `cause` is this
 * library's error for the last one (`BusyError`, `UnavailableError`, `AuthenticationError`...).
 */
export class ExecutionError extends LockError {
  readonly attempts: ReadonlyArray<Promise<ExecutionStats>>;
  constructor(message: string, attempts: ReadonlyArray<Promise<ExecutionStats>>, options?: { cause?: unknown }) {
    super(message, options);
    this.attempts = attempts;
  }
}

/** As redlock's `Lock`: `value` is the owner id, `expiration` a ms timestamp (0 once released or replaced). */
export class RedlockLock {
  constructor(
    readonly redlock: ModuleRedlock,
    readonly resources: string[],
    readonly value: string,
    readonly attempts: ReadonlyArray<Promise<ExecutionStats>>,
    public expiration: number,
    /** @internal */ readonly hold: Hold,
  ) {}

  release(): Promise<ExecutionResult> {
    return this.redlock.release(this);
  }

  extend(duration: number): Promise<RedlockLock> {
    return this.redlock.extend(this, duration);
  }

  /** The fencing token of the first resource (this module's addition). */
  get token(): bigint {
    return this.hold.token;
  }

  /** `token` in decimal, for JSON (this module's addition). */
  get tokenString(): string {
    return this.hold.tokenString;
  }
}

function checkDuration(duration: number): void {
  if (Math.floor(duration) !== duration) throw new Error("Duration must be an integer value in milliseconds.");
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** redlock's vote against when none of `resources` was locked, released or extended. */
function notApplied(resources: string[], cause?: unknown): ResourceLockedError {
  const e = new ResourceLockedError(`The operation was applied to: 0 of the ${resources.length} requested resources.`);
  return cause === undefined ? e : Object.assign(e, { cause });
}

/** Runs `op` on a lock's hold; a hold the server no longer has is redlock's vote against. */
async function onHold(resources: string[], op: () => Promise<unknown>): Promise<void> {
  try {
    await op();
  } catch (e) {
    if (e instanceof LostError || e instanceof NotOwnerError) throw notApplied(resources, e);
    throw e;
  }
}

/**
 * A failure another attempt cannot change, not retried: anything but a connection failure (an
 * authentication, module or lease refusal, an argument the server refuses).
 */
function isFinal(e: unknown): boolean {
  return !(e instanceof UnavailableError);
}

/** The error an attempt reports (vote against, `error` event): the client's own error for a connection failure, as redlock reports it. */
function voteError(e: unknown): Error {
  if (e instanceof UnavailableError && e.cause instanceof Error) return e.cause;
  return e instanceof Error ? e : new Error(String(e));
}

/** Accepts redlock's `[client]` (an array, or any iterable, of exactly one client) or one client. */
function oneClient(clients: RedisClientLike | Iterable<RedisClientLike>): RedisClientLike {
  if (clients === null || typeof clients !== "object") throw new TypeError("expected a redis client or an array of one");
  if (!(Symbol.iterator in clients)) return clients;
  const set = new Set(clients as Iterable<RedisClientLike>);
  if (set.size === 0) throw new Error("Redlock must be instantiated with at least one redis client.");
  if (set.size > 1)
    throw new Error(
      `ModuleRedlock takes one server (the lock module's queue replaces redlock's quorum): got ${set.size} clients; ` +
        "pass [client] for the server that has the module",
    );
  return [...set][0];
}

export class ModuleRedlock extends EventEmitter {
  readonly settings: Settings;
  private readonly client: RedisClientLike;
  private session?: Promise<Session>;

  /**
   * `clients`: `[client]` as redlock takes it (more than one is refused: the module is one
   * server), or the client itself. `sessionOptions` configure the session under the hood.
   */
  constructor(
    clients: RedisClientLike | Iterable<RedisClientLike>,
    settings: Partial<Settings> = {},
    private readonly sessionOptions: SessionOptions = {},
  ) {
    super();
    // As redlock: an "error" event per failed attempt, never a crash for want of a listener.
    this.on("error", () => {});
    this.client = oneClient(clients);
    this.settings = { ...defaultSettings, ...settings };
  }

  /** The session used under the hood (opened on first use). */
  getSession(): Promise<Session> {
    if (!this.session) {
      const p = Session.open(this.client, this.sessionOptions);
      this.session = p;
      p.catch(() => {
        if (this.session === p) this.session = undefined;
      });
    }
    return this.session;
  }

  private stats(vote: "for" | "against", error?: Error): Promise<ExecutionStats> {
    const votesFor = new Set<RedisClientLike>();
    const votesAgainst = new Map<RedisClientLike, Error>();
    if (vote === "for") votesFor.add(this.client);
    else votesAgainst.set(this.client, error!);
    return Promise.resolve({ membershipSize: 1, quorumSize: 1, votesFor, votesAgainst });
  }

  /**
   * redlock's retry loop around `op`. `op` gets the ms it may wait in the server's queue (the
   * retry window left) and returns a value, or throws. A `ResourceLockedError` (busy for the whole
   * window, or an answer retrying cannot change) counts every attempt left; a connection failure
   * counts one and is retried after `retryDelay ± retryJitter`, as redlock does; an
   * authentication, module or lease refusal (any reply but busy) is not retried.
   */
  private async execute<T>(
    s: Settings,
    op: (windowMs: number | undefined) => Promise<T>,
  ): Promise<{ value: T; attempts: Promise<ExecutionStats>[] }> {
    const maxAttempts = s.retryCount === -1 ? Infinity : s.retryCount + 1;
    const attempts: Promise<ExecutionStats>[] = [];
    for (;;) {
      const left = maxAttempts - attempts.length - 1; // retries redlock still has
      const windowMs = left === Infinity ? undefined : Math.max(0, left * s.retryDelay);
      try {
        const value = await op(windowMs);
        attempts.push(this.stats("for"));
        return { value, attempts };
      } catch (e) {
        const vote = voteError(e);
        const counted = vote instanceof ResourceLockedError ? maxAttempts - attempts.length : 1;
        for (let i = 0; i < counted && attempts.length < maxAttempts; i++) {
          attempts.push(this.stats("against", vote));
          this.emit("error", vote);
        }
        if (attempts.length >= maxAttempts || isFinal(e)) throw new ExecutionError(QUORUM_MESSAGE, attempts, { cause: e });
        await sleep(Math.max(0, s.retryDelay + Math.floor((Math.random() * 2 - 1) * s.retryJitter)));
      }
    }
  }

  private async take(resources: string[], duration: number, s: Settings, bind: boolean): Promise<RedlockLock> {
    const start = Date.now();
    const { value: hold, attempts } = await this.execute(s, async (windowMs) => {
      const session = await this.getSession();
      const lock = resources.length === 1 ? session.lock(resources[0]) : session.multiLock(resources);
      try {
        return await lock.acquireNow({ leaseMs: duration, timeoutMs: windowMs }, bind);
      } catch (e) {
        if (e instanceof BusyError) throw notApplied(resources, e);
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
  async acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<RedlockLock> {
    checkDuration(duration);
    return this.take(resources, duration, { ...this.settings, ...settings }, false);
  }

  /**
   * Releases the lock. As redlock: `ExecutionError` (its attempts `ResourceLockedError`) when
   * this lock no longer holds (force-released, expired, taken over): the server's answer is
   * final, so the attempts are counted without waiting between them.
   */
  async release(lock: RedlockLock, settings?: Partial<Settings>): Promise<ExecutionResult> {
    lock.expiration = 0;
    const releasedBefore = lock.hold.released;
    const { attempts } = await this.execute({ ...this.settings, ...settings }, async () => {
      if (releasedBefore) throw notApplied(lock.resources);
      await onHold(lock.resources, () => lock.hold.releaseAll());
      if (lock.hold.lost) throw notApplied(lock.resources);
    });
    return { attempts };
  }

  /** Sets the lease to `duration` ms from now: a new Lock (this one's `expiration` becomes 0). */
  async extend(existing: RedlockLock, duration: number, settings?: Partial<Settings>): Promise<RedlockLock> {
    checkDuration(duration);
    const s = { ...this.settings, ...settings };
    const start = Date.now();
    if (existing.expiration < Date.now()) throw new ExecutionError("Cannot extend an already-expired lock.", []);
    const { attempts } = await this.execute(s, () => onHold(existing.resources, () => existing.hold.extend(duration)));
    existing.expiration = 0;
    const drift = Math.round(s.driftFactor * duration) + 2;
    return new RedlockLock(this, existing.resources, existing.value, attempts, start + duration - drift, existing.hold);
  }

  /**
   * Runs `routine` holding `resources`, then releases them (a failed release rejects, as in
   * redlock). A `duration` the server can keep alive (at least its `keepalive_min_lease_ms`) binds
   * the lock to the session: the server renews it while this process lives, and `signal` aborts
   * (`signal.error`: a `LostError`) when the server reports it lost. A shorter one is a plain
   * lease of `duration` extended by a timer `automaticExtensionThreshold` ms before it ends, as
   * redlock does: `signal` aborts (`signal.error`: the extension's `ExecutionError`) if that fails.
   */
  using<T>(resources: string[], duration: number, settings: Partial<Settings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  async using<T>(
    resources: string[],
    duration: number,
    settingsOrRoutine: Partial<Settings> | ((signal: RedlockAbortSignal) => Promise<T>) | undefined,
    optionalRoutine?: (signal: RedlockAbortSignal) => Promise<T>,
  ): Promise<T> {
    checkDuration(duration);
    const settings: Settings =
      settingsOrRoutine && typeof settingsOrRoutine !== "function" ? { ...this.settings, ...settingsOrRoutine } : this.settings;
    const routine = optionalRoutine ?? settingsOrRoutine;
    if (typeof routine !== "function") throw new Error("INVARIANT: routine is not a function.");
    if (settings.automaticExtensionThreshold > duration - 100)
      throw new Error(
        "A lock `duration` must be at least 100ms greater than the `automaticExtensionThreshold` setting.",
      );
    const controller = new AbortController();
    const signal = controller.signal as RedlockAbortSignal;
    const abort = (error: Error) => {
      signal.error = error;
      controller.abort(error);
    };

    let floor: number | undefined;
    try {
      floor = (await this.getSession()).minLeaseMs;
    } catch {
      // Unreachable for now: take() retries and reports it as redlock does.
    }
    const bound = floor !== undefined && duration >= floor;
    let lock = await this.take(resources, duration, settings, bound);

    let timer: NodeJS.Timeout | undefined;
    let extension: Promise<void> | undefined;
    const queue = () => {
      timer = setTimeout(() => (extension = extend()), lock.expiration - Date.now() - settings.automaticExtensionThreshold);
    };
    const extend = async (): Promise<void> => {
      timer = undefined;
      try {
        lock = await lock.extend(duration);
        queue();
      } catch (e) {
        if (lock.expiration > Date.now()) return (extension = extend());
        abort(e instanceof Error ? e : new Error(String(e)));
      }
    };
    const onLost = (err: LostError) => abort(err);
    if (bound) lock.hold.onLost(onLost);
    else queue();
    try {
      return await routine(signal);
    } finally {
      if (timer) clearTimeout(timer);
      if (extension) await extension.catch(() => {});
      lock.hold.off("lost", onLost);
      await lock.release();
    }
  }

  /** Closes the session (releasing what it holds); the client given stays open (redlock quits it). */
  async quit(): Promise<void> {
    const s = this.session;
    this.session = undefined;
    if (s) await (await s).close();
  }
}
