//! The receiver's two queues: posted receives and unexpected messages.
//!
//! Both keep MPI's order (posting order, arrival order). Posted receives sit in
//! per-key FIFO buckets, so matching a message is a hash lookup and a queue head,
//! independent of how many receives are posted. Unexpected messages sit in arrival
//! order, which a receive scans while they are few; a receive of one source and tag
//! gets the same per-key buckets once they are many.

use crate::map::{Fifos, Window};
use crate::types::{Ctx, Rank, RemoteBuf, Source, Tag, TagSel, XferId};
use crate::wire::SendFlags;

/// Posted receives, in posting order. Keys are post sequence numbers (= `RecvId`s).
///
/// A message (ctx, src, tag) can match four kinds of receive: (src, tag), (src, ANY),
/// (ANY, tag), (ANY, ANY). Each kind has FIFO buckets; the earliest live head of the
/// four buckets is the receive MPI says must match. A receive removed other than at
/// its bucket's head (cancelled, or matched by a direct write) is marked dead and
/// dropped when it reaches the head, so the common case — match the head of one exact
/// bucket — is one lookup.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Posted {
    buckets: Fifos<PKey>,
    /// Removed receives still in their bucket.
    dead: Window<u64, ()>,
    /// Live receives.
    len: usize,
    /// Live receives with a wildcard source or tag: while there are none, a message
    /// looks in its exact bucket only.
    wild: usize,
}

/// A bucket's key, (context, source, tag) packed into one number, so that finding a
/// bucket (the message's exact one, most often the map's hot key) is one comparison
/// rather than one per field and enum tag: the context in bits 66 and up, the source
/// in bits 33–65 and the tag in bits 0–32, a wildcard as bit 32 of its field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct PKey(u128);

impl PKey {
    const ANY: u64 = 1 << 32;

    #[inline(always)]
    fn new(ctx: Ctx, src: Source, tag: TagSel) -> PKey {
        let src = match src {
            Source::Rank(r) => u64::from(r),
            Source::Any => Self::ANY,
        };
        let tag = match tag {
            TagSel::Tag(t) => u64::from(t as u32),
            TagSel::Any => Self::ANY,
        };
        PKey(u128::from(ctx) << 66 | u128::from(src) << 33 | u128::from(tag))
    }

    /// The key of a message's exact bucket.
    #[inline(always)]
    fn exact(ctx: Ctx, src: Rank, tag: Tag) -> PKey {
        PKey(u128::from(ctx) << 66 | u128::from(src) << 33 | u128::from(tag as u32))
    }

    /// Whether the key's source or tag is a wildcard.
    #[inline(always)]
    fn is_wild(self) -> bool {
        self.0 & (1 << 65 | 1 << 32) != 0
    }

    /// The key with a wildcard source (`src`) and/or tag (`tag`).
    #[inline(always)]
    fn wild(self, src: bool, tag: bool) -> PKey {
        const FIELD: u128 = (1 << 33) - 1;
        let mut k = self.0;
        if src {
            k = k & !(FIELD << 33) | u128::from(Self::ANY) << 33;
        }
        if tag {
            k = k & !FIELD | u128::from(Self::ANY);
        }
        PKey(k)
    }
}

impl Posted {
    pub fn insert(&mut self, seq: u64, ctx: Ctx, src: Source, tag: TagSel) {
        let key = PKey::new(ctx, src, tag);
        self.wild += usize::from(key.is_wild());
        self.len += 1;
        self.buckets.push(key, seq);
    }

