//! The engine's tables, each compared and hashed by content, not by insertion order
//! or where an entry is kept, so that the model checker can compare whole engine
//! states: [`HMap`] (a hash map), [`Sparse`] (keys reused over and over: tags,
//! peers, contexts), [`Window`] and [`OneMap`] (numbered keys: requests, arrivals).

use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct HMap<K: Eq + Hash, V>(FxHashMap<K, V>);

/// The slots an empty [`Window`] keeps. A window of up to this many keeps its
/// memory when it empties: freeing it after every burst of posted receives made the
/// next burst grow it again from nothing (4 096 receives posted in 0.67 ms instead
/// of 0.34–0.40 ms, `docs/performance.md`), while a few entries in a large window
/// cost a cache line each, as in a small one.
const KEEP: usize = 1 << 16;

/// How many empty slots behind a [`Window`]'s first entry (its `gap`) the window
/// keeps on top of its span before that entry moves behind it: [`Window::find`]
/// skips the run at no cost, while an entry behind the window is looked at by every
/// `find` through the ordered map (a note batch of the race checker left in the
/// unexpected queue for up to 128 receives cost each of them ~25 instructions). 256
/// was too few there: Table 2's checked receiver ran ~12 instructions a message more.
const GAP_KEPT: usize = 1024;

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

/// A value with an empty state that a [`Sparse`] map may keep without it counting.
pub(crate) trait Vacant {
    fn is_vacant(&self) -> bool;
}

impl Vacant for Seqs {
    fn is_vacant(&self) -> bool {
        self.is_empty()
    }
}

/// A FIFO queue of sequence numbers (a [`Fifos`] map's value): a vector read from
/// `head`, emptied when its last entry is taken (keeping its allocation). A push is
/// a vector's push, a pop a few instructions inline; `VecDeque::pop_front` stayed
/// out of line, a call of ~20 instructions at every match of a posted receive. A
/// queue that never drains (entries keep coming while older ones are taken) moves
/// its entries to the front when it is full and the taken ones are at least half of
/// it, so it holds at most four times its entries. Equality and hash are by
/// content.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seqs {
    buf: Vec<u64>,
    /// Entries before this one were taken; below `buf.len()`, or both are 0.
    head: usize,
}

impl Seqs {
    #[inline(always)]
    pub fn push_back(&mut self, seq: u64) {
        if self.buf.len() == self.buf.capacity() {
            self.make_room();
        }
        self.buf.push(seq);
    }

    /// Room for one more entry in a full vector: the taken entries' if they are at
    /// least half of it, otherwise a larger vector.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        if self.head > 0 && 2 * self.head >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        } else {
            self.buf.reserve(1);
        }
    }

    #[inline(always)]
    pub fn front(&self) -> Option<&u64> {
        self.buf.get(self.head)
    }

    #[inline(always)]
    pub fn pop_front(&mut self) -> Option<u64> {
        let seq = *self.buf.get(self.head)?;
        self.head += 1;
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
        }
        Some(seq)
    }

    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.head == self.buf.len()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.buf.len() - self.head
    }

    pub fn iter(&self) -> std::slice::Iter<'_, u64> {
        self.buf[self.head..].iter()
    }
}

impl PartialEq for Seqs {
    fn eq(&self, other: &Self) -> bool {
        self.buf[self.head..] == other.buf[other.head..]
    }
}

impl Eq for Seqs {}

impl Hash for Seqs {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.buf[self.head..].hash(state);
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
/// at a time), where finding it is a comparison instead of hashing; [`WARM`] more
/// keys sit in slots next to it (a few peers sending to one wildcard receiver take
/// turns at the slot beside the table, and hashing each turn cost ~50 instructions
/// a message). Vacant entries are swept once they outnumber the rest, and never
/// count in equality or hashing: two states that differ only in kept vacant
/// entries, or in which keys sit beside the table, are the same state.
#[derive(Clone, Debug)]
pub(crate) struct Sparse<K: Eq + Hash, V> {
    /// Never also in `warm` or `map`.
    hot: Option<(K, V)>,
    /// Filled from the front and never emptied again (a slot whose entry is vacant
    /// is given to the next new key), and before `map` gets any key: so an empty
    /// first slot means that this and the map are empty. Never also in `map`.
    warm: [Option<(K, V)>; WARM],
    map: FxHashMap<K, V>,
    /// Sweep vacant entries when the map grows past this many keys.
    sweep_at: usize,
}

/// The keys a [`Sparse`] table keeps in slots past the one beside it.
const WARM: usize = 3;

/// FIFO queues of sequence numbers by key.
pub(crate) type Fifos<K> = Sparse<K, Seqs>;
/// Counters by key.
pub(crate) type Counts<K> = Sparse<K, u32>;

const SWEEP_MIN: usize = 64;

/// [`Sparse::get_mut`] past the key beside the table, kept out of line so that the
/// lookup of that key stays small enough to inline.
#[inline(never)]
fn get_mut_cold<'a, K: Eq + Hash, V>(
    warm: &'a mut [Option<(K, V)>; WARM],
    map: &'a mut FxHashMap<K, V>,
    key: &K,
) -> Option<&'a mut V> {
    if let Some((_, v)) = warm.iter_mut().flatten().find(|(k, _)| k == key) {
        return Some(v);
    }
    match map.is_empty() {
        true => None,
        false => map.get_mut(key),
    }
}

impl<K: Eq + Hash, V> Default for Sparse<K, V> {
    fn default() -> Self {
        Sparse {
            hot: None,
            warm: std::array::from_fn(|_| None),
            map: FxHashMap::default(),
            sweep_at: SWEEP_MIN,
        }
    }
}

impl<K: Eq + Hash + Copy, V: Vacant + Default> Sparse<K, V> {
    #[inline(always)]
    pub fn get(&self, key: &K) -> Option<&V> {
        match &self.hot {
            Some((k, v)) if k == key => Some(v),
            _ if self.warm[0].is_none() => None,
            _ => self.get_cold(key),
        }
    }

