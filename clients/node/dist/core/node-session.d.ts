import { Adapter, Connection } from "../adapter";
import { LostReason } from "../errors";
import type { Binding } from "./bindings";
/** What a session connection needs of its session (the session core implements it). */
export interface NodeSessionHost {
    readonly adapter: Adapter;
    readonly token: string;
    readonly keepProcessAlive: boolean;
    readonly pingTimeoutMs: number;
    /** The PING interval now (shorter while an election campaigns or leads). */
    pingIntervalNow(): number;
    /** A message on the token's loss channel. */
    onLossMessage(node: string, msg: Buffer): void;
    /** A PING sent at `sent` was answered. */
    onPong(node: string, sent: number): void;
    /** The connection to `node` dropped: its leaderships are lost. */
    electionsDown(node: string, reason: LostReason): void;
    bindingsOn(node: string): Binding[];
    lose(b: Binding, reason: LostReason): void;
    reattachAll(node: string): Promise<void>;
    emit(event: "disconnected" | "reconnected" | "error", arg: unknown): boolean;
}
/** The session connection to one server (one per cluster node that owns a held key). */
export declare class NodeSession {
    private readonly s;
    readonly node: string;
    conn?: Connection;
    up: boolean;
    closed: boolean;
    /** Incremented every time the token is (re)registered on a new connection. */
    epoch: number;
    downSince: number;
    /** performance.now() when the last PING answered was sent (elections believe they lead until it + lease/2). */
    lastOkPingSent?: number;
    /** Set by a `demoted` message: the drop that follows is reported as such. */
    demoted: boolean;
    private lastPingAt;
    private pinging;
    private pingTimer?;
    private downTimer?;
    private reconnecting?;
    private opening?;
    constructor(s: NodeSessionHost, node: string);
    /** Connects, registers the token, subscribes to the loss channel. */
    open(): Promise<void>;
    private connectOnce;
    /** The next PING, `delay` ms from now: every pingIntervalMs, every lease/4 while an election campaigns or leads. */
    private schedulePing;
    /** The PING interval may have shortened (an election began): the next PING is scheduled by it. */
    kick(): void;
    private dropped;
    /** While down: a binding whose lease has passed since the drop is lost. */
    private watchDown;
    private clearDown;
    /** Reconnects until it works or the session closes, then re-attaches every binding. */
    reconnect(): Promise<void>;
    /** Forces a new connection (after a `demoted` message or NOSESSION on a live one). */
    recycle(): void;
    close(): void;
}
