import type { LostError } from "../errors";
/** What a binding stands for: a lock's Hold or a semaphore's Permit. */
export interface Bindable {
    readonly keys: string[];
    readonly owner: string;
    leaseMs: number;
    /** @internal The session's bindings this object is in (while bound and not ended). */
    bindings?: Binding[];
    markLost(err: LostError): void;
    releaseAll(): Promise<void>;
}
/** One owner's holds on one key, as the server sees them: what re-attach renews and a loss message names. */
export interface Binding {
    /** bindingId(key, owner), made once: the map's key. */
    id: string;
    key: string;
    owner: string;
    node: string;
    leaseMs: number;
    /** A semaphore's permits (SEM.RENEW, SEM.RELEASE) rather than a lock's hold (LOCK.RENEW, LOCK.RELEASE). */
    sem: boolean;
    /** Usually one (an RWLock's two sides share an owner). */
    holds: Bindable[];
}
/** The key of a binding (and of an election's candidate) in the session's maps: key and owner, NUL between. */
export declare function bindingId(key: string, owner: string): string;
