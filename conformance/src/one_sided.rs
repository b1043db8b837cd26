//! One-sidedness: a send into a pre-posted (advertised) receive completes while the
//! receiving process is stopped (SIGSTOP) — the receiver's CPU does nothing — and the
//! data is in the buffer once it runs again. With receiver-side matching (nothing
//! advertised) the 8-byte send still completes (eager) and the 1 MiB one waits for
//! the receiver, as it must.
//!
//! On verbs both sends are RDMA WRITEs into the receive buffers (the 8-byte one inline
//! in the work request, the 1 MiB one zero copy from the send buffer); on shared memory
//! the 8-byte payload rides in its notice in the ring and the 1 MiB one is a
//! `process_vm_writev`, which needs no help from the stopped process either.

use crate::{launch, Case, Ctx};
use rsmpi::traits::*;
use rsmpi::{request, Universe};
use std::time::{Duration, Instant};

pub fn cases() -> Vec<Case> {
    vec![
        Case::host("one_sided_send_completes_while_receiver_stopped", stopped),
        Case::helper("helper_one_sided_stopped", helper_stopped),
        Case::host("transport_verbs_or_a_fallback_line", verbs_or_fallback),
        Case::helper("helper_report_transport", helper_report_transport),
    ]
}

/// `RSMPI_TRANSPORT=verbs` on 2 ranks of this node: with a verbs build and an RDMA
/// device every rank uses verbs; otherwise (no device, no libibverbs, or a build
/// without the `verbs` feature) the job runs on shared memory and rank 0 — only — says
/// why in one line.
fn verbs_or_fallback(ctx: &Ctx) -> Result<(), String> {
    let env = [("CONFORMANCE_TRANSPORT", "verbs".into())];
    let out = launch(
        ctx,
        "helper_report_transport",
        2,
        Duration::from_secs(60),
        &env,
        Duration::from_secs(90),
    );
    if out.code != Some(0) {
        return Err(format!("status {:?}: {}", out.code, out.stderr));
    }
    let device = std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some());
    let want = if device && cfg!(feature = "verbs") {
        "verbs"
    } else {
        "shm"
    };
    let used = out.stdout.matches(&format!("transport={want}\n")).count();
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("using shared memory"))
        .collect();
    let want_lines = usize::from(want == "shm");
    if used != 2 || lines.len() != want_lines {
        return Err(format!(
            "expected both ranks on {want} and {want_lines} fallback line(s); stdout:\n{}\nstderr:\n{}",
            out.stdout, out.stderr
        ));
    }
    if want == "shm" && !(lines[0].contains("rank 0") || lines[0].contains("verbs")) {
        return Err(format!("the fallback line does not say why: {}", lines[0]));
    }
    Ok(())
}

fn helper_report_transport(u: Universe) {
    println!("transport={}", u.transport());
    u.world().barrier();
}

const SMALL: usize = 8;
const BIG: usize = 1 << 20;

fn stopped(ctx: &Ctx) -> Result<(), String> {
    // advertise every receive, small ones too (the paper's dual matching)
    let env = [("RSMPI_ADVERTISE", "always".into())];
    let out = launch(
        ctx,
        "helper_one_sided_stopped",
        2,
        Duration::from_secs(60),
        &env,
        Duration::from_secs(90),
    );
    let ok = out.code == Some(0)
        && out
            .stdout
            .contains("sends completed while rank 1 was stopped: 8 B true")
        && out.stdout.contains("rank 1 found both payloads");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "status {:?}\nstdout:\n{}\nstderr:\n{}",
            out.code, out.stdout, out.stderr
        ))
    }
}

fn pid_state(pid: i32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // the state follows the parenthesised command name
    s.rsplit_once(") ")?.1.chars().next()
}

fn helper_stopped(u: Universe) {
    let w = u.world();
    let peer = w.process_at_rank(1 - w.rank());
    if w.rank() == 1 {
        let mut small = [0u8; SMALL];
        let mut big = vec![0u8; BIG];
        request::scope(|sc| {
            let a = peer.immediate_receive_into_with_tag(sc, &mut small[..], 1);
            let b = peer.immediate_receive_into_with_tag(sc, &mut big[..], 2);
            // the advertisements left when the receives were posted: rank 0 has them
            // before it reads this
            peer.send_with_tag(&(std::process::id() as i32), 9);
            a.wait();
            b.wait();
        });
        assert!(
            small.iter().all(|&b| b == 0x5a),
            "8-byte payload: {small:?}"
        );
        assert!(
            big.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8),
            "1 MiB payload corrupted"
        );
        println!("rank 1 found both payloads");
        return;
    }
    let (pid, _) = peer.receive_with_tag::<i32>(9);
    let target = rustix::process::Pid::from_raw(pid).expect("pid");
    rustix::process::kill_process(target, rustix::process::Signal::STOP).expect("SIGSTOP");
    let until = Instant::now() + Duration::from_secs(5);
    while pid_state(pid) != Some('T') {
        assert!(Instant::now() < until, "rank 1 did not stop");
        std::thread::sleep(Duration::from_millis(1));
    }
    // with receiver-side matching nothing is advertised: the small send still
    // completes (eager), the large one needs rank 1 to read it — the contrast
    let dual = std::env::var("RSMPI_MATCHING").as_deref() != Ok("receiver");
    let before = u.stats();
    let small = [0x5au8; SMALL];
    let big: Vec<u8> = (0..BIG).map(|i| (i % 251) as u8).collect();
    let started = Instant::now();
    let limit = Duration::from_secs(if dual { 10 } else { 1 });
    let (mut small_done, mut big_done) = (false, false);
    request::scope(|sc| {
        let a = peer.immediate_send_with_tag(sc, &small[..], 1);
        let b = peer.immediate_send_with_tag(sc, &big[..], 2);
        let (mut a, mut b) = (Some(a), Some(b));
        while started.elapsed() < limit && (a.is_some() || b.is_some()) {
            a = a.and_then(|r| r.test().err());
            b = b.and_then(|r| r.test().err());
        }
        (small_done, big_done) = (a.is_none(), b.is_none());
        // let rank 1 run again whatever happened, so that the job ends
        rustix::process::kill_process(target, rustix::process::Signal::CONT).expect("SIGCONT");
        if let Some(r) = a {
            r.wait();
        }
        if let Some(r) = b {
            r.wait();
        }
    });
    let after = u.stats();
    let direct = after.direct_writes - before.direct_writes;
    if dual {
        assert!(
            small_done && big_done,
            "the sends did not complete within 10 s while rank 1 was stopped \
             (8 B: {small_done}, 1 MiB: {big_done}; {after})"
        );
        assert_eq!(direct, 2, "both sends should be direct writes ({after})");
    } else {
        assert!(
            small_done,
            "the eager 8-byte send needs no receiver ({after})"
        );
        assert!(
            !big_done,
            "a 1 MiB send completed with receiver-side matching while the receiver was stopped"
        );
        assert_eq!(direct, 0, "nothing is advertised with receiver matching");
    }
    println!(
        "sends completed while rank 1 was stopped: 8 B {small_done}, 1 MiB {big_done} \
         (dual matching: {dual}; {after})"
    );
}
