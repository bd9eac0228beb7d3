"use strict";
// Redis Cluster hash slots: CRC16-CCITT (XMODEM) of the key's hash tag, mod 16384.
Object.defineProperty(exports, "__esModule", { value: true });
exports.keySlot = keySlot;
const TABLE = (() => {
    const t = new Uint16Array(256);
    for (let i = 0; i < 256; i++) {
        let crc = i << 8;
        for (let j = 0; j < 8; j++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
        t[i] = crc;
    }
    return t;
})();
function crc16(buf) {
    let crc = 0;
    for (const b of buf)
        crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ b) & 0xff];
    return crc;
}
/** The cluster slot of `key` (its `{hash tag}` when it has a non-empty one). */
function keySlot(key) {
    let buf = Buffer.from(key);
    const open = buf.indexOf(0x7b); // {
    if (open >= 0) {
        const close = buf.indexOf(0x7d, open + 1); // }
        if (close > open + 1)
            buf = buf.subarray(open + 1, close);
    }
    return crc16(buf) % 16384;
}
//# sourceMappingURL=slot.js.map