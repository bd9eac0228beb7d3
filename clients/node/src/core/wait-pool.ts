// The connections a session waits on (a BLOCK acquire, a latch wait): one per concurrent wait,
// reused after, per server.

import { Adapter, Connection } from "../adapter";

/**
 * Dedicated connections for waiting: one per concurrent wait, reused after. A connection taken
 * keeps the process alive (a wait in progress is work to finish); an idle one does not, unless
 * the session keeps the process alive.
 */
export class WaitPool {
  private idle = new Map<string, Connection[]>();
  /** Every connection opened and not dropped yet, idle or busy (take and give leave it alone). */
  private all = new Set<Connection>();
  constructor(
    private readonly adapter: Adapter,
    private readonly keepProcessAlive: boolean,
  ) {}

  take(node: string): Connection | Promise<Connection> {
    const list = this.idle.get(node);
    while (list && list.length > 0) {
      const c = list.pop()!;
      if (c.ended) {
        this.all.delete(c);
        continue;
      }
      if (!this.keepProcessAlive) c.setRef(true);
      return c;
    }
    return this.open(node);
  }

  private async open(node: string): Promise<Connection> {
    const c = await this.adapter.connect(node || undefined, true);
    this.all.add(c);
    return c;
  }

  give(node: string, c: Connection): void {
    if (c.ended) {
      this.all.delete(c);
      return;
    }
    if (!this.keepProcessAlive) c.setRef(false);
    let list = this.idle.get(node);
    if (!list) this.idle.set(node, (list = []));
    list.push(c);
  }

  discard(c: Connection): void {
    this.all.delete(c);
    c.destroy();
  }

  get size(): number {
    return this.all.size;
  }

  close(): void {
    for (const c of this.all) c.destroy();
    this.all.clear();
    this.idle.clear();
  }
}
