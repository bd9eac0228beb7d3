export { Session, Lock, RWLock, MultiLock, Hold } from "./session";
export type { SessionOptions, AcquireOptions } from "./session";
export { Semaphore, Permit, Latch } from "./semaphore";
export { Election, Leadership } from "./election";
export type { Leader, ElectionOptions, CampaignOptions, ObserveOptions } from "./election";
export type { SemaphoreInfo, SemaphoreHolder, LatchInfo, LatchWaitOptions } from "./semaphore";
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
