//! A fast hash map whose `Hash` does not depend on insertion order, so whole engine
//! states can be hashed and compared by the model checker.

use rustc_hash::FxHashMap;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HMap<K: Eq + Hash, V>(FxHashMap<K, V>);

impl<K: Eq + Hash, V> Default for HMap<K, V> {
    fn default() -> Self {
        HMap(FxHashMap::default())
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
