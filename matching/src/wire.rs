//! The wire format of control messages.
//!
//! Every control message is a header, optionally followed by an eager payload:
//!
//! ```text
//! byte 0     version (currently 1)
//! byte 1     kind (see `Kind`)
//! varint     credits returned to the receiver of this message
//! ...        kind-specific fields, unsigned LEB128 varints
//! [payload]  SendReq with an eager body only: exactly `len` bytes
//! ```
//!
//! The eager send request of fewer than 16 KiB — every small message — has two forms
//! that decode in straight code: the short one above, with a credit, context and tag
//! below 128 (7 or 8 bytes), and a wide one of fixed-width fields where one of them is
//! larger (14 bytes: version, kind 15, credit and flags of one byte each, then the
//! context and the tag as four little-endian bytes and the length as two). The wide
//! form carries every collective's messages (an internal context, a sequence number
//! as tag) and a user's tags from 128, which the general form's varints had sent
//! through the general decoder and the engine's general path.
//!
//! Sequence numbers are implicit: the k-th `RecvReq` a rank sends to a peer is receive
//! request k, the i-th `SendReq` is send request i (the channels are FIFO), so only
//! replies name them. A header is at most [`MAX_HEADER`] bytes.
//!
//! [`decode`] never panics: truncated, over-long or out-of-range input is an error.
//!
//! ```
//! use matching::wire::{decode, encode, Ctrl, Frame};
//! let f = Frame { credit: 3, msg: Ctrl::Ack { i: 41 } };
//! let hdr = encode(&f);
//! let (back, used) = decode(hdr.as_bytes()).unwrap();
//! assert_eq!((back, used), (f, hdr.as_bytes().len()));
//! assert!(decode(&hdr.as_bytes()[..2]).is_err());
//! ```

use crate::types::{Ctx, RemoteBuf, Tag, TagSel};

/// Version byte of this format.
pub const VERSION: u8 = 1;
/// Upper bound of an encoded header.
pub const MAX_HEADER: usize = 64;

/// Flags of a send request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct SendFlags {
    /// The sender waits for an `Ack` once a receive matched (synchronous mode).
    pub sync: bool,
    /// Ready mode: no matching posted receive is an error (`Nack`), not an unexpected
    /// message.
    pub ready: bool,
}

/// How the payload of a send request travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Body {
    /// The payload follows the header.
    Eager,
    /// Rendezvous: the receiver reads `buf` once a receive matched, then sends `Fin`.
    Rndv(RemoteBuf),
    /// Get protocol: the receiver reads `buf` at once (into a staging buffer if no
    /// receive matched), then sends `Fin`.
    GetNow(RemoteBuf),
}

/// A control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ctrl {
    /// Receive request (R→S): "my next receive from you matches (ctx, tag); write it
    /// into `buf`". `m` = send requests from you I had processed.
    RecvReq {
        ctx: Ctx,
        tag: TagSel,
        buf: RemoteBuf,
        m: u64,
    },
    /// Send request (S→R): receiver-side matching of one message of `len` bytes.
    SendReq {
        ctx: Ctx,
        tag: Tag,
        len: u64,
        flags: SendFlags,
        body: Body,
    },
    /// Direct-write notice (S→R): the payload of a message for receive request `k` has
    /// been written into its buffer (`len` bytes of a `msg_len`-byte message).
    Written {
        k: u64,
        tag: Tag,
        len: u64,
        msg_len: u64,
    },
    /// Inline direct write (S→R): as `Written`, but the `len` payload bytes follow the
    /// header and R copies them into receive request `k`'s buffer (small messages,
    /// where a copy through the ring is cheaper than a one-sided write).
    WrittenInline {
        k: u64,
        tag: Tag,
        len: u64,
        msg_len: u64,
    },
    /// Send request `i` matched (synchronous or ready mode).
    Ack { i: u64 },
    /// Ready-mode send request `i` found no posted receive; it was discarded.
    Nack { i: u64 },
    /// The receiver finished reading send request `i`'s payload.
    Fin { i: u64 },
    /// The receiver cancels receive request `k`.
    Retract { k: u64 },
    /// Answer to `Retract`: `ok` = the entry was live and is gone; otherwise a message
    /// was already written or sent for it.
    RetractAck { k: u64, ok: bool },
    /// The sender cancels send request `i`.
    CancelSend { i: u64 },
    /// Answer to `CancelSend`: `ok` = removed from the unexpected queue.
    CancelAck { i: u64, ok: bool },
    /// Explicit credit return (the amount is in the frame header); `m` = send requests
    /// from the addressee processed so far, so it can forget older ones.
    Credit { m: u64 },
}

