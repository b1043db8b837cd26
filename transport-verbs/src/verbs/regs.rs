//! The registration cache: one registration per (address, length, access), shared by
//! the requests that use the same buffer, and — for registrations only this rank
//! uses (the source of a zero-copy put, the destination of a read) — kept after the
//! last of them ends, so that a buffer used request after request is registered once,
//! for as long as its memory stays mapped.
//!
//! Registrations that peers use (exposures, with a remote key) are never kept idle:
//! an exposure is revoked when its request ends, so that a peer writing with the old
//! key is refused by the device instead of reaching memory that is no longer the
//! buffer it was given (`tests/verbs.rs::stale_key_is_refused`). Keeping them cheap
//! would take memory windows bound to a cached registration, revoked per request.
//!
//! It never hands out a stale registration: an idle registration is kept only for
//! memory watched by [`Unmaps`] (a userfaultfd reporting every unmap, `madvise`
//! removal and remap), and every lookup first drops the registrations of memory
//! unmapped since. A registration still in use when its memory goes is retired (no
//! longer handed out) and released by its last user. Where no monitor can be had
//! (unprivileged userfaultfd disabled) or the memory cannot be watched (a file
//! mapping), registrations end with their last user, as without a cache.
//! `tests/verbs.rs::registration_never_stale` frees a buffer and maps a new one at the
//! same address with other contents, and the new contents arrive.

use super::ffi::{Device, Mr};
use super::unmaps::Unmaps;
use std::collections::HashMap;
use std::ffi::c_int;

/// Key of a registration: address, length, access rights.
pub type RegKey = (usize, usize, c_int);

/// Idle registrations kept at most (the oldest-keyed go first beyond it).
const IDLE_MAX: usize = 1024;

struct Entry {
    key: RegKey,
    mr: Mr,
    users: u32,
    /// Its memory is watched: it may stay registered while idle.
    watched: bool,
    /// Its memory went while in use: released by the last user, never handed out.
    retired: bool,
}

pub struct Regs {
    /// Every live registration, by local key (unique while it lives; remote keys are
    /// not: a registration without remote access has none, 0 on rxe).
    by_lkey: HashMap<u32, Entry>,
    /// The local key of each live registration with remote access, by remote key.
    remote: HashMap<u32, u32>,
    /// The registration handed out for a key (not retired).
    current: HashMap<RegKey, u32>,
    idle: usize,
    unmaps: Option<Unmaps>,
    /// Why idle registrations are not kept, if they are not.
    pub no_cache: Option<String>,
    /// Registrations made since start.
    pub made: u64,
    /// Acquisitions served by an existing registration.
    pub hits: u64,
}

impl Regs {
    pub fn new() -> Regs {
        let (unmaps, no_cache) = match Unmaps::new() {
            Ok(u) => (Some(u), None),
            Err(e) => (None, Some(e)),
        };
        Regs {
            by_lkey: HashMap::new(),
            remote: HashMap::new(),
            current: HashMap::new(),
            idle: 0,
            unmaps,
            no_cache,
            made: 0,
            hits: 0,
        }
    }

    /// Drops the registrations of memory unmapped since the last call.
    fn forget_unmapped(&mut self) {
        let Some(u) = &self.unmaps else { return };
        let mut gone = Vec::new();
        u.drain(|s, e| gone.push((s, e)));
        for (s, e) in gone {
            let hit: Vec<u32> = self
                .by_lkey
                .iter()
                .filter(|(_, x)| {
                    let (a, l, _) = x.key;
                    (a as u64) < e && a as u64 + l as u64 > s
                })
                .map(|(&r, _)| r)
                .collect();
            for r in hit {
                self.retire(r);
            }
        }
    }

    fn retire(&mut self, lkey: u32) {
        let Some(x) = self.by_lkey.get_mut(&lkey) else {
            return;
        };
        if self.current.get(&x.key) == Some(&lkey) {
            self.current.remove(&x.key);
        }
        x.retired = true;
        if x.users == 0 {
            self.remove(lkey);
            self.idle -= 1;
        }
    }

    fn remove(&mut self, lkey: u32) {
        if let Some(x) = self.by_lkey.remove(&lkey) {
            if self.remote.get(&x.mr.rkey) == Some(&lkey) {
                self.remote.remove(&x.mr.rkey);
            }
            if self.current.get(&x.key) == Some(&lkey) {
                self.current.remove(&x.key);
            }
        }
    }

    /// A registration of exactly `addr .. addr + len` with `access`. Returns
    /// (lkey, rkey); release it by its lkey.
    pub fn acquire(
        &mut self,
        dev: &Device,
        addr: usize,
        len: usize,
        access: c_int,
    ) -> Result<(u32, u32), String> {
        self.forget_unmapped();
        let key = (addr, len, access);
        if let Some(&l) = self.current.get(&key) {
            let x = self.by_lkey.get_mut(&l).expect("current is live");
            if x.users == 0 {
                self.idle -= 1;
            }
            x.users += 1;
            self.hits += 1;
            return Ok((l, x.mr.rkey));
        }
        let mr = dev.register(addr, len, access)?;
        self.made += 1;
        let remote =
            access & (super::ffi::ACCESS_REMOTE_WRITE | super::ffi::ACCESS_REMOTE_READ) != 0;
        let watched = !remote && self.unmaps.as_ref().is_some_and(|u| u.watch(addr, len));
        let (l, r) = (mr.lkey, mr.rkey);
        self.current.insert(key, l);
        if remote {
            self.remote.insert(r, l);
        }
        self.by_lkey.insert(
            l,
            Entry {
                key,
                mr,
                users: 1,
                watched,
                retired: false,
            },
        );
        Ok((l, r))
    }

    /// Ends one use of the registration `lkey`. An idle local registration of watched
    /// memory stays (up to `IDLE_MAX`); any other is deregistered, revoking its keys.
    pub fn release(&mut self, lkey: u32) {
        let Some(x) = self.by_lkey.get_mut(&lkey) else {
            return;
        };
        x.users -= 1;
        if x.users > 0 {
            return;
        }
        if x.watched && !x.retired && self.idle < IDLE_MAX {
            self.idle += 1;
            return;
        }
        self.remove(lkey);
    }

    /// The local key of the live registration with remote key `rkey` (an exposure).
    pub fn exposure(&self, rkey: u32) -> Option<u32> {
        self.remote.get(&rkey).copied()
    }

    /// The (address, length) of the live exposure with remote key `rkey`.
    pub fn range(&self, rkey: u32) -> Option<(usize, usize)> {
        let l = self.remote.get(&rkey)?;
        self.by_lkey.get(l).map(|x| (x.key.0, x.key.1))
    }

    /// Registrations in use now (idle cached ones not counted).
    pub fn in_use(&self) -> usize {
        self.by_lkey.values().filter(|x| x.users > 0).count()
    }
}
