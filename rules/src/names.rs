//! Maps and sets keyed by bytes that clients choose: lock names, owner ids,
//! session tokens. Their hash is keyed (a random seed per map), so clients
//! cannot pick keys that collide, and fast: foldhash, hashbrown's default,
//! where the standard library's SipHash cost a few hundred instructions per
//! lookup of a lock name, several times on every transition of a lock.

use std::collections::{HashMap, HashSet};

/// The keyed hasher of [`NameMap`] and [`NameSet`] (and of tables that
/// hash names themselves).
pub type NameHasher = hashbrown::DefaultHashBuilder;

pub type NameMap<K, V> = HashMap<K, V, NameHasher>;
pub type NameSet<K> = HashSet<K, NameHasher>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn the_hash_is_keyed_per_map() {
        let (a, b) = (NameHasher::default(), NameHasher::default());
        let names: Vec<&[u8]> = vec![b"lock", b"{a}:x", b"", b"owner:1"];
        assert!(names.iter().any(|n| a.hash_one(n) != b.hash_one(n)));
    }

    #[test]
    fn works_as_a_map() {
        let mut m: NameMap<Vec<u8>, i32> = NameMap::default();
        m.insert(b"k".to_vec(), 1);
        assert_eq!(m.get(&b"k"[..]), Some(&1));
        let mut s: NameSet<&[u8]> = NameSet::default();
        assert!(s.insert(b"x") && !s.insert(b"x"));
    }
}
