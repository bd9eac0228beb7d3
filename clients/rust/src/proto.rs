//! The module's protocol without I/O: the `LOCK.*` commands the library sends, their
//! replies, and the loss messages of a session's channel. Public so that tools built on
//! other connection handling (the `redis-lock` CLI) send exactly what the library sends.
//!
//! One flat namespace (`proto::X`) over its parts: what every command shares, the locks, the
//! session and its loss messages, semaphores and latches, elections. Each part imports only
//! the shared one.

mod common;
mod elect;
mod lock;
mod sem;
mod session;

pub use common::{
    cmd, field, int_field, integer, is_unknown_command, key_slot, millis, Binding, Unexpected, Wait,
};
pub use elect::{
    campaigned, elect_campaign, elect_leader, elect_observe, elect_proclaim, elect_resign, leader,
    Leader,
};
pub use lock::{acquired, cancel, release, renew, Acquire, Kind};
pub use sem::{
    latch_await, latch_count_down, latch_info, latch_init, latch_opened, sem_acquired, sem_add,
    sem_holders, sem_info, sem_init, sem_release, sem_renew, Refusal, SemAcquire, SemHolder,
};
pub use session::{channel, message, session, Lost, Message, Reason};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use redis::Value;

    use super::*;

    fn line(args: &[String]) -> String {
        args.join(" ")
    }

    #[test]
    fn commands() {
        let keys = vec!["job".to_string()];
        let a = Acquire {
            keys: &keys,
            owner: "t:1",
            kind: Kind::Exclusive,
            lease: Duration::from_secs(30),
            wait: Wait::For(Duration::from_millis(1500)),
            fence: true,
            binding: Binding::Session("t"),
        };
        assert_eq!(
            line(&a.args()),
            "LOCK.ACQUIRE job t:1 PX 30000 BLOCK 1500 FENCE SESSION t"
        );
        let two = vec!["{a}1".to_string(), "{a}2".to_string()];
        let m = Acquire {
            keys: &two,
            wait: Wait::No,
            fence: false,
            binding: Binding::Keepalive,
            ..a.clone()
        };
        assert_eq!(
            line(&m.args()),
            "LOCK.MACQUIRE 2 {a}1 {a}2 t:1 PX 30000 KEEPALIVE"
        );
        assert_eq!(
            line(&release(&two, "o", Kind::Exclusive)),
            "LOCK.MRELEASE 2 {a}1 {a}2 o"
        );
        assert_eq!(
            line(&release(&keys, "o", Kind::Read)),
            "LOCK.RELEASE job o READ"
        );
        assert_eq!(
            line(&renew(
                "job",
                "o",
                Duration::from_millis(900),
                Binding::Session("t")
            )),
            "LOCK.RENEW job o PX 900 SESSION t"
        );
        assert_eq!(Wait::For(Duration::from_micros(10)).block_ms(), Some(1));
        assert_eq!(Wait::from_duration(Duration::ZERO), Wait::No);
        assert_eq!(Wait::Forever.block_ms(), Some(0));
    }

    #[test]
    fn replies() {
        assert_eq!(acquired(&Value::Nil), Ok(None));
        assert_eq!(acquired(&Value::Int(7)), Ok(Some(vec![7])));
        assert_eq!(
            acquired(&Value::Array(vec![Value::Int(1), Value::Int(2)])),
            Ok(Some(vec![1, 2]))
        );
        assert!(acquired(&Value::Okay).is_err());
    }

    #[test]
    fn loss_messages() {
        assert_eq!(message(b"demoted"), Some(Message::Demoted));
        assert_eq!(
            message(b"forced 5 a b:1 my key"),
            Some(Message::Lost {
                reason: Reason::Forced,
                owner: "a b:1".into(),
                key: "my key".into()
            })
        );
        assert!(matches!(
            message(b"newword 1 o k"),
            Some(Message::Lost {
                reason: Reason::Other(_),
                ..
            })
        ));
        assert_eq!(message(b"gone 9 o k"), None);
        assert_eq!(message(b"junk"), None);
    }

    #[test]
    fn slots() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{}x"), key_slot(b"{}x"));
        assert_eq!(key_slot(b"123456789"), 0x31C3);
    }

    #[test]
    fn semaphore_and_latch_commands() {
        let a = SemAcquire {
            key: "pool",
            owner: "h:1:ab",
            permits: 1,
            lease: Duration::from_secs(30),
            wait: Wait::Forever,
            fence: false,
            binding: Binding::Keepalive,
        };
        assert_eq!(
            line(&a.args()),
            "SEM.ACQUIRE pool h:1:ab PX 30000 KEEPALIVE BLOCK 0"
        );
        let b = SemAcquire {
            permits: 3,
            wait: Wait::No,
            fence: true,
            binding: Binding::Session("t"),
            ..a.clone()
        };
        assert_eq!(
            line(&b.args()),
            "SEM.ACQUIRE pool h:1:ab PERMITS 3 PX 30000 SESSION t FENCE"
        );
        assert_eq!(line(&sem_init("pool", 4)), "SEM.INIT pool 4");
        assert_eq!(line(&sem_add("pool", -2)), "SEM.ADD pool -2");
        assert_eq!(line(&sem_release("pool", "o", None)), "SEM.RELEASE pool o");
        assert_eq!(
            line(&sem_release("pool", "o", Some(2))),
            "SEM.RELEASE pool o PERMITS 2"
        );
        assert_eq!(
            line(&sem_renew(
                "pool",
                "o",
                Duration::from_millis(900),
                Binding::Session("t")
            )),
            "SEM.RENEW pool o PX 900 SESSION t"
        );
        assert_eq!(line(&sem_info("pool")), "SEM.INFO pool");
        assert_eq!(line(&latch_init("l", 3, None)), "LATCH.INIT l 3");
        assert_eq!(
            line(&latch_init("l", 3, Some(Duration::from_secs(2)))),
            "LATCH.INIT l 3 PX 2000"
        );
        assert_eq!(line(&latch_count_down("l", 1)), "LATCH.COUNTDOWN l");
        assert_eq!(line(&latch_count_down("l", 4)), "LATCH.COUNTDOWN l 4");
        assert_eq!(line(&latch_await("l", Wait::No)), "LATCH.AWAIT l");
        assert_eq!(
            line(&latch_await("l", Wait::For(Duration::from_millis(250)))),
            "LATCH.AWAIT l BLOCK 250"
        );
        assert_eq!(line(&latch_info("l")), "LATCH.INFO l");
    }

    #[test]
    fn semaphore_and_latch_replies() {
        assert_eq!(Refusal::of("NOTOWNER"), Some(Refusal::NotOwner));
        assert_eq!(Refusal::of("EXPIRED"), Some(Refusal::Expired));
        assert_eq!(Refusal::of("GONE"), Some(Refusal::Gone));
        assert_eq!(Refusal::of("ERR"), None);
        assert!(Refusal::not_held(Some("EXPIRED")) && Refusal::not_held(Some("NOTOWNER")));
        assert!(!Refusal::not_held(Some("GONE")) && !Refusal::not_held(None));
        assert_eq!(sem_acquired(&Value::Nil), Ok(None));
        assert_eq!(sem_acquired(&Value::Int(2)), Ok(Some(2)));
        assert!(sem_acquired(&Value::Okay).is_err());
        assert_eq!(latch_opened(&Value::Int(0)), Ok(true));
        assert_eq!(latch_opened(&Value::Nil), Ok(false));
        assert!(latch_opened(&Value::Int(3)).is_err());
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let holder = Value::Array(vec![
            bulk("owner"),
            bulk("w1"),
            bulk("permits"),
            Value::Int(2),
            bulk("ttl"),
            Value::Int(900),
            bulk("keepalive_client"),
            Value::Int(7),
        ]);
        let resp2 = Value::Array(vec![
            bulk("permits"),
            Value::Int(4),
            bulk("available"),
            Value::Int(2),
            bulk("holders"),
            Value::Array(vec![holder.clone()]),
            bulk("waiters"),
            Value::Int(0),
        ]);
        let resp3 = Value::Map(vec![
            (Value::SimpleString("permits".into()), Value::Int(4)),
            (
                bulk("holders"),
                Value::Array(vec![Value::Map(vec![
                    (bulk("owner"), bulk("w1")),
                    (bulk("permits"), Value::Int(2)),
                    (bulk("ttl"), Value::Int(900)),
                    (bulk("keepalive_client"), Value::Int(7)),
                ])]),
            ),
        ]);
        for v in [resp2, resp3] {
            assert_eq!(int_field(&v, "permits"), Some(4));
            assert_eq!(
                sem_holders(&v),
                vec![SemHolder {
                    owner: "w1".into(),
                    permits: 2,
                    ttl: 900,
                    keepalive_client: Some(7)
                }]
            );
        }
        assert!(sem_holders(&Value::Nil).is_empty());
    }

    #[test]
    fn election_commands_and_replies() {
        let lease = Duration::from_secs(5);
        assert_eq!(
            line(&elect_campaign(
                "sched",
                "a",
                Some("10.0.0.5:80"),
                lease,
                Binding::Session("t"),
                Wait::Forever
            )),
            "ELECT.CAMPAIGN sched a VALUE 10.0.0.5:80 PX 5000 SESSION t BLOCK 0"
        );
        assert_eq!(
            line(&elect_campaign(
                "sched",
                "a",
                None,
                lease,
                Binding::Keepalive,
                Wait::No
            )),
            "ELECT.CAMPAIGN sched a PX 5000 KEEPALIVE"
        );
        assert_eq!(line(&elect_resign("s", "a")), "ELECT.RESIGN s a");
        assert_eq!(line(&elect_proclaim("s", "a", "v")), "ELECT.PROCLAIM s a v");
        assert_eq!(line(&elect_leader("s")), "ELECT.LEADER s");
        assert_eq!(
            line(&elect_observe(
                "s",
                7,
                Wait::For(Duration::from_millis(250))
            )),
            "ELECT.OBSERVE s TERM 7 BLOCK 250"
        );
        assert_eq!(campaigned(&Value::Nil), Ok(None));
        assert_eq!(campaigned(&Value::Int(12)), Ok(Some(12)));
        assert!(campaigned(&Value::Okay).is_err());
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("candidate"),
            bulk("a"),
            bulk("term"),
            Value::Int(12),
            bulk("value"),
            Value::Nil,
            bulk("ttl"),
            Value::Int(900),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("candidate"), bulk("a")),
            (bulk("term"), Value::Int(12)),
            (bulk("value"), Value::Nil),
            (bulk("ttl"), Value::Int(900)),
        ]);
        for v in [resp2, resp3] {
            assert_eq!(
                leader(&v),
                Ok(Some(Leader {
                    candidate: Some("a".into()),
                    term: 12,
                    value: None,
                    ttl: 900
                }))
            );
        }
        assert_eq!(leader(&Value::Nil), Ok(None));
        assert!(leader(&Value::Int(3)).is_err());
        assert_eq!(
            message(b"idle 1 a k"),
            Some(Message::Lost {
                reason: Reason::Idle,
                owner: "a".into(),
                key: "k".into()
            })
        );
    }
}
