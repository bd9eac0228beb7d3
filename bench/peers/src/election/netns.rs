//! The network cut: a network namespace joined to the host by a veth pair
//! ([`Netns`]), whose host side is set down to cut the leader off and up to
//! heal it (root only).

use std::io;
use std::process::Command;

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A network namespace joined to the host by a veth pair: the host side
/// 10.212.X.1/24, the namespace's 10.212.X.2 (tests/keepalive.rs uses
/// 10.213, tests/failover.rs 10.214 and up). Setting the host side down
/// cuts everything in the namespace off (its connections stay open, nothing
/// gets through); up heals it. Removed when dropped.
pub(super) struct Netns {
    pub(super) name: String,
    pub(super) veth: String,
    pub(super) host_ip: String,
}

impl Netns {
    pub(super) fn create() -> io::Result<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(io::Error::other("not root"));
        }
        let pid = std::process::id();
        let taken = Command::new("ip")
            .args(["-4", "-o", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())?;
        let net = (0..250)
            .map(|k| format!("10.212.{}", (pid as usize + k) % 250))
            .find(|n| !taken.contains(&format!(" {n}.")))
            .ok_or_else(|| io::Error::other("no free 10.212.X.0/24"))?;
        let ns = Netns {
            name: format!("lockbench{pid}"),
            veth: format!("lbh{pid}"),
            host_ip: format!("{net}.1"),
        };
        let peer = format!("lbn{pid}");
        let _ = ip(&["link", "del", &ns.veth]);
        let _ = ip(&["netns", "del", &ns.name]);
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link", "add", &ns.veth, "type", "veth", "peer", "name", &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &ns.name])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &ns.veth])?;
        ip(&["link", "set", &ns.veth, "up"])?;
        ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &peer,
        ])?;
        ip(&["-n", &ns.name, "link", "set", &peer, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub(super) fn cut(&self) -> io::Result<()> {
        ip(&["link", "set", &self.veth, "down"])
    }

    pub(super) fn heal(&self) -> io::Result<()> {
        ip(&["link", "set", &self.veth, "up"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}
