//! The trace file: one per rank, `DIR/rank-<r>.rsmpitrace`, a 16-byte header
//! (`MAGIC`, rank, size) followed by fixed-size 40-byte records, little-endian.
//!
//! ```text
//! offset  0  ts    u64  nanoseconds since the rank's tracer started (its own clock)
//!         8  kind  u8   Kind
//!         9  op    u8   Op (Enter / Leave), else 0
//!        10  -     u16
//!        12  a     u32  peer world rank (Send / Recv), epoch (flush records)
//!        16  b     i32  tag
//!        20  c     u32  context id of the communicator
//!        24  d     u64  bytes; Z or a duration in ns; a clock offset (as i64)
//!        32  e     u64  per-channel sequence number; whether a flush wrote; an error
//! ```
//!
//! A call watched by the tracer alone is written as one [`Kind::Call`] record,
//! made when it ends and so placed after the records of what happened in it;
//! [`read_dir`] gives it back as the `Enter` (moved before those records, by time)
//! and `Leave` the rest of the tools and every reader work with.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// The first eight bytes of every trace file. Version 2 gave each collective its own
/// [`Op`], which renumbered the rest: version 1 files are refused, not misread.
/// Version 3 added [`Kind::Call`]; version 2 files are still read.
pub const MAGIC: &[u8; 8] = b"RSMPITR3";
/// Version 2's first eight bytes.
const MAGIC_V2: &[u8; 8] = b"RSMPITR2";
/// Bytes of the file header.
pub const HEADER: usize = 16;
/// Bytes of one record.
pub const RECORD: usize = 40;

/// What a record says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// An MPI call begins (`op`).
    Enter = 1,
    /// The MPI call `op` returns.
    Leave = 2,
    /// A message left for world rank `a`: tag `b`, context `c`, `d` bytes; `e` is its
    /// number among the messages to `a` on the channel (`c`, `b`), from 0.
    Send = 3,
    /// A receive from world rank `a` completed, with the fields of the matching `Send`.
    Recv = 4,
    /// Flush epoch `a` begins: `d` bytes of events were buffered.
    FlushBegin = 5,
    /// Flush epoch `a` ends after the equalised pause of `d` ns (every rank pauses for
    /// the same `d`); `e` = 1 if this flush wrote the buffer.
    FlushEnd = 6,
    /// Clock sample of epoch `a`: adding `d` (an i64) to this rank's timestamps gives
    /// rank 0's; `e` is the largest error of the sample in ns.
    Clock = 7,
    /// The hard cap was reached with no collective in sight: the buffer was written
    /// locally, taking `d` ns, and this rank's timing is unsynchronised from here until
    /// the next flush epoch.
    Unsync = 8,
    /// End of the trace: `d` = the largest number of event bytes ever held in memory,
    /// `e` = the number of records written.
    Finish = 9,
    /// The MPI call `op`, whole: entered at `ts`, left at `d` (version 3). Only in
    /// the file: [`read_dir`] turns it into an `Enter` and a `Leave`. With `e` =
    /// [`OPEN`] the call never returned: the rank was stopped in it at `d` (an abort,
    /// a signal), and only its `Enter` is given back.
    Call = 10,
}

/// `e` of a [`Kind::Call`] record whose call the rank was stopped in.
pub const OPEN: u64 = 1;

impl Kind {
    fn from_u8(k: u8) -> Option<Kind> {
        Some(match k {
            1 => Kind::Enter,
            2 => Kind::Leave,
            3 => Kind::Send,
            4 => Kind::Recv,
            5 => Kind::FlushBegin,
            6 => Kind::FlushEnd,
            7 => Kind::Clock,
            8 => Kind::Unsync,
            9 => Kind::Finish,
            10 => Kind::Call,
            _ => return None,
        })
    }
}

macro_rules! ops {
    ($($name:ident => $mpi:literal,)*) => {
        /// The MPI call an `Enter` / `Leave` record names.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Op {
            $($name,)*
        }

        impl Op {
            const ALL: &'static [Op] = &[$(Op::$name,)*];

            /// The MPI name of the call.
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$name => $mpi,)*
                }
            }

            /// The op with number `n`.
            pub fn from_u8(n: u8) -> Option<Op> {
                Op::ALL.get(n as usize).copied()
            }
        }
    };
}

