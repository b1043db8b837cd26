//! Errors, with the MPI error class each one belongs to.

/// MPI error classes (`MPI_ERR_*`) that rsmpi reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// `MPI_ERR_RANK`
    Rank,
    /// `MPI_ERR_TAG`
    Tag,
    /// `MPI_ERR_TRUNCATE`
    Truncate,
    /// `MPI_ERR_COUNT`
    Count,
    /// `MPI_ERR_BUFFER`
    Buffer,
    /// `MPI_ERR_REQUEST`
    Request,
    /// `MPI_ERR_COMM`
    Comm,
    /// `MPI_ERR_TYPE`
    Type,
    /// `MPI_ERR_OTHER` (e.g. a ready send without a posted receive)
    Other,
    /// `MPI_ERR_INTERN`: the transport or a peer failed.
    Intern,
}

/// Everything that can go wrong in a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("rank {rank} is out of range for a communicator of size {size}")]
    InvalidRank { rank: i32, size: i32 },
    #[error("tag {0} is invalid (valid tags are 0..={max})", max = crate::TAG_UB)]
    InvalidTag(i32),
    #[error("message of {len} bytes truncated to the receive buffer of {capacity} bytes")]
    Truncated { len: u64, capacity: u64 },
    #[error("message of {len} bytes is not a whole number of {size}-byte elements")]
    Count { len: u64, size: usize },
    #[error("ready-mode send found no matching receive posted at the destination")]
    NoReceivePosted,
    #[error("buffered send: {0}")]
    Buffer(String),
    #[error("communicator (context {0}) has been freed")]
    Comm(u32),
    #[error("datatype: {0}")]
    Type(String),
    #[error("invalid request: {0}")]
    Request(String),
    #[error("MPI is not initialized, or already finalized")]
    NotInitialized,
    #[error("MPI is already initialized in this process")]
    AlreadyInitialized,
    #[error("transport failure: {0}")]
    Transport(String),
    #[error("invalid setting: {0}")]
    Setting(String),
}

impl Error {
    /// The MPI error class of this error.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidRank { .. } => ErrorClass::Rank,
            Error::InvalidTag(_) => ErrorClass::Tag,
            Error::Truncated { .. } => ErrorClass::Truncate,
            Error::Count { .. } => ErrorClass::Count,
            Error::NoReceivePosted => ErrorClass::Other,
            Error::Buffer(_) => ErrorClass::Buffer,
            Error::Request(_) => ErrorClass::Request,
            Error::Comm(_) => ErrorClass::Comm,
            Error::Type(_) => ErrorClass::Type,
            Error::NotInitialized | Error::AlreadyInitialized | Error::Setting(_) => {
                ErrorClass::Other
            }
            Error::Transport(_) => ErrorClass::Intern,
        }
    }
}

impl From<matching::CallError> for Error {
    fn from(e: matching::CallError) -> Self {
        use matching::CallError as C;
        match e {
            C::InvalidRank { rank, size } => Error::InvalidRank {
                rank: rank as i32,
                size: size as i32,
            },
            C::InvalidTag(t) => Error::InvalidTag(t),
            C::UnknownRequest => Error::Request("unknown or completed request".into()),
            C::Buffer(b) => Error::Buffer(b.to_string()),
            C::NoBufferAttached => Error::Buffer("no buffer attached".into()),
            C::BufferAlreadyAttached => Error::Buffer("a buffer is already attached".into()),
        }
    }
}

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
