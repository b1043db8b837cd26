//! One transport per peer: a job that spans nodes talks shared memory to the ranks of
//! its own node and a network transport to the others, through one [`Routed`]
//! transport that the protocol layer sees as any other.
//!
//! ```
//! use transport::route::Routed;
//! use transport::{Caps, Posted, Rank, RemoteBuf, Transport, TransportError};
//!
//! /// A transport that only reaches `peers` and records what it was asked to send.
//! struct Part { me: Rank, size: u32, peers: Vec<Rank>, sent: Vec<Rank> }
//! impl Transport for Part {
//!     fn rank(&self) -> Rank { self.me }
//!     fn size(&self) -> u32 { self.size }
//!     fn caps(&self) -> Caps { Caps { max_ctrl: 1024, ctrl_slots: 8, ring_bytes: 0, put: true, get: true, registers: false, put_inline: 0, put_bounce: 0, lone_read_above: u64::MAX, cross_read_above: u64::MAX } }
//!     fn try_send(&mut self, peer: Rank, _: &[u8], _: &[u8]) -> Result<(), TransportError> {
//!         assert!(self.peers.contains(&peer));
//!         self.sent.push(peer);
//!         Ok(())
//!     }
//!     fn poll(&mut self, _: usize, _: &mut dyn FnMut(Rank, &[u8])) -> Result<usize, TransportError> { Ok(0) }
//!     fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
//!         Ok(RemoteBuf { addr: addr as u64, len: len as u64, key: 0 })
//!     }
//!     fn put(&mut self, _: Rank, _: &[u8], _: RemoteBuf, _: u64, _: u64) -> Result<Posted, TransportError> { Ok(Posted::Done) }
//!     fn get(&mut self, _: Rank, _: &mut [u8], _: RemoteBuf, _: u64, _: u64) -> Result<Posted, TransportError> { Ok(Posted::Done) }
//! }
//!
//! // rank 1 of 4: ranks 0 and 1 share its node, 2 and 3 are elsewhere
//! let near = Part { me: 1, size: 4, peers: vec![0, 1], sent: vec![] };
//! let far = Part { me: 1, size: 4, peers: vec![2, 3], sent: vec![] };
//! let mut t = Routed::new(vec![Box::new(near), Box::new(far)], vec![0, 0, 1, 1]).unwrap();
//! for peer in 0..4 {
//!     t.try_send(peer, b"hi", b"").unwrap();
//! }
//! assert_eq!(t.route(3), Some(1));
//! ```

use crate::{Caps, Incoming, Posted, Rank, RemoteBuf, Transport, TransportError};

/// Routes every peer to one of several transports. Each part is a whole transport of
/// the job (same rank and size) that reaches at least the peers routed to it; the
/// per-peer ordering rules hold because each peer uses one part only.
///
/// A descriptor must be usable by whichever peer it is advertised to, so memory is
/// exposed through the part that registers (at most one may), and every part reads a
/// descriptor's `addr` as the local virtual address (a transport addressing its
/// registrations by offset ignores it) and ignores keys it did not make.
pub struct Routed {
    parts: Vec<Box<dyn Transport>>,
    /// Peer -> index into `parts`.
    route: Vec<u8>,
    caps: Caps,
    /// The part whose registration keys descriptors, if any part registers.
    registrar: Option<usize>,
}

impl Routed {
    /// Combines `parts` with `route[peer]` naming the part that reaches each peer.
    pub fn new(parts: Vec<Box<dyn Transport>>, route: Vec<u8>) -> Result<Routed, TransportError> {
        let Some(first) = parts.first() else {
            return Err(TransportError::Unsupported(
                "a routed transport without parts",
            ));
        };
        let (rank, size) = (first.rank(), first.size());
        if route.len() != size as usize
            || route.iter().any(|&p| p as usize >= parts.len())
            || parts.iter().any(|p| p.rank() != rank || p.size() != size)
        {
            return Err(TransportError::Exchange(format!(
                "routing table of {} entries over {} parts does not fit a job of {size} ranks",
                route.len(),
                parts.len()
            )));
        }
        let registering: Vec<usize> = (0..parts.len())
            .filter(|&i| parts[i].caps().registers)
            .collect();
        if registering.len() > 1 {
            return Err(TransportError::Unsupported(
                "more than one registering transport in one job",
            ));
        }
        let caps = combine(parts.iter().map(|p| p.caps()));
        Ok(Routed {
            parts,
            route,
            caps,
            registrar: registering.first().copied(),
        })
    }

    /// The index of the part that reaches `peer`.
    pub fn route(&self, peer: Rank) -> Option<usize> {
        self.route.get(peer as usize).map(|&p| p as usize)
    }

