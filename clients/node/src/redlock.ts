// The shape of node-redlock v5 (npm `redlock`) over one server with the lock module: swap
// `new Redlock([client], settings)` for `new ModuleRedlock(client, settings)` and keep the
// callers of `acquire`, `release`, `extend` and `using`.
//
// Differences, on purpose: one server, so no quorum; waiting is the server's FIFO queue (BLOCK)
// for as long as the retry settings would have retried, not polling; `using` binds the lock to
// a session (the server renews it while this process lives) instead of extending it on a timer,
// and its signal aborts when the server reports the lock lost.

import { EventEmitter } from "node:events";

import { BusyError, LockError, LostError } from "./errors";
import { Hold, Session, SessionOptions } from "./session";
import type { RedisClientLike } from "./adapter";

export interface Settings {
  readonly driftFactor: number;
  readonly retryCount: number;
  readonly retryDelay: number;
  readonly retryJitter: number;
  readonly automaticExtensionThreshold: number;
}

const defaultSettings: Settings = {
  driftFactor: 0.01,
  retryCount: 10,
  retryDelay: 200,
  retryJitter: 100,
  automaticExtensionThreshold: 500,
};

/** redlock's per-attempt statistics; this single-server version reports none. */
export type ExecutionStats = {
  readonly membershipSize: number;
  readonly quorumSize: number;
  readonly votesFor: Set<unknown>;
  readonly votesAgainst: Map<unknown, Error>;
};

export type ExecutionResult = { attempts: ReadonlyArray<Promise<ExecutionStats>> };

export type RedlockAbortSignal = AbortSignal & { error?: Error };

/** As redlock's: a resource is locked by another owner. */
export class ResourceLockedError extends LockError {
  constructor(message: string) {
    super(message);
  }
}

/** As redlock's: the operation failed (here: the lock stayed busy for the whole retry window, or the server refused). */
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
}

function checkDuration(duration: number): void {
  if (Math.floor(duration) !== duration) throw new Error("Duration must be an integer value in milliseconds.");
}

export class ModuleRedlock extends EventEmitter {
  readonly settings: Settings;
  private session?: Promise<Session>;

  constructor(
    private readonly client: RedisClientLike,
    settings: Partial<Settings> = {},
    private readonly sessionOptions: SessionOptions = {},
  ) {
    super();
    this.settings = { ...defaultSettings, ...settings };
  }

  /** The session used under the hood (opened on first use). */
  getSession(): Promise<Session> {
    if (!this.session) {
      this.session = Session.open(this.client, this.sessionOptions);
      this.session.catch(() => {
        this.session = undefined;
      });
    }
    return this.session;
  }

  private waitMs(s: Settings): number | undefined {
    if (s.retryCount < 0) return undefined; // retry forever
    return s.retryCount * (s.retryDelay + s.retryJitter / 2);
  }

  private async take(resources: string[], duration: number, settings: Partial<Settings> | undefined, bind: boolean) {
    checkDuration(duration);
    const s = { ...this.settings, ...settings };
    const session = await this.getSession();
    const lock = resources.length === 1 ? session.lock(resources[0]) : session.multiLock(resources);
    const start = Date.now();
    try {
      const hold = await lock.acquireNow({ leaseMs: duration, timeoutMs: this.waitMs(s) }, bind);
      const drift = Math.round(s.driftFactor * duration) + 2;
      return new RedlockLock(this, resources, hold.owner, [], start + duration - drift, hold);
    } catch (e) {
      const err = new ExecutionError(
        "The operation was unable to achieve a quorum during its retry window.",
        [],
        { cause: e },
      );
      // As redlock, each failure is also an "error" event (emitted only when someone listens).
      if (this.listenerCount("error") > 0)
        this.emit("error", e instanceof BusyError ? new ResourceLockedError((e as Error).message) : e);
      throw err;
    }
  }

  /** Takes `resources` (all at once for several) for `duration` ms. The lock ends with its lease unless extended. */
  acquire(resources: string[], duration: number, settings?: Partial<Settings>): Promise<RedlockLock> {
    return this.take(resources, duration, settings, false);
  }

  async release(lock: RedlockLock, _settings?: Partial<Settings>): Promise<ExecutionResult> {
    lock.expiration = 0;
    try {
      await lock.hold.releaseAll();
    } catch (e) {
      throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", [], { cause: e });
    }
    return { attempts: [] };
  }

  async extend(existing: RedlockLock, duration: number, settings?: Partial<Settings>): Promise<RedlockLock> {
    checkDuration(duration);
    const s = { ...this.settings, ...settings };
    if (existing.expiration < Date.now()) throw new ExecutionError("Cannot extend an already-expired lock.", []);
    const start = Date.now();
    try {
      await existing.hold.extend(duration);
    } catch (e) {
      throw new ExecutionError("The operation was unable to achieve a quorum during its retry window.", [], { cause: e });
    }
    existing.expiration = 0;
    const drift = Math.round(s.driftFactor * duration) + 2;
    return new RedlockLock(this, existing.resources, existing.value, [], start + duration - drift, existing.hold);
  }

  /**
   * Runs `routine` holding `resources`; the server keeps the lock alive while this process
   * lives. `signal.aborted` turns true (with `signal.error`) if the lock is lost.
   */
  using<T>(resources: string[], duration: number, settings: Partial<Settings>, routine?: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  using<T>(resources: string[], duration: number, routine: (signal: RedlockAbortSignal) => Promise<T>): Promise<T>;
  async using<T>(
    resources: string[],
    duration: number,
    settingsOrRoutine: Partial<Settings> | ((signal: RedlockAbortSignal) => Promise<T>) | undefined,
    optionalRoutine?: (signal: RedlockAbortSignal) => Promise<T>,
  ): Promise<T> {
    const settings = settingsOrRoutine && typeof settingsOrRoutine !== "function" ? settingsOrRoutine : undefined;
    const routine = optionalRoutine ?? settingsOrRoutine;
    if (typeof routine !== "function") throw new Error("INVARIANT: routine is not a function.");
    const lock = await this.take(resources, duration, settings, true);
    const controller = new AbortController();
    const signal = controller.signal as RedlockAbortSignal;
    const onLost = (err: LostError) => {
      signal.error = err;
      controller.abort(err);
    };
    lock.hold.onLost(onLost);
    try {
      return await routine(signal);
    } finally {
      lock.hold.off("lost", onLost);
      await lock.release().catch(() => {});
    }
  }

  /** Closes the session (releasing what it holds); the client given stays open. */
  async quit(): Promise<void> {
    const s = this.session;
    this.session = undefined;
    if (s) await (await s).close();
  }
}