ops! {
    Send => "MPI_Send",
    Bsend => "MPI_Bsend",
    Ssend => "MPI_Ssend",
    Rsend => "MPI_Rsend",
    Recv => "MPI_Recv",
    Isend => "MPI_Isend",
    Ibsend => "MPI_Ibsend",
    Issend => "MPI_Issend",
    Irsend => "MPI_Irsend",
    Irecv => "MPI_Irecv",
    Wait => "MPI_Wait",
    Test => "MPI_Test",
    Waitany => "MPI_Waitany",
    Testany => "MPI_Testany",
    Waitsome => "MPI_Waitsome",
    Testsome => "MPI_Testsome",
    Waitall => "MPI_Waitall",
    Testall => "MPI_Testall",
    Probe => "MPI_Probe",
    Iprobe => "MPI_Iprobe",
    Mprobe => "MPI_Mprobe",
    Improbe => "MPI_Improbe",
    Mrecv => "MPI_Mrecv",
    Sendrecv => "MPI_Sendrecv",
    SendrecvReplace => "MPI_Sendrecv_replace",
    Barrier => "MPI_Barrier",
    Bcast => "MPI_Bcast",
    Reduce => "MPI_Reduce",
    Allreduce => "MPI_Allreduce",
    Gather => "MPI_Gather",
    Gatherv => "MPI_Gatherv",
    Scatter => "MPI_Scatter",
    Scatterv => "MPI_Scatterv",
    Allgather => "MPI_Allgather",
    Allgatherv => "MPI_Allgatherv",
    Alltoall => "MPI_Alltoall",
    Alltoallv => "MPI_Alltoallv",
    ReduceScatter => "MPI_Reduce_scatter",
    ReduceScatterBlock => "MPI_Reduce_scatter_block",
    Scan => "MPI_Scan",
    Exscan => "MPI_Exscan",
    Ibarrier => "MPI_Ibarrier",
    Ibcast => "MPI_Ibcast",
    Ireduce => "MPI_Ireduce",
    Iallreduce => "MPI_Iallreduce",
    Igather => "MPI_Igather",
    Igatherv => "MPI_Igatherv",
    Iscatter => "MPI_Iscatter",
    Iscatterv => "MPI_Iscatterv",
    Iallgather => "MPI_Iallgather",
    Iallgatherv => "MPI_Iallgatherv",
    Ialltoall => "MPI_Ialltoall",
    Ialltoallv => "MPI_Ialltoallv",
    IreduceScatterBlock => "MPI_Ireduce_scatter_block",
    Iscan => "MPI_Iscan",
    Iexscan => "MPI_Iexscan",
    SyncPoint => "rsmpi::trace::sync_point",
}

impl Op {
    /// Whether the call only sends (in any mode, blocking or not).
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Op::Send
                | Op::Bsend
                | Op::Ssend
                | Op::Rsend
                | Op::Isend
                | Op::Ibsend
                | Op::Issend
                | Op::Irsend
        )
    }
}

/// One decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub ts: u64,
    pub kind: Kind,
    pub op: u8,
    pub a: u32,
    pub b: i32,
    pub c: u32,
    pub d: u64,
    pub e: u64,
}

impl Record {
    /// The record's 40 bytes.
    pub fn encode(&self) -> [u8; RECORD] {
        let mut r = [0u8; RECORD];
        r[0..8].copy_from_slice(&self.ts.to_le_bytes());
        r[8] = self.kind as u8;
        r[9] = self.op;
        r[12..16].copy_from_slice(&self.a.to_le_bytes());
        r[16..20].copy_from_slice(&self.b.to_le_bytes());
        r[20..24].copy_from_slice(&self.c.to_le_bytes());
        r[24..32].copy_from_slice(&self.d.to_le_bytes());
        r[32..40].copy_from_slice(&self.e.to_le_bytes());
        r
    }

    /// The record in `b` (40 bytes), if its kind is known.
    pub fn decode(b: &[u8]) -> Option<Record> {
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        Some(Record {
            ts: u64_at(0),
            kind: Kind::from_u8(b[8])?,
            op: b[9],
            a: u32_at(12),
            b: u32_at(16) as i32,
            c: u32_at(20),
            d: u64_at(24),
            e: u64_at(32),
        })
    }

