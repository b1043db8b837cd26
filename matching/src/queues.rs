//! The receiver's two queues: posted receives and unexpected messages.
//!
//! Both keep MPI's order (posting order, arrival order) with per-key FIFO buckets, so
//! the common case — a specific source and tag — is a hash lookup and a queue head,
//! independent of how many entries are queued.

use crate::map::{Fifos, HMap};
use crate::types::{Ctx, Rank, RemoteBuf, Source, Tag, TagSel, XferId};
use crate::wire::SendFlags;
use std::collections::BTreeMap;

/// Posted receives, in posting order. Keys are post sequence numbers (= `RecvId`s).
///
/// A message (ctx, src, tag) can match four kinds of receive: (src, tag), (src, ANY),
/// (ANY, tag), (ANY, ANY). Each kind has FIFO buckets; the earliest live head of the
/// four buckets is the receive MPI says must match. Removed receives are dropped from
/// `live` at once and from their bucket lazily.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Posted {
    buckets: Fifos<(Ctx, Source, TagSel)>,
    live: HMap<u64, (Ctx, Source, TagSel)>,
    /// Live receives with a wildcard source or tag: while there are none, a message
    /// looks in its exact bucket only.
    wild: usize,
}

fn is_wild(key: &(Ctx, Source, TagSel)) -> bool {
    key.1 == Source::Any || key.2 == TagSel::Any
}

impl Posted {
    pub fn insert(&mut self, seq: u64, ctx: Ctx, src: Source, tag: TagSel) {
        let key = (ctx, src, tag);
        self.wild += usize::from(is_wild(&key));
        self.buckets.push(key, seq);
        self.live.insert(seq, key);
    }

    pub fn remove(&mut self, seq: u64) -> bool {
        match self.live.remove(&seq) {
            Some(key) => {
                self.wild -= usize::from(is_wild(&key));
                self.live.shrink_if_empty();
                true
            }
            None => false,
        }
    }

    pub fn contains(&self, seq: u64) -> bool {
        self.live.contains_key(&seq)
    }

    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Removes and returns the earliest posted receive matching a message.
    pub fn take_match(&mut self, ctx: Ctx, src: Rank, tag: Tag) -> Option<u64> {
        let mut best: Option<(u64, (Ctx, Source, TagSel))> = None;
        let live = &self.live;
        let keys = [
            (ctx, Source::Rank(src), TagSel::Tag(tag)),
            (ctx, Source::Rank(src), TagSel::Any),
            (ctx, Source::Any, TagSel::Tag(tag)),
            (ctx, Source::Any, TagSel::Any),
        ];
        let kinds = if self.wild == 0 { 1 } else { 4 };
        for key in keys.into_iter().take(kinds) {
            if let Some(h) = self.buckets.head(&key, |s| live.contains_key(&s)) {
                if best.is_none_or(|(b, _)| h < b) {
                    best = Some((h, key));
                }
            }
        }
        let (seq, key) = best?;
        self.buckets.get_mut(&key).expect("bucket").pop_front();
        self.remove(seq);
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

/// Unexpected messages in arrival order, with an exact-match index.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Unexpected {
    order: BTreeMap<u64, UEntry>,
    exact: Fifos<(Ctx, Rank, Tag)>,
    next: u64,
}

impl Unexpected {
    pub fn push(&mut self, e: UEntry) -> u64 {
        let seq = self.next;
        self.next += 1;
        self.exact.push((e.ctx, e.src, e.tag), seq);
        self.order.insert(seq, e);
        seq
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    pub fn get_mut(&mut self, seq: u64) -> Option<&mut UEntry> {
        self.order.get_mut(&seq)
    }

    /// The earliest-arrived message matching a receive pattern.
    pub fn find(&self, ctx: Ctx, src: Source, tag: TagSel) -> Option<u64> {
        if let (Source::Rank(s), TagSel::Tag(t)) = (src, tag) {
            let q = self.exact.get(&(ctx, s, t))?;
            return q.iter().copied().find(|seq| self.order.contains_key(seq));
        }
        self.order
            .iter()
            .find(|(_, e)| e.ctx == ctx && src.matches(e.src) && tag.matches(e.tag))
            .map(|(&s, _)| s)
    }

    pub fn peek(&self, seq: u64) -> Option<&UEntry> {
        self.order.get(&seq)
    }

    pub fn take(&mut self, seq: u64) -> Option<UEntry> {
        let e = self.order.remove(&seq)?;
        let key = (e.ctx, e.src, e.tag);
        let order = &self.order;
        self.exact.head(&key, |h| order.contains_key(&h));
        Some(e)
    }

    /// The entry of send request `i` from `src`, if it is still unexpected.
    pub fn find_send(&self, src: Rank, i: u64) -> Option<u64> {
        self.order
            .iter()
            .find(|(_, e)| e.src == src && e.i == i)
            .map(|(&s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn posted_order_across_buckets() {
        let mut p = Posted::default();
        p.insert(1, 0, Source::Any, TagSel::Any);
        p.insert(2, 0, Source::Rank(3), TagSel::Tag(5));
        p.insert(3, 1, Source::Rank(3), TagSel::Tag(5));
        assert_eq!(p.take_match(0, 3, 5), Some(1));
        assert_eq!(p.take_match(0, 3, 5), Some(2));
        assert_eq!(p.take_match(0, 3, 5), None);
        assert!(p.remove(3));
        assert_eq!(p.take_match(1, 3, 5), None);
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn unexpected_order() {
        let mut u = Unexpected::default();
        let e = |src, tag, i| UEntry {
            src,
            ctx: 0,
            tag,
            i,
            len: 0,
            flags: SendFlags::default(),
            data: UData::Eager(vec![]),
        };
        let a = u.push(e(1, 7, 1));
        let b = u.push(e(2, 7, 1));
        let c = u.push(e(1, 7, 2));
        assert_eq!(u.find(0, Source::Any, TagSel::Tag(7)), Some(a));
        assert_eq!(u.find(0, Source::Rank(1), TagSel::Tag(7)), Some(a));
        u.take(a);
        assert_eq!(u.find(0, Source::Rank(1), TagSel::Tag(7)), Some(c));
        assert_eq!(u.find(0, Source::Any, TagSel::Any), Some(b));
        assert_eq!(u.find(1, Source::Any, TagSel::Any), None);
        assert_eq!(u.find_send(1, 2), Some(c));
    }
}
