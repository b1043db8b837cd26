//! `errors CASE [ok]`: programs for the error checks' tests (`tests/errors.rs`), run
//! under `RSMPI_CHECK=errors` on 2 ranks. Each case makes one error; with `ok` it is
//! its clean twin, which makes none. A line that makes an error ends with a marker
//! comment (`// @case`) that the test looks for: reports must name that line.
//!
//! * `leak-static`: rank 0 starts a send on a `'static` buffer and never completes
//!   the request (the message is received): a request leak, found at finalize.
//! * `leak-scope`: rank 1 starts a receive and lets its scope end without completing
//!   it (the scope cancels it): a request leak, found at the scope's end.
//! * `unmatched-send`: rank 0 sends two messages, rank 1 receives one.
//! * `unmatched-receive`: rank 1 posts a receive no message ever matches (on a
//!   `'static` buffer, so no scope cancels it).
//! * `type-mismatch`: rank 0 sends 4 `f64`, rank 1 receives 4 `i64` (twin: 4 `f64`).
//! * `order`: rank 0 sends a rendezvous message of `i32` and then 1 `f64` on one
//!   channel; rank 1 receives the second first, into 1 `i64` (twin: `f64`). The
//!   report pairs it with the `f64` send, not the first.
//! * `probe-order`: as `order`, but rank 1 takes the first message with a matched
//!   probe and receives it after the second.
//! * `cancel`: rank 0 cancels a synchronous send of 1 `f64`, then sends 1 `i32` on
//!   the same channel; rank 1 receives it into 1 `f32` (twin: `i32`). The report
//!   pairs it with the `i32` send, and the cancelled message is not unmatched.
//! * `type-struct`: rank 0 sends 2 × `(i32, f64)`; rank 1 receives them with an
//!   immediate receive into 1 × `(i32, f64, f64, i32)` (twin: the legal
//!   `(i32, f64, i32, f64)`, MPI's example of matching signatures).
//! * `bad-rank`, `truncation`, `bsend-overflow`: a send to a rank out of range, a
//!   message larger than its receive buffer, a buffered send larger than the
//!   attached buffer. Each ends the job with an error.
//! * `coll-type`: rank 0 broadcasts 4 `f64`, rank 1's buffer holds 4 `i64` (twin:
//!   4 `f64`).
//! * `coll-struct`: rank 0 broadcasts 2 × `(i32, f64)`, rank 1's buffer is 1 ×
//!   `(i32, f64, f64, i32)` (twin: the legal `(i32, f64, i32, f64)`).
//! * `coll-reduce`: a sum of 2 `f64` on rank 0 and 2 `i64` on rank 1 (twin: `f64`).
//! * `coll-amount`: rank 0 gathers 2 `f64` from each rank, rank 1 sends 3 (twin: 2).
//!   Ends the job.
//! * `coll-call`, `coll-root`: rank 0 broadcasts from rank 0; rank 1 reduces to rank
//!   0, or broadcasts from rank 1 (twin: the same broadcast). Each ends the job.
//! * `icoll-type`: an immediate all-gather of 2 `u32` per rank; rank 1's buffer holds
//!   `f32` (twin: `u32`). Reported when rank 1's request completes.
//! * `icoll-mixed`: rank 0 broadcasts with the blocking call, rank 1 with the
//!   immediate one, which never match (twin: both immediate). Ends the job.
#![forbid(unsafe_code)]

