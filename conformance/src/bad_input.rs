//! Bad input: every erroneous call gets the documented [`rsmpi::Error`] and MPI error
//! class, and the job and the other messages are unaffected.

use crate::{pattern, Case};
use rsmpi::traits::*;
use rsmpi::{request, Error, ErrorClass, Universe, PROC_NULL};

pub fn cases() -> Vec<Case> {
    vec![
        Case::job("bad_rank_and_tag_are_reported", 2, bad_rank_and_tag),
        Case::job(
            "bad_count_and_small_buffer_are_reported",
            2,
            bad_count_and_buffer,
        ),
        Case::job(
            "bad_datatype_and_request_use_are_reported",
            2,
            bad_datatype_and_request,
        ),
        Case::job(
            "calls_after_finalize_and_double_init_fail",
            2,
            after_finalize,
        ),
    ]
}

/// A message sent before the bad calls and one after: both arrive intact.
fn bracket(u: &Universe, bad: impl FnOnce()) {
    let w = u.world();
    let p = w.process_at_rank(1 - w.rank());
    p.send_with_tag(&pattern(100, 1)[..], 77); // eager: completes without the receiver
    bad();
    let out = pattern(20_000, 2);
    let mut b = vec![0u8; 20_000];
    request::scope(|sc| {
        let r = p.immediate_receive_into_with_tag(sc, &mut b[..], 78);
        p.send_with_tag(&out[..], 78);
        r.wait();
    });
    let (a, _) = p.receive_vec_with_tag::<u8>(77);
    assert_eq!(
        (a, b),
        (pattern(100, 1), pattern(20_000, 2)),
        "messages around the bad calls"
    );
    assert!(
        w.any_process().immediate_probe().is_none(),
        "a failed call delivered something"
    );
}

/// `MPI_ERR_RANK` for ranks outside the communicator (but `PROC_NULL` is fine);
/// `MPI_ERR_TAG` for negative tags, on every kind of call.
fn bad_rank_and_tag(u: Universe) {
    let w = u.world();
    bracket(&u, || {
        for r in [2, 5, -1, -3, i32::MAX, i32::MIN] {
            let q = w.process_at_rank(r);
            let e = q.try_send_with_tag(&1u8, 0).unwrap_err();
            assert_eq!(e, Error::InvalidRank { rank: r, size: 2 });
            assert_eq!(e.class(), ErrorClass::Rank);
            assert!(
                e.to_string().contains(&r.to_string()),
                "message names the rank: {e}"
            );
            assert_eq!(
                q.try_ready_send_with_tag(&1u8, 0).unwrap_err().class(),
                ErrorClass::Rank
            );
            assert_eq!(
                q.try_buffered_send_with_tag(&1u8, 0).unwrap_err().class(),
                ErrorClass::Rank
            );
            let mut b = 0u8;
            assert_eq!(
                q.try_receive_into_with_tag(&mut b, 0).unwrap_err().class(),
                ErrorClass::Rank
            );
            assert_eq!(
                q.try_receive_into(&mut b).unwrap_err().class(),
                ErrorClass::Rank
            );
            assert_eq!(
                q.try_receive_vec::<u8>().unwrap_err().class(),
                ErrorClass::Rank
            );
        }
        assert!(w
            .process_at_rank(PROC_NULL)
            .try_send_with_tag(&1u8, 0)
            .is_ok());
        let p = w.process_at_rank(1 - w.rank());
        for t in [-1, -2, i32::MIN] {
            let e = p.try_send_with_tag(&1u8, t).unwrap_err();
            assert_eq!(
                (e.clone(), e.class()),
                (Error::InvalidTag(t), ErrorClass::Tag)
            );
            assert_eq!(
                p.try_ready_send_with_tag(&1u8, t).unwrap_err().class(),
                ErrorClass::Tag
            );
            assert_eq!(
                p.try_buffered_send_with_tag(&1u8, t).unwrap_err().class(),
                ErrorClass::Tag
            );
            let mut b = 0u8;
            assert_eq!(
                p.try_receive_into_with_tag(&mut b, t).unwrap_err().class(),
                ErrorClass::Tag
            );
            assert_eq!(
                w.any_process()
                    .try_receive_into_with_tag(&mut b, t)
                    .unwrap_err()
                    .class(),
                ErrorClass::Tag
            );
        }
        // the largest tag is valid
        p.send_with_tag(&5u8, rsmpi::TAG_UB);
        let (v, s) = p.receive_with_tag::<u8>(rsmpi::TAG_UB);
        assert_eq!((v, s.tag()), (5, rsmpi::TAG_UB));
    });
}

