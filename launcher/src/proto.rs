//! What the PMI-1 client ([`crate::pmi`]) and rsmpirun's PMI-1 server
//! ([`crate::server`]) share: the limits rsmpirun announces, the parsing of a PMI-1
//! line, hex, a constant-time comparison and random bytes.

use std::io::{self, BufRead, Read};

/// Length of a rank's secret in bytes (sent as 32 hex digits).
pub(crate) const SECRET_LEN: usize = 16;
/// The rsmpi extension key of `cmd=initack` that carries the rank's secret.
pub(crate) const SECRET_KEY: &str = "rsmpi_secret";

/// Limits rsmpirun announces in `cmd=maxes` (Hydra's values: the client splits longer
/// values, so both launchers take the same path).
pub(crate) const KVSNAME_MAX: usize = 256;
pub(crate) const KEYLEN_MAX: usize = 64;
pub(crate) const VALLEN_MAX: usize = 1024;
/// Longest request line rsmpirun reads (newline excluded): a `put` at the limits above
/// takes 1 372 bytes.
pub(crate) const LINE_MAX: usize = 2048;
/// Longest first line of a `PMI_PORT` connection (`cmd=initack pmiid=N
/// rsmpi_secret=HEX`), read before the client is authenticated.
pub(crate) const FIRST_LINE_MAX: usize = 256;

/// The `key=value` fields of a PMI-1 line, in order; `None` when a word has no `=` or
/// an empty key.
pub(crate) fn fields(line: &str) -> Option<Vec<(&str, &str)>> {
    line.split_ascii_whitespace()
        .map(|w| w.split_once('=').filter(|(k, _)| !k.is_empty()))
        .collect()
}

/// The value of the first field `key` of `line`.
pub(crate) fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_ascii_whitespace().find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then_some(v)
    })
}

/// One line read by [`read_line_bounded`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadLine {
    /// A whole line, newline (and a `\r` before it) removed.
    Line(Vec<u8>),
    /// The line ran past the limit (what was read of it is dropped).
    TooLong,
    /// End of stream (a last line without newline is returned as a line first).
    Eof,
}

/// Reads one `\n`-terminated line of at most `max` bytes, never buffering more than
/// `max` bytes of it.
pub(crate) fn read_line_bounded(r: &mut impl BufRead, max: usize) -> io::Result<ReadLine> {
    let mut line = Vec::new();
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(if line.is_empty() {
                ReadLine::Eof
            } else {
                ReadLine::Line(line)
            });
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len() + take > max {
            return Ok(ReadLine::TooLong);
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take + usize::from(done));
        if done {
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(ReadLine::Line(line));
        }
    }
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
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(2 * bytes.len());
    for &b in bytes {
        s.push(D[usize::from(b >> 4)] as char);
        s.push(D[usize::from(b & 15)] as char);
    }
    s
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
    fn hex_and_compare() {
        assert_eq!(hex(&[0, 0xab, 0x1f]), "00ab1f");
        assert_eq!(unhex("00ab1F"), Some(vec![0, 0xab, 0x1f]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("+f"), None);
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }

    #[test]
    fn lines_and_fields() {
        let f = fields("cmd=put kvsname=j key=a value=b=c").unwrap();
        assert_eq!(
            f,
            [
                ("cmd", "put"),
                ("kvsname", "j"),
                ("key", "a"),
                ("value", "b=c")
            ]
        );
        assert_eq!(fields("cmd=get junk"), None);
        assert_eq!(fields("=x"), None);
        assert_eq!(field("cmd=get_result rc=0 value=", "value"), Some(""));

        let mut r = io::BufReader::with_capacity(4, &b"ab\r\ncdefgh\nxyz"[..]);
        assert_eq!(
            read_line_bounded(&mut r, 8).unwrap(),
            ReadLine::Line(b"ab".to_vec())
        );
        assert_eq!(
            read_line_bounded(&mut r, 8).unwrap(),
            ReadLine::Line(b"cdefgh".to_vec())
        );
        assert_eq!(
            read_line_bounded(&mut r, 8).unwrap(),
            ReadLine::Line(b"xyz".to_vec())
        );
        assert_eq!(read_line_bounded(&mut r, 8).unwrap(), ReadLine::Eof);
        let mut r = io::BufReader::with_capacity(4, &b"0123456789\n"[..]);
        assert_eq!(read_line_bounded(&mut r, 8).unwrap(), ReadLine::TooLong);
        let mut r = io::BufReader::new(&b"01234567\n"[..]);
        assert_eq!(
            read_line_bounded(&mut r, 8).unwrap(),
            ReadLine::Line(b"01234567".to_vec())
        );
    }
}
