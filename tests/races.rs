//! Races between a waiter's connection closing and the lock being handed to
//! it. Whatever the interleaving, the invariant is the same: a lock handed
//! to a caller that is gone is released again and reaches the next waiter.

mod common;
use common::*;

use std::sync::{Arc, Barrier};
use std::thread;

#[test]
fn a_waiter_closing_as_it_is_handed_the_lock_never_keeps_it() {
    let server = Server::start();
    let mut holder = server.client();
    for round in 0..150 {
        let key = format!("k{round}");
        let n: i64 = q(
            &mut holder,
            &["LOCK.ACQUIRE", &key, "holder", "PX", "60000"],
        );
        assert_eq!(n, 1);
        let mut dying = server.client();
        send(
            &mut dying,
            &["LOCK.ACQUIRE", &key, "dying", "PX", "60000", "BLOCK", "0"],
        );
        wait_for_waiters(&mut holder, &key, 1);
        let mut next = server.client();
        send(
            &mut next,
            &["LOCK.ACQUIRE", &key, "next", "PX", "60000", "BLOCK", "0"],
        );
        wait_for_waiters(&mut holder, &key, 2);

        // Close the first waiter and release at the same moment, so the
        // server sees both in one event loop turn in either order.
        let start = Arc::new(Barrier::new(2));
        let closer = {
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                drop(dying);
            })
        };
        start.wait();
        let left: i64 = q(&mut holder, &["LOCK.RELEASE", &key, "holder"]);
        assert_eq!(left, 0);
        closer.join().expect("closer thread");

        // Either the dying waiter left the queue first and `next` was
        // handed the lock directly, or it was handed the lock and the
        // module released it again: `next` gets it in both cases.
        assert_eq!(
            recv(&mut next).expect("next's reply"),
            Value::Int(1),
            "round {round}"
        );
        assert_eq!(
            field(&lock_info(&mut holder, &key), "owner").as_deref(),
            Some("next")
        );
    }
}
