//! A fast hash map whose `Hash` does not depend on insertion order, so whole engine
//! states can be hashed and compared by the model checker.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HMap<K: Eq + Hash, V>(FxHashMap<K, V>);

/// The capacity an empty [`HMap`] keeps (see [`HMap::shrink_if_empty`]).
const KEEP: usize = 1 << 16;

impl<K: Eq + Hash, V> Default for HMap<K, V> {
    fn default() -> Self {
        HMap(FxHashMap::default())
    }
}

impl<K: Eq + Hash, V> HMap<K, V> {
    /// Frees a very large table once it is empty again. A table of up to
    /// [`KEEP`] entries keeps its capacity: freeing it after every burst of posted
    /// receives made the next burst grow it again from nothing (4 096 receives posted
    /// in 0.67 ms instead of 0.34–0.40 ms, `docs/performance.md`), while an empty
    /// table costs a lookup nothing (`OneMap` tests `is_empty` first) and a few
    /// entries in a large one cost a cache line each, as in a small one.
    pub fn shrink_if_empty(&mut self) {
        if self.0.is_empty() && self.0.capacity() > KEEP {
            self.0.shrink_to(0);
        }
    }
}

impl<K: Eq + Hash, V> Deref for HMap<K, V> {
    type Target = FxHashMap<K, V>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<K: Eq + Hash, V> DerefMut for HMap<K, V> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<K: Eq + Hash + Ord, V: Hash> Hash for HMap<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut v: Vec<_> = self.0.iter().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.len().hash(state);
        for (k, val) in v {
            k.hash(state);
            val.hash(state);
        }
    }
}

/// A value with an empty state that a [`Sparse`] map may keep without it counting.
pub(crate) trait Vacant {
    fn is_vacant(&self) -> bool;
}

impl Vacant for VecDeque<u64> {
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

impl Vacant for u32 {
    fn is_vacant(&self) -> bool {
        *self == 0
    }
}

/// A hash map whose entries stay in place when they become vacant (an emptied queue
/// keeps its allocation, a counter at zero its slot), so a key used over and over —
/// one tag, one peer, one context — costs no allocation or re-insertion per message.
/// The key used last sits beside the table (most programs use one tag, one context
/// at a time), where finding it is a comparison instead of hashing. Vacant entries are
/// swept once they outnumber the rest, and never count in equality or hashing: two
/// states that differ only in kept vacant entries, or in which key sits beside the
/// table, are the same state.
#[derive(Clone, Debug)]
pub(crate) struct Sparse<K: Eq + Hash, V> {
    /// Never also in `map`.
    hot: Option<(K, V)>,
    map: FxHashMap<K, V>,
    /// Sweep vacant entries when the map grows past this many keys.
    sweep_at: usize,
}

/// FIFO queues of sequence numbers by key.
pub(crate) type Fifos<K> = Sparse<K, VecDeque<u64>>;
/// Counters by key.
pub(crate) type Counts<K> = Sparse<K, u32>;

const SWEEP_MIN: usize = 64;

impl<K: Eq + Hash, V> Default for Sparse<K, V> {
    fn default() -> Self {
        Sparse {
            hot: None,
            map: FxHashMap::default(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl<K: Eq + Hash + Copy, V: Vacant + Default> Sparse<K, V> {
    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.hot {
            Some((k, v)) if k == key => Some(v),
            _ if self.map.is_empty() => None,
            _ => self.map.get(key),
        }
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.hot {
            Some((k, v)) if k == key => Some(v),
            _ if self.map.is_empty() => None,
            _ => self.map.get_mut(key),
        }
    }

    /// The entry of `key`, created vacant if there is none.
    fn entry(&mut self, key: K) -> &mut V {
        if matches!(&self.hot, Some((k, _)) if *k == key) {
            return &mut self.hot.as_mut().expect("hot").1;
        }
        if !self.map.is_empty() && self.map.contains_key(&key) {
            return self.map.get_mut(&key).expect("present");
        }
        // a new key takes the slot beside the table when that holds nothing (reusing
        // its allocation); otherwise it goes into the table
        let free = match &mut self.hot {
            None => true,
            Some((k, v)) if v.is_vacant() => {
                *k = key;
                false
            }
            Some(_) => false,
        };
        if free {
            self.hot = Some((key, V::default()));
        }
        if matches!(&self.hot, Some((k, _)) if *k == key) {
            return &mut self.hot.as_mut().expect("hot").1;
        }
        if self.map.len() >= self.sweep_at {
            self.map.retain(|_, v| !v.is_vacant());
            self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
        }
        self.map.entry(key).or_default()
    }

    fn occupied(&self) -> impl Iterator<Item = (&K, &V)> {
        self.hot
            .iter()
            .map(|(k, v)| (k, v))
            .chain(self.map.iter())
            .filter(|(_, v)| !v.is_vacant())
    }
}

impl<K: Eq + Hash + Copy> Fifos<K> {
    pub fn push(&mut self, key: K, seq: u64) {
        self.entry(key).push_back(seq);
    }

    /// The first entry of `key`'s queue for which `live` holds, dropping the dead ones
    /// before it.
    pub fn head(&mut self, key: &K, live: impl Fn(u64) -> bool) -> Option<u64> {
        let q = self.get_mut(key)?;
        while let Some(&h) = q.front() {
            if live(h) {
                return Some(h);
            }
            q.pop_front();
        }
        None
    }
}

impl<K: Eq + Hash + Copy> Counts<K> {
    pub fn count(&self, key: &K) -> u32 {
        self.get(key).copied().unwrap_or(0)
    }

    pub fn incr(&mut self, key: K) {
        *self.entry(key) += 1;
    }

    /// Decrements a positive counter; returns the new value.
    pub fn decr(&mut self, key: &K) -> u32 {
        let n = self
            .get_mut(key)
            .filter(|n| **n > 0)
            .expect("positive count");
        *n -= 1;
        *n
    }
}

impl<K: Eq + Hash + Copy, V: Vacant + Default + PartialEq> PartialEq for Sparse<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.occupied().count() == other.occupied().count()
            && self
                .occupied()
                .all(|(k, v)| other.get(k).is_some_and(|o| o == v))
    }
}

impl<K: Eq + Hash + Copy, V: Vacant + Default + Eq> Eq for Sparse<K, V> {}

impl<K: Eq + Hash + Copy + Ord, V: Vacant + Default + Hash> Hash for Sparse<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut v: Vec<_> = self.occupied().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.len().hash(state);
        for (k, val) in v {
            k.hash(state);
            val.hash(state);
        }
    }
}