use rsmpi::request::StaticScope;
use rsmpi::traits::*;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().expect("CASE");
    let ok = args.next().as_deref() == Some("ok");
    let mut universe = rsmpi::initialize().expect("init");
    let w = universe.world();
    let me = w.rank();
    let peer = w.process_at_rank(1 - me);
    match case.as_str() {
        "leak-static" => {
            if me == 0 {
                let buf: &'static [u64] = Box::leak(vec![7u64; 4].into_boxed_slice());
                let r = peer.immediate_send(StaticScope, buf); // @leak-static
                if ok {
                    r.wait();
                }
            } else {
                let (v, _) = peer.receive_vec::<u64>();
                assert_eq!(v, [7; 4]);
            }
        }
        "leak-scope" => {
            if me == 1 {
                let mut x = 0u64;
                rsmpi::request::scope(|sc| {
                    let r = peer.immediate_receive_into(sc, &mut x); // @leak-scope
                    if ok {
                        assert_eq!(r.wait().source_rank(), 0);
                    }
                });
            } else if ok {
                peer.send(&5u64);
            }
        }
        "unmatched-send" => {
            if me == 0 {
                peer.send_with_tag(&1u64, 7);
                peer.send_with_tag(&2u64, 7); // @unmatched-send
            } else {
                let (a, _) = peer.receive_with_tag::<u64>(7);
                assert_eq!(a, 1);
                if ok {
                    let (b, _) = peer.receive_with_tag::<u64>(7);
                    assert_eq!(b, 2);
                }
            }
        }
        "unmatched-receive" => {
            if me == 1 {
                let buf: &'static mut [u64] = Box::leak(vec![0u64; 2].into_boxed_slice());
                let r = peer.immediate_receive_into_with_tag(StaticScope, buf, 9); // @unmatched-receive
                if ok {
                    r.wait();
                }
            } else if ok {
                peer.send_with_tag(&[1u64, 2][..], 9);
            }
        }
        "type-mismatch" => {
            if me == 0 {
                peer.send(&[1.5f64, 2.5, 3.5, 4.5][..]);
            } else if ok {
                let mut b = [0f64; 4];
                peer.receive_into(&mut b[..]);
                assert_eq!(b, [1.5, 2.5, 3.5, 4.5]);
            } else {
                let mut b = [0i64; 4];
                peer.receive_into(&mut b[..]); // @type-mismatch
            }
        }
        "order" => {
            // a rendezvous message, then an eager one, on one channel; the eager one's
            // receive completes first
            if me == 0 {
                let big = vec![7i32; 1 << 18];
                rsmpi::request::scope(|sc| {
                    let a = peer.immediate_send(sc, &big[..]);
                    let b = peer.immediate_send(sc, &[1.5f64][..]); // @order-send
                    a.wait();
                    b.wait();
                });
            } else {
                // both are in the unexpected queue when the receives are posted
                std::thread::sleep(std::time::Duration::from_millis(50));
                let mut big = vec![0i32; 1 << 18];
                let (mut right, mut wrong) = ([0f64; 1], [0i64; 1]);
                rsmpi::request::scope(|sc| {
                    let a = peer.immediate_receive_into(sc, &mut big[..]);
                    if ok {
                        peer.immediate_receive_into(sc, &mut right[..]).wait();
                    } else {
                        peer.immediate_receive_into(sc, &mut wrong[..]).wait(); // @order
                    }
                    a.wait();
                });
                assert!(big.iter().all(|&x| x == 7));
                if ok {
                    assert_eq!(right, [1.5]);
                }
            }
        }
        "probe-order" => {
            // as `order`, but the first message is taken by a matched probe and
            // received after the second
            if me == 0 {
                let big = vec![7i32; 1 << 18];
                rsmpi::request::scope(|sc| {
                    let a = peer.immediate_send(sc, &big[..]);
                    let b = peer.immediate_send(sc, &[1.5f64][..]); // @probe-order-send
                    a.wait();
                    b.wait();
                });
            } else {
                std::thread::sleep(std::time::Duration::from_millis(50));
                let (msg, st) = peer.matched_probe();
                assert_eq!(st.count(i32::equivalent_datatype()), 1 << 18);
                if ok {
                    let mut right = [0f64; 1];
                    peer.receive_into(&mut right[..]);
                    assert_eq!(right, [1.5]);
                } else {
                    let mut wrong = [0i64; 1];
                    peer.receive_into(&mut wrong[..]); // @probe-order
                }
                let mut big = vec![0i32; 1 << 18];
                msg.matched_receive_into(&mut big[..]);
                assert!(big.iter().all(|&x| x == 7));
            }
        }
        "cancel" => {
            // a synchronous send cancelled, then another message on its channel
            if me == 0 {
                rsmpi::request::scope(|sc| {
                    let a = peer.immediate_synchronous_send(sc, &[2.5f64][..]);
                    a.cancel();
                    assert!(a.wait().is_cancelled(), "the cancel lost");
                });
                w.barrier();
                peer.send(&[7i32][..]); // @cancel-send
            } else {
                // the barrier's progress takes the cancel
                w.barrier();
                if ok {
                    let mut b = [0i32; 1];
                    peer.receive_into(&mut b[..]);
                    assert_eq!(b, [7]);
                } else {
                    let mut b = [0f32; 1];
                    peer.receive_into(&mut b[..]); // @cancel
                }
            }
        }
        "type-struct" => {
            if me == 0 {
                peer.send(&[(1i32, 2.5f64), (3, 4.5)][..]);
            } else if ok {
                let mut b = [(0i32, 0f64, 0i32, 0f64)];
                rsmpi::request::scope(|sc| {
                    peer.immediate_receive_into(sc, &mut b[..]).wait();
                });
                assert_eq!(b, [(1, 2.5, 3, 4.5)]);
            } else {
                let mut b = [(0i32, 0f64, 0f64, 0i32)];
                rsmpi::request::scope(|sc| {
                    peer.immediate_receive_into(sc, &mut b[..]).wait(); // @type-struct
                });
            }
        }
        "bad-rank" => {
            if me == 0 {
                let to = if ok { 1 } else { w.size() };
                w.process_at_rank(to).send(&1u64); // @bad-rank
            } else {
                peer.receive::<u64>();
            }
        }
        "truncation" => {
            if me == 0 {
                peer.send(&[1u64; 8][..]);
            } else {
                let mut b = vec![0u64; if ok { 8 } else { 4 }];
                peer.receive_into(&mut b[..]); // @truncation
            }
        }
        "bsend-overflow" => {
            // room for one 1 KiB message and its bookkeeping
            universe.set_buffer_size(2048);
            if me == 0 {
                let n = if ok { 128 } else { 1024 };
                peer.buffered_send(&vec![3u64; n][..]); // @bsend-overflow
            } else {
                let (v, _) = peer.receive_vec::<u64>();
                assert!(v.iter().all(|x| *x == 3));
            }
            universe.detach_buffer();
        }
        "coll-type" => {
            let root = w.process_at_rank(0);
            if me == 0 || ok {
                let mut b = [1.5f64, 2.5, 3.5, 4.5];
                if me == 1 {
                    b = [0.0; 4];
                }
                root.broadcast_into(&mut b[..]);
                assert_eq!(b, [1.5, 2.5, 3.5, 4.5]);
            } else {
                let mut b = [0i64; 4];
                root.broadcast_into(&mut b[..]); // @coll-type
            }
        }
        "coll-struct" => {
            let root = w.process_at_rank(0);
            if me == 0 {
                let mut b = [(1i32, 2.5f64), (3, 4.5)];
                root.broadcast_into(&mut b[..]);
            } else if ok {
                let mut b = [(0i32, 0f64, 0i32, 0f64)];
                root.broadcast_into(&mut b[..]);
                assert_eq!(b, [(1, 2.5, 3, 4.5)]);
            } else {
                let mut b = [(0i32, 0f64, 0f64, 0i32)];
                root.broadcast_into(&mut b[..]); // @coll-struct
            }
        }
        "coll-reduce" => {
            let sum = rsmpi::collective::SystemOperation::sum();
            if me == 0 || ok {
                let mut r = [0f64; 2];
                w.all_reduce_into(&[1.0f64, 2.0][..], &mut r[..], sum);
                if ok {
                    assert_eq!(r, [2.0, 4.0]);
                }
            } else {
                let mut r = [0i64; 2];
                w.all_reduce_into(&[1i64, 2][..], &mut r[..], sum); // @coll-reduce
            }
        }
        "coll-amount" => {
            let root = w.process_at_rank(0);
            if me == 0 {
                let mut all = [0f64; 4];
                root.gather_into_root(&[1.0f64, 2.0][..], &mut all[..]); // @coll-amount
                assert_eq!(all, [1.0, 2.0, 3.0, 4.0]);
            } else {
                let mine = [3.0f64, 4.0, 5.0];
                root.gather_into(&mine[..if ok { 2 } else { 3 }]);
            }
        }
        "coll-call" => {
            let root = w.process_at_rank(0);
            let mut b = [me as u64 + 1; 2];
            let sum = rsmpi::collective::SystemOperation::sum();
            if me == 0 || ok {
                root.broadcast_into(&mut b[..]);
                assert_eq!(b, [1, 1]);
            } else {
                root.reduce_into(&b[..], sum); // @coll-call
            }
        }
        "coll-root" => {
            let r = if me == 0 || ok { 0 } else { 1 };
            let mut b = [me as u64 + 1; 2];
            w.process_at_rank(r).broadcast_into(&mut b[..]); // @coll-root
            assert_eq!(b, [1, 1]);
        }
        "icoll-type" => {
            let mine = [me as u32; 2];
            if me == 0 || ok {
                let mut all = [9u32; 4];
                rsmpi::request::scope(|sc| {
                    w.immediate_all_gather_into(sc, &mine[..], &mut all[..])
                        .wait();
                });
                assert_eq!(all, [0, 0, 1, 1]);
            } else {
                let mut all = [0f32; 4];
                rsmpi::request::scope(|sc| {
                    let r = w.immediate_all_gather_into(sc, &mine[..], &mut all[..]); // @icoll-type
                    r.wait();
                });
            }
        }
        "icoll-mixed" => {
            let root = w.process_at_rank(0);
            let mut b = [7u64; 2];
            if me == 0 && !ok {
                root.broadcast_into(&mut b[..]);
            } else {
                let b = &mut b;
                rsmpi::request::scope(|sc| {
                    let r = root.immediate_broadcast_into(sc, &mut b[..]); // @icoll-mixed
                    r.wait();
                });
            }
            assert_eq!(b, [7, 7]);
        }
        c => panic!("unknown case {c}"),
    }
    w.barrier();
}