    #[inline(always)]
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.hot {
            Some((k, v)) if k == key => Some(v),
            _ if self.warm[0].is_none() => None,
            _ => get_mut_cold(&mut self.warm, &mut self.map, key),
        }
    }

    /// [`Self::get`] past the key beside the table, kept out of line so that the
    /// lookup of that key stays small enough to inline.
    #[inline(never)]
    fn get_cold(&self, key: &K) -> Option<&V> {
        if let Some((_, v)) = self.warm.iter().flatten().find(|(k, _)| k == key) {
            return Some(v);
        }
        match self.map.is_empty() {
            true => None,
            false => self.map.get(key),
        }
    }

    /// The entry of `key`, created vacant if there is none.
    #[inline]
    fn entry(&mut self, key: K) -> &mut V {
        if matches!(&self.hot, Some((k, _)) if *k == key) {
            return &mut self.hot.as_mut().expect("hot").1;
        }
        self.entry_cold(key)
    }

    /// [`Self::entry`] for a key other than the one beside the table.
    #[inline(never)]
    fn entry_cold(&mut self, key: K) -> &mut V {
        let Sparse {
            hot,
            warm,
            map,
            sweep_at,
        } = self;
        let at = warm
            .iter()
            .map_while(Option::as_ref)
            .position(|(k, _)| *k == key);
        if let Some(i) = at {
            // a key in use takes the slot beside the table from one whose entry is
            // vacant: otherwise a key that came first and went quiet (a tool's
            // channel, a finished phase's) keeps every later one out of it
            if hot.as_ref().is_some_and(|(_, v)| v.is_vacant()) {
                std::mem::swap(hot, &mut warm[i]);
                return &mut hot.as_mut().expect("hot").1;
            }
            return &mut warm[i].as_mut().expect("warm").1;
        }
        if map.is_empty() {
            return match Self::reuse(hot, warm, key) {
                Some(v) => v,
                None => map.entry(key).or_default(),
            };
        }
        if map.len() >= *sweep_at {
            map.retain(|_, v| !v.is_vacant());
            *sweep_at = (2 * map.len()).max(SWEEP_MIN);
        }
        // one lookup finds the key or the place to insert it (a burst of receives
        // on tags of their own: one hash each, not two)
        match map.entry(key) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(place) => match Self::reuse(hot, warm, key) {
                Some(v) => v,
                None => place.insert(V::default()),
            },
        }
    }

    /// A slot for new `key` beside the table, if one is free: the slot next to it,
    /// or else the first warm slot that holds nothing (reusing its allocation).
    fn reuse<'a>(
        hot: &'a mut Option<(K, V)>,
        warm: &'a mut [Option<(K, V)>; WARM],
        key: K,
    ) -> Option<&'a mut V> {
        match hot {
            None => return Some(&mut hot.insert((key, V::default())).1),
            Some((_, v)) if v.is_vacant() => {
                let (k, v) = hot.as_mut().expect("hot");
                *k = key;
                return Some(v);
            }
            Some(_) => {}
        }
        let i = warm
            .iter()
            .position(|s| s.as_ref().is_none_or(|(_, v)| v.is_vacant()))?;
        let slot = &mut warm[i];
        Some(match slot {
            Some((k, v)) => {
                *k = key;
                v
            }
            None => &mut slot.insert((key, V::default())).1,
        })
    }

    fn occupied(&self) -> impl Iterator<Item = (&K, &V)> {
        self.hot
            .iter()
            .chain(self.warm.iter().flatten())
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
    #[inline]
    pub fn count(&self, key: &K) -> u32 {
        self.get(key).copied().unwrap_or(0)
    }

    /// Sets `key`'s counter to `n`.
    pub fn set(&mut self, key: K, n: u32) {
        *self.entry(key) = n;
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

/// Keys that are numbers handed out in increasing order (request ids, arrival
/// numbers), so that a [`Window`] can keep their entries in slots indexed by number.
/// Two keys of one map never share a number.
pub trait Numbered: Copy + Eq {
    fn number(self) -> u64;
}

impl Numbered for u64 {
    #[inline]
    fn number(self) -> u64 {
        self
    }
}

/// A map from numbered keys to values for keys that arrive mostly in increasing
/// order and leave mostly in the same order (requests, arrivals). The recent entries
/// sit in a window of slots indexed by number: inserting the newest key appends a
/// slot, finding one indexes it and removing one empties it and drops the empty
/// slots at the window's front, with no hashing. The run of empty slots behind a
/// first entry that stays is counted, and a search starts past it. An entry left
/// behind while many others pass (a receive that stays posted, a message received
/// much later), or a key inserted below the window, is kept in an ordered map behind
/// it; a key far beyond the window's end moves the window's entries there and starts
/// a new window.
/// Iteration is in number order; equality and hashing are by content, not by where
/// an entry is kept (the model checker compares states).
///
/// ```
/// let mut w = matching::Window::default();
/// w.insert(7u64, "a");
/// w.insert(8, "b");
/// w.insert(3, "older");
/// assert_eq!(w.remove(&7), Some("a"));
/// assert_eq!(w.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(), [(3, "older"), (8, "b")]);
/// ```
#[derive(Clone, Debug)]
pub struct Window<K, V> {
    /// Entries below the window, by number (every number here is below `base`).
    behind: BTreeMap<u64, (K, V)>,
    /// The number of the window's first slot.
    base: u64,
    /// The window's slots, in a ring: slot `i` of the window is `ring[(head + i) &
    /// mask]`. A hand-made ring rather than a `VecDeque`, so that dropping empty slots
    /// at the front moves nothing (a `pop_front` moves each slot out, values and all).
    ring: Vec<Option<(K, V)>>,
    head: usize,
    /// Slots in the window.
    len: usize,
    /// Occupied slots.
    live: usize,
    /// Empty slots known to follow the window's first slot, which holds an entry: a
    /// lower bound, 0 when unknown. An entry that stays while the ones after it leave
    /// (a message no receive takes yet, on another communicator) leaves a run of
    /// empty slots behind it, and [`Window::find`] starts past the run instead of
    /// looking at each slot of it again at every call.
    gap: usize,
}

impl<K, V> Default for Window<K, V> {
    fn default() -> Self {
        Window {
            behind: BTreeMap::new(),
            base: 0,
            ring: Vec::new(),
            head: 0,
            len: 0,
            live: 0,
            gap: 0,
        }
    }
}

impl<K: Numbered, V> Window<K, V> {
    /// The window may hold this many slots for `live` entries before its oldest
    /// entries move behind it.
    #[inline]
    fn span(live: usize) -> usize {
        64 + 4 * live
    }

    /// The ring index of the window's slot `i`.
    #[inline]
    fn at(&self, i: usize) -> usize {
        (self.head + i) & (self.ring.len().wrapping_sub(1))
    }

    /// The ring index of number `n`'s slot, if it is in the window.
    #[inline]
    fn slot(&self, n: u64) -> Option<usize> {
        // one comparison: a number below `base` wraps to far beyond the window
        let i = n.wrapping_sub(self.base);
        (i < self.len as u64).then(|| self.at(i as usize))
    }

    /// Appends a slot holding `e` to the window (always inlined, so that a new
    /// entry is written straight into its slot rather than copied in as an argument).
    #[inline(always)]
    fn push(&mut self, e: Option<(K, V)>) {
        if self.len == self.ring.len() {
            self.grow();
        }
        let j = self.at(self.len);
        // a slot past the window's end is always vacant: nothing to drop (an
        // assignment would test the old value for a destructor to run)
        let old = std::mem::replace(&mut self.ring[j], e);
        debug_assert!(old.is_none(), "a slot past the window's end holds an entry");
        std::mem::forget(old);
        self.len += 1;
    }

    /// Doubles the ring (full: called when the window fills it) in place: the
    /// allocation grows (moved, if it must move, as one block rather than slot by
    /// slot) and only the new half is written; the slots that had wrapped round to
    /// the ring's start then move to follow its old end, where the window now
    /// continues. (The pages a burst of entries first touches are the same either
    /// way: `docs/performance.md`, "Posting next to the references".)
    #[inline(never)]
    fn grow(&mut self) {
        debug_assert_eq!(self.len, self.ring.len(), "the ring grows when full");
        let old = self.ring.len();
        let cap = (2 * old).max(16);
        self.ring.reserve_exact(cap - old);
        self.ring.resize_with(cap, || None);
        let (front, back) = self.ring.split_at_mut(old);
        front[..self.head].swap_with_slice(&mut back[..self.head]);
    }

    /// Whether number `n` would be appended to the window, next to its last slot,
    /// with the window holding entries (the common case of an insertion).
    #[inline(always)]
    fn appends(&self, n: u64) -> bool {
        self.live > 0 && n == self.base + self.len as u64
    }

    /// Inserts `v` under `k`; the value it replaces.
    #[inline]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let n = k.number();
        if self.appends(n) {
            // the common case: the newest key, next to the window's last
            self.push(Some((k, v)));
            self.live += 1;
            return None;
        }
        self.insert_more(n, k, v)
    }

    #[inline(never)]
    fn insert_more(&mut self, n: u64, k: K, v: V) -> Option<V> {
        if let Some(j) = self.slot(n) {
            if n - self.base <= self.gap as u64 {
                self.gap = 0;
            }
            let old = self.ring[j].replace((k, v)).map(|(_, v)| v);
            self.live += usize::from(old.is_none());
            return old;
        }
        // every number behind is below `base`, so an empty window starts at any key
        // from `base` on, and below it at one above those behind
        let above_behind = || self.behind.last_key_value().is_none_or(|(b, _)| *b < n);
        if self.live == 0 && (n >= self.base || above_behind()) {
            self.len = 0;
            self.gap = 0;
            self.base = n;
        } else if n < self.base {
            return self.behind.insert(n, (k, v)).map(|(_, v)| v);
        } else if n - (self.base + self.len as u64) > Self::span(self.live) as u64 {
            // far beyond the window: its entries move behind, a new window starts
            for i in 0..self.len {
                let j = self.at(i);
                if let Some(e) = self.ring[j].take() {
                    self.behind.insert(self.base + i as u64, e);
                }
            }
            self.live = 0;
            self.len = 0;
            self.gap = 0;
            self.base = n;
        } else {
            while self.base + (self.len as u64) < n {
                self.push(None);
            }
        }
        self.push(Some((k, v)));
        self.live += 1;
        None
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        let n = k.number();
        match self.slot(n) {
            Some(j) => self.ring[j].as_ref().map(|(_, v)| v),
            // every number behind is below `base`
            None if n >= self.base || self.behind.is_empty() => None,
            None => self.behind.get(&n).map(|(_, v)| v),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let n = k.number();
        match self.slot(n) {
            Some(j) => self.ring[j].as_mut().map(|(_, v)| v),
            None if n >= self.base || self.behind.is_empty() => None,
            None => self.behind.get_mut(&n).map(|(_, v)| v),
        }
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Removes and returns the value under `k`.
    #[inline]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let n = k.number();
        let Some(j) = self.slot(n) else {
            return self.remove_behind(n);
        };
        self.take_slot(j)
    }

    /// Empties ring slot `j`; its value.
    #[inline(always)]
    fn take_slot(&mut self, j: usize) -> Option<V> {
        let (_, v) = self.ring[j].take()?;
        self.clear_slot(j);
        Some(v)
    }

    /// Removes and returns the value under `k` if `take` says so (always inlined, so
    /// that a caller keeping part of the value does not copy all of it out).
    #[inline(always)]
    pub fn remove_if(&mut self, k: &K, take: impl FnOnce(&V) -> bool) -> Option<V> {
        let n = k.number();
        let Some(j) = self.slot(n) else {
            return match self.get(k) {
                Some(v) if take(v) => self.remove_behind(n),
                _ => None,
            };
        };
        match &self.ring[j] {
            Some((_, v)) if take(v) => self.take_slot(j),
            _ => None,
        }
    }

    /// Removes the entry under `k` if `take` returns something for it, and returns
    /// that: the caller reads what it needs in place, and the value is dropped where
    /// it lies instead of being moved out whole (a receive's state is ~100 bytes).
    #[inline(always)]
    pub fn take_if<R>(&mut self, k: &K, take: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        let n = k.number();
        let Some(j) = self.slot(n) else {
            return self.take_behind_if(n, take);
        };
        let r = take(&self.ring[j].as_ref()?.1)?;
        self.clear_slot(j);
        Some(r)
    }

    /// Empties ring slot `j` (occupied, or just taken out), dropping its entry in
    /// place, and moves the window on as [`Self::remove`] does.
    #[inline(always)]
    fn clear_slot(&mut self, j: usize) {
        self.ring[j] = None;
        self.live -= 1;
        if j == self.head {
            // the common case, entries leaving in the order they came: the window
            // starts one slot later, and `trim` runs only if there is more to do
            self.head = self.at(1);
            self.len -= 1;
            self.base += 1;
            if (self.len > 0 && self.ring[self.head].is_none())
                || self.len > Self::span(self.live)
                || (self.len == 0 && self.ring.len() > KEEP)
            {
                self.trim();
            }
        } else {
            if j == self.at(1 + self.gap) {
                // the run of empty slots behind the first entry grows
                self.widen_gap();
            }
            if self.len > Self::span(self.live) + self.gap.min(GAP_KEPT) {
                self.trim();
            }
        }
    }

    /// Counts into [`Self::gap`] the empty slots that now follow it (the slot just
    /// past it was emptied).
    #[inline(never)]
    fn widen_gap(&mut self) {
        self.gap += 1;
        while 1 + self.gap < self.len && self.ring[self.at(1 + self.gap)].is_none() {
            self.gap += 1;
        }
    }

    #[inline(never)]
    fn take_behind_if<R>(&mut self, n: u64, take: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        if n >= self.base || self.behind.is_empty() {
            return None;
        }
        let r = take(&self.behind.get(&n)?.1)?;
        self.behind.remove(&n);
        Some(r)
    }

    #[inline(never)]
    fn remove_behind(&mut self, n: u64) -> Option<V> {
        // every number behind is below `base`
        if n >= self.base || self.behind.is_empty() {
            return None;
        }
        self.behind.remove(&n).map(|(_, v)| v)
    }

    /// Starts the window at its first entry; while it is mostly empty slots, moves
    /// the old entries holding it open behind it.
    #[inline(never)]
    fn trim(&mut self) {
        // the first slot changes (or keeps an entry, with the run behind it counted
        // again by the next removals)
        self.gap = 0;
        loop {
            while self.len > 0 && self.ring[self.head].is_none() {
                self.head = self.at(1);
                self.len -= 1;
                self.base += 1;
            }
            if self.len <= Self::span(self.live) {
                break;
            }
            if let Some(old) = self.ring[self.head].take() {
                self.behind.insert(self.base, old);
                self.live -= 1;
            }
        }
        if self.len == 0 && self.ring.len() > KEEP {
            *self = Window {
                behind: std::mem::take(&mut self.behind),
                base: self.base,
                ..Window::default()
            };
        }
    }

    pub fn len(&self) -> usize {
        self.behind.len() + self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0 && self.behind.is_empty()
    }

    /// Every entry, in number order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        let window = (0..self.len).filter_map(|i| self.ring[self.at(i)].as_ref());
        self.behind.values().chain(window).map(|(k, v)| (k, v))
    }

    /// The first entry, in number order, whose value `pred` holds for:
    /// `iter().find(..)` without the chain, which a wildcard receive paid for at every
    /// look while nothing was behind the window (the common case).
    #[inline]
    pub fn find(&self, mut pred: impl FnMut(&V) -> bool) -> Option<(&K, &V)> {
        if !self.behind.is_empty() {
            if let Some((k, v)) = self.behind.values().find(|(_, v)| pred(v)) {
                return Some((k, v));
            }
        }
        if self.len == 0 {
            return None;
        }
        if let Some((k, v)) = &self.ring[self.head] {
            if pred(v) {
                return Some((k, v));
            }
        }
        (1 + self.gap..self.len)
            .filter_map(|i| self.ring[self.at(i)].as_ref())
            .find(|(_, v)| pred(v))
            .map(|(k, v)| (k, v))
    }
}

impl<K: Numbered, V> Window<K, V> {
    /// [`Window::find`] among the entries numbered `from` or more: a search that
    /// resumes where an earlier one that found nothing stopped.
    pub fn find_from(&self, from: u64, mut pred: impl FnMut(&V) -> bool) -> Option<(&K, &V)> {
        if from < self.base && !self.behind.is_empty() {
            if let Some((k, v)) = self
                .behind
                .range(from..)
                .map(|(_, e)| e)
                .find(|(_, v)| pred(v))
            {
                return Some((k, v));
            }
        }
        let start = from.saturating_sub(self.base).min(self.len as u64) as usize;
        if start == 0 && self.len > 0 {
            if let Some((k, v)) = &self.ring[self.head] {
                if pred(v) {
                    return Some((k, v));
                }
            }
        }
        // (the slots of the gap are empty)
        (start.max(1 + self.gap)..self.len)
            .filter_map(|i| self.ring[self.at(i)].as_ref())
            .find(|(_, v)| pred(v))
            .map(|(k, v)| (k, v))
    }
}

impl<K: Numbered, V> std::ops::Index<&K> for Window<K, V> {
    type Output = V;
    fn index(&self, k: &K) -> &V {
        self.get(k).expect("key in map")
    }
}

#[cfg(test)]
impl<K: Numbered, V> Window<K, V> {
    /// (slots in the window, entries behind it)
    pub(crate) fn placement(&self) -> (usize, usize) {
        (self.len, self.behind.len())
    }

    /// Whether [`Window::gap`] counts only empty slots behind an occupied first one.
    pub(crate) fn gap_holds(&self) -> bool {
        self.gap == 0
            || (self.gap < self.len
                && self.ring[self.head].is_some()
                && (1..=self.gap).all(|i| self.ring[self.at(i)].is_none()))
    }

    /// The empty slots known to follow the first one.
    pub(crate) fn gap(&self) -> usize {
        self.gap
    }

    /// Moves every entry into the window, however sparse it gets (a placement the
    /// window's own rules would not keep), for tests of equality by content.
    pub(crate) fn gather(&mut self) {
        let mut all: Vec<(u64, (K, V))> = std::mem::take(&mut self.behind).into_iter().collect();
        for i in 0..self.len {
            let j = self.at(i);
            if let Some(e) = self.ring[j].take() {
                all.push((self.base + i as u64, e));
            }
        }
        let Some(&(first, _)) = all.first() else {
            return;
        };
        (self.len, self.live, self.base, self.gap) = (0, 0, first, 0);
        for (n, e) in all {
            while self.base + (self.len as u64) < n {
                self.push(None);
            }
            self.push(Some(e));
            self.live += 1;
        }
    }
}

impl<K: Numbered, V: PartialEq> PartialEq for Window<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<K: Numbered, V: Eq> Eq for Window<K, V> {}

impl<K: Numbered + Hash, V: Hash> Hash for Window<K, V> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.len().hash(state);
        for (k, v) in self.iter() {
            k.hash(state);
            v.hash(state);
        }
    }
}

