//! Property tests of the wire codec (`matching::wire`) and of `Engine::handle` against
//! hostile input: valid frames round-trip, `decode` never panics, and the engine turns
//! garbage from a valid peer into a `ProtocolError` instead of a panic.

use matching::wire::{decode, encode, Body, Ctrl, Frame, SendFlags, WireError, MAX_HEADER};
use matching::*;
use proptest::prelude::*;

// ------------------------------------------------------------------------ strategies

/// u64s biased towards the varint boundaries.
fn u64_edge() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..300u64,
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => (0..64u32).prop_map(|s| 1u64 << s),
        1 => (1..64u32).prop_map(|s| (1u64 << s) - 1),
        3 => any::<u64>(),
    ]
}

fn u32_edge() -> impl Strategy<Value = u32> {
    prop_oneof![2 => 0..300u32, 1 => Just(u32::MAX), 2 => any::<u32>()]
}

fn tag() -> impl Strategy<Value = Tag> {
    prop_oneof![2 => 0..300i32, 1 => Just(TAG_UB), 2 => 0..=TAG_UB]
}

fn tagsel() -> impl Strategy<Value = TagSel> {
    prop_oneof![1 => Just(TagSel::Any), 4 => tag().prop_map(TagSel::Tag)]
}

/// A remote buffer whose `addr + len` does not overflow and whose `len >= min_len`.
fn rbuf(min_len: u64) -> impl Strategy<Value = RemoteBuf> {
    (u64_edge(), u64_edge(), u64_edge()).prop_map(move |(a, l, key)| {
        let len = min_len.saturating_add(l);
        let addr = a.min(u64::MAX - len);
        RemoteBuf { addr, len, key }
    })
}

fn flags() -> impl Strategy<Value = SendFlags> {
    (any::<bool>(), any::<bool>()).prop_map(|(sync, ready)| SendFlags { sync, ready })
}

