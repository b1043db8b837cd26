//! The sender's associative memory: receives a peer advertised to us, and the send
//! requests we issued that the peer may not have seen yet (for the crossing rule).

use crate::map::{Fifos, Window};
use crate::types::{Ctx, RemoteBuf, Tag, TagSel};
use std::collections::VecDeque;

/// One advertised receive (receive request k of the peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Adv {
    pub ctx: Ctx,
    pub tag: TagSel,
    pub buf: RemoteBuf,
    pub live: bool,
}

/// Live receive requests of one peer, by k, with a FIFO per (ctx, tag) and per
/// (ctx, ANY_TAG). The earliest live entry matching (ctx, tag) is the smaller k of two
/// queue heads: O(1) amortised, whatever the number of entries. Consumed entries are
/// dropped at once, so the table holds only live entries even when an old one stays
/// live for ever.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct AdvTable {
    live: Window<u64, Adv>,
    /// Receive requests recorded so far (the last k).
    seen: u64,
    /// Queues of k; entries no longer live are dropped lazily from the front.
    fifo: Fifos<(Ctx, TagSel)>,
}

impl AdvTable {
    /// Records receive request `k` (requests arrive in order: k = previous + 1).
    pub fn push(&mut self, k: u64, adv: Adv) {
        debug_assert_eq!(k, self.seen + 1);
        self.seen = k;
        if adv.live {
            self.fifo.push((adv.ctx, adv.tag), k);
            self.live.insert(k, adv);
        }
    }

    fn head(&mut self, key: (Ctx, TagSel)) -> Option<u64> {
        let live = &self.live;
        self.fifo.head(&key, |k| live.contains_key(&k))
    }

    /// No live advertisement.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The earliest live receive request matching a message (ctx, tag), left in place.
    #[inline]
    pub fn find_match(&mut self, ctx: Ctx, tag: Tag) -> Option<(u64, Adv)> {
        if self.live.is_empty() {
            // no advertisement to look at (every send to a peer that does not
            // advertise)
            return None;
        }
        self.find_live(ctx, tag)
    }

    #[inline(never)]
    fn find_live(&mut self, ctx: Ctx, tag: Tag) -> Option<(u64, Adv)> {
        let a = self.head((ctx, TagSel::Tag(tag)));
        let b = self.head((ctx, TagSel::Any));
        let k = match (a, b) {
            (Some(a), Some(b)) => a.min(b),
            (x, y) => x.or(y)?,
        };
        Some((k, self.live[&k]))
    }

    /// Takes the earliest live receive request matching a message (ctx, tag).
    pub fn take_match(&mut self, ctx: Ctx, tag: Tag) -> Option<(u64, Adv)> {
        let (k, _) = self.find_match(ctx, tag)?;
        let adv = self.kill(k)?;
        Some((k, adv))
    }

    /// Marks entry k consumed; returns it if it was live.
    pub fn kill(&mut self, k: u64) -> Option<Adv> {
        let mut e = self.live.remove(&k)?;
        e.live = false;
        Some(e)
    }

    #[cfg(test)]
    pub fn is_live(&self, k: u64) -> bool {
        self.live.contains_key(&k)
    }

    pub fn live_count(&self) -> usize {
        self.live.len()
    }
}

/// A run of send requests we issued, kept until the peer has certainly seen them:
/// numbers `first .. first + count`, all with one context and tag. The first
/// `assigned` of them are already known (by replay) to have matched one of the peer's
/// receive requests: a replay takes the earliest unassigned request that matches, so
/// within a run the assigned ones are always its first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Issued {
    first: u64,
    count: u64,
    assigned: u64,
    ctx: Ctx,
    tag: Tag,
}

/// Send requests the peer may not have processed yet, in runs ([`Issued`]): a stream
/// of messages with one tag costs one comparison and an increment per message, not
/// an entry each. Consecutive requests with the same context and tag always share a
/// run, so equal contents have equal runs (the model checker compares states).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Crossing {
    q: VecDeque<Issued>,
}

impl Crossing {
    /// Send request `i` (numbers are issued in increasing order) left for the peer.
    #[inline(always)]
    pub fn push(&mut self, i: u64, ctx: Ctx, tag: Tag) {
        if let Some(r) = self.q.back_mut() {
            if r.first + r.count == i && r.ctx == ctx && r.tag == tag {
                r.count += 1;
                return;
            }
        }
        self.push_run(i, ctx, tag);
    }

    #[inline(never)]
    fn push_run(&mut self, i: u64, ctx: Ctx, tag: Tag) {
        self.q.push_back(Issued {
            first: i,
            count: 1,
            assigned: 0,
            ctx,
            tag,
        });
    }

    /// The peer has processed send requests up to `m`: forget them.
    pub fn seen(&mut self, m: u64) {
        while let Some(r) = self.q.front_mut() {
            if r.first > m {
                return;
            }
            if r.first + r.count - 1 <= m {
                self.q.pop_front();
                continue;
            }
            // the run's first requests are seen; the assigned ones go first
            let k = m + 1 - r.first;
            r.first += k;
            r.count -= k;
            r.assigned = r.assigned.saturating_sub(k);
            return;
        }
    }

