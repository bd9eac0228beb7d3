//! A network namespace joined to the host by a veth pair, for tests that
//! cut a client off: the server listens on the host side (`host_ip`), the
//! client runs inside (`ip netns exec <name> ...`), and taking the inside
//! link down cuts it off without closing its connections (no FIN, no RST).
//! Needs root and iproute2 ([`unavailable`] says why not).

use std::process::Command;

use super::ip;

pub struct Netns {
    pub name: String,
    pub host_ip: String,
    host_if: String,
    inner_if: String,
}

impl Netns {
    /// A namespace on a free `<net>.x.0/24` (`net` like `10.212`: each
    /// test file its own, so that test runs side by side (one per server) never
    /// share one), named after `tag` and this process.
    pub fn create(net: &str, tag: &str) -> Result<Netns, String> {
        let pid = std::process::id();
        let out = Command::new("ip")
            .args(["-4", "-o", "addr", "show"])
            .output()
            .map_err(|e| format!("ip: {e}"))?;
        let taken = String::from_utf8_lossy(&out.stdout).into_owned();
        let subnet = (0..250)
            .map(|k| format!("{net}.{}", (pid as usize + k) % 250))
            .find(|subnet| !taken.contains(&format!(" {subnet}.")))
            .ok_or_else(|| format!("no free {net}.x.0/24"))?;
        let ns = Netns {
            name: format!("{tag}{pid}"),
            host_ip: format!("{subnet}.1"),
            host_if: format!("{tag}h{pid}"),
            inner_if: format!("{tag}n{pid}"),
        };
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link",
            "add",
            &ns.host_if,
            "type",
            "veth",
            "peer",
            "name",
            &ns.inner_if,
        ])?;
        ip(&["link", "set", &ns.inner_if, "netns", &ns.name])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", ns.host_ip),
            "dev",
            &ns.host_if,
        ])?;
        ip(&["link", "set", &ns.host_if, "up"])?;
        let inner_ip = format!("{subnet}.2/24");
        ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &inner_ip,
            "dev",
            &ns.inner_if,
        ])?;
        ip(&["-n", &ns.name, "link", "set", &ns.inner_if, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The inside of the link goes down: the client's packets go nowhere.
    pub fn cut(&self) {
        ip(&["-n", &self.name, "link", "set", &self.inner_if, "down"]).expect("cut the link");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.host_if]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Why network namespaces cannot be made here (not root, no `ip`), if so.
pub fn unavailable() -> Option<String> {
    // SAFETY: a plain query of this process's effective user.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no `ip` (iproute2)".into()),
    }
}