/// A map of requests by number ([`Numbered`]) that keeps one entry beside the table:
/// while one request is pending (every blocking call, most ping-pongs) inserting,
/// finding and removing it is a comparison. The others sit in a [`Window`], indexed
/// by number. The entry beside the window is the first of its requests, until 256
/// others have passed it (`PASSED`); then the newest takes its place. Equality and
/// hashing see only the entries, not where they are kept. The engine keeps its
/// requests in these, and so does `rsmpi-core`.
///
/// ```
/// let mut m = matching::OneMap::default();
/// m.insert(7u64, "first");
/// m.insert(9, "second");
/// assert_eq!(m.remove(&7), Some("first"));
/// assert_eq!((m.len(), m.get(&9)), (1, Some(&"second")));
/// ```
#[derive(Clone, Debug)]
pub struct OneMap<K, V> {
    one: Option<(K, V)>,
    /// Requests put in the window while `one` stayed.
    passed: u32,
    rest: Window<K, V>,
}

/// A request beside the window that this many others have passed gives its slot to
/// the next one (more than a window of 64 requests, the message-rate benchmarks').
const PASSED: u32 = 256;

impl<K, V> Default for OneMap<K, V> {
    fn default() -> Self {
        OneMap {
            one: None,
            passed: 0,
            rest: Window::default(),
        }
    }
}