    /// The call of an `Enter` / `Leave` record.
    pub fn call(&self) -> Option<Op> {
        Op::from_u8(self.op)
    }
}

/// The file of rank `r` in `dir`.
pub fn rank_file(dir: &Path, r: u32) -> PathBuf {
    dir.join(format!("rank-{r}.rsmpitrace"))
}

/// The header of a trace file.
pub fn header(rank: u32, size: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&rank.to_le_bytes());
    h[12..16].copy_from_slice(&size.to_le_bytes());
    h
}

/// One rank's trace, as read back: its records in order, each call's as an `Enter`
/// and a `Leave` (never a [`Kind::Call`]).
#[derive(Clone, Debug)]
pub struct RankTrace {
    pub rank: u32,
    pub size: u32,
    pub records: Vec<Record>,
    /// Records in the file (a call's one record is two in `records`).
    pub written: u64,
}

/// Reads every rank's file of a trace directory, calling `progress(bytes read, total)`
/// now and then (large traces take a while).
pub fn read_dir(dir: &Path, progress: &mut dyn FnMut(u64, u64)) -> io::Result<Vec<RankTrace>> {
    let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
    let first = rank_file(dir, 0);
    let size = read_header(&first)?.1;
    let total: u64 = (0..size)
        .map(|r| {
            let path = rank_file(dir, r);
            std::fs::metadata(&path)
                .map(|m| m.len())
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
        })
        .sum::<io::Result<u64>>()?;
    let mut done = 0u64;
    let mut out = Vec::with_capacity(size as usize);
    for r in 0..size {
        let path = rank_file(dir, r);
        let (rank, sz) = read_header(&path)?;
        if rank != r || sz != size {
            return Err(bad(format!(
                "{}: header says rank {rank} of {sz}",
                path.display()
            )));
        }
        let mut f = io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
        let mut h = [0u8; HEADER];
        f.read_exact(&mut h)?;
        done += HEADER as u64;
        let mut records = Vec::new();
        let mut written = 0u64;
        let mut buf = [0u8; RECORD];
        loop {
            match f.read_exact(&mut buf) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e),
            }
            let rec = Record::decode(&buf).ok_or_else(|| {
                bad(format!(
                    "{}: unknown record kind {}",
                    path.display(),
                    buf[8]
                ))
            })?;
            written += 1;
            push_expanded(&mut records, rec);
            done += RECORD as u64;
            if records.len().is_multiple_of(1 << 20) {
                progress(done, total);
            }
        }
        progress(done, total);
        out.push(RankTrace {
            rank,
            size,
            records,
            written,
        });
    }
    Ok(out)
}

/// Appends `rec` to the records read so far, a [`Kind::Call`] as the `Enter` and
/// `Leave` it stands for. The call's record was made when it ended, after the
/// records of what happened in it (its send, the receives it completed, the calls
/// within it): the `Enter` goes before the last records whose times are later than
/// the call's start (or equal, for its send), and the `Leave` at the end. Calls on
/// one rank nest in time, so this also places calls within calls.
fn push_expanded(records: &mut Vec<Record>, rec: Record) {
    if rec.kind != Kind::Call {
        records.push(rec);
        return;
    }
    let mut at = records.len();
    // a send made in the call shares its start time; a receive stamped with that
    // time was taken before the call began
    while at > 0 && {
        let r = &records[at - 1];
        r.ts > rec.ts || (r.ts == rec.ts && r.kind == Kind::Send)
    } {
        at -= 1;
    }
    let enter = Record {
        ts: rec.ts,
        kind: Kind::Enter,
        op: rec.op,
        a: 0,
        b: 0,
        c: 0,
        d: 0,
        e: 0,
    };
    records.insert(at, enter);
    if rec.e == OPEN {
        return;
    }
    records.push(Record {
        ts: rec.d,
        kind: Kind::Leave,
        ..enter
    });
}

