export { Session, Lock, RWLock, MultiLock, Hold } from "./session";
export type { SessionOptions, AcquireOptions } from "./session";
export { LockError, BusyError, NotOwnerError, DeadlockError, LostError, UnavailableError, ModuleNotLoadedError, } from "./errors";
export type { LostReason } from "./errors";
export { ModuleRedlock, RedlockLock, ExecutionError, ResourceLockedError } from "./redlock";
export type { Settings, ExecutionResult, ExecutionStats, RedlockAbortSignal } from "./redlock";
export type { RedisClientLike } from "./adapter";
