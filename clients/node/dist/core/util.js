"use strict";
// Small helpers every layer shares: a sleep that does not keep the process alive, the
// conversions of server replies (whichever client and protocol answered), and the range check
// of a count argument.
Object.defineProperty(exports, "__esModule", { value: true });
exports.sleep = sleep;
exports.toBigInt = toBigInt;
exports.toNumber = toNumber;
exports.toRecord = toRecord;
exports.checkCount = checkCount;
const errors_1 = require("../errors");
/** Resolves after `ms`; the timer does not keep the process alive (the caller's wait does, if anything). */
function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms).unref?.());
}
/** An integer reply (number, bigint, string or Buffer, per client and protocol) as a bigint: fencing tokens, terms. */
function toBigInt(v) {
    if (typeof v === "bigint")
        return v;
    if (typeof v === "number")
        return BigInt(v);
    if (typeof v === "string")
        return BigInt(v);
    if (Buffer.isBuffer(v))
        return BigInt(v.toString());
    throw new errors_1.LockError(`unexpected reply ${String(v)}`);
}
/** An integer reply as a number: counts, permits, ttls. */
function toNumber(v) {
    if (typeof v === "number")
        return v;
    if (typeof v === "bigint" || typeof v === "string")
        return Number(v);
    if (Buffer.isBuffer(v))
        return Number(v.toString());
    throw new errors_1.LockError(`unexpected reply ${String(v)}`);
}
/** A map reply (RESP3 map, or RESP2 flat array of pairs) as a plain object. */
function toRecord(v) {
    const o = {};
    if (Array.isArray(v)) {
        for (let i = 0; i + 1 < v.length; i += 2)
            o[String(v[i])] = v[i + 1];
    }
    else if (v instanceof Map) {
        for (const [k, x] of v)
            o[String(k)] = x;
    }
    else if (v && typeof v === "object") {
        Object.assign(o, v);
    }
    return o;
}
/** A count argument (permits, a latch's count) must be an integer from 1 to `max`: RangeError otherwise. */
function checkCount(what, n, max) {
    if (!Number.isInteger(n) || n < 1 || n > max)
        throw new RangeError(`${what} must be an integer from 1 to ${max}, got ${n}`);
}
//# sourceMappingURL=util.js.map