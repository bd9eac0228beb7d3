//! The owner id of a run: `host:pid:random`, unique per run.

use std::io::Read;

use crate::sys;

/// `hostname:pid:8 hex digits` (the random part from /dev/urandom, or from
/// the clock when it cannot be read).
pub fn generate() -> String {
    compose(&hostname(), std::process::id(), random32())
}

pub fn compose(host: &str, pid: u32, random: u32) -> String {
    // ':write' and 'mode' are reserved owner names of read-write locks; a
    // hostname cannot make the id end with either.
    format!("{host}:{pid}:{random:08x}")
}

/// A random 128-bit id in hex: a session's token (`LOCK.SESSION`).
pub fn token() -> String {
    format!(
        "{:08x}{:08x}{:08x}{:08x}",
        random32(),
        random32(),
        random32(),
        random32()
    )
}

fn hostname() -> String {
    match sys::hostname() {
        Some(name) if !name.is_empty() => name,
        _ => "localhost".into(),
    }
}

fn random32() -> u32 {
    let mut b = [0u8; 4];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u32::from_le_bytes(b);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() ^ (d.as_secs() as u32))
        .unwrap_or(0);
    nanos ^ std::process::id().rotate_left(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape() {
        assert_eq!(compose("web-1", 4242, 0xab), "web-1:4242:000000ab");
        let a = generate();
        let parts: Vec<&str> = a.rsplitn(3, ':').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0].len(), 8);
        assert_eq!(parts[1], std::process::id().to_string());
        assert_ne!(generate(), a, "two runs in one process still differ");
    }
}
