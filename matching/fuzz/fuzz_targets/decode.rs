//! Decodes arbitrary bytes as a control message; whenever they decode, feeds them to
//! the engine of rank 1 of a 2-rank job (fresh, and with receives and sends pending)
//! as if rank 0 had sent them. Neither may panic; bytes that do not decode must be
//! rejected by the engine as malformed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use matching::wire::decode;
use matching::*;

fn busy_engine() -> Engine {
    let cfg = Config {
        eager_limit: 8,
        credits: 2,
        low_water: 1,
        ..Config::default()
    };
    let mut e = Engine::new(1, 2, cfg);
    for (i, (source, tag)) in [
        (Source::Rank(0), TagSel::Tag(1)),
        (Source::Rank(0), TagSel::Any),
        (Source::Any, TagSel::Tag(2)),
        (Source::Rank(0), TagSel::Tag(0)),
    ]
    .into_iter()
    .enumerate()
    {
        let buf = Some(RemoteBuf {
            addr: 0x1000 * (i as u64 + 1),
            len: 8,
            key: 0,
        });
        e.post_recv(RecvSpec {
            source,
            tag,
            ctx: 0,
            capacity: 8,
            buf,
        })
        .unwrap();
    }
    for (i, mode) in [SendMode::Standard, SendMode::Synchronous, SendMode::Ready]
        .into_iter()
        .enumerate()
    {
        for len in [4u64, 16] {
            let buf = RemoteBuf {
                addr: 0x10_0000 + 0x100 * i as u64,
                len,
                key: 0,
            };
            e.start_send(SendSpec {
                dest: 0,
                tag: i as Tag,
                ctx: 0,
                len,
                mode,
                buf,
            })
            .unwrap();
        }
    }
    while e.poll_output().is_some() {}
    e
}

fn drive(e: &mut Engine, data: &[u8]) {
    let res = e.handle(0, data);
    if let Ok(Some(d)) = &res {
        assert!(d.range.end <= data.len());
    }
    let mut gets = vec![];
    while let Some(o) = e.poll_output() {
        if let Output::Get {
            xfer, len, into, ..
        } = o
        {
            gets.push((xfer, len, into));
        }
    }
    for (xfer, len, into) in gets {
        let staged = (into == GetInto::Staging).then(|| vec![0u8; len.min(64) as usize]);
        e.get_done(xfer, staged)
            .expect("a read the engine asked for");
        while e.poll_output().is_some() {}
    }
}

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok((frame, hl)) => {
            assert!(hl <= data.len());
            let re = wire::encode(&frame);
            let mut b = re.as_bytes().to_vec();
            b.extend_from_slice(&data[hl..]);
            assert_eq!(decode(&b), Ok((frame, re.as_bytes().len())));
            drive(&mut Engine::new(1, 2, Config::default()), data);
            drive(&mut busy_engine(), data);
        }
        Err(_) => {
            let mut e = Engine::new(1, 2, Config::default());
            assert!(matches!(
                e.handle(0, data),
                Err(ProtocolError::Malformed { .. })
            ));
        }
    }
});
