//! Wire format of the launcher's key-value service (see the crate docs for the table).
//!
//! Every frame is a little-endian `u32` length `L` followed by `L` bytes: one kind byte
//! and `L - 1` bytes of payload.

use std::io::{self, Read, Write};

/// Client → launcher: `secret[16] ++ rank:u32`. Must be the first frame.
pub(crate) const HELLO: u8 = 1;
/// Client → launcher: `key_len:u32 ++ key ++ value`.
pub(crate) const PUBLISH: u8 = 2;
/// Client → launcher: empty.
pub(crate) const FENCE: u8 = 3;
/// Client → launcher: `rank:u32 ++ key`.
pub(crate) const LOOKUP: u8 = 4;
/// Client → launcher: `code:i32 ++ message`.
pub(crate) const ABORT: u8 = 5;
/// Launcher → client: success; payload is the value for a lookup, else empty (for the
/// hello reply: `size:u32`).
pub(crate) const OK: u8 = 0x80;
/// Launcher → client: failure; payload is a UTF-8 message.
pub(crate) const ERR: u8 = 0x81;

/// Length of the secret in bytes.
pub(crate) const SECRET_LEN: usize = 16;
/// Exact frame length (kind byte included) of a hello frame.
pub(crate) const HELLO_LEN: u32 = 1 + SECRET_LEN as u32 + 4;
/// Largest frame accepted from an authenticated client.
pub(crate) const MAX_FRAME: u32 = 64 << 20;

/// Writes one frame with a single `write_all`.
pub(crate) fn write_frame(w: &mut impl Write, kind: u8, parts: &[&[u8]]) -> io::Result<()> {
    let body: usize = 1 + parts.iter().map(|p| p.len()).sum::<usize>();
    let len = u32::try_from(body)
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    let mut buf = Vec::with_capacity(4 + body);
    buf.extend_from_slice(&len.to_le_bytes());
    buf.push(kind);
    for p in parts {
        buf.extend_from_slice(p);
    }
    w.write_all(&buf)?;
    w.flush()
}

/// Reads the length prefix of the next frame.
pub(crate) fn read_len(r: &mut impl Read) -> io::Result<u32> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    Ok(u32::from_le_bytes(len))
}

/// Reads a frame body of `len` bytes and splits off the kind byte.
pub(crate) fn read_body(r: &mut impl Read, len: u32) -> io::Result<(u8, Vec<u8>)> {
    if len == 0 || len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "bad frame length",
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    let kind = body.remove(0);
    Ok((kind, body))
}

/// Reads one whole frame.
pub(crate) fn read_frame(r: &mut impl Read) -> io::Result<(u8, Vec<u8>)> {
    let len = read_len(r)?;
    read_body(r, len)
}

/// Splits a little-endian `u32` off the front of `b`.
pub(crate) fn take_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (head, rest) = b.split_first_chunk::<4>()?;
    Some((u32::from_le_bytes(*head), rest))
}

/// Compares two byte strings in time independent of where they differ.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Lower-case hex encoding.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Decodes lower- or upper-case hex; `None` on odd length or a non-hex digit.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() & 1 != 0 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `N` bytes from the kernel's random source.
pub(crate) fn random_bytes<const N: usize>() -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_roundtrip() {
        let mut buf = Vec::new();
        write_frame(&mut buf, PUBLISH, &[b"ab", b"", b"cde"]).unwrap();
        assert_eq!(&buf[..4], &6u32.to_le_bytes());
        let (k, body) = read_frame(&mut &buf[..]).unwrap();
        assert_eq!(k, PUBLISH);
        assert_eq!(body, b"abcde");
        assert!(read_body(&mut &b""[..], 0).is_err());
        assert!(read_body(&mut &b""[..], MAX_FRAME + 1).is_err());
    }

    #[test]
    fn hex_and_compare() {
        assert_eq!(hex(&[0, 0xab, 0x1f]), "00ab1f");
        assert_eq!(unhex("00ab1F"), Some(vec![0, 0xab, 0x1f]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("+f"), None);
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
        assert_eq!(take_u32(&[1, 0, 0, 0, 9]), Some((1, &[9u8][..])));
        assert_eq!(take_u32(&[1, 0]), None);
    }
}
