//! The module's integration tests: one test binary (one build and link for
//! all), a module per feature or fault, each starting real `redis-server` /
//! `valkey-server` processes with the module (`common/`: the harness).
//! `cargo test --test integration <module>::` runs one file's tests.
//!
//! Which file tests what:
//!
//! - `acl_limits`: ACL users (key patterns on the lock and its token key), callers without a user, maxclients, durations near i64::MAX
//! - `catalog`: every hand-kept list of commands, configs and INFO fields against what a live server registers
//! - `chaos`: the history checker under faults (`make chaos` runs it for minutes)
//! - `cluster`: cluster mode: MOVED, CROSSSLOT, token keys in the lock's slot, shard-channel notifications
//! - `cluster_failover`: a 3-master, 3-replica cluster: every shard, failovers
//! - `commands`: every LOCK.* command, reply and error
//! - `deadlock`: deadlock detection with real clients, over every kind of wait
//! - `deadlock_chaos`: no false DEADLOCK under faults, and every DEADLOCK names a real cycle
//! - `deadlock_edges`: deadlock detection's edge cases, each once a bug
//! - `election`: ELECT.*: campaign, resign, proclaim, leader, observe
//! - `election_chaos`: elections under faults, with real `redis-lock elect` processes and a network cut
//! - `election_failover`: an election across a Sentinel failover
//! - `failover`: unclean Sentinel failovers: fencing tokens' history, what mutual exclusion loses (`make failover`)
//! - `fencing`: fencing tokens never go back (failover, restart, FLUSHALL), Redisson's counters
//! - `fifo_errors`: a waiter answered in its FIFO turn, error or grant
//! - `fuzz`: random argument vectors for every command against a live server (`make fuzz` for 1M)
//! - `keepalive`: KEEPALIVE: renewals while the connection lives; kills, SIGSTOP, a network cut
//! - `latches`: LATCH.*: await, count-down, expiry, Redisson's latch
//! - `multilock`: LOCK.MACQUIRE / MRELEASE: all or none, places in every queue
//! - `persistence`: AOF and RDB restarts: leases, deadlines, fencing counters
//! - `queues`: LOCK.WAITERS, LOCK.QUEUES and INFO lock's percentiles
//! - `races`: a waiter whose connection breaks while the lock is handed to it
//! - `redisson`: Redisson's RLock protocol (its scripts) beside LOCK.* on the same keys
//! - `redisson_fair`: Redisson's RFairLock beside LOCK.* callers, one FIFO order
//! - `redisson_fair_chaos`: fair-lock clients and LOCK.* callers under holders that die
//! - `redisson_semaphores`: Redisson's semaphores and latch (their scripts) beside SEM.* and LATCH.*
//! - `replication`: effects replicated as native commands to replicas and the AOF; replicas refuse writes
//! - `rwlock`: read-write locks: RACQUIRE, WACQUIRE, release, renew, force-release, info
//! - `semaphore_failover`: a semaphore across a Sentinel failover
//! - `semaphore_replication`: semaphores and latches under replication and persistence
//! - `semaphores`: SEM.*: one FIFO whatever the counts, leases, waiters that leave
//! - `sessions`: LOCK.SESSION and SESSION: holds kept alive by the session connection, loss messages
//! - `smoke`: the module loads and a lock is taken and released
//! - `waiting`: BLOCK, FIFO order and the hand-off

mod common;

mod acl_limits;
mod catalog;
mod chaos;
mod cluster;
mod cluster_failover;
mod commands;
mod deadlock;
mod deadlock_chaos;
mod deadlock_edges;
mod election;
mod election_chaos;
mod election_failover;
mod failover;
mod fencing;
mod fifo_errors;
mod fuzz;
mod keepalive;
mod latches;
mod multilock;
mod persistence;
mod queues;
mod races;
mod redisson;
mod redisson_fair;
mod redisson_fair_chaos;
mod redisson_semaphores;
mod replication;
mod rwlock;
mod semaphore_failover;
mod semaphore_replication;
mod semaphores;
mod sessions;
mod smoke;
mod waiting;
