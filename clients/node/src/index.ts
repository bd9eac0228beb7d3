// The package root: the public API, each name from the module that owns it.

export { Session } from "./session";
export { Lock, RWLock, MultiLock, Hold } from "./lock";
export type { SessionOptions, AcquireOptions } from "./core/session";
export { Semaphore, Permit } from "./semaphore";
export { Latch } from "./latch";
export { Election, Leadership } from "./election";
export type { Leader, ElectionOptions, CampaignOptions, ObserveOptions } from "./election";
export type { SemaphoreInfo, SemaphoreHolder } from "./semaphore";
export type { LatchInfo, LatchWaitOptions } from "./latch";
export {
  LockError,
  BusyError,
  NotOwnerError,
  DeadlockError,
  LostError,
  UnavailableError,
  ModuleNotLoadedError,
  LatchGoneError,
  AuthenticationError,
  LeaseTooShortError,
} from "./errors";
export type { LostReason } from "./errors";
export { ModuleRedlock, RedlockLock, ExecutionError, ResourceLockedError } from "./redlock";
export type { Settings, ExecutionResult, ExecutionStats, RedlockAbortSignal } from "./redlock";
export type { RedisClientLike } from "./adapter";