    /// Removes live receive `seq`, posted with `ctx`, `src`, `tag` (the caller knows it
    /// is in the queue).
    pub fn remove(&mut self, seq: u64, ctx: Ctx, src: Source, tag: TagSel) {
        let key = PKey::new(ctx, src, tag);
        self.wild -= usize::from(key.is_wild());
        self.len -= 1;
        match self.buckets.get_mut(&key) {
            Some(q) if q.front() == Some(&seq) => {
                q.pop_front();
            }
            _ => {
                self.dead.insert(seq, ());
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The first live receive of `key`'s bucket, dropping dead ones before it.
    fn head(&mut self, key: &PKey) -> Option<u64> {
        let q = self.buckets.get_mut(key)?;
        while let Some(&h) = q.front() {
            if self.dead.is_empty() || self.dead.remove(&h).is_none() {
                return Some(h);
            }
            q.pop_front();
        }
        None
    }

    /// Whether some posted receive matches a message (what [`Posted::take_match`]
    /// would find), without changing anything.
    pub fn has_match(&self, ctx: Ctx, src: Rank, tag: Tag) -> bool {
        let live = |key: &PKey| {
            self.buckets
                .get(key)
                .is_some_and(|q| q.iter().any(|h| !self.dead.contains_key(h)))
        };
        let exact = PKey::exact(ctx, src, tag);
        live(&exact)
            || self.wild > 0
                && [
                    exact.wild(false, true),
                    exact.wild(true, false),
                    exact.wild(true, true),
                ]
                .iter()
                .any(live)
    }

    /// Removes and returns the earliest posted receive matching a message.
    #[inline(always)]
    pub fn take_match(&mut self, ctx: Ctx, src: Rank, tag: Tag) -> Option<u64> {
        let exact = PKey::exact(ctx, src, tag);
        let (seq, key) = if self.wild == 0 {
            // only the exact bucket can match: pop its first live receive
            let q = self.buckets.get_mut(&exact)?;
            while let Some(h) = q.pop_front() {
                if self.dead.is_empty() || self.dead.remove(&h).is_none() {
                    self.len -= 1;
                    return Some(h);
                }
            }
            return None;
        } else {
            let keys = [
                exact,
                exact.wild(false, true),
                exact.wild(true, false),
                exact.wild(true, true),
            ];
            let mut best: Option<(u64, PKey)> = None;
            for key in keys {
                if let Some(h) = self.head(&key) {
                    if best.is_none_or(|(b, _)| h < b) {
                        best = Some((h, key));
                    }
                }
            }
            best?
        };
        self.buckets.get_mut(&key).expect("bucket").pop_front();
        self.wild -= usize::from(key.is_wild());
        self.len -= 1;
        Some(seq)
    }
}

/// Where the payload of an unexpected message is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum UData {
    /// Arrived inline; copied here.
    Eager(Vec<u8>),
    /// Still at the sender; read it once matched.
    Rndv(RemoteBuf),
    /// Being read into a staging buffer (get protocol).
    Staging(XferId),
    /// Read into a staging buffer.
    Staged(Vec<u8>),
}

/// Payload buffers of small unexpected messages, kept for reuse. An eager message
/// that arrives before its receive is copied into one ([`Spares::copy`]); the caller
/// hands it back once it has copied the payload out ([`Engine::recycle`]), so a steady
/// flow of early messages (a wildcard receiver behind its senders, a window posted
/// late) allocates and frees nothing per message.
///
/// A payload larger than a spare buffer goes into a vector of its own, appended by
/// the driver's copy ([`Engine::copy_early_with`]).
///
/// Not part of the protocol's state: two engines that differ only in their spares are
/// equal, and hash alike, for the model checker.
///
/// [`Engine::recycle`]: crate::Engine::recycle
/// [`Engine::copy_early_with`]: crate::Engine::copy_early_with
#[derive(Clone, Debug, Default)]
pub(crate) struct Spares(Vec<Vec<u8>>);

impl Spares {
    /// Buffers kept at most.
    const KEEP: usize = 256;
    /// The largest buffer kept, in bytes, and the smallest one made.
    const BIG: usize = 1024;
    const SMALL: usize = 64;

    /// `bytes` in a buffer of its own: a spare one if there is one, or for a payload
    /// too big for one, a vector of its own that `extend` fills.
    #[inline(always)]
    pub fn copy(&mut self, bytes: &[u8], extend: fn(&mut Vec<u8>, &[u8])) -> Vec<u8> {
        if bytes.len() > Self::BIG {
            let mut v = Vec::new();
            extend(&mut v, bytes);
            return v;
        }
        let mut v = match self.0.pop() {
            Some(v) => v,
            None => Vec::with_capacity(Self::SMALL),
        };
        v.extend_from_slice(bytes);
        v
    }

    /// Keeps `v` for a later [`Spares::copy`] if it is small and there is room.
    #[inline(always)]
    pub fn keep(&mut self, mut v: Vec<u8>) {
        if v.capacity() <= Self::BIG && v.capacity() > 0 && self.0.len() < Self::KEEP {
            v.clear();
            self.0.push(v);
        }
    }
}

/// How an early payload too big for a spare buffer is appended to its vector
/// ([`Engine::copy_early_with`]). Like [`Spares`], not part of the protocol's state:
/// equal to every other, hashed as nothing.
///
/// [`Engine::copy_early_with`]: crate::Engine::copy_early_with
#[derive(Clone, Copy, Debug)]
pub(crate) struct CopyEarly(pub fn(&mut Vec<u8>, &[u8]));

impl Default for CopyEarly {
    fn default() -> Self {
        CopyEarly(|v, bytes| v.extend_from_slice(bytes))
    }
}

impl PartialEq for CopyEarly {
    fn eq(&self, _: &CopyEarly) -> bool {
        true
    }
}

impl Eq for CopyEarly {}

impl std::hash::Hash for CopyEarly {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

impl PartialEq for Spares {
    fn eq(&self, _: &Spares) -> bool {
        true
    }
}

impl Eq for Spares {}

impl std::hash::Hash for Spares {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

/// A message that arrived before its receive.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct UEntry {
    pub src: Rank,
    pub ctx: Ctx,
    pub tag: Tag,
    /// The sender's send-request number.
    pub i: u64,
    pub len: u64,
    pub flags: SendFlags,
    pub data: UData,
}

/// Unexpected messages in arrival order. A receive of one source and tag scans them
/// while they are few, and a per-(context, source, tag) index once they are many.
///
/// The index is built when such a receive looks into more than [`INDEX_AT`] messages,
/// kept up while any message waits, and dropped when the queue empties. Kept always,
/// it cost every message that arrived before its receive a push and a clean-up in a
/// map (~100 instructions a message of the paper's Table 2 workload, where every
/// receive is a wildcard and nothing ever reads it). It is derived from the arrivals,
/// so it takes no part in the state's equality or hash.
#[derive(Clone, Debug, Default)]
pub(crate) struct Unexpected {
    order: Arrivals,
    exact: Option<Fifos<(Ctx, Rank, Tag)>>,
}

/// The most messages a receive of one source and tag scans; past that many it builds
/// [`Unexpected`]'s index.
pub(crate) const INDEX_AT: usize = 16;

impl PartialEq for Unexpected {
    fn eq(&self, other: &Self) -> bool {
        self.order == other.order
    }
}

impl Eq for Unexpected {}

impl std::hash::Hash for Unexpected {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.order.hash(state);
    }
}

impl Unexpected {
    pub fn push(&mut self, e: UEntry) -> u64 {
        let key = (e.ctx, e.src, e.tag);
        let seq = self.order.push(e);
        if let Some(x) = &mut self.exact {
            x.push(key, seq);
        }
        seq
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Whether the index of [`Unexpected`] is built (for tests).
    #[cfg(test)]
    pub fn indexed(&self) -> bool {
        self.exact.is_some()
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut UEntry> {
        self.order.get_mut(seq)
    }

    /// The earliest-arrived message matching a receive pattern.
    pub fn find(&mut self, ctx: Ctx, src: Source, tag: TagSel) -> Option<u64> {
        if let (Source::Rank(s), TagSel::Tag(t)) = (src, tag) {
            if self.exact.is_none() {
                if self.order.len() <= INDEX_AT {
                    return self
                        .order
                        .find(|e| e.ctx == ctx && e.src == s && e.tag == t);
                }
                self.exact = Some(self.index());
            }
            let q = self.exact.as_ref()?.get(&(ctx, s, t))?;
            return q.iter().copied().find(|seq| self.order.contains(*seq));
        }
        self.order
            .find(|e| e.ctx == ctx && src.matches(e.src) && tag.matches(e.tag))
    }

    /// [`Unexpected::find`] among the messages numbered `from` or more (by arrival,
    /// [`Unexpected::next_number`]), by a scan: a look that resumes where an earlier
    /// one found nothing, for messages of a context that arrive now and then among
    /// many of others (the race checker's notes).
    pub fn find_from(&self, ctx: Ctx, src: Source, tag: TagSel, from: u64) -> Option<u64> {
        self.order.find_from(from, |e| {
            e.ctx == ctx && src.matches(e.src) && tag.matches(e.tag)
        })
    }

    /// The number the next message to arrive will have.
    pub fn next_number(&self) -> u64 {
        self.order.next
    }

    /// Every message's number under its (context, source, tag), in arrival order.
    #[cold]
    #[inline(never)]
    fn index(&self) -> Fifos<(Ctx, Rank, Tag)> {
        let mut x = Fifos::default();
        for (seq, e) in self.order.iter() {
            x.push((e.ctx, e.src, e.tag), seq);
        }
        x
    }

    pub fn peek(&self, seq: u64) -> Option<&UEntry> {
        self.order.get(seq)
    }

    pub fn take(&mut self, seq: u64) -> Option<UEntry> {
        let e = self.order.take(seq)?;
        if self.exact.is_some() {
            if self.order.is_empty() {
                self.exact = None;
            } else if let Some(x) = &mut self.exact {
                let order = &self.order;
                x.head(&(e.ctx, e.src, e.tag), |h| order.contains(h));
            }
        }
        Some(e)
    }

    /// How many messages of the channel of entry `seq` (its sender, context and tag)
    /// arrived before it and are still here.
    pub fn ahead_on_channel(&self, seq: u64) -> u64 {
        let Some(e) = self.order.get(seq) else {
            return 0;
        };
        let c = (e.src, e.ctx, e.tag);
        self.order
            .iter()
            .filter(|&(s, x)| s < seq && (x.src, x.ctx, x.tag) == c)
            .count() as u64
    }

    /// The entry of send request `i` from `src`, if it is still unexpected.
    pub fn find_send(&self, src: Rank, i: u64) -> Option<u64> {
        self.order
            .iter()
            .find(|(_, e)| e.src == src && e.i == i)
            .map(|(s, _)| s)
    }
}

/// Entries numbered in arrival order, in a [`Window`]: push, lookup and take index a
/// slot (a `BTreeMap` cost several hundred instructions a message here), and the few
/// left behind while many others pass are kept in order behind the window. Equality
/// and hashing are by content (the model checker compares states).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Arrivals {
    entries: Window<u64, UEntry>,
    /// The number the next entry gets.
    next: u64,
}

impl Arrivals {
    fn push(&mut self, e: UEntry) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.entries.insert(seq, e);
        seq
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn contains(&self, seq: u64) -> bool {
        self.entries.contains_key(&seq)
    }

    fn get(&self, seq: u64) -> Option<&UEntry> {
        self.entries.get(&seq)
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut UEntry> {
        self.entries.get_mut(&seq)
    }

    fn take(&mut self, seq: u64) -> Option<UEntry> {
        self.entries.remove(&seq)
    }

    /// The oldest entry `pred` holds for.
    #[inline]
    fn find(&self, pred: impl FnMut(&UEntry) -> bool) -> Option<u64> {
        self.entries.find(pred).map(|(s, _)| *s)
    }

    /// Every entry, oldest first.
    fn iter(&self) -> impl Iterator<Item = (u64, &UEntry)> {
        self.entries.iter().map(|(s, e)| (*s, e))
    }

    /// The oldest entry numbered `from` or more that `pred` holds for.
    fn find_from(&self, from: u64, pred: impl FnMut(&UEntry) -> bool) -> Option<u64> {
        self.entries.find_from(from, pred).map(|(s, _)| *s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packed bucket keys: one per (context, source, tag) at the extremes of each
    /// field, and a message's wildcard keys are those its receives are posted under.
    #[test]
    fn packed_keys() {
        let ctxs = [0, 1, u32::MAX];
        let srcs = [Source::Rank(0), Source::Rank(u32::MAX), Source::Any];
        let tags = [
            TagSel::Tag(0),
            TagSel::Tag(i32::MAX),
            TagSel::Tag(-1),
            TagSel::Any,
        ];
        let mut seen = std::collections::HashSet::new();
        for c in ctxs {
            for s in srcs {
                for t in tags {
                    let k = PKey::new(c, s, t);
                    assert!(seen.insert(k), "{c} {s:?} {t:?} shares a key");
                    assert_eq!(k.is_wild(), s == Source::Any || t == TagSel::Any);
                }
            }
            for r in [0, 7, u32::MAX] {
                for tag in [0, 5, i32::MAX, -1] {
                    let exact = PKey::exact(c, r, tag);
                    let (rs, ts) = (Source::Rank(r), TagSel::Tag(tag));
                    assert_eq!(exact, PKey::new(c, rs, ts));
                    assert_eq!(exact.wild(false, true), PKey::new(c, rs, TagSel::Any));
                    assert_eq!(exact.wild(true, false), PKey::new(c, Source::Any, ts));
                    assert_eq!(
                        exact.wild(true, true),
                        PKey::new(c, Source::Any, TagSel::Any)
                    );
                }
            }
        }
    }

    /// An unexpected eager message from `src` with `tag`, the sender's request `i`.
    fn entry(src: Rank, tag: Tag, i: u64) -> UEntry {
        UEntry {
            src,
            ctx: 0,
            tag,
            i,
            len: i,
            flags: SendFlags::default(),
            data: UData::Eager(vec![]),
        }
    }

    #[test]
    fn posted_order_across_buckets() {
        let mut p = Posted::default();
        p.insert(1, 0, Source::Any, TagSel::Any);
        p.insert(2, 0, Source::Rank(3), TagSel::Tag(5));
        p.insert(3, 1, Source::Rank(3), TagSel::Tag(5));
        assert_eq!(p.take_match(0, 3, 5), Some(1));
        assert_eq!(p.take_match(0, 3, 5), Some(2));
        assert_eq!(p.take_match(0, 3, 5), None);
        p.remove(3, 1, Source::Rank(3), TagSel::Tag(5));
        assert_eq!(p.take_match(1, 3, 5), None);
        assert_eq!(p.len(), 0);
    }

    /// Receives removed behind a bucket's head are skipped, in exact and wildcard
    /// lookups alike, and forgotten once passed.
    #[test]
    fn posted_removed_behind_head() {
        let mut p = Posted::default();
        for seq in 1..=4 {
            p.insert(seq, 0, Source::Rank(1), TagSel::Tag(7));
        }
        p.remove(2, 0, Source::Rank(1), TagSel::Tag(7));
        p.remove(3, 0, Source::Rank(1), TagSel::Tag(7));
        assert_eq!(p.len(), 2);
        assert_eq!(p.take_match(0, 1, 7), Some(1));
        assert_eq!(p.take_match(0, 1, 7), Some(4));
        assert!(p.dead.is_empty());
        p.insert(5, 0, Source::Rank(1), TagSel::Tag(7));
        p.insert(6, 0, Source::Rank(1), TagSel::Tag(7));
        p.insert(7, 0, Source::Any, TagSel::Tag(7));
        p.remove(6, 0, Source::Rank(1), TagSel::Tag(7));
        assert_eq!(p.take_match(0, 1, 7), Some(5));
        assert_eq!(p.take_match(0, 1, 7), Some(7), "the removed 6 is skipped");
        assert_eq!((p.len(), p.wild), (0, 0));
        assert!(p.dead.is_empty());
    }

    #[test]
    fn unexpected_order() {
        let mut u = Unexpected::default();
        let a = u.push(entry(1, 7, 1));
        let b = u.push(entry(2, 7, 1));
        let c = u.push(entry(1, 7, 2));
        assert_eq!(u.find(0, Source::Any, TagSel::Tag(7)), Some(a));
        assert_eq!(u.find(0, Source::Rank(1), TagSel::Tag(7)), Some(a));
        u.take(a);
        assert_eq!(u.find(0, Source::Rank(1), TagSel::Tag(7)), Some(c));
        assert_eq!(u.find(0, Source::Any, TagSel::Any), Some(b));
        assert_eq!(u.find(1, Source::Any, TagSel::Any), None);
        assert_eq!(u.find_send(1, 2), Some(c));
    }

    /// A receive of one source and tag finds what a scan of the arrivals finds, whether
    /// the queue is short (scanned) or long (indexed): random arrivals from three
    /// sources on two tags, taken by random exact and wildcard receives, against a
    /// plain list. The index is built only past `INDEX_AT` messages, dropped when the
    /// queue empties, and a queue with it equals (and hashes as) one without it.
    #[test]
    fn unexpected_index_finds_what_a_scan_finds() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let hash =
            |u: &Unexpected| BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(u);
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut u = Unexpected::default();
        let mut model: Vec<(u64, Rank, Tag)> = Vec::new();
        let (mut built, mut dropped) = (0, 0);
        for i in 0..20_000u64 {
            // long stretches of arrivals, then of receives: the queue swings from
            // empty to well past INDEX_AT and back
            let arriving = (i / 200) % 2 == 0;
            if arriving && next(4) != 0 {
                let (src, tag) = (next(3) as Rank, next(2) as Tag);
                let seq = u.push(entry(src, tag, i));
                model.push((seq, src, tag));
                continue;
            }
            let src = match next(4) {
                3 => Source::Any,
                r => Source::Rank(r as Rank),
            };
            let tag = match next(3) {
                2 => TagSel::Any,
                t => TagSel::Tag(t as Tag),
            };
            let was = u.indexed();
            let long = u.len() > INDEX_AT;
            let want = model
                .iter()
                .position(|&(_, s, t)| src.matches(s) && tag.matches(t));
            let got = u.find(0, src, tag);
            assert_eq!(got, want.map(|k| model[k].0), "{src:?} {tag:?}");
            if !was && u.indexed() {
                assert!(long, "built only past INDEX_AT");
                assert!(matches!((src, tag), (Source::Rank(_), TagSel::Tag(_))));
                built += 1;
            }
            if let Some(k) = want {
                let (seq, s, t) = model.remove(k);
                let e = u.take(seq).expect("found");
                assert_eq!((e.src, e.tag), (s, t));
                if model.is_empty() {
                    assert!(!u.indexed(), "dropped with the last message");
                    dropped += was as u32;
                }
            }
            // the same arrivals, without the index: equal, and hashed alike
            let mut plain = Unexpected {
                exact: None,
                ..u.clone()
            };
            assert_eq!(plain, u);
            assert_eq!(hash(&plain), hash(&u));
            if let Some(&(seq, s, t)) = model.first() {
                assert_eq!(plain.find(0, Source::Rank(s), TagSel::Tag(t)), Some(seq));
            }
        }
        assert!(
            built > 5 && dropped > 0,
            "built {built} times, dropped {dropped}"
        );
    }

    /// An entry left behind while many others pass keeps its number, its place in the
    /// arrival order and its lookups; the window does not grow with the others.
    #[test]
    fn unexpected_straggler_keeps_its_place() {
        let mut u = Unexpected::default();
        let old = u.push(entry(1, 9, 0));
        for i in 1..10_000 {
            let s = u.push(entry(2, 7, i));
            assert_eq!(u.find(0, Source::Rank(2), TagSel::Tag(7)), Some(s));
            assert_eq!(u.take(s).map(|x| x.i), Some(i));
        }
        let (slots, behind) = u.order.entries.placement();
        assert!(slots <= 64, "{slots} slots");
        assert_eq!(behind, 1);
        let a = u.push(entry(2, 7, 10_000));
        // the straggler is still first in arrival order
        assert_eq!(u.find(0, Source::Any, TagSel::Any), Some(old));
        assert_eq!(u.find(0, Source::Rank(1), TagSel::Tag(9)), Some(old));
        assert_eq!(u.find_send(1, 0), Some(old));
        u.get_mut(old).expect("there").len = 77;
        assert_eq!(u.peek(old).map(|x| x.len), Some(77));
        assert_eq!(u.len(), 2);
        assert_eq!(u.take(old).map(|x| x.i), Some(0));
        assert_eq!(u.find(0, Source::Any, TagSel::Any), Some(a));
        assert_eq!(u.len(), 1);
    }

    /// Equal contents are equal states with equal hashes, wherever entries are kept.
    #[test]
    fn unexpected_equality_is_by_content() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = |u: &Unexpected| BuildHasherDefault::<rustc_hash::FxHasher>::default().hash_one(u);
        let (mut a, mut b) = (Unexpected::default(), Unexpected::default());
        // (enough that the run of empty slots behind the first outgrows what the
        // window keeps of one)
        for i in 0..2000 {
            a.push(entry(1, 7, i));
            b.push(entry(1, 7, i));
        }
        // both take all but the first; `a` keeps it behind its window, as the
        // window's rules do, `b` in a window of mostly empty slots
        for s in 1..2000 {
            a.take(s);
            b.take(2000 - s);
            assert_eq!(a == b, s == 1999);
        }
        b.order.entries.gather();
        assert_eq!(a.order.entries.placement(), (0, 1));
        assert_eq!(b.order.entries.placement().1, 0);
        assert_eq!(a, b);
        assert_eq!(h(&a), h(&b));
        b.push(entry(1, 7, 2000));
        assert_ne!(a, b);
    }
}
