use crate::common;
use common::*;

#[test]
fn module_loads_and_acquires() {
    let server = Server::start();
    let mut con = server.client();
    let n: i64 = q(&mut con, &["LOCK.ACQUIRE", "k", "a"]);
    assert_eq!(n, 1);
    let mut waiter = server.client();
    send(&mut waiter, &["LOCK.ACQUIRE", "k", "b", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 1);
    let left: i64 = q(&mut con, &["LOCK.RELEASE", "k", "a"]);
    assert_eq!(left, 0);
    assert_eq!(recv(&mut waiter).unwrap(), Value::Int(1));
    assert_eq!(lock_info(&mut con, "k")[0], ("owner".into(), "b".into()));
}