/// `MPI_ERR_COUNT` when the message is not a whole number of elements;
/// `MPI_ERR_TRUNCATE` when the buffer is too small — blocking, immediate and
/// `receive_vec`, with the message consumed and the next one intact.
fn bad_count_and_buffer(u: Universe) {
    let w = u.world();
    let p = w.process_at_rank(1 - w.rank());
    bracket(&u, || {
        if w.rank() == 0 {
            p.send_with_tag(&[1u8; 5][..], 1);
            p.send_with_tag(&[1u8; 6][..], 2);
            p.send_with_tag(&[1u8; 7][..], 3);
            p.send_with_tag(&[1u8; 64][..], 4);
            p.send_with_tag(&[1u8; 20_000][..], 5);
            w.barrier();
        } else {
            let mut words = [0u32; 4];
            let e = p.try_receive_into_with_tag(&mut words[..], 1).unwrap_err();
            assert_eq!(e, Error::Count { len: 5, size: 4 });
            assert_eq!(e.class(), ErrorClass::Count);
            let mut w2 = [0u32; 2];
            let e = p.try_receive_into_with_tag(&mut w2[..], 2).unwrap_err();
            assert_eq!(e, Error::Count { len: 6, size: 4 });
            let mut w8 = [0u64; 1];
            request::scope(|sc| {
                let r = p.immediate_receive_into_with_tag(sc, &mut w8[..], 3);
                assert_eq!(r.try_wait().unwrap_err().class(), ErrorClass::Count);
            });
            let mut small = [0u8; 10];
            let e = p.try_receive_into_with_tag(&mut small[..], 4).unwrap_err();
            assert_eq!(
                (e.clone(), e.class()),
                (
                    Error::Truncated {
                        len: 64,
                        capacity: 10
                    },
                    ErrorClass::Truncate
                )
            );
            let mut small = vec![0u8; 1000];
            request::scope(|sc| {
                let r = p.immediate_receive_into_with_tag(sc, &mut small[..], 5);
                assert_eq!(
                    r.try_wait().unwrap_err(),
                    Error::Truncated {
                        len: 20_000,
                        capacity: 1000
                    }
                );
            });
            w.barrier();
            // each failed receive consumed its message
            assert!(p.immediate_probe().is_none() || p.immediate_probe().unwrap().tag() == 77);
        }
    });
}

/// `MPI_ERR_TYPE` for a view that does not fit its buffer; `MPI_ERR_REQUEST` for a
/// persistent request started twice; `MPI_ERR_COMM` for a freed communicator;
/// `MPI_ERR_BUFFER` for buffered sends without (enough) buffer.
fn bad_datatype_and_request(u: Universe) {
    use rsmpi::{datatype::UserDatatype as Datatype, View};
    let w = u.world();
    let p = w.process_at_rank(1 - w.rank());
    bracket(&u, || {
        let f = f64::equivalent_datatype();
        let m = [0f64; 4];
        let col = Datatype::vector(4, 1, 5, &f);
        let e = p
            .try_send_with_tag(&View::new(&m[..], 1, &col), 1)
            .unwrap_err();
        assert_eq!(e.class(), ErrorClass::Type, "{e}");
        let mut b = [0u8; 4];
        request::scope(|sc| {
            let mut r = p.receive_init(sc, &mut b[..], Some(3));
            r.start().unwrap();
            assert_eq!(r.start().unwrap_err().class(), ErrorClass::Request);
            // the active receive is cancelled when the scope ends
        });
        let d = w.duplicate();
        let h = d;
        d.free().unwrap();
        let e = h.process_at_rank(0).try_send_with_tag(&1u8, 0).unwrap_err();
        assert_eq!(e.class(), ErrorClass::Comm);
        let mut x = 0u8;
        assert_eq!(
            h.any_process()
                .try_receive_into(&mut x)
                .unwrap_err()
                .class(),
            ErrorClass::Comm
        );
        assert!(h.free().is_err(), "double free");
        assert!(w.free().is_err(), "the world cannot be freed");
        assert_eq!(
            p.try_buffered_send_with_tag(&1u8, 0).unwrap_err().class(),
            ErrorClass::Buffer
        );
        u.buffer_attach(16).unwrap();
        assert_eq!(
            p.try_buffered_send_with_tag(&[0u8; 100][..], 0)
                .unwrap_err()
                .class(),
            ErrorClass::Buffer
        );
        assert_eq!(u.buffer_detach().unwrap(), 16);
        assert_eq!(
            u.buffer_detach().unwrap_err().class(),
            ErrorClass::Buffer,
            "detach without a buffer"
        );
    });
}

/// Calls on a handle after `MPI_Finalize` (rsmpi cannot be called before initialize:
/// every handle comes from the [`Universe`]) fail with `NotInitialized`, and the
/// panicking (non-`try_`) forms name the call and the cause; a second `initialize`
/// while initialized is `AlreadyInitialized`.
fn after_finalize(u: Universe) {
    let e = rsmpi::try_initialize()
        .err()
        .expect("second initialize must fail");
    assert_eq!(e, Error::AlreadyInitialized);
    let w = u.world();
    let p = w.process_at_rank(1 - w.rank());
    p.send_with_tag(&pattern(10, 1)[..], 1);
    let (v, _) = p.receive_vec_with_tag::<u8>(1);
    assert_eq!(v, pattern(10, 1));
    drop(u); // MPI_Finalize
    let e = p.try_send_with_tag(&1u8, 0).unwrap_err();
    assert_eq!(e, Error::NotInitialized);
    assert_eq!(e.class(), ErrorClass::Other);
    let mut b = 0u8;
    assert_eq!(
        p.try_receive_into(&mut b).unwrap_err(),
        Error::NotInitialized
    );
    assert_eq!(
        w.any_process().try_receive_into(&mut b).unwrap_err(),
        Error::NotInitialized
    );
    let r = std::panic::catch_unwind(|| p.send_with_tag(&1u8, 0));
    let msg = r
        .err()
        .and_then(|m| m.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    assert!(
        msg.contains("send") && msg.contains("not initialized"),
        "panic message: {msg:?}"
    );
    assert!(
        rsmpi::time() >= 0.0,
        "MPI_Wtime works outside initialize/finalize"
    );
}
