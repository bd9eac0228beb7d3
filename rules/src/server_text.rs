//! Reading the server's own replies that the Redis layer consults: who
//! serves a slot (`CLUSTER NODES`), whether a client still has unsent output
//! (`CLIENT LIST`), and which socket it is on.

/// Whether the `myself` line of `CLUSTER NODES` serves `slot` and is not
/// migrating it away: only then may this node write a key of that slot on
/// its own initiative (a timer, not a routed command).
pub fn myself_serves_slot(cluster_nodes: &str, slot: u16) -> bool {
    let Some(line) = cluster_nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    }) else {
        return false;
    };
    let mut served = false;
    for field in line.split(' ').skip(8) {
        if let Some(state) = field.strip_prefix('[') {
            // "[slot->-node]" migrating away, "[slot-<-node]" importing.
            if let Some((s, _)) = state.split_once("->-") {
                if s.parse() == Ok(slot) {
                    return false;
                }
            }
            continue;
        }
        let (lo, hi) = field.split_once('-').unwrap_or((field, field));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>()) {
            served |= (lo..=hi).contains(&slot);
        }
    }
    served
}

/// Whether a `CLIENT LIST` line shows output not yet written to the socket
/// (`obl`, bytes in the reply buffer, or `oll`, queued reply blocks). A line
/// that cannot be read counts as nothing pending.
pub fn has_unsent_output(client_line: &str) -> bool {
    client_line.split(' ').any(|field| {
        let pending = field
            .strip_prefix("obl=")
            .or_else(|| field.strip_prefix("oll="));
        pending.is_some_and(|n| n.trim().parse::<u64>().is_ok_and(|n| n > 0))
    })
}

/// The socket (`fd=`) of a `CLIENT LIST` line; `None` for a client
/// without one (`fd=-1`: scripts, the AOF).
pub fn client_fd(client_line: &str) -> Option<i32> {
    client_line
        .split(' ')
        .find_map(|field| field.strip_prefix("fd="))
        .and_then(|n| n.trim().parse::<i32>().ok())
        .filter(|fd| *fd >= 0)
}

/// How long (`idle=`, whole seconds) a `CLIENT LIST` line's client has
/// sent nothing; `None` if the line does not say.
pub fn client_idle_seconds(client_line: &str) -> Option<i64> {
    client_line
        .split(' ')
        .find_map(|field| field.strip_prefix("idle="))
        .and_then(|n| n.trim().parse::<i64>().ok())
        .filter(|idle| *idle >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_clients_idle_time() {
        let line = "id=7 addr=127.0.0.1:5000 fd=12 name= age=9 idle=4 flags=P db=0";
        assert_eq!(client_idle_seconds(line), Some(4));
        assert_eq!(client_idle_seconds("id=7 idle=x"), None);
        assert_eq!(client_idle_seconds(""), None);
    }

    #[test]
    fn reads_a_clients_socket() {
        let line = "id=7 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 fd=12 name= age=0";
        assert_eq!(client_fd(line), Some(12));
        assert_eq!(client_fd("id=3 addr= fd=-1 name="), None);
        assert_eq!(client_fd("id=3 addr=x"), None);
        assert_eq!(client_fd(""), None);
    }

    #[test]
    fn reads_slot_ownership_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922\n\
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5000->-07c3] [6000-<-07c3]\n";
        assert!(myself_serves_slot(nodes, 0));
        assert!(myself_serves_slot(nodes, 5460));
        assert!(myself_serves_slot(nodes, 12000));
        assert!(!myself_serves_slot(nodes, 5000), "migrating away");
        assert!(!myself_serves_slot(nodes, 6000), "importing, not ours yet");
        assert!(!myself_serves_slot(nodes, 5461));
        assert!(!myself_serves_slot(nodes, 16383));
        assert!(!myself_serves_slot("", 0));
    }

    #[test]
    fn reads_unsent_output_from_client_list() {
        let line = "id=7 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=8 name= age=0 idle=0 flags=A \
                    db=0 sub=0 psub=0 ssub=0 multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 \
                    multi-mem=0 rbs=1024 rbp=0 obl={obl} oll={oll} omem=0 tot-mem=0 events=r \
                    cmd=lock.acquire user=default redir=-1 resp=2\n";
        let with = |obl: u32, oll: u32| {
            line.replace("{obl}", &obl.to_string())
                .replace("{oll}", &oll.to_string())
        };
        assert!(!has_unsent_output(&with(0, 0)));
        assert!(has_unsent_output(&with(4, 0)));
        assert!(has_unsent_output(&with(0, 1)));
        assert!(!has_unsent_output(""));
    }
}
