"use strict";
// The connections a session waits on (a BLOCK acquire, a latch wait): one per concurrent wait,
// reused after, per server.
Object.defineProperty(exports, "__esModule", { value: true });
exports.WaitPool = void 0;
/**
 * Dedicated connections for waiting: one per concurrent wait, reused after. A connection taken
 * keeps the process alive (a wait in progress is work to finish); an idle one does not, unless
 * the session keeps the process alive.
 */
class WaitPool {
    adapter;
    keepProcessAlive;
    idle = new Map();
    /** Every connection opened and not dropped yet, idle or busy (take and give leave it alone). */
    all = new Set();
    constructor(adapter, keepProcessAlive) {
        this.adapter = adapter;
        this.keepProcessAlive = keepProcessAlive;
    }
    take(node) {
        const list = this.idle.get(node);
        while (list && list.length > 0) {
            const c = list.pop();
            if (c.ended) {
                this.all.delete(c);
                continue;
            }
            if (!this.keepProcessAlive)
                c.setRef(true);
            return c;
        }
        return this.open(node);
    }
    async open(node) {
        const c = await this.adapter.connect(node || undefined, true);
        this.all.add(c);
        return c;
    }
    give(node, c) {
        if (c.ended) {
            this.all.delete(c);
            return;
        }
        if (!this.keepProcessAlive)
            c.setRef(false);
        let list = this.idle.get(node);
        if (!list)
            this.idle.set(node, (list = []));
        list.push(c);
    }
    discard(c) {
        this.all.delete(c);
        c.destroy();
    }
    get size() {
        return this.all.size;
    }
    close() {
        for (const c of this.all)
            c.destroy();
        this.all.clear();
        this.idle.clear();
    }
}
exports.WaitPool = WaitPool;
//# sourceMappingURL=wait-pool.js.map