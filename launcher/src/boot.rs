//! The rank side: [`Boot`], the client of the launcher's key-value service.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use transport::{Exchange, Rank, TransportError};

use crate::proto;
use crate::run::{ENV_JOB_ID, ENV_KVS, ENV_RANK, ENV_SECRET, ENV_SIZE, ENV_TRANSPORT};

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
    /// Started by `rsmpirun`: requests go over the Unix socket.
    Remote(UnixStream),
    /// Started alone: a job of one rank, served locally.
    Single(HashMap<String, Vec<u8>>),
    /// Started by a PMI-1 launcher (MPICH's `mpiexec`).
    Pmi(crate::pmi::Pmi),
}

fn exch(msg: impl Into<String>) -> TransportError {
    TransportError::Exchange(msg.into())
}

fn os(call: &'static str) -> impl FnOnce(std::io::Error) -> TransportError {
    move |source| TransportError::Os { call, source }
}

fn var(name: &str) -> Result<String, TransportError> {
    std::env::var(name).map_err(|_| exch(format!("{name} is not set or not UTF-8")))
}

impl Boot {
    /// Connects to the launcher described by the `RSMPI_*` environment variables.
    ///
    /// Returns `Ok(None)` when `RSMPI_RANK` is unset: the program was not started by
    /// `rsmpirun` and should run as a singleton ([`Boot::singleton`]).
    pub fn from_env() -> Result<Option<Boot>, TransportError> {
        if std::env::var_os(ENV_RANK).is_none() {
            return Boot::from_pmi();
        }
        let rank: Rank = var(ENV_RANK)?
            .parse()
            .map_err(|_| exch(format!("{ENV_RANK} is not a rank number")))?;
        let size: u32 = var(ENV_SIZE)?
            .parse()
            .map_err(|_| exch(format!("{ENV_SIZE} is not a number")))?;
        if rank >= size {
            return Err(exch(format!(
                "{ENV_RANK}={rank} is not below {ENV_SIZE}={size}"
            )));
        }
        // Die with the launcher: a rank must never outlive its job.
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
        let job_id = var(ENV_JOB_ID)?;
        if job_id.is_empty()
            || !job_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(exch(format!("{ENV_JOB_ID} must be made of [A-Za-z0-9_-]")));
        }
        let secret = proto::unhex(&var(ENV_SECRET)?)
            .filter(|s| s.len() == proto::SECRET_LEN)
            .ok_or_else(|| exch(format!("{ENV_SECRET} is not 32 hex digits")))?;
        let transport = std::env::var(ENV_TRANSPORT).unwrap_or_else(|_| "shm".into());
        let path =
            std::env::var_os(ENV_KVS).ok_or_else(|| exch(format!("{ENV_KVS} is not set")))?;
        let mut stream = UnixStream::connect(&path).map_err(os("connect(RSMPI_KVS)"))?;
        proto::write_frame(&mut stream, proto::HELLO, &[&secret, &rank.to_le_bytes()])
            .map_err(os("write(RSMPI_KVS)"))?;
        let reply = read_reply(&mut stream)?;
        match proto::take_u32(&reply) {
            Some((n, _)) if n == size => {}
            _ => {
                return Err(exch(
                    "the launcher answered the hello with a different job size",
                ))
            }
        }
        Ok(Some(Boot {
            rank,
            size,
            job_id,
            transport,
            kind: Kind::Remote(stream),
        }))
    }

    /// A rank started by a PMI-1 launcher (MPICH's Hydra `mpiexec`, which sets
    /// `PMI_FD` or `PMI_PORT`, `PMI_RANK` and `PMI_SIZE`); `Ok(None)` without one. The
    /// job id is the launcher's key-value space name, made file-name safe.
    fn from_pmi() -> Result<Option<Boot>, TransportError> {
        let Some(pmi) = crate::pmi::Pmi::from_env()? else {
            return Ok(None);
        };
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
        let job_id: String = pmi
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
        Ok(Some(Boot {
            rank: pmi.rank,
            size: pmi.size,
            job_id: format!("pmi-{job_id}"),
            transport: std::env::var(ENV_TRANSPORT).unwrap_or_else(|_| "shm".into()),
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
            transport: std::env::var(ENV_TRANSPORT).unwrap_or_else(|_| "shm".into()),
            kind: Kind::Single(HashMap::new()),
        }
    }

    /// [`Boot::from_env`], or a [`Boot::singleton`] when not started by `rsmpirun`.
    pub fn init() -> Result<Boot, TransportError> {
        Ok(Boot::from_env()?.unwrap_or_else(Boot::singleton))
    }

    /// Whether this is a singleton (not started by a launcher).
    pub fn is_singleton(&self) -> bool {
        matches!(self.kind, Kind::Single(_))
    }

    /// The transport the launcher asked for (`RSMPI_TRANSPORT`, default `shm`).
    pub fn transport(&self) -> &str {
        &self.transport
    }

    /// Ends the whole job: tells the launcher (which stops every other rank and exits
    /// with `code`), prints `msg` to stderr and exits this process with `code`.
    pub fn abort(&mut self, code: i32, msg: &str) -> ! {
        match &mut self.kind {
            Kind::Remote(s) => {
                // Wait (briefly) for the acknowledgement so that the launcher knows
                // about the abort before this process's exit status reaches it.
                let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
                if proto::write_frame(s, proto::ABORT, &[&code.to_le_bytes(), msg.as_bytes()])
                    .is_ok()
                {
                    let _ = proto::read_frame(s);
                }
            }
            Kind::Pmi(p) => {
                // the launcher kills the job as soon as it hears: say why first
                let _ = writeln!(
                    std::io::stderr(),
                    "rsmpi: rank {} aborted the job with code {code}: {msg}",
                    self.rank
                );
                p.abort(code, msg);
                std::thread::sleep(Duration::from_secs(5));
                std::process::exit(code)
            }
            Kind::Single(_) => {}
        }
        let _ = writeln!(
            std::io::stderr(),
            "rsmpi: rank {} aborted the job with code {code}: {msg}",
            self.rank
        );
        std::process::exit(code)
    }

    fn request(&mut self, kind: u8, parts: &[&[u8]]) -> Result<Vec<u8>, TransportError> {
        let Kind::Remote(s) = &mut self.kind else {
            unreachable!("singletons are served locally")
        };
        proto::write_frame(s, kind, parts).map_err(os("write(RSMPI_KVS)"))?;
        read_reply(s)
    }
}

/// The PMI key of `key` published by `rank` (keys are one space of the job).
fn pmi_key(rank: Rank, key: &str) -> Result<String, TransportError> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic() && b != b'=') {
        return Err(exch(format!("key {key:?} cannot travel through PMI")));
    }
    Ok(format!("r{rank}-{key}"))
}