/// A header: credits piggy-backed on a control message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    pub credit: u32,
    pub msg: Ctrl,
}

impl Ctrl {
    /// Explicit credit messages do not consume a credit themselves.
    pub fn consumes_credit(&self) -> bool {
        !matches!(self, Ctrl::Credit { .. })
    }
}

/// Why a control message was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum WireError {
    #[error("message truncated")]
    Truncated,
    #[error("unsupported wire version {0}")]
    Version(u8),
    #[error("unknown message kind {0}")]
    Kind(u8),
    #[error("varint too long or out of range")]
    Varint,
    #[error("field out of range")]
    Range,
    #[error("eager payload of {got} bytes does not match the announced {want}")]
    PayloadLength { want: u64, got: u64 },
    #[error("unexpected payload after a {0}-byte header")]
    TrailingBytes(usize),
}

/// An encoded header, kept inline (no allocation on the hot path). Two headers are
/// equal when their bytes are: what lies past them is not part of the header.
#[derive(Clone, Copy, Debug)]
pub struct Header {
    buf: [u8; MAX_HEADER],
    len: u8,
}

impl PartialEq for Header {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Header {}

impl std::hash::Hash for Header {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl Header {
    /// No header yet (no bytes): what [`encode_into`] writes over.
    pub const EMPTY: Header = Header {
        buf: [0; MAX_HEADER],
        len: 0,
    };

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }
    fn push(&mut self, b: u8) {
        self.buf[self.len as usize] = b;
        self.len += 1;
    }
    #[inline]
    fn varint(&mut self, v: u64) {
        if v < 0x80 {
            self.push(v as u8); // most fields of most headers: one byte
        } else {
            self.varint_long(v);
        }
    }
    fn varint_long(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.push(b);
                return;
            }
            self.push(b | 0x80);
        }
    }
    fn rbuf(&mut self, b: &RemoteBuf) {
        self.varint(b.addr);
        self.varint(b.len);
        self.varint(b.key);
    }
}

mod kind {
    pub const RECV_REQ: u8 = 1;
    pub const SEND_EAGER: u8 = 2;
    pub const SEND_RNDV: u8 = 3;
    pub const SEND_GET: u8 = 4;
    pub const WRITTEN: u8 = 5;
    pub const ACK: u8 = 6;
    pub const NACK: u8 = 7;
    pub const FIN: u8 = 8;
    pub const RETRACT: u8 = 9;
    pub const RETRACT_ACK: u8 = 10;
    pub const CANCEL_SEND: u8 = 11;
    pub const CANCEL_ACK: u8 = 12;
    pub const CREDIT: u8 = 13;
    pub const WRITTEN_INLINE: u8 = 14;
    pub const SEND_EAGER_WIDE: u8 = 15;
}

fn tagsel_code(t: TagSel) -> u64 {
    match t {
        TagSel::Any => 0,
        TagSel::Tag(t) => t as u64 + 1,
    }
}

/// Encodes a header. Tags must be non-negative (the engine validates them).
#[inline]
pub fn encode(f: &Frame) -> Header {
    let mut h = Header::EMPTY;
    encode_into(f, &mut h);
    h
}