/// A map that keeps its first entry beside the hash table: while one request is
/// pending (every blocking call, most ping-pongs) inserting, finding and removing it
/// is a comparison instead of hashing. Equality and hashing see only the entries,
/// not where they are kept. The engine keeps its requests in these, and so does
/// `rsmpi-core`.
///
/// ```
/// let mut m = matching::OneMap::default();
/// m.insert(7u64, "first");
/// m.insert(9, "second");
/// assert_eq!(m.remove(&7), Some("first"));
/// assert_eq!((m.len(), m.get(&9)), (1, Some(&"second")));
/// ```
#[derive(Clone, Debug)]
pub struct OneMap<K: Eq + Hash, V> {
    one: Option<(K, V)>,
    rest: HMap<K, V>,
}

impl<K: Eq + Hash, V> Default for OneMap<K, V> {
    fn default() -> Self {
        OneMap {
            one: None,
            rest: HMap::default(),
        }
    }
}

impl<K: Eq + Hash + Copy, V> OneMap<K, V> {
    /// Inserts `v` under `k`; the value it replaces.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        // the common case, kept small enough to inline into every caller
        if self.one.is_none() && self.rest.is_empty() {
            self.one = Some((k, v));
            return None;
        }
        self.insert_more(k, v)
    }

    #[inline(never)]
    fn insert_more(&mut self, k: K, v: V) -> Option<V> {
        match &mut self.one {
            Some((k1, v1)) if *k1 == k => Some(std::mem::replace(v1, v)),
            Some(_) => self.rest.insert(k, v),
            None if self.rest.is_empty() || !self.rest.contains_key(&k) => {
                self.one = Some((k, v));
                None
            }
            None => self.rest.insert(k, v),
        }
    }

    pub fn get(&self, k: &K) -> Option<&V> {
        match &self.one {
            Some((k1, v1)) if k1 == k => Some(v1),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get(k),
        }
    }

    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.one {
            Some((k1, v1)) if k1 == k => Some(v1),
            _ if self.rest.is_empty() => None,
            _ => self.rest.get_mut(k),
        }
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Removes and returns the value under `k`.
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        if matches!(&self.one, Some((k1, _)) if k1 == k) {
            return self.one.take().map(|(_, v)| v);
        }
        self.remove_more(k)
    }

    // not `inline(never)`, unlike `insert_more`: with many requests in flight (a window
    // of 64) this is the common path, and a call per remove cost ~90 instructions per
    // message there (rsmpi's docs/performance.md, "Tools off")
    fn remove_more(&mut self, k: &K) -> Option<V> {
        if self.rest.is_empty() {
            return None;
        }
        let v = self.rest.remove(k);
        self.rest.shrink_if_empty();
        v
    }

    pub fn len(&self) -> usize {
        usize::from(self.one.is_some()) + self.rest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.one.is_none() && self.rest.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.one.iter().map(|(k, v)| (k, v)).chain(self.rest.iter())
    }
}

