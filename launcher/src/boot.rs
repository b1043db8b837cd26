//! The rank side: [`Boot`], the start-up exchange of a rank, over PMI (rsmpirun,
//! MPICH's Hydra, Slurm) or alone.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use transport::{Exchange, Rank, TransportError};

use crate::proto;
use crate::run::{ENV_JOB_ID, ENV_RANK, ENV_TRANSPORT};

/// A rank's connection to its launcher (or a stand-alone singleton), implementing
/// [`transport::Exchange`].
#[derive(Debug)]
pub struct Boot {
    rank: Rank,
    size: u32,
    job_id: String,
    transport: String,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// Started alone: a job of one rank, served locally.
    Single(HashMap<String, Vec<u8>>),
    /// Started by a PMI launcher: rsmpirun or MPICH's Hydra (PMI-1), Slurm (PMI-2).
    Pmi(crate::pmi::Pmi),
}

fn exch(msg: impl Into<String>) -> TransportError {
    TransportError::Exchange(msg.into())
}

/// Whether `id` may name files (`/dev/shm/rsmpi-{id}-…`).
fn file_safe(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Boot {
    /// Connects to the PMI launcher described by the environment (`PMI_FD` or
    /// `PMI_PORT`: rsmpirun, Hydra's `mpiexec`, Slurm's `srun --mpi=pmi2`).
    ///
    /// Returns `Ok(None)` when there is none: the program was started alone and should
    /// run as a singleton ([`Boot::singleton`]). It is an error when `RSMPI_RANK` says
    /// that rsmpirun started this process but there is no PMI connection to it.
    pub fn from_env() -> Result<Option<Boot>, TransportError> {
        match Boot::from_pmi()? {
            Some(b) => Ok(Some(b)),
            None if std::env::var_os(ENV_RANK).is_some() => Err(exch(format!(
                "{ENV_RANK} is set but neither PMI_FD nor PMI_PORT: not started by this \
                 version of rsmpirun"
            ))),
            None => Ok(None),
        }
    }

    /// A rank started by a PMI launcher; `Ok(None)` without one. The job id is
    /// rsmpirun's (`RSMPI_JOB_ID`, which names its key-value space), else the
    /// launcher's key-value space name made file-name safe, prefixed `pmi-`.
    fn from_pmi() -> Result<Option<Boot>, TransportError> {
        let Some(mut pmi) = crate::pmi::Pmi::from_env()? else {
            return Ok(None);
        };
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
        let job_id = match std::env::var(ENV_JOB_ID) {
            // rsmpirun names the key-value space after the job, so that its clean-up of
            // `/dev/shm/rsmpi-{job_id}-*` finds the segments of the ranks (a stale
            // RSMPI_JOB_ID inherited from an outer job does not match another
            // launcher's kvsname)
            Ok(id) if id == pmi.kvsname && file_safe(&id) => {
                pmi.rsmpirun = true;
                id
            }
            _ => {
                let safe: String = pmi
                    .kvsname
                    .chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || c == '-' {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect();
                format!("pmi-{safe}")
            }
        };
        Ok(Some(Boot {
            rank: pmi.rank,
            size: pmi.size,
            job_id,
            transport: std::env::var(ENV_TRANSPORT).unwrap_or_else(|_| "auto".into()),
            kind: Kind::Pmi(pmi),
        }))
    }

    /// A job of one rank that is not attached to any launcher: `publish` stores
    /// locally, `fence` returns at once, and the job id is `single-{pid}-{random}`.
    ///
    /// No launcher removes shared-memory segments for a singleton; transports that
    /// create them should unlink them themselves.
    pub fn singleton() -> Boot {
        let tag = proto::random_bytes::<4>()
            .map(|b| proto::hex(&b))
            .unwrap_or_else(|_| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                format!("{:08x}", t.subsec_nanos())
            });
        Boot {
            rank: 0,
            size: 1,
            job_id: format!("single-{}-{tag}", std::process::id()),
            transport: std::env::var(ENV_TRANSPORT).unwrap_or_else(|_| "auto".into()),
            kind: Kind::Single(HashMap::new()),
        }
    }

    /// [`Boot::from_env`], or a [`Boot::singleton`] when not started by a launcher.
    pub fn init() -> Result<Boot, TransportError> {
        Ok(Boot::from_env()?.unwrap_or_else(Boot::singleton))
    }

    /// Whether this is a singleton (not started by a launcher).
    pub fn is_singleton(&self) -> bool {
        matches!(self.kind, Kind::Single(_))
    }

    /// The transport the launcher asked for (`RSMPI_TRANSPORT`, default `auto`).
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// Ends the whole job: prints `msg` to stderr, tells the launcher (which stops
    /// every other rank and exits with `code`) and exits this process with `code`.
    pub fn abort(&mut self, code: i32, msg: &str) -> ! {
        // the launcher may kill the job as soon as it hears: say why first
        let _ = writeln!(
            std::io::stderr(),
            "rsmpi: rank {} aborted the job with code {code}: {msg}",
            self.rank
        );
        if let Kind::Pmi(p) = &mut self.kind {
            p.abort(code, msg);
            // PMI's abort has no answer: give the launcher time to act on it, so that
            // the job ends with this code rather than this rank's exit
            std::thread::sleep(Duration::from_secs(5));
        }
        std::process::exit(code)
    }
}

/// The PMI key of `key` published by `rank` (keys are one space of the job).
fn pmi_key(rank: Rank, key: &str) -> Result<String, TransportError> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic() && b != b'=') {
        return Err(exch(format!("key {key:?} cannot travel through PMI")));
    }
    Ok(format!("r{rank}-{key}"))
}

impl Exchange for Boot {
    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn job_id(&self) -> &str {
        &self.job_id
    }

    fn publish(&mut self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        let rank = self.rank;
        match &mut self.kind {
            Kind::Single(kv) => {
                kv.insert(key.to_owned(), value.to_vec());
                Ok(())
            }
            Kind::Pmi(p) => p.put(&pmi_key(rank, key)?, value),
        }
    }

    fn fence(&mut self) -> Result<(), TransportError> {
        match &mut self.kind {
            Kind::Single(_) => Ok(()),
            Kind::Pmi(p) => p.barrier(),
        }
    }

    fn lookup(&mut self, rank: Rank, key: &str) -> Result<Vec<u8>, TransportError> {
        if rank >= self.size {
            return Err(TransportError::NoSuchRank(rank));
        }
        match &mut self.kind {
            Kind::Single(kv) => kv
                .get(key)
                .cloned()
                .ok_or_else(|| exch(format!("rank {rank} has not published key {key:?}"))),
            Kind::Pmi(p) => p.get(&pmi_key(rank, key)?),
        }
    }
}