fn read_reply(s: &mut UnixStream) -> Result<Vec<u8>, TransportError> {
    match proto::read_frame(s) {
        Ok((proto::OK, v)) => Ok(v),
        Ok((proto::ERR, m)) => Err(exch(String::from_utf8_lossy(&m))),
        Ok((k, _)) => Err(exch(format!("unexpected reply kind {k} from the launcher"))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(exch("the launcher closed the connection"))
        }
        Err(e) => Err(TransportError::Os {
            call: "read(RSMPI_KVS)",
            source: e,
        }),
    }
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
                return Ok(());
            }
            Kind::Pmi(p) => return p.put(&pmi_key(rank, key)?, value),
            Kind::Remote(_) => {}
        }
        let klen = u32::try_from(key.len()).map_err(|_| exch("key too long"))?;
        self.request(
            proto::PUBLISH,
            &[&klen.to_le_bytes(), key.as_bytes(), value],
        )?;
        Ok(())
    }

    fn fence(&mut self) -> Result<(), TransportError> {
        match &mut self.kind {
            Kind::Single(_) => return Ok(()),
            Kind::Pmi(p) => return p.barrier(),
            Kind::Remote(_) => {}
        }
        self.request(proto::FENCE, &[])?;
        Ok(())
    }

    fn lookup(&mut self, rank: Rank, key: &str) -> Result<Vec<u8>, TransportError> {
        if rank >= self.size {
            return Err(TransportError::NoSuchRank(rank));
        }
        match &mut self.kind {
            Kind::Single(kv) => {
                return kv
                    .get(key)
                    .cloned()
                    .ok_or_else(|| exch(format!("rank {rank} has not published key {key:?}")))
            }
            Kind::Pmi(p) => return p.get(&pmi_key(rank, key)?),
            Kind::Remote(_) => {}
        }
        self.request(proto::LOOKUP, &[&rank.to_le_bytes(), key.as_bytes()])
    }
}