fn read_header(path: &Path) -> io::Result<(u32, u32)> {
    let mut h = [0u8; HEADER];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut h))
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if &h[..8] != MAGIC && &h[..8] != MAGIC_V2 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not an rsmpi trace", path.display()),
        ));
    }
    let rank = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
    let size = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
    Ok((rank, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = Record {
            ts: 123_456_789,
            kind: Kind::Send,
            op: 0,
            a: 3,
            b: -7,
            c: 0x8000_0010,
            d: 1 << 40,
            e: 42,
        };
        assert_eq!(Record::decode(&r.encode()), Some(r));
        let mut bad = r.encode();
        bad[8] = 200;
        assert_eq!(Record::decode(&bad), None);
    }

    /// A call's one record comes back as its enter, before the records made in the
    /// call (and the calls within it), and its leave after them.
    /// A missing rank file (a rank that never started tracing) is named.
    #[test]
    fn a_missing_rank_file_is_named() {
        let dir = std::env::temp_dir().join(format!("rsmpi-trace-missing-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(rank_file(&dir, 0), header(0, 2)).unwrap();
        let e = read_dir(&dir, &mut |_, _| {}).expect_err("rank 1 is missing");
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("rank-1.rsmpitrace"), "{e}");
        std::fs::write(rank_file(&dir, 1), header(1, 2)).unwrap();
        assert_eq!(read_dir(&dir, &mut |_, _| {}).unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn calls_come_back_as_enter_and_leave() {
        let r = |ts, kind, op, d| Record {
            ts,
            kind,
            op,
            a: 0,
            b: 0,
            c: 0,
            d,
            e: 0,
        };
        let (send, wait) = (Op::Send as u8, Op::Wait as u8);
        let mut got = Vec::new();
        for rec in [
            r(5, Kind::Enter, Op::Barrier as u8, 0),
            r(7, Kind::Leave, Op::Barrier as u8, 0),
            r(10, Kind::Send, 0, 8),
            r(10, Kind::Call, send, 20),
            // taken by a call made with a check on (its own records), stamped with
            // the next call's start: before that call
            r(25, Kind::Enter, Op::Iprobe as u8, 0),
            r(26, Kind::Leave, Op::Iprobe as u8, 0),
            r(30, Kind::Recv, 0, 8),
            // a wait with a test inside, each completing a receive
            r(35, Kind::Recv, 0, 8),
            r(32, Kind::Call, Op::Test as u8, 35),
            r(40, Kind::Recv, 0, 8),
            r(30, Kind::Call, wait, 40),
        ] {
            push_expanded(&mut got, rec);
        }
        let seen: Vec<_> = got.iter().map(|r| (r.ts, r.kind)).collect();
        assert_eq!(
            seen,
            [
                (5, Kind::Enter),
                (7, Kind::Leave),
                (10, Kind::Enter),
                (10, Kind::Send),
                (20, Kind::Leave),
                (25, Kind::Enter),
                (26, Kind::Leave),
                (30, Kind::Recv),
                (30, Kind::Enter),
                (32, Kind::Enter),
                (35, Kind::Recv),
                (35, Kind::Leave),
                (40, Kind::Recv),
                (40, Kind::Leave),
            ]
        );
        assert_eq!(got[2].op, send);
        assert_eq!((got[8].op, got[13].op), (wait, wait));
        assert_eq!((got[9].op, got[11].op), (Op::Test as u8, Op::Test as u8));

        // a call the rank was stopped in comes back as its enter alone, before the
        // records made in it
        let mut got = Vec::new();
        for rec in [
            r(50, Kind::Send, 0, 8),
            Record {
                e: OPEN,
                ..r(50, Kind::Call, Op::Sendrecv as u8, 60)
            },
        ] {
            push_expanded(&mut got, rec);
        }
        let seen: Vec<_> = got.iter().map(|r| (r.ts, r.kind, r.op)).collect();
        assert_eq!(
            seen,
            [(50, Kind::Enter, Op::Sendrecv as u8), (50, Kind::Send, 0)]
        );
    }

    #[test]
    fn op_numbers_name_their_calls() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(Op::from_u8(i as u8), Some(*op));
        }
        assert_eq!(Op::from_u8(Op::Recv as u8).map(Op::name), Some("MPI_Recv"));
        assert_eq!(Op::from_u8(250), None);
    }
}
