//! Messages a rank sends to itself: kept in the process, in order, instead of going
//! through the shared-memory ring that its own segment holds for it.
//!
//! A message to self needs none of what the ring is for: no other process reads it,
//! so there is nothing to publish with a release store, no header word to check for
//! the right lap, and no line to clear before the space is reused. Here it is one
//! length word and the bytes, appended to a buffer that is emptied (not freed) each
//! time everything in it has been read. The buffer accepts exactly what an empty ring
//! would ([`Loopback::try_push`] counts each message as the ring record it would have
//! been), so the transport's capabilities and its `Full` answers are the same for
//! self as for any peer.
//!
//! ```
//! # use transport_shm::Loopback;
//! let mut l = Loopback::default();
//! assert!(l.try_push(b"head ", b"body"));
//! assert!(l.try_push(b"", b"second"));
//! assert_eq!(l.front(), Some(&b"head body"[..]));
//! l.pop();
//! assert_eq!(l.front(), Some(&b"second"[..]));
//! l.pop();
//! assert_eq!(l.front(), None);
//! ```

use crate::ring::{record_size, RING_BYTES};

/// Bytes of the length word in front of each message.
const LEN: usize = 4;

/// A first-in first-out queue of messages a rank sent itself (see the module docs).
#[derive(Debug, Default)]
pub struct Loopback {
    /// Messages, each a little-endian `u32` length and its bytes, from `read` on.
    buf: Vec<u8>,
    /// Where the oldest unread message starts.
    read: usize,
    /// Ring bytes the unread messages would take (their records' sizes).
    held: usize,
}

impl Loopback {
    /// Appends `header ++ payload` (at most [`crate::MAX_CTRL`] bytes, checked by the
    /// caller); `false`, appending nothing, when a ring would have had no room.
    #[inline]
    pub fn try_push(&mut self, header: &[u8], payload: &[u8]) -> bool {
        let len = header.len() + payload.len();
        let rec = record_size(len);
        if self.held + rec > RING_BYTES {
            return false;
        }
        self.held += rec;
        self.buf.reserve(LEN + len);
        self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        self.buf.extend_from_slice(header);
        self.buf.extend_from_slice(payload);
        true
    }

    /// The oldest unread message.
    #[inline]
    pub fn front(&self) -> Option<&[u8]> {
        let word = self.buf.get(self.read..self.read + LEN)?;
        let len = u32::from_le_bytes(word.try_into().expect("four bytes")) as usize;
        let at = self.read + LEN;
        Some(&self.buf[at..at + len])
    }

    /// Hands the oldest unread message to `f` and drops it; `None` if there is none.
    /// Once all are read, empties the buffer for the next ones, keeping its memory.
    #[inline]
    pub fn pop_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let m = self.front()?;
        let len = m.len();
        let r = f(m);
        self.read += LEN + len;
        self.held -= record_size(len);
        if self.read == self.buf.len() {
            self.buf.clear();
            self.read = 0;
        }
        Some(r)
    }

    /// Drops the oldest unread message (if any).
    #[inline]
    pub fn pop(&mut self) {
        self.pop_with(|_| ());
    }

    /// Whether no message is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.read == self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CTRL_SLOTS, MAX_CTRL};

    /// Messages come out once each, in order, with their bytes; at least as many of
    /// any size fit as in a ring, and a refused push changes nothing.
    #[test]
    fn in_order_and_bounded_as_a_ring() {
        let mut l = Loopback::default();
        let big = vec![7u8; MAX_CTRL];
        let mut n = 0;
        while l.try_push(&[n as u8], &big[..MAX_CTRL - 1]) {
            n += 1;
        }
        assert!(n >= CTRL_SLOTS, "only {n} maximum messages fit");
        let mut small = 0;
        while l.try_push(b"", b"x") {
            small += 1;
        }
        assert_eq!(l.held, RING_BYTES, "the rest filled line by line");
        let before = (l.buf.len(), l.held);
        assert!(!l.try_push(b"", b""));
        assert_eq!((l.buf.len(), l.held), before);
        for i in 0..n {
            let m = l.front().expect("queued");
            assert_eq!((m.len(), m[0]), (MAX_CTRL, i as u8));
            assert!(m[1..].iter().all(|&b| b == 7));
            l.pop();
        }
        for _ in 0..small {
            assert_eq!(l.front(), Some(&b"x"[..]));
            l.pop();
        }
        assert!(l.is_empty() && l.front().is_none() && l.held == 0);
        // emptied, not freed: the next messages start at the front again
        assert!(l.buf.capacity() >= MAX_CTRL && l.read == 0);
        let mut next = 0u32;
        for i in 0..1000u32 {
            assert!(l.try_push(&i.to_le_bytes()[..2], &i.to_le_bytes()[2..]));
            if i % 3 == 0 {
                assert_eq!(l.front(), Some(&next.to_le_bytes()[..]));
                l.pop();
                next += 1;
            }
        }
        while let Some(m) = l.front() {
            assert_eq!(m, next.to_le_bytes());
            l.pop();
            next += 1;
        }
        assert_eq!(next, 1000);
        l.pop(); // nothing to drop: nothing happens
        assert!(l.is_empty());
    }
}