/// [`encode`] into `h`, in place: what `h` held before is overwritten. The engine's
/// send without a queue ([`crate::Engine::send_now`]) encodes into its caller's header
/// this way, so that the header is written once, where the transport reads it, and not
/// moved after: a move of the 65-byte `Header` reads it back with wide loads that
/// overlap the narrower stores just made, which the CPU cannot forward, so each waited
/// for every store before it to leave the store buffer (a window of 4 KiB sends spent
/// a third of its sender's time there; `docs/performance.md`, "Values written where
/// they are read").
#[inline(always)]
pub fn encode_into(f: &Frame, h: &mut Header) {
    if let Ctrl::SendReq {
        ctx,
        tag,
        len,
        flags,
        body: Body::Eager,
    } = f.msg
    {
        let fl = flags.sync as u8 | (flags.ready as u8) << 1;
        if (f.credit | ctx | tag as u32) < 0x80 && len < 0x80 {
            // the small eager send request: credit, context, tag and length varints
            // of one byte each (see `decode_small_eager`)
            h.buf[..7].copy_from_slice(&[
                VERSION,
                kind::SEND_EAGER,
                f.credit as u8,
                ctx as u8,
                tag as u8,
                len as u8,
                fl,
            ]);
            h.len = 7;
            return;
        }
        if (f.credit | ctx | tag as u32) < 0x80 && len < SMALL_EAGER_LEN {
            // the same with a length of two bytes
            h.buf[..8].copy_from_slice(&[
                VERSION,
                kind::SEND_EAGER,
                f.credit as u8,
                ctx as u8,
                tag as u8,
                len as u8 | 0x80,
                (len >> 7) as u8,
                fl,
            ]);
            h.len = 8;
            return;
        }
        if f.credit < 0x100 && len < SMALL_EAGER_LEN {
            // a context or tag of more than seven bits (every collective's message,
            // on its communicator's internal context, and a user's tags from 128):
            // the wide form, of fixed-width fields (see `wide_eager`)
            let (c, t, l) = (ctx.to_le_bytes(), (tag as u32).to_le_bytes(), len as u16);
            h.buf[..WIDE_HEADER].copy_from_slice(&[
                VERSION,
                kind::SEND_EAGER_WIDE,
                f.credit as u8,
                fl,
                c[0],
                c[1],
                c[2],
                c[3],
                t[0],
                t[1],
                t[2],
                t[3],
                l as u8,
                (l >> 8) as u8,
            ]);
            h.len = WIDE_HEADER as u8;
            return;
        }
    }
    encode_long(f, h)
}

/// [`encode`] for every header but the small eager send request's.
#[inline(never)]
fn encode_long(f: &Frame, h: &mut Header) {
    h.len = 0;
    h.push(VERSION);
    let k = match f.msg {
        Ctrl::RecvReq { .. } => kind::RECV_REQ,
        Ctrl::SendReq {
            body: Body::Eager, ..
        } => kind::SEND_EAGER,
        Ctrl::SendReq {
            body: Body::Rndv(_),
            ..
        } => kind::SEND_RNDV,
        Ctrl::SendReq {
            body: Body::GetNow(_),
            ..
        } => kind::SEND_GET,
        Ctrl::Written { .. } => kind::WRITTEN,
        Ctrl::WrittenInline { .. } => kind::WRITTEN_INLINE,
        Ctrl::Ack { .. } => kind::ACK,
        Ctrl::Nack { .. } => kind::NACK,
        Ctrl::Fin { .. } => kind::FIN,
        Ctrl::Retract { .. } => kind::RETRACT,
        Ctrl::RetractAck { .. } => kind::RETRACT_ACK,
        Ctrl::CancelSend { .. } => kind::CANCEL_SEND,
        Ctrl::CancelAck { .. } => kind::CANCEL_ACK,
        Ctrl::Credit { .. } => kind::CREDIT,
    };
    h.push(k);
    h.varint(f.credit as u64);
    match f.msg {
        Ctrl::RecvReq { ctx, tag, buf, m } => {
            h.varint(ctx as u64);
            h.varint(tagsel_code(tag));
            h.rbuf(&buf);
            h.varint(m);
        }
        Ctrl::SendReq {
            ctx,
            tag,
            len,
            flags,
            body,
        } => {
            h.varint(ctx as u64);
            h.varint(tag as u32 as u64);
            h.varint(len);
            h.push(flags.sync as u8 | (flags.ready as u8) << 1);
            if let Body::Rndv(b) | Body::GetNow(b) = body {
                h.rbuf(&b);
            }
        }
        Ctrl::Written {
            k,
            tag,
            len,
            msg_len,
        }
        | Ctrl::WrittenInline {
            k,
            tag,
            len,
            msg_len,
        } => {
            h.varint(k);
            h.varint(tag as u32 as u64);
            h.varint(len);
            h.varint(msg_len);
        }
        Ctrl::Ack { i } | Ctrl::Nack { i } | Ctrl::Fin { i } | Ctrl::CancelSend { i } => {
            h.varint(i)
        }
        Ctrl::Retract { k } => h.varint(k),
        Ctrl::RetractAck { k: n, ok } | Ctrl::CancelAck { i: n, ok } => {
            h.varint(n);
            h.push(ok as u8);
        }
        Ctrl::Credit { m } => h.varint(m),
    }
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, WireError> {
        let v = *self.b.get(self.pos).ok_or(WireError::Truncated)?;
        self.pos += 1;
        Ok(v)
    }
    #[inline]
    fn varint(&mut self) -> Result<u64, WireError> {
        match self.b.get(self.pos) {
            Some(&b) if b < 0x80 => {
                self.pos += 1; // most fields of most headers: one byte
                Ok(b as u64)
            }
            _ => self.varint_long(),
        }
    }
    fn varint_long(&mut self) -> Result<u64, WireError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = (b & 0x7f) as u64;
            if shift == 63 && part > 1 {
                return Err(WireError::Varint);
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WireError::Varint)
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        u32::try_from(self.varint()?).map_err(|_| WireError::Range)
    }
    fn tag(&mut self) -> Result<Tag, WireError> {
        Tag::try_from(self.varint()?).map_err(|_| WireError::Range)
    }
    fn tagsel(&mut self) -> Result<TagSel, WireError> {
        match self.varint()? {
            0 => Ok(TagSel::Any),
            v if v <= Tag::MAX as u64 + 1 => Ok(TagSel::Tag((v - 1) as Tag)),
            _ => Err(WireError::Range),
        }
    }
    fn bool(&mut self) -> Result<bool, WireError> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Range),
        }
    }
    fn rbuf(&mut self) -> Result<RemoteBuf, WireError> {
        let addr = self.varint()?;
        let len = self.varint()?;
        let key = self.varint()?;
        if addr.checked_add(len).is_none() {
            return Err(WireError::Range);
        }
        Ok(RemoteBuf { addr, len, key })
    }
}

