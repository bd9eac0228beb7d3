/** A client this library accepts: an ioredis `Redis` or `Cluster`, or a node-redis client or cluster. */
export type RedisClientLike = object;
/** One dedicated connection. */
export interface Connection {
    /** Sends one command; resolves with the reply, rejects with the client's error. */
    call(args: string[]): Promise<unknown>;
    /** Subscribes; `onMessage` gets each message's raw bytes. After this only PING may be sent. */
    subscribe(channel: string, onMessage: (message: Buffer) => void): Promise<void>;
    /** PING (also valid while subscribed). */
    ping(): Promise<void>;
    /** Closes the socket at once (a waiter on it is dropped by the server). */
    destroy(): void;
    /** Called once, when the connection ends for any reason. */
    onEnd(cb: () => void): void;
    readonly ended: boolean;
    /**
     * Whether the socket keeps the Node process alive. The library's connections are unref'd by
     * default (a session left open does not hold the process) and ref'd while a wait is on them.
     */
    setRef(ref: boolean): void;
}
export interface Adapter {
    readonly kind: "ioredis" | "node-redis";
    readonly cluster: boolean;
    /** A command through the user's client; `key` routes it in a cluster. */
    call(key: string | undefined, args: string[]): Promise<unknown>;
    /**
     * A dedicated connection: a duplicate of the client (standalone, Sentinel) or to `node`
     * ("host:port") in a cluster. Its socket keeps the process alive only with `keepAlive`.
     * Rejects with AuthenticationError (credentials, ACL) or UnavailableError.
     */
    connect(node?: string, keepAlive?: boolean): Promise<Connection>;
}
export declare function adapterFor(client: RedisClientLike): Adapter;
