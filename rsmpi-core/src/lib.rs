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
//! job of one rank. The API is the `mpi` crate's (0.8) for everything MPI-1 covers —
//! the same modules, traits, types and method names — so a program written for it
//! builds against rsmpi with its dependency renamed:
//! `mpi = { package = "rsmpi", path = "…" }` (`docs/mpi-crate.md` lists what is not
//! covered). Calls that can fail abort the
//! job with a message naming the rank, the call and the cause (`MPI_ERRORS_ARE_FATAL`);
//! each has a `try_` form returning [`Result`] for code that handles errors itself.
//!
//! Protocol settings come from the environment (see [`config_from_env`]): `RSMPI_MATCHING=both|receiver`,
//! `RSMPI_PROTOCOL=eager|get|sync`, `RSMPI_EAGER_LIMIT=bytes`.
// `unsafe` appears only on a few functions that the `mpi` crate declares `unsafe`
// (ready sends, datatype views, unpack), so that code written for it compiles
// unchanged; none of them, nor anything else here, contains an `unsafe` block.
#![deny(unsafe_code)]

// derived `Equivalence` impls name the crate `::rsmpi`, inside it too
extern crate self as rsmpi;

/// Re-exported so that plain-data types can derive `Pod` / `Zeroable` for zero-copy
/// byte views of their own.
pub use bytemuck;

pub mod check;
pub mod collective;
pub mod datatype;
pub mod environment;
mod error;
#[cfg(feature = "fault-injection")]
mod fault;
mod link;
pub mod point_to_point;
mod progress;
pub mod request;
mod select;
mod tools;
pub mod topology;
pub mod trace;

pub use datatype::{Address, Buffer, BufferMut, Count, Equivalence, MutView, UserDatatype, View};
pub use environment::{
    config_from_env, initialize, initialize_thread, initialize_with, initialize_with_threading,
    time, time_resolution, try_initialize, Threading, Universe, DEFAULT_EAGER_LIMIT,
    DEFAULT_INLINE_LIMIT,
};
pub use error::{Error, ErrorClass, Result};
pub use matching::{SendMode, Stats};
pub use point_to_point::{Message, Status, Tag};
pub use rsmpi_derive::Equivalence;
pub use topology::{
    AnyProcess, CommunicatorRelation, Process, Rank, SimpleCommunicator, PROC_NULL, TAG_UB,
};

/// `use rsmpi::traits::*;` brings every trait whose methods the API is made of (as
/// `mpi::traits::*` does), and the `Equivalence` derive.
pub mod traits {
    pub use crate::collective::traits::*;
    pub use crate::datatype::traits::*;
    pub use crate::point_to_point::traits::*;
    pub use crate::topology::traits::*;
    pub use rsmpi_derive::Equivalence;
}