    fn part(&mut self, peer: Rank) -> Result<&mut dyn Transport, TransportError> {
        match self.route.get(peer as usize) {
            Some(&p) => Ok(self.parts[p as usize].as_mut()),
            None => Err(TransportError::NoSuchRank(peer)),
        }
    }
}

/// The limits every part can honour: the protocol has one set of settings per job.
fn combine(mut caps: impl Iterator<Item = Caps>) -> Caps {
    let first = caps.next().expect("at least one part");
    caps.fold(first, |a, b| Caps {
        max_ctrl: a.max_ctrl.min(b.max_ctrl),
        ctrl_slots: a.ctrl_slots.min(b.ctrl_slots),
        // a byte-weighted channel and a counted one: count messages
        ring_bytes: if a.ring_bytes == 0 || b.ring_bytes == 0 {
            0
        } else {
            a.ring_bytes.min(b.ring_bytes)
        },
        put: a.put && b.put,
        get: a.get && b.get,
        registers: a.registers || b.registers,
        // tiers are per part; the protocol's one setting must suit every part
        put_inline: a.put_inline.min(b.put_inline),
        put_bounce: a.put_bounce.min(b.put_bounce),
        // measured per transport: reads where every part's are cheaper
        lone_read_above: a.lone_read_above.max(b.lone_read_above),
        cross_read_above: a.cross_read_above.max(b.cross_read_above),
    })
}

impl Transport for Routed {
    fn rank(&self) -> Rank {
        self.parts[0].rank()
    }

    fn size(&self) -> u32 {
        self.parts[0].size()
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn try_send(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), TransportError> {
        self.part(peer)?.try_send(peer, header, payload)
    }

    fn poll(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, &[u8]),
    ) -> Result<usize, TransportError> {
        let mut got = 0;
        for p in &mut self.parts {
            if got >= max {
                break;
            }
            got += p.poll(max - got, f)?;
        }
        Ok(got)
    }

    fn poll_incoming(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, Incoming<'_>),
    ) -> Result<usize, TransportError> {
        let mut got = 0;
        for p in &mut self.parts {
            if got >= max {
                break;
            }
            got += p.poll_incoming(max - got, f)?;
        }
        Ok(got)
    }

    fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
        match self.registrar {
            Some(i) => self.parts[i].expose(addr, len),
            None => self.parts[0].expose(addr, len),
        }
    }

    fn unexpose(&mut self, buf: RemoteBuf) {
        if let Some(i) = self.registrar {
            self.parts[i].unexpose(buf);
        }
    }

    fn put(
        &mut self,
        peer: Rank,
        src: &[u8],
        dst: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        self.part(peer)?.put(peer, src, dst, offset, token)
    }

    fn get(
        &mut self,
        peer: Rank,
        dst: &mut [u8],
        src: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        self.part(peer)?.get(peer, dst, src, offset, token)
    }

    fn prefers_read(&mut self, peer: Rank, len: usize, stream: bool) -> bool {
        self.part(peer)
            .is_ok_and(|p| p.prefers_read(peer, len, stream))
    }

    fn poll_done(
        &mut self,
        f: &mut dyn FnMut(u64, Result<(), TransportError>),
    ) -> Result<usize, TransportError> {
        let mut n = 0;
        for p in &mut self.parts {
            n += p.poll_done(f)?;
        }
        Ok(n)
    }

    fn close(&mut self) -> Result<(), TransportError> {
        // every part is closed, whatever the others said
        let mut first = Ok(());
        for p in &mut self.parts {
            let r = p.close();
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A part that loops messages back as if from the peer and logs what it did.
    struct Part {
        reach: Vec<Rank>,
        caps: Caps,
        inbox: VecDeque<(Rank, Vec<u8>)>,
        log: std::rc::Rc<std::cell::RefCell<Vec<String>>>,
        name: &'static str,
    }

    impl Transport for Part {
        fn rank(&self) -> Rank {
            0
        }
        fn size(&self) -> u32 {
            3
        }
        fn caps(&self) -> Caps {
            self.caps
        }
        fn try_send(&mut self, peer: Rank, h: &[u8], p: &[u8]) -> Result<(), TransportError> {
            assert!(
                self.reach.contains(&peer),
                "{} asked to reach {peer}",
                self.name
            );
            self.inbox.push_back((peer, [h, p].concat()));
            Ok(())
        }
        fn poll(
            &mut self,
            max: usize,
            f: &mut dyn FnMut(Rank, &[u8]),
        ) -> Result<usize, TransportError> {
            let mut n = 0;
            while n < max {
                let Some((r, m)) = self.inbox.pop_front() else {
                    break;
                };
                f(r, &m);
                n += 1;
            }
            Ok(n)
        }
        fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
            self.log.borrow_mut().push(format!("{} expose", self.name));
            Ok(RemoteBuf {
                addr: addr as u64,
                len: len as u64,
                key: 7,
            })
        }
        fn unexpose(&mut self, _: RemoteBuf) {
            self.log
                .borrow_mut()
                .push(format!("{} unexpose", self.name));
        }
        fn put(
            &mut self,
            peer: Rank,
            _: &[u8],
            _: RemoteBuf,
            _: u64,
            _: u64,
        ) -> Result<Posted, TransportError> {
            self.log
                .borrow_mut()
                .push(format!("{} put {peer}", self.name));
            Ok(Posted::Done)
        }
        fn get(
            &mut self,
            peer: Rank,
            _: &mut [u8],
            _: RemoteBuf,
            _: u64,
            _: u64,
        ) -> Result<Posted, TransportError> {
            self.log
                .borrow_mut()
                .push(format!("{} get {peer}", self.name));
            Ok(Posted::Done)
        }
    }

    fn caps(max_ctrl: usize, slots: usize, ring_bytes: usize, registers: bool) -> Caps {
        Caps {
            max_ctrl,
            ctrl_slots: slots,
            ring_bytes,
            put: true,
            get: true,
            registers,
            put_inline: 0,
            put_bounce: 0,
            lone_read_above: u64::MAX,
            cross_read_above: u64::MAX,
        }
    }

    #[test]
    fn routes_every_operation_by_peer() {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let near = Part {
            reach: vec![0, 1],
            caps: caps(70_000, 29, 2 << 20, false),
            inbox: VecDeque::new(),
            log: log.clone(),
            name: "shm",
        };
        let far = Part {
            reach: vec![2],
            caps: caps(65_656, 64, 0, true),
            inbox: VecDeque::new(),
            log: log.clone(),
            name: "ofi",
        };
        let mut t = Routed::new(vec![Box::new(near), Box::new(far)], vec![0, 0, 1]).unwrap();
        // the limits every part can honour; counted credits as one part counts messages
        assert_eq!(
            t.caps(),
            Caps {
                max_ctrl: 65_656,
                ctrl_slots: 29,
                ring_bytes: 0,
                put: true,
                get: true,
                registers: true,
                put_inline: 0,
                put_bounce: 0,
                lone_read_above: u64::MAX,
                cross_read_above: u64::MAX,
            }
        );
        for peer in [0, 1, 2, 2] {
            t.try_send(peer, &[peer as u8], b"").unwrap();
        }
        let mut got = Vec::new();
        assert_eq!(
            t.poll(16, &mut |r, m| got.push((r, m.to_vec()))).unwrap(),
            4
        );
        got.sort();
        assert_eq!(
            got,
            vec![(0, vec![0]), (1, vec![1]), (2, vec![2]), (2, vec![2])]
        );
        let b = t.expose(4096, 10).unwrap();
        assert_eq!(b.key, 7);
        t.put(1, b"x", b, 0, 1).unwrap();
        t.put(2, b"x", b, 0, 2).unwrap();
        t.get(2, &mut [0], b, 0, 3).unwrap();
        t.unexpose(b);
        assert_eq!(
            *log.borrow(),
            [
                "ofi expose",
                "shm put 1",
                "ofi put 2",
                "ofi get 2",
                "ofi unexpose"
            ]
        );
        assert!(matches!(
            t.try_send(3, b"", b""),
            Err(TransportError::NoSuchRank(3))
        ));
        // `max` bounds the messages delivered over all parts
        for peer in [0, 2, 2] {
            t.try_send(peer, b"m", b"").unwrap();
        }
        assert_eq!(t.poll(2, &mut |_, _| {}).unwrap(), 2);
        assert_eq!(t.poll(2, &mut |_, _| {}).unwrap(), 1);
    }

    #[test]
    fn rejects_tables_that_do_not_fit() {
        let log = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let part = |registers| -> Box<dyn Transport> {
            Box::new(Part {
                reach: vec![],
                caps: caps(100, 8, 0, registers),
                inbox: VecDeque::new(),
                log: log.clone(),
                name: "p",
            })
        };
        assert!(Routed::new(vec![], vec![]).is_err());
        assert!(
            Routed::new(vec![part(false)], vec![0, 0]).is_err(),
            "short table"
        );
        assert!(
            Routed::new(vec![part(false)], vec![0, 1, 0]).is_err(),
            "no part 1"
        );
        assert!(
            Routed::new(vec![part(true), part(true)], vec![0, 1, 0]).is_err(),
            "two registrars"
        );
        assert!(Routed::new(vec![part(false), part(true)], vec![0, 1, 0]).is_ok());
    }
}
