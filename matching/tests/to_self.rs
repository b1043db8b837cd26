//! `Engine::send_to_self`: a standard send to this rank that a posted receive takes at
//! once, without a message, only when no earlier message of this rank could match
//! first and no advertisement could still be written into.

use matching::*;

const ME: Rank = 0;

fn engine(cfg: Config) -> Engine {
    Engine::new(ME, 1, cfg)
}

/// Direct writes of up to 64 bytes inline in their notice (so `send_now` takes them).
fn inline() -> Config {
    Config {
        inline_limit: 64,
        ..Config::default()
    }
}

fn recv(e: &mut Engine, source: Source, tag: TagSel, capacity: u64, buf: bool) -> RecvId {
    let buf = buf.then_some(RemoteBuf {
        addr: 0x1000,
        len: capacity,
        key: 0,
    });
    e.post_recv(RecvSpec {
        source,
        tag,
        ctx: 0,
        capacity,
        buf,
    })
    .unwrap()
}

fn send(tag: Tag, len: u64) -> SendSpec {
    SendSpec {
        dest: ME,
        tag,
        ctx: 0,
        len,
        mode: SendMode::Standard,
        read_advised: false,
        buf: RemoteBuf::default(),
    }
}

fn received(tag: Tag, len: u64, truncated_from: Option<u64>) -> Option<RecvOutcome> {
    Some(RecvOutcome::Received {
        source: ME,
        tag,
        len,
        truncated_from,
    })
}

/// `send_to_self` declines and leaves the engine exactly as it was.
fn declines(e: &mut Engine, spec: &SendSpec) {
    let before = e.clone();
    assert_eq!(e.send_to_self(spec).unwrap(), None);
    assert!(*e == before, "a declined send to self changed the engine");
}

/// Hands every message the engine sends to itself back to it; returns the deliveries.
fn loop_back(e: &mut Engine, payload: &[u8]) -> Vec<Deliver> {
    let mut got = Vec::new();
    while let Some(o) = e.poll_output() {
        if let Output::Transmit {
            to: ME,
            header,
            payload: p,
        } = o
        {
            let mut bytes = header.as_bytes().to_vec();
            if let Some((_, len)) = p {
                bytes.extend_from_slice(&payload[..len as usize]);
            }
            got.extend(e.handle(ME, &bytes).unwrap());
        }
    }
    got
}

#[test]
fn takes_the_posted_receives_in_posting_order() {
    let mut e = engine(Config::default());
    let r1 = recv(&mut e, Source::Rank(ME), TagSel::Tag(7), 8, false);
    let r2 = recv(&mut e, Source::Rank(ME), TagSel::Any, 8, false);
    let d = e.send_to_self(&send(7, 4)).unwrap().expect("r1 is posted");
    assert_eq!((d.recv, d.range, d.done), (r1, 0..4, received(7, 4, None)));
    let d = e.send_to_self(&send(9, 8)).unwrap().expect("r2 is posted");
    assert_eq!((d.recv, d.range, d.done), (r2, 0..8, received(9, 8, None)));
    assert!(e.is_idle());
    // nothing posted: the message must be queued behind the others, not taken here
    declines(&mut e, &send(7, 4));
}

#[test]
fn truncates_to_the_receive_and_says_so() {
    let mut e = engine(Config::default());
    let r = recv(&mut e, Source::Any, TagSel::Tag(1), 2, false);
    let d = e.send_to_self(&send(1, 5)).unwrap().expect("posted");
    assert_eq!(
        (d.recv, d.range, d.done),
        (r, 0..2, received(1, 2, Some(5)))
    );
}

#[test]
fn waits_behind_a_message_to_itself_still_on_its_way() {
    let mut e = engine(Config::default());
    // an eager send request to itself, not handled yet
    let mut header = wire::Header::EMPTY;
    let len = e
        .send_now(&send(7, 3), &mut header)
        .unwrap()
        .expect("eager");
    let r = recv(&mut e, Source::Rank(ME), TagSel::Tag(7), 8, false);
    // the earlier message must take r: declined
    declines(&mut e, &send(7, 4));
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(&b"abc"[..len as usize]);
    let d = e
        .handle(ME, &bytes)
        .unwrap()
        .expect("r takes the first message");
    assert_eq!((d.recv, d.done), (r, received(7, 3, None)));
    // settled again: the next one goes straight in
    let r2 = recv(&mut e, Source::Rank(ME), TagSel::Tag(7), 8, false);
    assert_eq!(e.send_to_self(&send(7, 4)).unwrap().unwrap().recv, r2);
}

#[test]
fn never_takes_an_advertised_receive() {
    // a receive advertised to itself: its advertisement may still be written into,
    // so the sender-side path decides
    let mut e = engine(inline());
    let r = recv(&mut e, Source::Rank(ME), TagSel::Tag(3), 64, true);
    // the receive request is on its way
    declines(&mut e, &send(3, 8));
    assert!(loop_back(&mut e, &[]).is_empty());
    // it has arrived: still declined, the advertisement is live
    declines(&mut e, &send(3, 8));
    let mut header = wire::Header::EMPTY;
    let len = e
        .send_now(&send(3, 8), &mut header)
        .unwrap()
        .expect("direct write");
    let mut bytes = header.as_bytes().to_vec();
    bytes.extend_from_slice(&[5u8; 8][..len as usize]);
    let d = e.handle(ME, &bytes).unwrap().expect("the notice fills r");
    assert_eq!((d.recv, d.range.len()), (r, 8));
}

#[test]
fn a_wildcard_receive_taken_releases_the_receives_held_behind_it() {
    let mut e = engine(inline());
    let any = recv(&mut e, Source::Any, TagSel::Tag(7), 8, false);
    let held = recv(&mut e, Source::Rank(ME), TagSel::Tag(7), 64, true);
    assert!(!e.has_output(), "held behind the wildcard receive");
    let d = e.send_to_self(&send(7, 1)).unwrap().expect("posted first");
    assert_eq!(d.recv, any);
    // the held receive is advertised now: the next send waits for that to settle
    assert!(e.has_output());
    declines(&mut e, &send(7, 1));
    loop_back(&mut e, &[]);
    let mut header = wire::Header::EMPTY;
    e.send_now(&send(7, 1), &mut header)
        .unwrap()
        .expect("direct write");
    let mut bytes = header.as_bytes().to_vec();
    bytes.push(9);
    assert_eq!(e.handle(ME, &bytes).unwrap().unwrap().recv, held);
}

#[test]
fn only_standard_eager_sends() {
    let mut e = engine(Config::default());
    recv(&mut e, Source::Rank(ME), TagSel::Tag(7), 1 << 20, false);
    for mode in [SendMode::Synchronous, SendMode::Ready, SendMode::Buffered] {
        declines(&mut e, &SendSpec { mode, ..send(7, 4) });
    }
    // above the eager limit: rendezvous
    declines(&mut e, &send(7, Config::default().eager_limit + 1));
    let mut g = engine(Config {
        protocol: RecvProtocol::Get,
        ..Config::default()
    });
    recv(&mut g, Source::Rank(ME), TagSel::Tag(7), 8, false);
    declines(&mut g, &send(7, 4));
    assert!(matches!(
        e.send_to_self(&send(-5, 4)),
        Err(CallError::InvalidTag(-5))
    ));
}
