// What everything held shares (a lock's Hold, a semaphore's Permit, an election's Leadership):
// held until lost, and a loss told three ways: `lost`, `signal` aborted with the LostError, and
// a "lost" event (`onLost`). Each object ends its own part first, then announces the loss here.

import { EventEmitter } from "node:events";

import type { LostError } from "../errors";

export abstract class Held extends EventEmitter {
  /** @internal Behind `signal`: made on first use, most holds never look at it. */
  protected controller?: AbortController;
  /** @internal Set once it is lost. */
  protected lostError?: LostError;

  /** Aborted (with a `LostError` reason) when it is lost. */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.lostError) this.controller.abort(this.lostError);
    }
    return this.controller.signal;
  }

  get lost(): boolean {
    return this.lostError !== undefined;
  }

  /** Calls `cb` once if it is lost. */
  onLost(cb: (err: LostError) => void): this {
    return this.once("lost", cb);
  }

  /** The loss, told once `lostError` is set and the object ended what it had: `signal` aborts, "lost" is emitted. */
  protected announceLost(err: LostError): void {
    this.controller?.abort(err);
    this.emit("lost", err);
  }
}
