//! rsmpi: MPI-1 point-to-point messaging in native Rust, over shared memory (and RDMA
//! transports to come), whose sends become direct writes into the receiver's buffer
//! whenever the receive was posted first.
//!
//! ```no_run
//! use rsmpi::traits::*;
//!
//! let universe = rsmpi::initialize().unwrap();
//! let world = universe.world();
//! if world.rank() == 0 {
//!     world.process_at_rank(1).send_with_tag(&[1.0f64; 4][..], 7);
//! } else if world.rank() == 1 {
//!     let (v, status) = world.process_at_rank(0).receive_vec_with_tag::<f64>(7);
//!     assert_eq!((v, status.tag()), (vec![1.0; 4], 7));
//! }
//! ```
//!
//! Run it with `rsmpirun -n 2 target/debug/examples/prog`; run alone, a program is a
//! job of one rank. The API follows the shapes of the `mpi` crate (rsmpi), so
//! point-to-point code ports by changing the `use` lines. Calls that can fail abort the
//! job with a message naming the rank, the call and the cause (`MPI_ERRORS_ARE_FATAL`);
//! each has a `try_` form returning [`Result`] for code that handles errors itself.
//!
//! Protocol settings come from the environment (see [`config_from_env`]): `RSMPI_MATCHING=both|receiver`,
//! `RSMPI_PROTOCOL=eager|get|sync`, `RSMPI_EAGER_LIMIT=bytes`.
#![forbid(unsafe_code)]

mod datatype;
mod environment;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod progress;
pub mod request;
mod topology;

/// Re-exported so that derived `Equivalence` types can derive `Pod` / `Zeroable`.
pub use bytemuck;
pub use datatype::{Buffer, BufferMut, Datatype, Equivalence, MutView, View};
pub use environment::{
    config_from_env, initialize, initialize_thread, initialize_with, time, time_resolution,
    Threading, Universe, DEFAULT_EAGER_LIMIT, DEFAULT_INLINE_LIMIT,
};
pub use error::{Error, ErrorClass, Result};
pub use matching::{SendMode, Stats};
pub use rsmpi_derive::Equivalence;
pub use topology::{
    AnyProcess, CommunicatorRelation, Message, Process, Rank, SimpleCommunicator, Status, Tag,
    PROC_NULL, TAG_UB,
};

/// `use rsmpi::traits::*;` brings what `mpi::traits::*` does for point-to-point code.
pub mod traits {
    pub use crate::datatype::{Buffer, BufferMut, Equivalence};
    pub use rsmpi_derive::Equivalence;
}