/// Every `Ctrl` variant. Eager send requests get a small `len` so that the payload
/// can actually be appended.
fn ctrl() -> impl Strategy<Value = Ctrl> {
    prop_oneof![
        (u32_edge(), tagsel(), rbuf(0), u64_edge()).prop_map(|(ctx, tag, buf, m)| Ctrl::RecvReq {
            ctx,
            tag,
            buf,
            m
        }),
        (u32_edge(), tag(), 0..100u64, flags()).prop_map(|(ctx, tag, len, flags)| Ctrl::SendReq {
            ctx,
            tag,
            len,
            flags,
            body: Body::Eager
        }),
        (u32_edge(), tag(), u64_edge(), flags(), any::<bool>()).prop_flat_map(
            |(ctx, tag, len, flags, get)| {
                rbuf(len).prop_map(move |b| Ctrl::SendReq {
                    ctx,
                    tag,
                    len,
                    flags,
                    body: if get { Body::GetNow(b) } else { Body::Rndv(b) },
                })
            }
        ),
        (u64_edge(), tag(), u64_edge(), u64_edge()).prop_map(|(k, tag, a, b)| Ctrl::Written {
            k,
            tag,
            len: a.min(b),
            msg_len: a.max(b)
        }),
        (u64_edge(), tag(), 0..64u64, u64_edge()).prop_map(|(k, tag, a, b)| Ctrl::WrittenInline {
            k,
            tag,
            len: a.min(b),
            msg_len: a.max(b)
        }),
        u64_edge().prop_map(|i| Ctrl::Ack { i }),
        u64_edge().prop_map(|i| Ctrl::Nack { i }),
        u64_edge().prop_map(|i| Ctrl::Fin { i }),
        u64_edge().prop_map(|k| Ctrl::Retract { k }),
        (u64_edge(), any::<bool>()).prop_map(|(k, ok)| Ctrl::RetractAck { k, ok }),
        u64_edge().prop_map(|i| Ctrl::CancelSend { i }),
        (u64_edge(), any::<bool>()).prop_map(|(i, ok)| Ctrl::CancelAck { i, ok }),
        u64_edge().prop_map(|m| Ctrl::Credit { m }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    (u32_edge(), ctrl()).prop_map(|(credit, msg)| Frame { credit, msg })
}

/// Small frames as a peer of a 2-rank engine would send them: small numbers so that
/// they hit live state (request numbers, tags, credits) most of the time.
fn small_frame() -> impl Strategy<Value = Frame> {
    let n = || 0..6u64;
    let t = || 0..4i32;
    fn b(min: u64) -> impl Strategy<Value = RemoteBuf> {
        (0..4u64, 0..16u64).prop_map(move |(slot, extra)| RemoteBuf {
            addr: 0x1000 * (slot + 1),
            len: min + extra,
            key: 0,
        })
    }
    let msg = prop_oneof![
        (
            0..2u32,
            prop_oneof![Just(TagSel::Any), t().prop_map(TagSel::Tag)],
            b(0),
            n()
        )
            .prop_map(|(ctx, tag, buf, m)| Ctrl::RecvReq { ctx, tag, buf, m }),
        (0..2u32, t(), 0..24u64, flags()).prop_map(|(ctx, tag, len, flags)| Ctrl::SendReq {
            ctx,
            tag,
            len,
            flags,
            body: Body::Eager
        }),
        (0..2u32, t(), 0..24u64, flags(), any::<bool>()).prop_flat_map(
            |(ctx, tag, len, flags, get)| {
                b(len).prop_map(move |b| Ctrl::SendReq {
                    ctx,
                    tag,
                    len,
                    flags,
                    body: if get { Body::GetNow(b) } else { Body::Rndv(b) },
                })
            }
        ),
        (n(), t(), 0..24u64, 0..24u64).prop_map(|(k, tag, a, b)| Ctrl::Written {
            k,
            tag,
            len: a.min(b),
            msg_len: a.max(b)
        }),
        (n(), t(), 0..24u64, 0..24u64).prop_map(|(k, tag, a, b)| Ctrl::WrittenInline {
            k,
            tag,
            len: a.min(b),
            msg_len: a.max(b)
        }),
        n().prop_map(|i| Ctrl::Ack { i }),
        n().prop_map(|i| Ctrl::Nack { i }),
        n().prop_map(|i| Ctrl::Fin { i }),
        n().prop_map(|k| Ctrl::Retract { k }),
        (n(), any::<bool>()).prop_map(|(k, ok)| Ctrl::RetractAck { k, ok }),
        n().prop_map(|i| Ctrl::CancelSend { i }),
        (n(), any::<bool>()).prop_map(|(i, ok)| Ctrl::CancelAck { i, ok }),
        n().prop_map(|m| Ctrl::Credit { m }),
    ];
    (0..3u32, msg).prop_map(|(credit, msg)| Frame { credit, msg })
}

/// The bytes of a frame on the wire: header plus, for an eager send request, exactly
/// `len` payload bytes.
fn wire_bytes(f: &Frame) -> Vec<u8> {
    let mut b = encode(f).as_bytes().to_vec();
    if let Some(len) = eager_len(f) {
        b.extend((0..len).map(|x| x as u8 ^ 0xa5));
    }
    b
}

fn eager_len(f: &Frame) -> Option<u64> {
    match f.msg {
        Ctrl::SendReq {
            len,
            body: Body::Eager,
            ..
        }
        | Ctrl::WrittenInline { len, .. } => Some(len),
        _ => None,
    }
}

/// A decode result is well-formed: the header is within bounds, the payload has the
/// announced length, and re-encoding gives a header that decodes to the same frame.
/// The wide small eager send request's header length (`wire::wide_eager`).
const WIDE_HEADER: usize = 14;

fn check_decoded(
    bytes: &[u8],
    res: Result<(Frame, usize), WireError>,
) -> Result<(), TestCaseError> {
    let Ok((f, hl)) = res else { return Ok(()) };
    prop_assert!(hl <= bytes.len());
    let rest = (bytes.len() - hl) as u64;
    prop_assert_eq!(rest, eager_len(&f).unwrap_or(0));
    let re = encode(&f);
    // a decoded header may use non-canonical varints, so the canonical one is no longer;
    // except that a small eager send request of a wide context or tag is always the
    // wide form's 14 bytes, which a frame whose varints are short would fit in fewer
    prop_assert!(re.as_bytes().len() <= hl.max(WIDE_HEADER));
    prop_assert!(re.as_bytes().len() <= MAX_HEADER);
    let mut b = re.as_bytes().to_vec();
    b.extend_from_slice(&bytes[hl..]);
    prop_assert_eq!(decode(&b), Ok((f, re.as_bytes().len())));
    Ok(())
}

// ------------------------------------------------------------------------- codec

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn roundtrip(f in frame()) {
        let hdr = encode(&f);
        let hl = hdr.as_bytes().len();
        prop_assert!(hl <= MAX_HEADER);
        let bytes = wire_bytes(&f);
        prop_assert_eq!(decode(&bytes), Ok((f, hl)));
        // encoding is deterministic and canonical
        prop_assert_eq!(encode(&decode(&bytes).unwrap().0), hdr);
    }

    #[test]
    fn eager_payload_must_match_len(
        credit in u32_edge(), ctx in u32_edge(), tag in tag(), fl in flags(),
        len in 0..64u64, got in 0..64u64,
    ) {
        let f = Frame { credit, msg: Ctrl::SendReq { ctx, tag, len, flags: fl, body: Body::Eager } };
        let mut b = encode(&f).as_bytes().to_vec();
        let hl = b.len();
        b.extend(std::iter::repeat_n(7u8, got as usize));
        if got == len {
            prop_assert_eq!(decode(&b), Ok((f, hl)));
        } else {
            prop_assert_eq!(decode(&b), Err(WireError::PayloadLength { want: len, got }));
        }
    }

    #[test]
    fn non_eager_frames_reject_trailing_bytes(f in frame(), extra in prop::collection::vec(any::<u8>(), 1..8)) {
        prop_assume!(eager_len(&f).is_none());
        let mut b = encode(&f).as_bytes().to_vec();
        let hl = b.len();
        b.extend(extra);
        prop_assert_eq!(decode(&b), Err(WireError::TrailingBytes(hl)));
    }

    #[test]
    fn decode_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let res = decode(&bytes);
        check_decoded(&bytes, res)?;
    }

    /// Same, but starting with a valid version and kind so that the field decoders are
    /// reached rather than the version check.
    #[test]
    fn decode_arbitrary_body(kind in 0..16u8, body in prop::collection::vec(any::<u8>(), 0..80)) {
        let mut bytes = vec![wire::VERSION, kind];
        bytes.extend(body);
        let res = decode(&bytes);
        check_decoded(&bytes, res)?;
    }

    #[test]
    fn every_truncation_is_rejected(f in frame()) {
        let bytes = wire_bytes(&f);
        for cut in 0..bytes.len() {
            let res = decode(&bytes[..cut]);
            prop_assert!(res.is_err(), "prefix {cut} of {:?} decoded: {:?}", f, res);
        }
    }

    #[test]
    fn every_single_byte_mutation(f in frame(), xor in 1..=255u8) {
        let bytes = wire_bytes(&f);
        for pos in 0..bytes.len() {
            for m in [bytes[pos] ^ xor, 0, 0x7f, 0x80, 0xff] {
                let mut b = bytes.clone();
                b[pos] = m;
                let res = decode(&b);
                check_decoded(&b, res)?;
            }
            // deleting or inserting a byte
            let mut b = bytes.clone();
            b.remove(pos);
            let res = decode(&b);
            check_decoded(&b, res)?;
            let mut b = bytes.clone();
            b.insert(pos, xor);
            let res = decode(&b);
            check_decoded(&b, res)?;
        }
    }
}

