// Small helpers every layer shares: a sleep that does not keep the process alive, the
// conversions of server replies (whichever client and protocol answered), and the range check
// of a count argument.

import { LockError } from "../errors";

/** Resolves after `ms`; the timer does not keep the process alive (the caller's wait does, if anything). */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms).unref?.());
}

/** An integer reply (number, bigint, string or Buffer, per client and protocol) as a bigint: fencing tokens, terms. */
export function toBigInt(v: unknown): bigint {
  if (typeof v === "bigint") return v;
  if (typeof v === "number") return BigInt(v);
  if (typeof v === "string") return BigInt(v);
  if (Buffer.isBuffer(v)) return BigInt(v.toString());
  throw new LockError(`unexpected reply ${String(v)}`);
}

/** An integer reply as a number: counts, permits, ttls. */
export function toNumber(v: unknown): number {
  if (typeof v === "number") return v;
  if (typeof v === "bigint" || typeof v === "string") return Number(v);
  if (Buffer.isBuffer(v)) return Number(v.toString());
  throw new LockError(`unexpected reply ${String(v)}`);
}

/** A map reply (RESP3 map, or RESP2 flat array of pairs) as a plain object. */
export function toRecord(v: unknown): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  if (Array.isArray(v)) {
    for (let i = 0; i + 1 < v.length; i += 2) o[String(v[i])] = v[i + 1];
  } else if (v instanceof Map) {
    for (const [k, x] of v) o[String(k)] = x;
  } else if (v && typeof v === "object") {
    Object.assign(o, v);
  }
  return o;
}

/** A count argument (permits, a latch's count) must be an integer from 1 to `max`: RangeError otherwise. */
export function checkCount(what: string, n: number, max: number): void {
  if (!Number.isInteger(n) || n < 1 || n > max) throw new RangeError(`${what} must be an integer from 1 to ${max}, got ${n}`);
}
