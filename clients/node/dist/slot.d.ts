/** The cluster slot of `key` (its `{hash tag}` when it has a non-empty one). */
export declare function keySlot(key: string): number;
