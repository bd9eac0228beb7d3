"use strict";
// What the session keeps alive and re-attaches: a binding is one owner's holds on one key, as the
// server sees them; a Bindable is the object a caller holds (a lock's Hold, a semaphore's Permit)
// that a binding reports a loss to. Types only (and the binding's map key), so that the session
// connection and the session core can both name them without importing each other.
Object.defineProperty(exports, "__esModule", { value: true });
exports.bindingId = bindingId;
/** The key of a binding (and of an election's candidate) in the session's maps: key and owner, NUL between. */
function bindingId(key, owner) {
    return `${key}\u0000${owner}`;
}
//# sourceMappingURL=bindings.js.map