//! What the test files share.

use std::process::Output;

/// Asserts that a job of program `name` started `how` succeeded and printed its
/// `NAME ok` line exactly once.
pub fn assert_ok(name: &str, how: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} {how}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| *l == format!("{name} ok"))
            .count(),
        1,
        "{name} {how}: {stdout}"
    );
}