/// Lengths below this are the small eager send request's (a varint of one or two
/// bytes).
const SMALL_EAGER_LEN: u64 = 1 << 14;

/// The header of the latency-critical message — an eager send request whose credit,
/// context and tag are one varint byte each and whose length is one or two (below
/// 16 KiB: every whole message a shared-memory ring carries) — decoded in straight
/// code; `None` sends anything else (and any malformed input) to the general
/// decoder, which gives the same result for these bytes. With lengths of one byte
/// only, a message of 128 B or more took the general encoder and decoder: ~300
/// instructions more per round of a ping-pong (`docs/performance.md`, eighteenth
/// round).
#[inline]
pub(crate) fn decode_small_eager(bytes: &[u8]) -> Option<SmallEager> {
    let h: &[u8; 7] = bytes.get(..7)?.try_into().ok()?;
    let [VERSION, kind::SEND_EAGER, credit, ctx, tag, l0, x] = *h else {
        return wide_or_none(bytes);
    };
    if (credit | ctx | tag | l0) < 0x80 {
        // a length of one byte; `x` is the flags
        if x & !3 != 0 || bytes.len() - 7 != l0 as usize {
            return None;
        }
        return Some(small_eager(credit, ctx, tag, l0.into(), x, 7));
    }
    // a length of two bytes: `x` is its high part (not zero: the shortest form), and
    // the flags follow it
    let fl = *bytes.get(7)?;
    let len = (x as u64) << 7 | (l0 & 0x7f) as u64;
    if (credit | ctx | tag) >= 0x80
        || x == 0
        || x >= 0x80
        || fl & !3 != 0
        || (bytes.len() - 8) as u64 != len
    {
        return None;
    }
    Some(small_eager(credit, ctx, tag, len, fl, 8))
}

/// [`decode_small_eager`] for any message but the short form's: the wide form's
/// fields, or `None`. Cold and out of line, so that the short form's path is laid out
/// as it was without the wide form (inline, the poll that decodes it took about ten
/// instructions more per message).
#[cold]
#[inline(never)]
fn wide_or_none(bytes: &[u8]) -> Option<SmallEager> {
    wide_eager(bytes, bytes.len()).ok()
}

/// The wide form's header length: version, kind, credit, flags, then the context and
/// the tag as four little-endian bytes each and the length as two.
const WIDE_HEADER: usize = 14;