impl<K: Numbered, V> OneMap<K, V> {
    /// Inserts `v` under `k`; the value it replaces.
    #[inline(always)]
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.insert_with(k, move || v)
    }

    /// [`Self::insert`] of the value `make` returns, made in the branch that stores it.
    /// In the common cases the value's fields are then stored straight into its slot:
    /// made first and moved, a value of several fields was read back with loads wider
    /// than the stores that had just written it, which the CPU cannot forward, and the
    /// loads waited for every store before them to leave the store buffer (a posted
    /// receive's `RecvState`; `docs/performance.md`, "Values written where they are
    /// read").
    #[inline(always)]
    pub fn insert_with(&mut self, k: K, make: impl FnOnce() -> V) -> Option<V> {
        // the common cases, kept small enough to inline into every caller: the only
        // request, or the newest of a burst (`insert_more` would append it too)
        if self.one.is_none() && self.rest.is_empty() {
            self.one = Some((k, make()));
            self.passed = 0;
            return None;
        }
        let n = k.number();
        if self.passed < PASSED
            && self.rest.appends(n)
            && matches!(&self.one, Some((k1, _)) if *k1 != k)
        {
            self.passed += 1;
            self.rest.push(Some((k, make())));
            self.rest.live += 1;
            return None;
        }
        self.insert_more(k, make())
    }

    #[inline(never)]
    fn insert_more(&mut self, k: K, v: V) -> Option<V> {
        match &mut self.one {
            Some((k1, v1)) if *k1 == k => Some(std::mem::replace(v1, v)),
            Some(_) if self.passed < PASSED || self.rest.contains_key(&k) => {
                self.passed += 1;
                self.rest.insert(k, v)
            }
            Some(_) => {
                // a request that stays (a receive posted for the whole run) leaves
                // the slot beside the window to the newest once many have passed it,
                // so that it does not keep every later one out
                let (k0, v0) = self.one.replace((k, v)).expect("occupied");
                self.passed = 0;
                self.rest.insert(k0, v0);
                None
            }
            None if !self.rest.contains_key(&k) => {
                self.one = Some((k, v));
                self.passed = 0;
                None
            }
            None => self.rest.insert(k, v),
        }
    }

    #[inline]
    pub fn get(&self, k: &K) -> Option<&V> {
        match &self.one {
            Some((k1, v1)) if k1 == k => Some(v1),
            _ => self.rest.get(k),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.one {
            Some((k1, v1)) if k1 == k => Some(v1),
            _ => self.rest.get_mut(k),
        }
    }

    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Removes and returns the value under `k`.
    #[inline(always)]
    pub fn remove(&mut self, k: &K) -> Option<V> {
        if matches!(&self.one, Some((k1, _)) if k1 == k) {
            return self.one.take().map(|(_, v)| v);
        }
        if self.rest.is_empty() {
            return None;
        }
        self.rest.remove(k)
    }

    /// Removes and returns the value under `k` if `take` says so.
    #[inline(always)]
    pub fn remove_if(&mut self, k: &K, take: impl FnOnce(&V) -> bool) -> Option<V> {
        match &self.one {
            Some((k1, v1)) if k1 == k => {
                if take(v1) {
                    return self.one.take().map(|(_, v)| v);
                }
                None
            }
            _ => self.rest.remove_if(k, take),
        }
    }

    /// Removes the entry under `k` if `take` returns something for it, and returns
    /// that ([`Window::take_if`]).
    #[inline(always)]
    pub fn take_if<R>(&mut self, k: &K, take: impl FnOnce(&V) -> Option<R>) -> Option<R> {
        match &self.one {
            Some((k1, v1)) if k1 == k => {
                let r = take(v1)?;
                self.one = None;
                Some(r)
            }
            _ => self.rest.take_if(k, take),
        }
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

impl<K: Numbered, V> std::ops::Index<&K> for OneMap<K, V> {
    type Output = V;
    fn index(&self, k: &K) -> &V {
        self.get(k).expect("key in map")
    }
}

impl<K: Numbered, V: PartialEq> PartialEq for OneMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl<K: Numbered, V: Eq> Eq for OneMap<K, V> {}

impl<K: Numbered + Hash + Ord, V: Hash> Hash for OneMap<K, V> {
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
    use std::collections::{HashMap, VecDeque};

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
        a.set(1u32, 2);
        a.set(2, 1);
        assert_eq!((a.count(&1), a.count(&2), a.count(&3)), (2, 1, 0));
        a.set(1, 0);
        *a.get_mut(&2).expect("counted") += 1; // the slot holds a vacant 1; 2 is in the table
        assert_eq!(a.count(&2), 2);
        a.set(3, 1);
        let mut b = Counts::default();
        b.set(3, 1);
        b.set(2, 2);
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        a.set(2, 1);
        assert_ne!(a, b);
        a.set(2, 0);
        a.set(3, 0);
        assert_eq!(a, Counts::default());
        assert_eq!(hash_of(&a), hash_of(&Counts::<u32>::default()));
    }

    /// `Fifos` (a `Sparse` map) behaves as a map of queues whether a key sits beside
    /// the table, in a slot next to it or in the table, as keys come, empty and are
    /// given slots again; equality and hash do not depend on where keys sit.
    #[test]
    fn fifos_are_a_map_wherever_keys_sit() {
        let mut f: Fifos<u32> = Fifos::default();
        let mut model: HashMap<u32, VecDeque<u64>> = HashMap::new();
        let mut x = 12345u64;
        for seq in 0..4000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // up to 9 keys: more than the slots; the early ones more often
            let key = ((x >> 33) % 9).min((x >> 40) % 9) as u32;
            if (x >> 20).is_multiple_of(3) {
                // take the head of `key`'s queue, as `Unexpected::take` does
                let head = f.head(&key, |_| true);
                assert_eq!(head, model.get(&key).and_then(|q| q.front().copied()));
                if head.is_some() {
                    f.get_mut(&key).expect("queued").pop_front();
                    model.get_mut(&key).expect("queued").pop_front();
                }
            } else {
                f.push(key, seq);
                model.entry(key).or_default().push_back(seq);
            }
            for k in 0..10u32 {
                let want = model.get(&k).filter(|q| !q.is_empty());
                let got = f.get(&k).filter(|q| !q.is_empty());
                let got: Option<Vec<u64>> = got.map(|q| q.iter().copied().collect());
                let want: Option<Vec<u64>> = want.map(|q| q.iter().copied().collect());
                assert_eq!(got, want, "key {k}");
            }
        }
        // the same contents put in another order (other keys beside the table)
        let mut g: Fifos<u32> = Fifos::default();
        for k in (0..10u32).rev() {
            for &s in model.get(&k).into_iter().flatten() {
                g.push(k, s);
            }
        }
        assert!(f == g);
        assert_eq!(hash_of(&f), hash_of(&g));
        g.push(3, 99_999);
        assert!(f != g);
    }

    /// A queue that never drains (always one entry or more left) keeps its entries
    /// in order and its vector within four times the most it held; equal contents
    /// are equal, with equal hashes, wherever in the vector they sit.
    #[test]
    fn seqs_that_never_drain_stay_small() {
        let mut q = Seqs::default();
        let mut model = VecDeque::new();
        let mut x = 7u64;
        for seq in 0..100_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if model.len() < 2 || ((x >> 33).is_multiple_of(2) && model.len() < 40) {
                q.push_back(seq);
                model.push_back(seq);
            } else {
                assert_eq!(q.pop_front(), model.pop_front());
            }
            assert_eq!((q.front(), q.len()), (model.front(), model.len()));
            assert!(q.iter().eq(model.iter()), "at {seq}");
            assert!(q.buf.capacity() <= 256, "{} slots", q.buf.capacity());
        }
        assert!(q.head > 0, "the test ends with taken entries in the vector");
        let mut fresh = Seqs::default();
        for &s in &model {
            fresh.push_back(s);
        }
        assert!(q == fresh);
        assert_eq!(hash_of(&q), hash_of(&fresh));
        fresh.pop_front();
        assert!(q != fresh);
    }

    /// A key that came first and went quiet (a tool's channel ahead of the user's)
    /// gives the slot beside the table to a key in use, which then no longer takes
    /// the out-of-line path at every message.
    #[test]
    fn quiet_key_gives_up_the_slot_beside_the_table() {
        let mut f: Fifos<u32> = Fifos::default();
        f.push(7, 0); // 7 beside the table
        f.push(1, 1); // 1 in the first slot next to it
        f.get_mut(&7).expect("queued").pop_front(); // 7 goes quiet
        f.push(1, 2); // 1, in use, takes the slot beside the table
        assert!(matches!(&f.hot, Some((1, q)) if q.len() == 2));
        // while it is in use, it keeps it
        f.push(7, 3);
        assert!(matches!(&f.hot, Some((1, _))));
        assert_eq!(f.get(&7).map(Seqs::len), Some(1));
        assert_eq!(f.head(&1, |_| true), Some(1));
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

    /// The next number of a deterministic walk (a linear congruential generator's
    /// high bits).
    fn step_walk(x: &mut u64) -> u64 {
        *x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *x >> 33
    }

    /// Every lookup and removal of a [`OneMap`] answers as a map does, with the key
    /// beside the window or not, and the window empty, holding entries, or holding
    /// only entries behind it: the lookups go to the window without first asking
    /// whether it is empty, so a window that answered for a key it does not hold (an
    /// emptied slot, a number below its base or far above it) fails here.
    #[test]
    fn one_map_answers_as_a_map() {
        let mut m = OneMap::default();
        let mut model = std::collections::BTreeMap::new();
        let mut x: u64 = 99;
        let mut next = 500u64;
        for step in 0..30_000u64 {
            let r = step_walk(&mut x);
            // keys near the newest, below the first ever (0..500), or far above
            let k = match (r >> 4) % 8 {
                0 => (r >> 8) % 500,
                1 => next + 1000 + (r >> 8) % 50,
                _ => next.saturating_sub((r >> 8) % 80),
            };
            match r % 12 {
                0..=3 => {
                    next += 1 + (r >> 12) % 2;
                    assert_eq!(m.insert(next, step), model.insert(next, step));
                }
                4 => assert_eq!(m.insert(k, step), model.insert(k, step)),
                5 | 6 => assert_eq!(m.remove(&k), model.remove(&k), "step {step}"),
                7 => {
                    let want = match model.get(&k) {
                        Some(v) if v % 2 == 0 => model.remove(&k),
                        _ => None,
                    };
                    assert_eq!(m.remove_if(&k, |v| v % 2 == 0), want, "step {step}");
                }
                8 => {
                    let want = match model.get(&k) {
                        Some(v) if v % 3 != 0 => model.remove(&k).map(|v| v + 7),
                        _ => None,
                    };
                    let got = m.take_if(&k, |v| (v % 3 != 0).then_some(v + 7));
                    assert_eq!(got, want, "step {step}");
                }
                9 => {
                    if let Some(v) = m.get_mut(&k) {
                        *v += 1;
                    }
                    if let Some(v) = model.get_mut(&k) {
                        *v += 1;
                    }
                }
                10 => {
                    // the oldest entries leave, as completed requests do: the map
                    // empties now and then, and the window with it
                    while let Some((&k, _)) = model.iter().next() {
                        assert_eq!(m.remove(&k), model.remove(&k));
                        if !(r >> 12).is_multiple_of(4) {
                            break;
                        }
                    }
                }
                _ => {}
            }
            assert_eq!(m.get(&k), model.get(&k), "step {step}");
            assert_eq!(m.contains_key(&(k + 1)), model.contains_key(&(k + 1)));
            assert_eq!((m.len(), m.is_empty()), (model.len(), model.is_empty()));
        }
        let mut all: Vec<_> = m.iter().map(|(k, v)| (*k, *v)).collect();
        all.sort_unstable();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }

    /// A request that stays beside the window gives its slot to a newer one once
    /// many have passed it; every entry is still found, and where one is kept does
    /// not change equality.
    #[test]
    fn one_map_old_entry_gives_way() {
        let mut a = OneMap::default();
        a.insert(1u64, 1u64);
        for k in 2..2 + u64::from(PASSED) + 10 {
            assert_eq!(a.insert(k, k), None);
            assert_eq!(a.remove(&k), Some(k));
        }
        assert!(a.one.as_ref().is_none_or(|(k, _)| *k != 1), "1 gave way");
        assert_eq!(a.get(&1), Some(&1));
        let mut b = OneMap::default();
        b.insert(1u64, 1u64);
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        a.insert(5000, 5);
        a.insert(5001, 6);
        assert_eq!((a.len(), a[&1], a[&5000], a[&5001]), (3, 1, 5, 6));
        assert_eq!(a.remove(&1), Some(1));
        assert_eq!(a.len(), 2);
    }

    /// `insert_with` makes its value once, whichever way it stores it (the only entry,
    /// the newest of a burst, or over an entry already there), and stores what it made.
    #[test]
    fn one_map_insert_with_makes_its_value_once() {
        let mut m = OneMap::default();
        let made = std::cell::Cell::new(0);
        let make = |v: char| {
            let made = &made;
            move || {
                made.set(made.get() + 1);
                v
            }
        };
        assert_eq!(m.insert_with(1u64, make('a')), None); // the only one
        assert_eq!(m.insert_with(2, make('b')), None); // the newest of a burst
        assert_eq!(m.insert_with(1, make('c')), Some('a')); // over the one beside
        assert_eq!(m.insert_with(2, make('d')), Some('b')); // over one in the window
        assert_eq!(made.get(), 4);
        assert_eq!((m.len(), m[&1], m[&2]), (2, 'c', 'd'));
    }

    /// `take_if` removes an entry only when its closure returns something, from the
    /// slot beside the window as from the window, and returns what the closure did.
    #[test]
    fn one_map_take_if() {
        let mut m = OneMap::default();
        m.insert(1u64, 10u64);
        m.insert(2, 20);
        assert_eq!(m.take_if(&1, |_| None::<u64>), None);
        assert_eq!((m.len(), m.get(&1)), (2, Some(&10)));
        assert_eq!(m.take_if(&1, |v| Some(v + 1)), Some(11));
        assert_eq!((m.len(), m.get(&1)), (1, None));
        assert_eq!(m.take_if(&2, |v| (*v == 21).then_some(0)), None);
        assert_eq!(m.take_if(&2, |v| Some(*v)), Some(20));
        assert_eq!(m.take_if(&3, |v| Some(*v)), None);
        assert!(m.is_empty());
    }

    /// An entry that stays first while those after it leave in order: `find` starts
    /// past the run of empty slots behind it, and finds the stayer itself and the
    /// entries after the run; the run is forgotten when the stayer leaves.
    #[test]
    fn window_find_skips_the_run_behind_a_stayer() {
        let mut w = Window::default();
        w.insert(0u64, 1u64);
        for k in 1..=40u64 {
            w.insert(k, 2 * k);
        }
        for k in 1..=30u64 {
            assert_eq!(w.remove(&k), Some(2 * k));
            assert!(w.gap_holds());
        }
        assert_eq!(w.gap(), 30);
        assert_eq!(w.placement().0, 41, "the stayer holds the window open");
        assert_eq!(w.find(|v| v % 2 == 0), Some((&31, &62)));
        assert_eq!(w.find(|v| *v == 1), Some((&0, &1)));
        assert_eq!(w.find(|v| *v == 7), None);
        // taken out of order: the run grows over the slot emptied earlier
        assert_eq!(w.remove(&33), Some(66));
        assert_eq!(w.gap(), 30);
        assert_eq!(w.remove(&31), Some(62));
        assert_eq!(w.gap(), 31);
        assert_eq!(w.remove(&32), Some(64));
        assert_eq!(w.gap(), 33);
        assert_eq!(w.find(|v| v % 2 == 0), Some((&34, &68)));
        // from a number on: inside the run, before it, past the window
        assert_eq!(w.find_from(20, |v| v % 2 == 0), Some((&34, &68)));
        assert_eq!(w.find_from(0, |_| true), Some((&0, &1)));
        assert_eq!(w.find_from(1, |_| true), Some((&34, &68)));
        assert_eq!(w.find_from(36, |_| true), Some((&36, &72)));
        assert_eq!(w.find_from(41, |_| true), None);
        // a key put back into the run ends it
        w.insert(5, 11);
        assert!(w.gap_holds());
        assert_eq!(w.find(|v| *v == 11), Some((&5, &11)));
        assert_eq!(w.remove(&0), Some(1));
        assert!(w.gap_holds());
        assert_eq!(w.find(|_| true), Some((&5, &11)));
        assert_eq!(w.len(), 8);
    }

    fn window_entries(w: &Window<u64, u64>) -> Vec<(u64, u64)> {
        w.iter().map(|(k, v)| (*k, *v)).collect()
    }

    /// The ring grows in place when the window has wrapped round its end: the
    /// entries keep their order and their numbers, and the window goes on past them.
    #[test]
    fn window_grows_when_wrapped() {
        let mut w = Window::default();
        for k in 0..16u64 {
            w.insert(k, k * 10);
        }
        for k in 0..5u64 {
            assert_eq!(w.remove(&k), Some(k * 10));
        }
        // the window now starts at slot 5 of 16: the next five wrap to slots 0..5,
        // and the one after fills the ring, which then grows
        assert_eq!((w.head, w.ring.len()), (5, 16));
        for k in 16..22u64 {
            w.insert(k, k * 10);
        }
        assert_eq!(
            (w.head, w.ring.len()),
            (5, 32),
            "grown with the window in place"
        );
        for k in 22..80u64 {
            w.insert(k, k * 10);
        }
        let want: Vec<_> = (5..80).map(|k| (k, k * 10)).collect();
        assert_eq!(window_entries(&w), want);
        for k in 5..80 {
            assert_eq!(w.get(&k), Some(&(k * 10)));
        }
        assert_eq!((w.get(&4), w.get(&80)), (None, None));
        assert_eq!(w.placement(), (75, 0));
    }

    /// A `Window` behaves as a map whatever order keys come in: gaps, keys below
    /// the window, keys far beyond it, replacing, and entries left behind.
    #[test]
    fn window_is_a_map() {
        let mut w = Window::default();
        let mut model = std::collections::BTreeMap::new();
        // a deterministic walk: mostly increasing keys, removals mostly oldest first,
        // a few that stay for ever, a few far jumps and keys below the window
        let mut x: u64 = 12345;
        let mut next = 1000u64;
        for step in 0..20_000u64 {
            let r = step_walk(&mut x);
            match r % 10 {
                0..=4 => {
                    next += 1 + (r >> 8) % 3;
                    if r.is_multiple_of(997) {
                        next += 100_000;
                    }
                    assert_eq!(w.insert(next, step), model.insert(next, step));
                }
                5 => {
                    let k = (r >> 4) % 1000;
                    if r.is_multiple_of(3) {
                        // an entry below the window, removed if its value is odd
                        let odd = model.get(&k).is_some_and(|v| v % 2 == 1);
                        let want = if odd { model.remove(&k) } else { None };
                        if r.is_multiple_of(2) {
                            assert_eq!(w.remove_if(&k, |v| v % 2 == 1), want);
                        } else {
                            let got = w.take_if(&k, |v| (v % 2 == 1).then_some(v + 1));
                            assert_eq!(got, want.map(|v| v + 1));
                        }
                    } else {
                        assert_eq!(w.insert(k, step), model.insert(k, step));
                    }
                }
                6..=8 => {
                    // the oldest entry but those below 1000 (which stay)
                    if let Some((&k, _)) = model.range(1000..).next() {
                        assert_eq!(w.remove(&k), model.remove(&k));
                    }
                }
                _ => {
                    let k = next.saturating_sub((r >> 4) % 200);
                    if r.is_multiple_of(2) {
                        assert_eq!(w.remove(&k), model.remove(&k));
                    } else {
                        // removed only if its value is even
                        let even = model.get(&k).is_some_and(|v| v % 2 == 0);
                        let want = if even { model.remove(&k) } else { None };
                        if r.is_multiple_of(3) {
                            let got = w.take_if(&k, |v| (v % 2 == 0).then_some(v * 3));
                            assert_eq!(got, want.map(|v| v * 3));
                        } else {
                            assert_eq!(w.remove_if(&k, |v| v % 2 == 0), want);
                        }
                    }
                    assert_eq!(w.get(&(k + 1)), model.get(&(k + 1)));
                }
            }
            assert_eq!(w.len(), model.len());
            assert!(w.gap_holds(), "step {step}");
            // the oldest entry a predicate holds for, past any run of empty slots
            let m = r % 7;
            assert_eq!(
                w.find(|v| v % 7 == m).map(|(k, v)| (*k, *v)),
                model
                    .iter()
                    .find(|(_, v)| *v % 7 == m)
                    .map(|(k, v)| (*k, *v)),
                "step {step}"
            );
            // and among the entries from a number on: below the window, in it (in
            // the run of empty slots, or past it), past its end
            let from = match (r >> 3) % 4 {
                0 => (r >> 6) % 1200,
                1 => next.saturating_sub((r >> 6) % 300),
                2 => w.iter().next().map_or(0, |(k, _)| *k + (r >> 6) % 4),
                _ => next + 1,
            };
            assert_eq!(
                w.find_from(from, |v| v % 7 == m).map(|(k, v)| (*k, *v)),
                model
                    .range(from..)
                    .find(|(_, v)| *v % 7 == m)
                    .map(|(k, v)| (*k, *v)),
                "step {step}, from {from}"
            );
        }
        assert_eq!(
            window_entries(&w),
            model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
        );
        let (slots, _) = w.placement();
        assert!(
            slots <= 64 + 4 * model.range(1000..).count() + w.gap().min(GAP_KEPT),
            "{slots} slots"
        );
    }

    /// A straggler moves behind the window instead of holding it open; equal
    /// contents are equal, with equal hashes, wherever they are kept.
    #[test]
    fn window_straggler_and_equality() {
        let (mut a, mut b) = (Window::default(), Window::default());
        a.insert(1u64, 0u64);
        b.insert(1u64, 0u64);
        for k in 2..10_000 {
            a.insert(k, k);
            assert_eq!(a.remove(&k), Some(k));
        }
        assert_eq!(a.placement(), (0, 1));
        assert_eq!(b.placement(), (1, 0));
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        // a key far beyond the window starts a new one; the old entries move behind
        b.insert(1_000_000, 5);
        a.insert(1_000_000, 5);
        assert_eq!(b.placement(), (1, 1));
        assert_eq!(a, b);
        assert_eq!(hash_of(&a), hash_of(&b));
        assert_eq!(window_entries(&a), [(1, 0), (1_000_000, 5)]);
        assert_eq!(a.remove(&1), Some(0));
        assert_ne!(a, b);
    }
}