    /// Rule 5: a receive request (ctx, tag) issued by the peer after it had processed
    /// `m` send requests. Replays the peer's matching over the send requests it had not
    /// seen: the earliest one not already assigned that matches is the one the peer's
    /// own matching gives this receive. Returns its number, if any.
    pub fn replay(&mut self, m: u64, ctx: Ctx, tag: TagSel) -> Option<u64> {
        self.seen(m);
        let r = self
            .q
            .iter_mut()
            .find(|r| r.assigned < r.count && r.ctx == ctx && tag.matches(r.tag))?;
        r.assigned += 1;
        Some(r.first + r.assigned - 1)
    }

    /// Send requests kept.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.q.iter().map(|r| r.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adv(tag: TagSel) -> Adv {
        Adv {
            ctx: 0,
            tag,
            buf: RemoteBuf::default(),
            live: true,
        }
    }

    #[test]
    fn earliest_of_tag_and_any() {
        let mut t = AdvTable::default();
        t.push(1, adv(TagSel::Tag(5)));
        t.push(2, adv(TagSel::Any));
        t.push(3, adv(TagSel::Tag(5)));
        assert_eq!(t.take_match(0, 6).map(|x| x.0), Some(2));
        assert_eq!(t.take_match(0, 5).map(|x| x.0), Some(1));
        assert_eq!(t.take_match(1, 5), None);
        assert!(t.is_live(3));
        assert!(t.kill(3).is_some());
        assert!(t.kill(3).is_none());
        assert_eq!(t.take_match(0, 5), None);
        assert_eq!(t.live_count(), 0);
    }

    /// The runs against a list of one entry per request (the representation they
    /// replace): the same replays, the same requests kept, and equal contents give
    /// equal runs.
    #[test]
    fn runs_replay_as_a_list_would() {
        use proptest::prelude::*;
        #[derive(Clone, Debug)]
        enum Step {
            Push {
                skip: bool,
                ctx: Ctx,
                tag: Tag,
            },
            Seen(u64),
            Replay {
                back: u64,
                ctx: Ctx,
                tag: Option<Tag>,
            },
        }
        let step = prop_oneof![
            4 => (any::<bool>(), 0..2u32, 0..3i32)
                .prop_map(|(skip, ctx, tag)| Step::Push { skip, ctx, tag }),
            1 => (0..6u64).prop_map(Step::Seen),
            2 => (0..6u64, 0..2u32, prop::option::of(0..3i32))
                .prop_map(|(back, ctx, tag)| Step::Replay { back, ctx, tag }),
        ];
        proptest!(|(steps in prop::collection::vec(step, 0..60))| {
            let mut c = Crossing::default();
            // (i, ctx, tag, assigned)
            let mut list: Vec<(u64, Ctx, Tag, bool)> = Vec::new();
            let mut next = 1u64;
            let mut m = 0u64;
            for s in steps {
                match s {
                    Step::Push { skip, ctx, tag } => {
                        next += u64::from(skip);
                        c.push(next, ctx, tag);
                        list.push((next, ctx, tag, false));
                        next += 1;
                    }
                    Step::Seen(d) => {
                        m = (m + d).min(next - 1);
                        c.seen(m);
                        list.retain(|e| e.0 > m);
                    }
                    Step::Replay { back, ctx, tag } => {
                        let at = m.saturating_sub(back);
                        let sel = tag.map_or(TagSel::Any, TagSel::Tag);
                        let got = c.replay(at, ctx, sel);
                        list.retain(|e| e.0 > at);
                        let want = list
                            .iter_mut()
                            .find(|e| !e.3 && e.1 == ctx && sel.matches(e.2))
                            .map(|e| {
                                e.3 = true;
                                e.0
                            });
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(c.len(), list.len() as u64);
            }
            // the same contents built by pushes alone (assigning by replays at the
            // front) give the same runs
            let mut d = Crossing::default();
            for e in &list {
                d.push(e.0, e.1, e.2);
            }
            for e in list.iter().filter(|e| e.3) {
                let got = d.replay(0, e.1, TagSel::Tag(e.2));
                prop_assert!(got.is_some());
            }
            prop_assert_eq!(c, d);
        });
    }

    #[test]
    fn replay_skips_assigned_and_seen() {
        let mut c = Crossing::default();
        c.push(1, 0, 0);
        c.push(2, 0, 1);
        c.push(3, 0, 1);
        assert_eq!(c.replay(1, 0, TagSel::Tag(1)), Some(2));
        assert_eq!(c.replay(1, 0, TagSel::Any), Some(3));
        assert_eq!(c.replay(0, 0, TagSel::Any), None);
        assert_eq!(c.len(), 2);
    }
}