/// The wide form of the small eager send request: a credit of one byte, a length below
/// 16 KiB, and a context or a tag of more than seven bits, in fixed-width fields;
/// `bytes` start with the header of a message of `total` bytes. The general decoder
/// reads it through this function too. Only the encoder's choice is accepted (a
/// context, tag and credit that all fit the short form are not), so that the format
/// stays canonical.
#[inline(never)]
fn wide_eager(bytes: &[u8], total: usize) -> Result<SmallEager, WireError> {
    let Some(h) = bytes.first_chunk::<WIDE_HEADER>() else {
        return Err(WireError::Truncated);
    };
    if h[0] != VERSION {
        return Err(WireError::Version(h[0]));
    }
    if h[1] != kind::SEND_EAGER_WIDE {
        return Err(WireError::Kind(h[1]));
    }
    let (credit, fl) = (h[2], h[3]);
    let ctx = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let tag = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    let len = u16::from_le_bytes([h[12], h[13]]) as u64;
    if fl & !3 != 0 || tag > Tag::MAX as u32 || len >= SMALL_EAGER_LEN {
        return Err(WireError::Range);
    }
    if (u32::from(credit) | ctx | tag) < 0x80 {
        return Err(WireError::Range); // the short form's fields: not canonical
    }
    let got = (total - WIDE_HEADER) as u64;
    if got != len {
        return Err(WireError::PayloadLength { want: len, got });
    }
    Ok(SmallEager {
        credit: credit.into(),
        ctx,
        tag: tag as Tag,
        len,
        flags: SendFlags {
            sync: fl & 1 != 0,
            ready: fl & 2 != 0,
        },
        hl: WIDE_HEADER,
    })
}

/// A small eager send request's fields, as [`decode_small_eager`] reads them: the
/// engine handles it from these without building a [`Frame`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SmallEager {
    pub credit: u32,
    pub ctx: Ctx,
    pub tag: Tag,
    pub len: u64,
    pub flags: SendFlags,
    /// The header's length: the payload follows it.
    pub hl: usize,
}

impl SmallEager {
    /// The frame and header length that [`decode`] returns for it.
    fn frame(self) -> (Frame, usize) {
        let msg = Ctrl::SendReq {
            ctx: self.ctx,
            tag: self.tag,
            len: self.len,
            flags: self.flags,
            body: Body::Eager,
        };
        (
            Frame {
                credit: self.credit,
                msg,
            },
            self.hl,
        )
    }
}

/// The small eager send request's fields.
#[inline(always)]
fn small_eager(credit: u8, ctx: u8, tag: u8, len: u64, fl: u8, hl: usize) -> SmallEager {
    SmallEager {
        credit: credit.into(),
        ctx: ctx.into(),
        tag: tag.into(),
        len,
        flags: SendFlags {
            sync: fl & 1 != 0,
            ready: fl & 2 != 0,
        },
        hl,
    }
}

/// Decodes a header; returns it and the header's length. The rest of `bytes` is the
/// payload, which must be empty except for an eager `SendReq`, whose payload must be
/// exactly `len` bytes.
pub fn decode(bytes: &[u8]) -> Result<(Frame, usize), WireError> {
    match decode_small_eager(bytes) {
        Some(e) => Ok(e.frame()),
        None => decode_any(bytes, bytes.len()),
    }
}

/// [`decode`] for a message of `len` bytes of which only the first ones, `head`, have
/// arrived (they must hold the whole header): the same result as `decode` of the whole
/// message.
pub fn decode_head(head: &[u8], len: usize) -> Result<(Frame, usize), WireError> {
    if head.len() > len {
        return Err(WireError::TrailingBytes(len));
    }
    decode_any(head, len)
}

