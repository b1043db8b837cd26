//! Binding ranks to CPUs (`rsmpirun --bind-to`).
//!
//! ```
//! use launcher::Bind;
//!
//! // four CPUs, two ranks: each rank its own half
//! let plan = Bind::Block.plan(2, &[0, 1, 2, 3]).unwrap();
//! assert_eq!(plan, [vec![0, 1], vec![2, 3]]);
//! // one CPU each, as `mpirun --bind-to core`
//! assert_eq!(Bind::Core.plan(2, &[0, 1, 2, 3]).unwrap(), [vec![0], vec![1]]);
//! // more ranks than CPUs: not bound, the scheduler balances them
//! assert_eq!(Bind::Block.plan(5, &[0, 1, 2, 3]), None);
//! ```
//!
//! A rank that the scheduler moves between CPUs leaves its cache behind, and on a
//! machine with more than one memory node its memory far away; two ranks it puts on
//! one CPU wait for each other. So rsmpirun binds each rank to CPUs of its own by
//! default, as `mpirun` does, out of the CPUs the launcher itself may use (those
//! of a `taskset`, a cgroup or a batch system's allocation). A rank inherits its CPUs
//! at its start: the launcher's thread binds itself to them for the moment of the
//! spawn and then returns to its own.

use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::LaunchError;

/// How a job's ranks are bound to CPUs ([`crate::Job::bind`], `rsmpirun --bind-to`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Bind {
    /// Not bound: each rank may run on every CPU the launcher may. The default of
    /// [`crate::Job::new`], for programs that start several jobs at once (bound,
    /// their ranks would share the first CPUs).
    #[default]
    None,
    /// Rank `r` to the `r`-th of the launcher's CPUs (`mpirun --bind-to core`).
    Core,
    /// The launcher's CPUs, in order, cut into one block per rank, the blocks' sizes
    /// differing by at most one: rank `r` runs on the `r`-th. A rank keeps room for
    /// threads of its own, and neighbouring CPUs (a socket's, where they are numbered
    /// so) for each rank. rsmpirun's default; with as many ranks as CPUs it is
    /// [`Bind::Core`].
    Block,
}

impl Bind {
    /// The binding a value of `--bind-to` names: `block`, `core` or `none`.
    pub fn parse(s: &str) -> Result<Bind, LaunchError> {
        match s {
            "block" => Ok(Bind::Block),
            "core" => Ok(Bind::Core),
            "none" => Ok(Bind::None),
            _ => Err(LaunchError::InvalidJob(format!(
                "--bind-to {s:?}: expected block, core or none"
            ))),
        }
    }

    /// The CPUs of each of `ranks` ranks, out of `cpus` (the CPUs the launcher may
    /// use, in order); `None` where the ranks are not bound: [`Bind::None`], or more
    /// ranks than CPUs (oversubscribed, where binding would fix an uneven share that
    /// the scheduler can balance).
    pub fn plan(self, ranks: u32, cpus: &[usize]) -> Option<Vec<Vec<usize>>> {
        let (n, k) = (ranks as usize, cpus.len());
        if self == Bind::None || n == 0 || n > k {
            return None;
        }
        Some(
            (0..n)
                .map(|r| match self {
                    Bind::Core => vec![cpus[r]],
                    _ => cpus[r * k / n..(r + 1) * k / n].to_vec(),
                })
                .collect(),
        )
    }
}

/// The CPUs the calling thread may run on, in order (its affinity mask as a list).
pub fn own_cpus() -> std::io::Result<Vec<usize>> {
    let set = sched_getaffinity(None)?;
    Ok((0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect())
}

/// Runs `spawn` with the calling thread bound to `cpus` (`None`: as it is), so that
/// the process it starts inherits them; the thread's own CPUs are back when it
/// returns.
pub(crate) fn spawning_on<T>(
    cpus: Option<&[usize]>,
    spawn: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let Some(cpus) = cpus else {
        return spawn();
    };
    let own = sched_getaffinity(None)?;
    let mut set = CpuSet::new();
    for &c in cpus {
        set.set(c);
    }
    sched_setaffinity(None, &set)?;
    let out = spawn();
    // back to the CPUs it had a moment ago (no failure is expected, and a spawned
    // rank must not be lost to one: it would run on, unsupervised)
    let _ = sched_setaffinity(None, &own);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_cpus_once_in_order() {
        let cpus: Vec<usize> = vec![2, 3, 5, 7, 8];
        for n in 1..=5u32 {
            let plan = Bind::Block.plan(n, &cpus).unwrap();
            assert_eq!(plan.len(), n as usize);
            assert_eq!(plan.concat(), cpus, "{n} ranks");
            let sizes: Vec<usize> = plan.iter().map(Vec::len).collect();
            let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
            assert!(*lo >= 1 && hi - lo <= 1, "{n} ranks: {sizes:?}");
        }
        assert_eq!(
            Bind::Block.plan(2, &cpus).unwrap(),
            [vec![2, 3], vec![5, 7, 8]]
        );
        assert_eq!(
            Bind::Core.plan(3, &cpus).unwrap(),
            [vec![2], vec![3], vec![5]]
        );
        assert_eq!(Bind::Block.plan(6, &cpus), None, "oversubscribed");
        assert_eq!(Bind::Core.plan(6, &cpus), None, "oversubscribed");
        assert_eq!(Bind::None.plan(2, &cpus), None);
    }

    #[test]
    fn bind_settings() {
        assert_eq!(Bind::parse("block").unwrap(), Bind::Block);
        assert_eq!(Bind::parse("core").unwrap(), Bind::Core);
        assert_eq!(Bind::parse("none").unwrap(), Bind::None);
        let e = Bind::parse("socket").unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid job: --bind-to \"socket\": expected block, core or none"
        );
    }

    #[test]
    fn a_spawn_on_cpus_leaves_the_thread_as_it_was() {
        let own = own_cpus().unwrap();
        let first = [own[0]];
        let seen = spawning_on(Some(&first), || Ok(own_cpus().unwrap())).unwrap();
        assert_eq!(seen, first);
        assert_eq!(own_cpus().unwrap(), own);
        let seen = spawning_on(None, || Ok(own_cpus().unwrap())).unwrap();
        assert_eq!(seen, own);
    }
}