// ------------------------------------------------------------------------ engine

const SMALL_CFG: Config = Config {
    matching: MatchingMode::Both,
    protocol: RecvProtocol::Eager,
    eager_limit: 8,
    inline_limit: 4,
    credits: 2,
    low_water: 1,
    tell_after: 0,
    credit_unit: 4,
    adapt_after: 1,
    adapt_pause: 1,
    advertise_above: 0,
    lone_read_above: u64::MAX,
    cross_read_above: u64::MAX,
    stream_read_above: u64::MAX,
    mutation: Mutation::None,
};

/// Engines of rank 1 in a 2-rank job in various states.
fn engines() -> Vec<Engine> {
    let mut out = vec![];
    for protocol in [RecvProtocol::Eager, RecvProtocol::Get, RecvProtocol::Sync] {
        for matching in [MatchingMode::Both, MatchingMode::Receiver] {
            let cfg = Config {
                protocol,
                matching,
                ..SMALL_CFG
            };
            out.push(Engine::new(1, 2, cfg));
            let mut e = Engine::new(1, 2, cfg);
            // receives of every kind, some advertised, some held behind ANY_SOURCE
            for (i, (source, tag)) in [
                (Source::Rank(0), TagSel::Tag(1)),
                (Source::Rank(0), TagSel::Any),
                (Source::Any, TagSel::Tag(2)),
                (Source::Rank(0), TagSel::Tag(3)),
                (Source::Rank(0), TagSel::Tag(0)),
            ]
            .into_iter()
            .enumerate()
            {
                let buf = Some(RemoteBuf {
                    addr: 0x1000 * (i as u64 + 1),
                    len: 8,
                    key: 0,
                });
                e.post_recv(RecvSpec {
                    source,
                    tag,
                    ctx: 0,
                    capacity: 8,
                    buf,
                })
                .unwrap();
            }
            // sends of every mode and size: with 2 credits, most wait in the outbox
            e.attach_buffer(1 << 20).unwrap();
            for (i, mode) in [
                SendMode::Standard,
                SendMode::Synchronous,
                SendMode::Ready,
                SendMode::Buffered,
            ]
            .into_iter()
            .enumerate()
            {
                for len in [4u64, 16] {
                    let buf = RemoteBuf {
                        addr: 0x10_0000 + 0x100 * i as u64,
                        len,
                        key: 0,
                    };
                    e.start_send(SendSpec {
                        dest: 0,
                        tag: i as Tag,
                        ctx: 0,
                        len,
                        mode,
                        read_advised: false,
                        buf,
                    })
                    .unwrap();
                }
            }
            let r = e.post_recv(RecvSpec {
                source: Source::Rank(0),
                tag: TagSel::Tag(5),
                ctx: 1,
                capacity: 4,
                buf: Some(RemoteBuf {
                    addr: 0x9000,
                    len: 4,
                    key: 0,
                }),
            });
            e.cancel_recv(r.unwrap()).unwrap();
            while e.poll_output().is_some() {}
            out.push(e);
        }
    }
    out
}

