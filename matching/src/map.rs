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

/// FIFO queues of sequence numbers by key. A queue that runs empty stays allocated, so
/// a key used over and over (one tag, one peer) costs no allocation per message; empty
/// queues are swept once they outnumber the rest, and never count in equality or
/// hashing (two states that differ only in kept empty queues are the same state).
#[derive(Clone, Debug)]
pub(crate) struct Fifos<K: Eq + Hash> {
    map: FxHashMap<K, VecDeque<u64>>,
    /// Sweep empty queues when the map grows past this many keys.
    sweep_at: usize,
}

impl<K: Eq + Hash> Default for Fifos<K> {
    fn default() -> Self {
        Fifos {
            map: FxHashMap::default(),
            sweep_at: SWEEP_MIN,
        }
    }
}

const SWEEP_MIN: usize = 64;

impl<K: Eq + Hash + Copy> Fifos<K> {
    pub fn push(&mut self, key: K, seq: u64) {
        if self.map.len() >= self.sweep_at && !self.map.contains_key(&key) {
            self.map.retain(|_, q| !q.is_empty());
            self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
        }
        self.map.entry(key).or_default().push_back(seq);
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

    fn nonempty(&self) -> impl Iterator<Item = (&K, &VecDeque<u64>)> {
        self.map.iter().filter(|(_, q)| !q.is_empty())
    }
}

impl<K: Eq + Hash + Copy> PartialEq for Fifos<K> {
    fn eq(&self, other: &Self) -> bool {
        self.nonempty().count() == other.nonempty().count()
            && self
                .nonempty()
                .all(|(k, q)| other.map.get(k).is_some_and(|o| o == q))
    }
}

impl<K: Eq + Hash + Copy> Eq for Fifos<K> {}

impl<K: Eq + Hash + Copy + Ord> Hash for Fifos<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut v: Vec<_> = self.nonempty().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.len().hash(state);
        for (k, q) in v {
            k.hash(state);
            q.hash(state);
        }
    }
}

/// Counters by key. A counter that drops to zero stays in the table (no removal and
/// re-insertion per message) until zeros outnumber the rest; zeros never count in
/// equality or hashing.
#[derive(Clone, Debug)]
pub(crate) struct Counts<K: Eq + Hash> {
    map: FxHashMap<K, u32>,
    sweep_at: usize,
}

impl<K: Eq + Hash> Default for Counts<K> {
    fn default() -> Self {
        Counts {
            map: FxHashMap::default(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl<K: Eq + Hash + Copy> Counts<K> {
    pub fn get(&self, key: &K) -> u32 {
        self.map.get(key).copied().unwrap_or(0)
    }

    pub fn incr(&mut self, key: K) {
        if self.map.len() >= self.sweep_at && !self.map.contains_key(&key) {
            self.map.retain(|_, n| *n > 0);
            self.sweep_at = (2 * self.map.len()).max(SWEEP_MIN);
        }
        *self.map.entry(key).or_default() += 1;
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

    fn nonzero(&self) -> impl Iterator<Item = (&K, &u32)> {
        self.map.iter().filter(|(_, n)| **n > 0)
    }
}

impl<K: Eq + Hash + Copy> PartialEq for Counts<K> {
    fn eq(&self, other: &Self) -> bool {
        self.nonzero().count() == other.nonzero().count()
            && self.nonzero().all(|(k, n)| other.get(k) == *n)
    }
}

impl<K: Eq + Hash + Copy> Eq for Counts<K> {}

impl<K: Eq + Hash + Copy + Ord> Hash for Counts<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let mut v: Vec<_> = self.nonzero().collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v.len().hash(state);
        for (k, n) in v {
            k.hash(state);
            n.hash(state);
        }
    }
}
