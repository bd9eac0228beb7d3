//! Maps keyed by numbers this module hands out itself (waiter ids, timer
//! jobs, client ids, blocked-client handles). Nobody outside chooses those
//! keys, so the keyed SipHash that guards maps of user-chosen keys (lock
//! names) against collision attacks buys nothing here and costs a few
//! hundred instructions per lookup.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Folded 64x64->128 multiply: every input bit reaches the high and low
/// bits that the table uses.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

const K: u64 = 0x9E37_79B9_7F4A_7C15;

impl IdHasher {
    fn mix(&mut self, x: u64) {
        let p = u128::from((self.0 ^ x).wrapping_add(K)) * u128::from(K);
        self.0 = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }

    fn write_usize(&mut self, x: usize) {
        self.mix(x as u64);
    }

    fn write_i32(&mut self, x: i32) {
        self.mix(x as u64);
    }
}

pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn sequential_ids_spread_over_the_low_and_high_bits() {
        let build = BuildHasherDefault::<IdHasher>::default();
        let hashes: Vec<u64> = (0u64..4096).map(|i| build.hash_one(i)).collect();
        let low: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 0xfff).collect();
        let top: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(low.len() > 2500, "low 12 bits: {} distinct", low.len());
        assert_eq!(top.len(), 128, "top 7 bits: all values used");
    }

    #[test]
    fn works_as_a_map() {
        let mut m: IdMap<u64, &str> = IdMap::default();
        m.insert(7, "seven");
        m.insert(u64::MAX, "max");
        assert_eq!(m.get(&7), Some(&"seven"));
        assert_eq!(m.get(&u64::MAX), Some(&"max"));
        assert_eq!(m.remove(&8), None);
    }
}