fn feed(e: &mut Engine, bytes: &[u8]) {
    let res = e.handle(0, bytes);
    if let Ok(Some(d)) = &res {
        assert!(
            d.range.end <= bytes.len(),
            "delivery range {:?} outside {} bytes",
            d.range,
            bytes.len()
        );
    }
    if decode(bytes).is_err() {
        assert!(
            matches!(res, Err(ProtocolError::Malformed { from: 0, .. })),
            "{res:?}"
        );
    }
    // carry out the outputs as a driver would, completing reads at once
    let mut gets = vec![];
    while let Some(o) = e.poll_output() {
        if let Output::Get {
            xfer, len, into, ..
        } = o
        {
            gets.push((xfer, len, into));
        }
    }
    for (xfer, len, into) in gets {
        let staged = (into == GetInto::Staging).then(|| vec![0u8; len.min(64) as usize]);
        e.get_done(xfer, staged)
            .expect("a read the engine asked for");
        while e.poll_output().is_some() {}
    }
}

#[derive(Clone, Debug)]
enum Input {
    Raw(Vec<u8>),
    Valid(Frame),
    Mutated(Frame, usize, u8),
}

impl Input {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Input::Raw(b) => b.clone(),
            Input::Valid(f) => wire_bytes(f),
            Input::Mutated(f, pos, x) => {
                let mut b = wire_bytes(f);
                let n = b.len();
                b[pos % n] ^= x;
                b
            }
        }
    }
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Input::Raw),
        1 => (prop::collection::vec(any::<u8>(), 0..40), 0..16u8).prop_map(|(mut b, k)| {
            b.splice(0..0, [wire::VERSION, k]);
            Input::Raw(b)
        }),
        4 => small_frame().prop_map(Input::Valid),
        2 => (small_frame(), any::<usize>(), 1..=255u8).prop_map(|(f, p, x)| Input::Mutated(f, p, x)),
        1 => frame().prop_map(Input::Valid),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    /// One hostile message into every engine state.
    #[test]
    fn handle_never_panics(inp in input()) {
        let bytes = inp.bytes();
        for mut e in engines() {
            feed(&mut e, &bytes);
        }
    }

    /// A sequence of hostile messages into the same engine (errors are ignored, as if
    /// the driver kept going after a protocol error).
    #[test]
    fn handle_sequence_never_panics(seq in prop::collection::vec(input(), 1..12)) {
        for mut e in engines() {
            for inp in &seq {
                feed(&mut e, &inp.bytes());
            }
        }
    }

    #[test]
    fn handle_rejects_unknown_rank(from in 2..u32::MAX, inp in input()) {
        let mut e = Engine::new(1, 2, SMALL_CFG);
        let res = e.handle(from, &inp.bytes());
        prop_assert!(matches!(res, Err(ProtocolError::Violation { .. })), "{:?}", res);
    }
}
