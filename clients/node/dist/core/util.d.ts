/** Resolves after `ms`; the timer does not keep the process alive (the caller's wait does, if anything). */
export declare function sleep(ms: number): Promise<void>;
/** An integer reply (number, bigint, string or Buffer, per client and protocol) as a bigint: fencing tokens, terms. */
export declare function toBigInt(v: unknown): bigint;
/** An integer reply as a number: counts, permits, ttls. */
export declare function toNumber(v: unknown): number;
/** A map reply (RESP3 map, or RESP2 flat array of pairs) as a plain object. */
export declare function toRecord(v: unknown): Record<string, unknown>;
/** A count argument (permits, a latch's count) must be an integer from 1 to `max`: RangeError otherwise. */
export declare function checkCount(what: string, n: number, max: number): void;
