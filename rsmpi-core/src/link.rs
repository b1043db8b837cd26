//! The transport a rank's progress engine drives ([`Link`]): shared memory, whose
//! sends are called directly, or any transport through the [`Transport`] interface.
//!
//! ```ignore
//! // a job on one node: a send goes to `ShmTransport::send_now` by its type, inlined
//! // into the send path, with no call through the vtable
//! let mut link = Link::Shm(Box::new(shm));
//! link.try_send(peer, header, payload)?;
//! // everything else goes through the interface, as for any transport
//! link.poll_incoming(32, &mut |from, msg| { /* decode, match, deliver */ })?;
//! ```
//!
//! The interface stays the one place where the transports meet the protocol: the
//! verbs and libfabric transports, shared memory joined with one of them
//! ([`transport::route::Routed`]) and the fault injector's wrapper all run through
//! it, and so does every call but the send on shared memory alone. That send, made
//! once per message by every eager send and control message, is also called by the
//! transport's type, as MPICH's ch4 calls its shared-memory module directly and its
//! network module through a table: inlined, it saves a message ~30–40 instructions
//! (`docs/performance.md`, "Shared memory's send called directly"). The poll was
//! tried the same way, its callback inlined into the rings' loop, and saved nothing.

use std::ops::{Deref, DerefMut};

use transport::{Rank, Transport, TransportError};
use transport_shm::ShmTransport;

/// The transport of a rank: see the module's docs.
pub(crate) enum Link {
    /// Every peer on this node: shared memory, by its type.
    Shm(Box<ShmTransport>),
    /// Anything else, through the interface.
    Any(Box<dyn Transport>),
}

impl Link {
    /// [`Transport::try_send`], called directly on shared memory.
    #[inline(always)]
    pub(crate) fn try_send(
        &mut self,
        peer: Rank,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), TransportError> {
        match self {
            Link::Shm(t) => t.send_now(peer, header, payload),
            Link::Any(t) => t.try_send(peer, header, payload),
        }
    }

    /// The transport as the interface alone (to be wrapped or joined).
    pub(crate) fn into_dyn(self) -> Box<dyn Transport> {
        match self {
            Link::Shm(t) => t,
            Link::Any(t) => t,
        }
    }
}

impl Deref for Link {
    type Target = dyn Transport;

    fn deref(&self) -> &Self::Target {
        match self {
            Link::Shm(t) => &**t,
            Link::Any(t) => &**t,
        }
    }
}

impl DerefMut for Link {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Link::Shm(t) => &mut **t,
            Link::Any(t) => &mut **t,
        }
    }
}
