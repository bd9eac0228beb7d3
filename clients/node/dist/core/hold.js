"use strict";
// What everything held shares (a lock's Hold, a semaphore's Permit, an election's Leadership):
// held until lost, and a loss told three ways: `lost`, `signal` aborted with the LostError, and
// a "lost" event (`onLost`). Each object ends its own part first, then announces the loss here.
Object.defineProperty(exports, "__esModule", { value: true });
exports.Held = void 0;
const node_events_1 = require("node:events");
class Held extends node_events_1.EventEmitter {
    /** @internal Behind `signal`: made on first use, most holds never look at it. */
    controller;
    /** @internal Set once it is lost. */
    lostError;
    /** Aborted (with a `LostError` reason) when it is lost. */
    get signal() {
        if (!this.controller) {
            this.controller = new AbortController();
            if (this.lostError)
                this.controller.abort(this.lostError);
        }
        return this.controller.signal;
    }
    get lost() {
        return this.lostError !== undefined;
    }
    /** Calls `cb` once if it is lost. */
    onLost(cb) {
        return this.once("lost", cb);
    }
    /** The loss, told once `lostError` is set and the object ended what it had: `signal` aborts, "lost" is emitted. */
    announceLost(err) {
        this.controller?.abort(err);
        this.emit("lost", err);
    }
}
exports.Held = Held;
//# sourceMappingURL=hold.js.map