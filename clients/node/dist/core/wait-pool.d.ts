import { Adapter, Connection } from "../adapter";
/**
 * Dedicated connections for waiting: one per concurrent wait, reused after. A connection taken
 * keeps the process alive (a wait in progress is work to finish); an idle one does not, unless
 * the session keeps the process alive.
 */
export declare class WaitPool {
    private readonly adapter;
    private readonly keepProcessAlive;
    private idle;
    /** Every connection opened and not dropped yet, idle or busy (take and give leave it alone). */
    private all;
    constructor(adapter: Adapter, keepProcessAlive: boolean);
    take(node: string): Connection | Promise<Connection>;
    private open;
    give(node: string, c: Connection): void;
    discard(c: Connection): void;
    get size(): number;
    close(): void;
}