impl<K: Eq + Hash + Copy, V> std::ops::Index<&K> for OneMap<K, V> {
    type Output = V;
    fn index(&self, k: &K) -> &V {
        self.get(k).expect("key in map")
    }
}

impl<K: Eq + Hash + Copy, V: PartialEq> PartialEq for OneMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl<K: Eq + Hash + Copy, V: Eq> Eq for OneMap<K, V> {}

impl<K: Eq + Hash + Copy + Ord, V: Hash> Hash for OneMap<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut v: Vec<_> = self.iter().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.len().hash(state);
        for (k, val) in v {
            k.hash(state);
            val.hash(state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::DefaultHasher;

    fn hash_of<T: Hash>(t: &T) -> u64 {
        let mut h = DefaultHasher::new();
        t.hash(&mut h);
        h.finish()
    }

    /// `Counts` (a `Sparse` map) counts, whichever counter sits beside the table, and
    /// compares and hashes by the non-zero counts only.
    #[test]
    fn counts_count() {
        let mut a = Counts::default();
        a.incr(1u32);
        a.incr(2);
        a.incr(1);
        assert_eq!((a.count(&1), a.count(&2), a.count(&3)), (2, 1, 0));
        assert_eq!(a.decr(&1), 1);
        assert_eq!(a.decr(&1), 0);
        a.incr(2); // the slot holds a vacant 1; 2 is counted in the table
        assert_eq!(a.count(&2), 2);
        a.incr(3);
        let mut b = Counts::default();
        b.incr(3);
        b.incr(2);
        b.incr(2);
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_eq!(a.decr(&2), 1);
        assert_ne!(a, b);
        assert_eq!(a.decr(&2), 0);
        assert_eq!(a.decr(&3), 0);
        assert_eq!(a, Counts::default());
        assert_eq!(hash_of(&a), hash_of(&Counts::<u32>::default()));
    }

    /// `OneMap` behaves as a map, and its equality and hash do not depend on which
    /// entry sits beside the table.
    #[test]
    fn one_map_is_a_map() {
        let mut a = OneMap::default();
        let mut b = OneMap::default();
        assert_eq!(a.insert(1u64, 'x'), None);
        assert_eq!(a.insert(2, 'y'), None);
        assert_eq!(a.insert(1, 'z'), Some('x'));
        b.insert(2, 'y');
        b.insert(1, 'z');
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_eq!((a.len(), a[&1], a.get(&3)), (2, 'z', None));
        assert_eq!(a.remove(&1), Some('z'));
        assert_eq!(a.remove(&1), None);
        a.insert(1, 'z'); // back beside the table, where `b` keeps it in the table
        assert_eq!(a, b);
        *a.get_mut(&2).unwrap() = 'w';
        assert_ne!(a, b);
        assert_eq!(a.remove(&2), Some('w'));
        assert_eq!(a.remove(&1), Some('z'));
        assert!(a.is_empty());
        // a key already in the table is never also put beside it
        let mut c = OneMap::default();
        c.insert(1u64, 'a');
        c.insert(2, 'b');
        c.remove(&1);
        assert_eq!(c.insert(2, 'c'), Some('b'));
        assert_eq!((c.len(), c[&2]), (1, 'c'));
    }
}
