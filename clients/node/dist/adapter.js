"use strict";
// One small interface over ioredis 5 (Redis, Cluster) and node-redis 4+ (createClient,
// createCluster): send a raw command through the user's client (which follows MOVED in a
// cluster), open a dedicated connection (to a given node in a cluster), subscribe.
//
// Dedicated connections never reconnect, queue offline or time commands out by themselves:
// the library decides what a dropped connection means (a cancelled wait, a session to
// re-register).
Object.defineProperty(exports, "__esModule", { value: true });
exports.adapterFor = adapterFor;
const errors_1 = require("./errors");
function has(o, name) {
    return typeof o[name] === "function";
}
function adapterFor(client) {
    const c = client;
    if (c === null || typeof c !== "object")
        throw new TypeError("expected an ioredis or node-redis client");
    // ioredis: Redis and Cluster both have `call` and an `isCluster` flag.
    if (has(c, "call") && typeof c.isCluster === "boolean")
        return new IoRedisAdapter(c);
    // node-redis cluster: `masters` and `nodeClient`; client: `sendCommand` and `duplicate`.
    if (has(c, "nodeClient") && has(c, "sendCommand"))
        return new NodeRedisAdapter(c, true);
    if (has(c, "sendCommand") && has(c, "duplicate"))
        return new NodeRedisAdapter(c, false);
    throw new TypeError("expected an ioredis (Redis, Cluster) or node-redis (createClient, createCluster) client");
}
function splitNode(node) {
    const i = node.lastIndexOf(":");
    return { host: node.slice(0, i), port: Number(node.slice(i + 1)) };
}
// ---------------------------------------------------------------- ioredis
class IoRedisConnection {
    r;
    ended = false;
    /** The last error event: ioredis rejects connect() with "Connection is closed." and tells why (WRONGPASS...) only here. */
    lastError;
    endCbs = [];
    ref = true;
    constructor(r) {
        this.r = r;
        const end = () => {
            if (this.ended)
                return;
            this.ended = true;
            for (const cb of this.endCbs)
                cb();
        };
        r.on("error", (e) => {
            this.lastError = e; // otherwise reported through the commands' rejections and `end`
        });
        r.on("close", end);
        r.on("end", end);
    }
    call(args) {
        return this.r.call(...args);
    }
    async subscribe(channel, onMessage) {
        this.r.on("messageBuffer", (ch, msg) => {
            if (ch.toString() === channel)
                onMessage(msg);
        });
        await this.r.subscribe(channel);
    }
    async ping() {
        await this.r.ping();
    }
    destroy() {
        this.r.disconnect(false);
    }
    onEnd(cb) {
        if (this.ended)
            queueMicrotask(cb);
        else
            this.endCbs.push(cb);
    }
    setRef(ref) {
        this.ref = ref;
        this.applyRef();
    }
    /** (Also once connected: ioredis makes the socket in connect().) */
    applyRef() {
        const socket = this.r.stream;
        if (this.ref)
            socket?.ref?.();
        else
            socket?.unref?.();
    }
}
/** A failed connect, typed: a refusal of the credentials is an AuthenticationError, anything else UnavailableError. */
function connectError(e, lastError) {
    if ((0, errors_1.isReplyError)(e))
        return (0, errors_1.toLockError)(e);
    if ((0, errors_1.isReplyError)(lastError))
        return (0, errors_1.toLockError)(lastError);
    return new errors_1.UnavailableError(`cannot connect: ${e.message}`, { cause: e });
}
const IOREDIS_DEDICATED = {
    lazyConnect: true,
    retryStrategy: () => null,
    enableOfflineQueue: false,
    autoResubscribe: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    commandTimeout: undefined,
    reconnectOnError: null,
};
class IoRedisAdapter {
    c;
    kind = "ioredis";
    cluster;
    constructor(c) {
        this.c = c;
        this.cluster = c.isCluster === true;
    }
    call(_key, args) {
        return this.c.call(...args);
    }
    async connect(node, keepAlive = false) {
        let r;
        if (this.cluster) {
            if (!node)
                throw new Error("a cluster connection needs a node");
            const base = this.c.nodes("all")[0];
            if (!base)
                throw new errors_1.UnavailableError("the cluster client has not connected yet");
            const { host, port } = splitNode(node);
            r = base.duplicate({ ...IOREDIS_DEDICATED, host, port, readOnly: false });
        }
        else {
            r = this.c.duplicate(IOREDIS_DEDICATED);
        }
        const conn = new IoRedisConnection(r);
        conn.setRef(keepAlive);
        try {
            await r.connect();
        }
        catch (e) {
            r.disconnect(false);
            throw connectError(e, conn.lastError);
        }
        conn.applyRef();
        return conn;
    }
}
// ---------------------------------------------------------------- node-redis
class NodeRedisConnection {
    r;
    ended = false;
    endCbs = [];
    constructor(r) {
        this.r = r;
        const end = () => {
            if (this.ended)
                return;
            this.ended = true;
            for (const cb of this.endCbs)
                cb();
        };
        r.on("error", (_e) => {
            // With reconnectStrategy false an error on an open socket ends the client.
            if (!r.isOpen)
                end();
        });
        r.on("end", end);
    }
    call(args) {
        return this.r.sendCommand(args);
    }
    async subscribe(channel, onMessage) {
        await this.r.subscribe(channel, (msg) => onMessage(msg), true);
    }
    async ping() {
        await this.r.sendCommand(["PING"]);
    }
    destroy() {
        if (this.ended)
            return;
        try {
            const p = (this.r.destroy ?? this.r.disconnect).call(this.r);
            if (p && typeof p.catch === "function")
                p.catch(() => { });
        }
        catch {
            /* already closed */
        }
        // node-redis emits `end` on destroy; make sure it is seen even if it did not.
        queueMicrotask(() => {
            if (!this.ended) {
                this.ended = true;
                for (const cb of this.endCbs)
                    cb();
            }
        });
    }
    onEnd(cb) {
        if (this.ended)
            queueMicrotask(cb);
        else
            this.endCbs.push(cb);
    }
    setRef(ref) {
        if (ref)
            this.r.ref();
        else
            this.r.unref();
    }
}
class NodeRedisAdapter {
    c;
    cluster;
    kind = "node-redis";
    constructor(c, cluster) {
        this.c = c;
        this.cluster = cluster;
    }
    call(key, args) {
        if (this.cluster)
            return this.c.sendCommand(key, false, args);
        return this.c.sendCommand(args);
    }
    dedicated(base, socket) {
        const opts = (base.options ?? {});
        return base.duplicate({
            socket: { ...(opts.socket ?? {}), ...(socket ?? {}), reconnectStrategy: false },
            disableOfflineQueue: true,
            pingInterval: undefined,
        });
    }
    async connect(node, keepAlive = false) {
        let r;
        if (this.cluster) {
            if (!node)
                throw new Error("a cluster connection needs a node");
            const { host, port } = splitNode(node);
            const masters = this.c.masters ?? [];
            if (masters.length === 0)
                throw new errors_1.UnavailableError("the cluster client has not connected yet");
            const base = await this.c.nodeClient(masters[0]);
            r = this.dedicated(base, { host, port });
        }
        else {
            r = this.dedicated(this.c);
        }
        const conn = new NodeRedisConnection(r);
        try {
            await r.connect();
        }
        catch (e) {
            conn.destroy();
            throw connectError(e);
        }
        conn.setRef(keepAlive);
        return conn;
    }
}
//# sourceMappingURL=adapter.js.map