//! The schedules of `rsmpi-coll`, cached: a collective called again with the same
//! shape (the usual loop) reuses its schedule instead of building it anew. Varcount
//! collectives (whose shape includes every count) are built each time.

use crate::progress;
use rsmpi_coll as coll;
use std::rc::Rc;

/// Which collective a cached schedule is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Gather,
    Scatter,
    Allgather,
    Alltoall,
    ReduceScatterBlock,
    Scan,
    Exscan,
}

/// The shape of a call: kind, rank, size, root, bytes, element size, commutative.
pub(crate) type Key = (Kind, u32, u32, u32, usize, usize, bool);

/// Schedules kept at most (the cache is emptied when it is full).
const CACHED: usize = 64;

fn cached(key: Key, build: impl FnOnce() -> coll::Schedule) -> Rc<coll::Schedule> {
    let found = progress::with(|s| {
        // the last shape first: a loop of one collective compares, and hashes nothing
        if let Some((k, sched)) = &s.colls.last {
            if *k == key {
                return Some(sched.clone());
            }
        }
        let sched = s.colls.cache.get(&key).cloned()?;
        s.colls.last = Some((key, sched.clone()));
        Some(sched)
    });
    if let Some(s) = found {
        return s;
    }
    let sched = Rc::new(build());
    progress::with(|s| {
        if s.colls.cache.len() >= CACHED {
            s.colls.cache.clear();
        }
        s.colls.cache.insert(key, sched.clone());
        s.colls.last = Some((key, sched.clone()));
    });
    sched
}

pub(crate) fn barrier(rank: u32, size: u32) -> Rc<coll::Schedule> {
    cached((Kind::Barrier, rank, size, 0, 0, 0, true), || {
        coll::barrier(rank, size)
    })
}
pub(crate) fn bcast(
    rank: u32,
    size: u32,
    root: u32,
    len: usize,
    elem: usize,
) -> Rc<coll::Schedule> {
    cached((Kind::Bcast, rank, size, root, len, elem, true), || {
        coll::bcast(rank, size, root, len, elem)
    })
}
pub(crate) fn reduce(
    rank: u32,
    size: u32,
    root: u32,
    len: usize,
    elem: usize,
    com: bool,
) -> Rc<coll::Schedule> {
    cached((Kind::Reduce, rank, size, root, len, elem, com), || {
        coll::reduce(rank, size, root, len, elem, com)
    })
}
pub(crate) fn allreduce(
    rank: u32,
    size: u32,
    len: usize,
    elem: usize,
    com: bool,
) -> Rc<coll::Schedule> {
    cached((Kind::Allreduce, rank, size, 0, len, elem, com), || {
        coll::allreduce(rank, size, len, elem, com)
    })
}
pub(crate) fn gather(rank: u32, size: u32, root: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Gather, rank, size, root, len, 0, true), || {
        coll::gather(rank, size, root, len)
    })
}
pub(crate) fn scatter(rank: u32, size: u32, root: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Scatter, rank, size, root, len, 0, true), || {
        coll::scatter(rank, size, root, len)
    })
}
pub(crate) fn allgather(rank: u32, size: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Allgather, rank, size, 0, len, 0, true), || {
        coll::allgather(rank, size, len)
    })
}
pub(crate) fn alltoall(rank: u32, size: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Alltoall, rank, size, 0, len, 0, true), || {
        coll::alltoall(rank, size, len)
    })
}
pub(crate) fn reduce_scatter_block(
    rank: u32,
    size: u32,
    len: usize,
    elem: usize,
    com: bool,
) -> Rc<coll::Schedule> {
    cached(
        (Kind::ReduceScatterBlock, rank, size, 0, len, elem, com),
        || coll::reduce_scatter_block(rank, size, len, elem, com),
    )
}
pub(crate) fn scan(rank: u32, size: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Scan, rank, size, 0, len, 0, true), || {
        coll::scan(rank, size, len)
    })
}
pub(crate) fn exscan(rank: u32, size: u32, len: usize) -> Rc<coll::Schedule> {
    cached((Kind::Exscan, rank, size, 0, len, 0, true), || {
        coll::exscan(rank, size, len)
    })
}
pub(crate) fn gatherv(rank: u32, size: u32, root: u32, counts: &[usize]) -> Rc<coll::Schedule> {
    Rc::new(coll::gatherv(rank, size, root, counts))
}
pub(crate) fn scatterv(rank: u32, size: u32, root: u32, counts: &[usize]) -> Rc<coll::Schedule> {
    Rc::new(coll::scatterv(rank, size, root, counts))
}
pub(crate) fn allgatherv(rank: u32, size: u32, counts: &[usize]) -> Rc<coll::Schedule> {
    Rc::new(coll::allgatherv(rank, size, counts))
}
pub(crate) fn alltoallv(
    rank: u32,
    size: u32,
    send: &[usize],
    recv: &[usize],
) -> Rc<coll::Schedule> {
    Rc::new(coll::alltoallv(rank, size, send, recv))
}
pub(crate) fn reduce_scatter(
    rank: u32,
    size: u32,
    counts: &[usize],
    elem: usize,
    com: bool,
) -> Rc<coll::Schedule> {
    Rc::new(coll::reduce_scatter(rank, size, counts, elem, com))
}
