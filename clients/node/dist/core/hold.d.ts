import { EventEmitter } from "node:events";
import type { LostError } from "../errors";
export declare abstract class Held extends EventEmitter {
    /** @internal Behind `signal`: made on first use, most holds never look at it. */
    protected controller?: AbortController;
    /** @internal Set once it is lost. */
    protected lostError?: LostError;
    /** Aborted (with a `LostError` reason) when it is lost. */
    get signal(): AbortSignal;
    get lost(): boolean;
    /** Calls `cb` once if it is lost. */
    onLost(cb: (err: LostError) => void): this;
    /** The loss, told once `lostError` is set and the object ended what it had: `signal` aborts, "lost" is emitted. */
    protected announceLost(err: LostError): void;
}
