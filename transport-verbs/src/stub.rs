//! The verbs transport, absent from this build (no `ibverbs` feature).

use crate::VerbsConfig;
use transport::{Caps, Exchange, Posted, Rank, RemoteBuf, Transport, TransportError};

/// The verbs transport, absent from this build: it cannot be constructed.
#[derive(Debug)]
pub struct VerbsTransport {
    never: std::convert::Infallible,
}

impl VerbsTransport {
    /// Always [`TransportError::Unsupported`] in this build.
    pub fn new(
        _ex: &mut dyn Exchange,
        _cfg: &VerbsConfig,
    ) -> Result<VerbsTransport, TransportError> {
        Err(TransportError::Unsupported(
            "verbs (build with the `verbs` feature)",
        ))
    }
    /// Unreachable (no value of this type exists).
    pub fn device_name(&self) -> String {
        match self.never {}
    }
    /// Unreachable (no value of this type exists).
    pub fn live_registrations(&self) -> usize {
        match self.never {}
    }
}

impl Transport for VerbsTransport {
    fn rank(&self) -> Rank {
        match self.never {}
    }
    fn size(&self) -> u32 {
        match self.never {}
    }
    fn caps(&self) -> Caps {
        match self.never {}
    }
    fn try_send(&mut self, _: Rank, _: &[u8], _: &[u8]) -> Result<(), TransportError> {
        match self.never {}
    }
    fn poll(&mut self, _: usize, _: &mut dyn FnMut(Rank, &[u8])) -> Result<usize, TransportError> {
        match self.never {}
    }
    fn expose(&mut self, _: usize, _: usize) -> Result<RemoteBuf, TransportError> {
        match self.never {}
    }
    fn put(
        &mut self,
        _: Rank,
        _: &[u8],
        _: RemoteBuf,
        _: u64,
        _: u64,
    ) -> Result<Posted, TransportError> {
        match self.never {}
    }
    fn get(
        &mut self,
        _: Rank,
        _: &mut [u8],
        _: RemoteBuf,
        _: u64,
        _: u64,
    ) -> Result<Posted, TransportError> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use transport::{Exchange, Rank, TransportError};

    /// An exchange that must never be used: `new` has to fail before touching it.
    struct NoExchange;

    impl Exchange for NoExchange {
        fn rank(&self) -> Rank {
            0
        }
        fn size(&self) -> u32 {
            1
        }
        fn job_id(&self) -> &str {
            "t"
        }
        fn publish(&mut self, _: &str, _: &[u8]) -> Result<(), TransportError> {
            panic!("publish without verbs")
        }
        fn fence(&mut self) -> Result<(), TransportError> {
            panic!("fence without verbs")
        }
        fn lookup(&mut self, _: Rank, _: &str) -> Result<Vec<u8>, TransportError> {
            panic!("lookup without verbs")
        }
    }

    #[test]
    fn absent_without_the_feature() {
        let e = super::VerbsTransport::new(&mut NoExchange, &crate::VerbsConfig::default())
            .unwrap_err();
        assert!(matches!(e, TransportError::Unsupported(_)), "{e}");
        assert!(e.to_string().contains("verbs"), "{e}");
    }
}
