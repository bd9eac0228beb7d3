import { SessionCore } from "./session";
/** A lock's kinds: exclusive, one side of a read-write lock, a multi-lock. */
export type Kind = "exclusive" | "read" | "write" | "multi";
/** What a wait is for: a lock's kinds, a semaphore's permits, a latch opening, an election's campaign. */
export type WaitKind = Kind | "semaphore" | "latch" | "election";
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
/**
 * @internal Sends an acquire: waits on a pooled connection, cancels per the contract, retries
 * NOSESSION once, and queues again (with a fresh owner, or the same one when it cannot change,
 * in the time left) when the connection it waits on breaks while the server can still be reached.
 */
export declare function acquireRaw(s: SessionCore, spec: RunSpec): Promise<unknown>;
