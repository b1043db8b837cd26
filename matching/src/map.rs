//! A fast hash map whose `Hash` does not depend on insertion order, so whole engine
//! states can be hashed and compared by the model checker.

use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HMap<K: Eq + Hash, V>(FxHashMap<K, V>);

impl<K: Eq + Hash, V> Default for HMap<K, V> {
    fn default() -> Self {
        HMap(FxHashMap::default())
    }
}

impl<K: Eq + Hash, V> HMap<K, V> {
    /// Frees a large table once it is empty again: after a burst (thousands of
    /// pre-posted receives) the hot steady state would otherwise spread its few
    /// entries over a table far larger than the L1 cache.
    pub fn shrink_if_empty(&mut self) {
        if self.0.is_empty() && self.0.capacity() > 256 {
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
/// Vacant entries are swept once they outnumber the rest, and never count in equality
/// or hashing: two states that differ only in kept vacant entries are the same state.
#[derive(Clone, Debug)]
pub(crate) struct Sparse<K: Eq + Hash, V> {
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
            map: FxHashMap::default(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl<K: Eq + Hash + Copy, V: Vacant + Default> Sparse<K, V> {
    /// The entry of `key`, created vacant if there is none.
    fn entry(&mut self, key: K) -> &mut V {
        if self.map.len() >= self.sweep_at && !self.map.contains_key(&key) {
            self.map.retain(|_, v| !v.is_vacant());
            self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
        }
        self.map.entry(key).or_default()
    }

    fn occupied(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter().filter(|(_, v)| !v.is_vacant())
    }
}

impl<K: Eq + Hash + Copy> Fifos<K> {
    pub fn push(&mut self, key: K, seq: u64) {
        self.entry(key).push_back(seq);
    }

    pub fn get(&self, key: &K) -> Option<&VecDeque<u64>> {
        self.map.get(key)
    }

    pub fn get_mut(&mut self, key: &K) -> Option<&mut VecDeque<u64>> {
        self.map.get_mut(key)
    }

    /// The first entry of `key`'s queue for which `live` holds, dropping the dead ones
    /// before it.
    pub fn head(&mut self, key: &K, live: impl Fn(u64) -> bool) -> Option<u64> {
        let q = self.map.get_mut(key)?;
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
    pub fn get(&self, key: &K) -> u32 {
        self.map.get(key).copied().unwrap_or(0)
    }

    pub fn incr(&mut self, key: K) {
        *self.entry(key) += 1;
    }

    /// Decrements a positive counter; returns the new value.
    pub fn decr(&mut self, key: &K) -> u32 {
        let n = self
            .map
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
                .all(|(k, v)| other.map.get(k).is_some_and(|o| o == v))
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