/// Decodes the header at the start of `bytes`, the first bytes of a message of
/// `total` bytes.
fn decode_any(bytes: &[u8], total: usize) -> Result<(Frame, usize), WireError> {
    let mut r = Reader { b: bytes, pos: 0 };
    let v = r.byte()?;
    if v != VERSION {
        return Err(WireError::Version(v));
    }
    let k = r.byte()?;
    if k == kind::SEND_EAGER_WIDE {
        return wide_eager(bytes, total).map(SmallEager::frame);
    }
    let credit = r.u32()?;
    let msg = match k {
        kind::RECV_REQ => Ctrl::RecvReq {
            ctx: r.u32()?,
            tag: r.tagsel()?,
            buf: r.rbuf()?,
            m: r.varint()?,
        },
        kind::SEND_EAGER | kind::SEND_RNDV | kind::SEND_GET => {
            let ctx = r.u32()?;
            let tag = r.tag()?;
            let len = r.varint()?;
            let fl = r.byte()?;
            if fl & !3 != 0 {
                return Err(WireError::Range);
            }
            let flags = SendFlags {
                sync: fl & 1 != 0,
                ready: fl & 2 != 0,
            };
            let body = match k {
                kind::SEND_EAGER => Body::Eager,
                kind::SEND_RNDV => Body::Rndv(r.rbuf()?),
                _ => Body::GetNow(r.rbuf()?),
            };
            if let Body::Rndv(b) | Body::GetNow(b) = body {
                if b.len < len {
                    return Err(WireError::Range);
                }
            }
            Ctrl::SendReq {
                ctx,
                tag,
                len,
                flags,
                body,
            }
        }
        kind::WRITTEN | kind::WRITTEN_INLINE => {
            let inline = k == kind::WRITTEN_INLINE;
            let k = r.varint()?;
            let tag = r.tag()?;
            let len = r.varint()?;
            let msg_len = r.varint()?;
            if len > msg_len {
                return Err(WireError::Range);
            }
            if inline {
                Ctrl::WrittenInline {
                    k,
                    tag,
                    len,
                    msg_len,
                }
            } else {
                Ctrl::Written {
                    k,
                    tag,
                    len,
                    msg_len,
                }
            }
        }
        kind::ACK => Ctrl::Ack { i: r.varint()? },
        kind::NACK => Ctrl::Nack { i: r.varint()? },
        kind::FIN => Ctrl::Fin { i: r.varint()? },
        kind::RETRACT => Ctrl::Retract { k: r.varint()? },
        kind::RETRACT_ACK => Ctrl::RetractAck {
            k: r.varint()?,
            ok: r.bool()?,
        },
        kind::CANCEL_SEND => Ctrl::CancelSend { i: r.varint()? },
        kind::CANCEL_ACK => Ctrl::CancelAck {
            i: r.varint()?,
            ok: r.bool()?,
        },
        kind::CREDIT => Ctrl::Credit { m: r.varint()? },
        other => return Err(WireError::Kind(other)),
    };
    let hl = r.pos;
    let rest = (total - hl) as u64;
    match msg {
        Ctrl::SendReq {
            len,
            body: Body::Eager,
            ..
        } if rest != len => Err(WireError::PayloadLength {
            want: len,
            got: rest,
        }),
        Ctrl::SendReq {
            body: Body::Eager, ..
        } => Ok((Frame { credit, msg }, hl)),
        Ctrl::WrittenInline { len, .. } if rest != len => Err(WireError::PayloadLength {
            want: len,
            got: rest,
        }),
        Ctrl::WrittenInline { .. } => Ok((Frame { credit, msg }, hl)),
        _ if rest != 0 => Err(WireError::TrailingBytes(hl)),
        _ => Ok((Frame { credit, msg }, hl)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `encode_into` writes over whatever its header held (a longer header, or
    /// garbage) and gives `encode`'s bytes, short and long forms alike; headers are
    /// equal, and hash alike, by their bytes alone.
    #[test]
    fn encode_into_writes_over_what_the_header_held() {
        let small = |len| Frame {
            credit: 3,
            msg: Ctrl::SendReq {
                ctx: 1,
                tag: 9,
                len,
                flags: SendFlags::default(),
                body: Body::Eager,
            },
        };
        let long = Frame {
            credit: 300,
            msg: Ctrl::RecvReq {
                ctx: 70_000,
                tag: TagSel::Any,
                buf: RemoteBuf {
                    addr: 1 << 46,
                    len: 1 << 40,
                    key: 0xdead_beef,
                },
                m: 1 << 50,
            },
        };
        let mut h = Header {
            buf: [0xee; MAX_HEADER],
            len: MAX_HEADER as u8,
        };
        for f in [long, small(8), small(4096), long, small(1 << 20), small(0)] {
            encode_into(&f, &mut h);
            assert_eq!(h.as_bytes(), encode(&f).as_bytes());
            assert_eq!(h, encode(&f));
            let hash = |h: &Header| {
                use std::hash::{Hash, Hasher};
                let mut s = std::collections::hash_map::DefaultHasher::new();
                h.hash(&mut s);
                s.finish()
            };
            assert_eq!(hash(&h), hash(&encode(&f)));
        }
        // the last one, 0 bytes of payload, took the 7-byte form over a longer one
        assert_eq!(h.as_bytes().len(), 7);
    }

    /// The small-eager fast path decodes exactly what the general decoder does, on
    /// near-miss and random headers alike.
    #[test]
    fn small_eager_path_agrees() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut fast, mut fast_two) = (0, 0);
        for _ in 0..200_000 {
            let r = next();
            let pick = |i: u32, lo: u8| -> u8 {
                // mostly valid bytes, sometimes edge or random ones
                match (r >> (i * 4)) & 7 {
                    0 => 0x7f,
                    1 => 0x80,
                    2 => (r >> 40) as u8,
                    _ => lo + ((r >> (i * 5 + 3)) & 3) as u8,
                }
            };
            // a length of one byte, or of two (128 B to 16 KiB, sometimes with a
            // high byte that is zero, too large, or missing)
            let two = next();
            let (len, len_bytes) = if two % 3 == 0 {
                let v = 128 + (two >> 8) % 600;
                let hi = match (two >> 20) % 16 {
                    0 => 0,
                    1 => 0x80 | (v >> 7) as u8,
                    _ => (v >> 7) as u8,
                };
                (v, vec![(v as u8 & 0x7f) | 0x80, hi])
            } else {
                let l = pick(5, 0);
                (u64::from(l), vec![l])
            };
            let mut b = vec![
                if r & 0xff == 0 { 2 } else { VERSION },
                if r & 0xff00 == 0 {
                    kind::SEND_RNDV
                } else {
                    kind::SEND_EAGER
                },
                pick(0, 0),
                pick(1, 0),
                pick(2, 0),
            ];
            b.extend_from_slice(&len_bytes);
            b.push(pick(3, 0) & if r & 0x10000 == 0 { 3 } else { 0xff });
            let extra = (next() % 3) as i64 - 1; // payload one short, exact, one long
            let payload = (len as i64 + extra).max(0) as usize;
            b.resize(b.len() + payload, 0xaa);
            b.truncate((next() % 1024) as usize + 6);
            if let Some(e) = decode_small_eager(&b) {
                fast += 1;
                fast_two += usize::from(e.hl == 8);
                assert_eq!(decode_any(&b, b.len()), Ok(e.frame()), "{b:?}");
            }
            assert_eq!(decode(&b), decode_any(&b, b.len()), "{b:?}");
        }
        assert!(fast > 10_000, "the fast path ran {fast} times");
        assert!(
            fast_two > 2_000,
            "the fast path ran {fast_two} times on two-byte lengths"
        );
    }

    /// The small eager send request's fast encoder writes the bytes the general one
    /// does (the format did not change), and they decode to the frame, by either
    /// decoder, at every length of one and two bytes and the first of three.
    #[test]
    fn small_eager_encoding_is_the_general_one() {
        for len in (0..SMALL_EAGER_LEN + 3).chain([1 << 20]) {
            for (credit, ctx, tag, sync) in
                [(0, 0, 0, false), (127, 127, 127, true), (5, 1, 42, false)]
            {
                let f = Frame {
                    credit,
                    msg: Ctrl::SendReq {
                        ctx,
                        tag,
                        len,
                        flags: SendFlags { sync, ready: !sync },
                        body: Body::Eager,
                    },
                };
                // the long encoding into a header that held another one
                let mut long = Header {
                    buf: [0xee; MAX_HEADER],
                    len: MAX_HEADER as u8,
                };
                encode_long(&f, &mut long);
                let h = encode(&f);
                assert_eq!(h.as_bytes(), long.as_bytes(), "len {len}");
                let mut b = h.as_bytes().to_vec();
                b.resize(b.len() + len as usize, 0x5a);
                assert_eq!(decode(&b), Ok((f, h.as_bytes().len())), "len {len}");
                assert_eq!(decode_any(&b, b.len()), decode(&b));
                assert_eq!(
                    decode_small_eager(&b).is_some(),
                    len < SMALL_EAGER_LEN,
                    "len {len}"
                );
            }
        }
    }

    /// Contexts or tags of more than seven bits (collectives' messages, users' tags
    /// from 128) take the wide form below 16 KiB, the long one from there or with a
    /// credit of more than a byte; either decoder reads the wide form to the frame, and
    /// rejects it truncated, with a short payload, with the short form's fields, or
    /// with a field out of range.
    #[test]
    fn wide_eager_form() {
        let frame = |credit, ctx, tag, len| Frame {
            credit,
            msg: Ctrl::SendReq {
                ctx,
                tag,
                len,
                flags: SendFlags {
                    sync: len % 2 == 1,
                    ready: false,
                },
                body: Body::Eager,
            },
        };
        let internal = 1u32 << 31;
        let mut wide = 0;
        for (credit, ctx, tag) in [
            (0, internal | 3, 0),
            (255, 1, 128),
            (7, 128, 5),
            (0, u32::MAX, Tag::MAX),
            (128, 0, 0),
            (256, internal, 9),
            (300, 0, 0),
        ] {
            for len in [0, 1, 127, 128, 4096, SMALL_EAGER_LEN - 1, SMALL_EAGER_LEN] {
                let f = frame(credit, ctx, tag, len);
                let h = encode(&f);
                let is_wide = credit < 0x100 && len < SMALL_EAGER_LEN;
                assert_eq!(h.as_bytes()[1] == kind::SEND_EAGER_WIDE, is_wide, "{f:?}");
                assert!(!is_wide || h.as_bytes().len() == WIDE_HEADER);
                let mut b = h.as_bytes().to_vec();
                b.resize(b.len() + len as usize, 0x5a);
                assert_eq!(decode(&b), Ok((f, h.as_bytes().len())), "{f:?}");
                assert_eq!(decode_any(&b, b.len()), decode(&b));
                assert_eq!(decode_small_eager(&b).is_some(), is_wide);
                if !is_wide {
                    continue;
                }
                wide += 1;
                let e = decode_small_eager(&b).unwrap();
                assert_eq!((e.ctx, e.tag, e.len, e.credit), (ctx, tag, len, credit));
                // the head alone, with the whole length, as a stream's first bytes
                assert_eq!(decode_head(&b[..WIDE_HEADER], b.len()), decode(&b));
                for cut in 0..b.len() {
                    assert!(decode(&b[..cut]).is_err(), "{cut} of {f:?}");
                }
                b.push(0);
                assert_eq!(
                    decode(&b),
                    Err(WireError::PayloadLength {
                        want: len,
                        got: len + 1
                    })
                );
            }
        }
        assert_eq!(wide, 5 * 6);
        // the short form's fields written wide, a flag, a tag or a length out of range
        let mut b = encode(&frame(1, 1, 200, 0)).as_bytes().to_vec();
        for (at, v) in [(8, 5), (3, 4), (11, 0x80), (13, 0x40)] {
            let mut bad = b.clone();
            bad[at] = v;
            assert_eq!(decode(&bad), Err(WireError::Range), "byte {at} = {v}");
            assert_eq!(decode_small_eager(&bad), None);
        }
        b[0] = 2;
        assert_eq!(decode(&b), Err(WireError::Version(2)));
    }

    #[test]
    fn max_header_fits() {
        let big = RemoteBuf {
            addr: u64::MAX / 2,
            len: u64::MAX / 2,
            key: u64::MAX,
        };
        for msg in [
            Ctrl::RecvReq {
                ctx: u32::MAX,
                tag: TagSel::Tag(Tag::MAX),
                buf: big,
                m: u64::MAX,
            },
            Ctrl::SendReq {
                ctx: u32::MAX,
                tag: Tag::MAX,
                len: u64::MAX / 2,
                flags: SendFlags {
                    sync: true,
                    ready: true,
                },
                body: Body::GetNow(big),
            },
            Ctrl::Written {
                k: u64::MAX,
                tag: Tag::MAX,
                len: u64::MAX,
                msg_len: u64::MAX,
            },
        ] {
            let f = Frame {
                credit: u32::MAX,
                msg,
            };
            let h = encode(&f);
            assert!(h.as_bytes().len() <= MAX_HEADER);
            assert_eq!(decode(h.as_bytes()).unwrap().0, f);
        }
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(decode(&[]), Err(WireError::Truncated));
        assert_eq!(decode(&[2, 6, 0, 0]), Err(WireError::Version(2)));
        assert_eq!(decode(&[1, 99, 0]), Err(WireError::Kind(99)));
        assert_eq!(decode(&[1, 6, 0, 0, 7]), Err(WireError::TrailingBytes(4)));
        assert_eq!(decode(&[1, 10, 0, 3, 2]), Err(WireError::Range));
        let mut long = vec![1, 6, 0];
        long.extend([0xff; 11]);
        assert_eq!(decode(&long), Err(WireError::Varint));
        // eager payload length must match
        let f = Frame {
            credit: 0,
            msg: Ctrl::SendReq {
                ctx: 0,
                tag: 1,
                len: 3,
                flags: SendFlags::default(),
                body: Body::Eager,
            },
        };
        let mut b = encode(&f).as_bytes().to_vec();
        b.extend([1, 2]);
        assert_eq!(
            decode(&b),
            Err(WireError::PayloadLength { want: 3, got: 2 })
        );
        b.push(3);
        assert_eq!(decode(&b).unwrap().0, f);
    }
}
