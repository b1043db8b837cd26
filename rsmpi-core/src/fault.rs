//! Fault injection for testing the test suite (cargo feature `fault-injection`, off by
//! default): with `RSMPI_FAULT=reorder|drop|duplicate`, the 20th message carrying or
//! announcing a payload (eager send request, direct-write notice) that a rank receives
//! is delivered after the same peer's next such message, not at all, or twice. The conformance suite uses it to show that its checks catch reordering, loss
//! and duplication; nothing else ever sets it.
//!
//! `RSMPI_FAULT_TRACE_WRITE_MS=N` makes rank `r`'s every trace write take `(r + 1) · N`
//! ms longer, as on a slow shared file system: the tracer's reconstruction test
//! (`conformance/tests/trace_accuracy.rs`) needs pauses long enough, and unequal
//! across the ranks, to show that they are taken out again.

use matching::wire::{self, Body, Ctrl};
use transport::{Caps, Posted, Rank, RemoteBuf, Transport, TransportError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    Reorder,
    Drop,
    Duplicate,
}

pub(crate) struct Faulty {
    inner: Box<dyn Transport>,
    fault: Fault,
    seen: u64,
    held: Option<(Rank, Vec<u8>)>,
    done: bool,
}

const VICTIM: u64 = 20;

/// The fault `RSMPI_FAULT` asks for, if any.
pub(crate) fn asked() -> Option<Fault> {
    match std::env::var("RSMPI_FAULT").as_deref() {
        Ok("reorder") => Some(Fault::Reorder),
        Ok("drop") => Some(Fault::Drop),
        Ok("duplicate") => Some(Fault::Duplicate),
        _ => None,
    }
}

/// Wraps `t` to inject `fault`.
pub(crate) fn wrap(t: Box<dyn Transport>, fault: Fault) -> Box<dyn Transport> {
    eprintln!("rsmpi: rank {}: injecting fault {fault:?}", t.rank());
    Box::new(Faulty {
        inner: t,
        fault,
        seen: 0,
        held: None,
        done: false,
    })
}

/// A message that carries or announces a payload: eager send requests and
/// direct-write notices.
fn is_eager(b: &[u8]) -> bool {
    matches!(
        wire::decode(b),
        Ok((
            wire::Frame {
                msg: Ctrl::SendReq {
                    body: Body::Eager,
                    ..
                } | Ctrl::Written { .. }
                    | Ctrl::WrittenInline { .. },
                ..
            },
            _
        ))
    )
}

impl Transport for Faulty {
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn caps(&self) -> Caps {
        self.inner.caps()
    }
    fn try_send(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), TransportError> {
        self.inner.try_send(peer, header, payload)
    }
    fn expose(&mut self, addr: usize, len: usize) -> Result<RemoteBuf, TransportError> {
        self.inner.expose(addr, len)
    }

    fn unexpose(&mut self, buf: RemoteBuf) {
        self.inner.unexpose(buf)
    }
    fn put(
        &mut self,
        peer: Rank,
        src: &[u8],
        dst: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        self.inner.put(peer, src, dst, offset, token)
    }
    fn get(
        &mut self,
        peer: Rank,
        dst: &mut [u8],
        src: RemoteBuf,
        offset: u64,
        token: u64,
    ) -> Result<Posted, TransportError> {
        self.inner.get(peer, dst, src, offset, token)
    }
    fn prefers_read(&mut self, peer: Rank, len: usize, stream: bool) -> bool {
        self.inner.prefers_read(peer, len, stream)
    }
    fn poll_done(
        &mut self,
        f: &mut dyn FnMut(u64, Result<(), TransportError>),
    ) -> Result<usize, TransportError> {
        self.inner.poll_done(f)
    }
    fn poll(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Rank, &[u8]),
    ) -> Result<usize, TransportError> {
        let mut got = Vec::new();
        self.inner
            .poll(max, &mut |r, b| got.push((r, b.to_vec())))?;
        let me = self.inner.rank();
        let n = got.len();
        for (r, b) in got {
            if !self.done && r != me && is_eager(&b) {
                self.seen += 1;
                if self.seen == VICTIM {
                    match self.fault {
                        Fault::Drop => {
                            self.done = true;
                            continue;
                        }
                        Fault::Duplicate => {
                            self.done = true;
                            f(r, &b);
                            f(r, &b);
                            continue;
                        }
                        Fault::Reorder => {
                            self.held = Some((r, b));
                            continue;
                        }
                    }
                }
            }
            let payload = is_eager(&b);
            f(r, &b);
            // the held message goes after the same peer's next payload message
            if payload && self.held.as_ref().is_some_and(|(hr, _)| *hr == r) {
                let (hr, hb) = self.held.take().expect("held");
                f(hr, &hb);
                self.done = true;
            }
        }
        Ok(n)
    }
    fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close()
    }
}

/// Sleeps before a trace write (`RSMPI_FAULT_TRACE_WRITE_MS`; the rank is the
/// launcher's `RSMPI_RANK`).
pub(crate) fn slow_trace_write() {
    let var = |k| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    if let Some(ms) = var("RSMPI_FAULT_TRACE_WRITE_MS") {
        let rank = var("RSMPI_RANK").unwrap_or(0);
        std::thread::sleep(std::time::Duration::from_millis(ms * (rank + 1)));
    }
}
