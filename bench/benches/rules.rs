//! The pure lock rules (crate `lock-rules`) without a server: what one
//! LOCK.ACQUIRE / LOCK.RELEASE decides, and the per-key FIFO of waiters.
//! `cargo bench -p lock-bench --bench rules`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lock_rules::queue::Fifo;
use lock_rules::request::{LockKind, Request};
use lock_rules::state::LockState;
use lock_rules::transition::Transition;

const NOW: i64 = 1_700_000_000_000;

fn req(owner: &str) -> Request {
    Request {
        owner: owner.as_bytes().to_vec().into(),
        lease_ms: 30_000,
        fence: false,
        kind: LockKind::Exclusive,
        keepalive: None,
        campaign: None,
    }
}

fn held(owner: &str, holds: i64) -> LockState {
    LockState::Held {
        owner: owner.as_bytes().to_vec().into(),
        holds,
    }
}

/// A queue of `n` waiters w0..w{n-1} with ids 1..=n.
fn queue(n: u64) -> Fifo<Request> {
    let mut q = Fifo::default();
    for i in 1..=n {
        q.push_back(i, req(&format!("w{i}")));
    }
    q
}

fn acquire(c: &mut Criterion) {
    let mut g = c.benchmark_group("acquire");
    let a = req("8743c9c0-0795-4907-87fd-6c719a6b4586:1");
    let mut empty: Fifo<Request> = Fifo::default();
    g.bench_function("free lock", |b| {
        b.iter(|| {
            let mut t = Transition::<Request>::new(LockState::Free, NOW, None);
            black_box(t.acquire(&mut empty, black_box(&a), true)).ok();
            black_box(t.changes.len())
        })
    });
    let owner = std::str::from_utf8(&a.owner).unwrap_or("a").to_string();
    g.bench_function("re-entry", |b| {
        b.iter(|| {
            let mut t = Transition::<Request>::new(held(&owner, 1), NOW, None);
            black_box(t.acquire(&mut empty, black_box(&a), true)).ok();
            black_box(t.changes.len())
        })
    });
    let other = req("someone-else:1");
    let mut q = queue(100);
    g.bench_function("busy lock, caller must wait", |b| {
        b.iter(|| {
            let mut t = Transition::<Request>::new(held(&owner, 1), NOW, None);
            black_box(t.acquire(&mut q, black_box(&other), true)).ok();
            black_box(t.changes.len())
        })
    });
    g.finish();
}

/// Release to 0 handing the lock to the queue head; the released owner is
/// queued again at the tail so the queue keeps its length from one iteration
/// to the next (the measured step is release + one push_back).
fn release(c: &mut Criterion) {
    let mut g = c.benchmark_group("release");
    let mut empty: Fifo<Request> = Fifo::default();
    g.bench_function("no waiters", |b| {
        b.iter(|| {
            let mut t = Transition::<Request>::new(held("a", 1), NOW, None);
            black_box(t.release(&mut empty, black_box(b"a"), None)).ok();
            black_box(t.changes.len())
        })
    });
    for n in [1u64, 10_000] {
        let mut q = queue(n);
        let mut next_id = n + 1;
        let mut owner = req("h");
        g.bench_function(format!("hand-off to head of {n} waiters + re-queue"), |b| {
            b.iter(|| {
                let mut t = Transition::<Request>::new(
                    LockState::Held {
                        owner: owner.owner.clone(),
                        holds: 1,
                    },
                    NOW,
                    None,
                );
                black_box(t.release(&mut q, &owner.owner, None)).ok();
                let woken = t.wakes.pop().map(|w| w.waiter);
                q.push_back(next_id, std::mem::replace(&mut owner, req("x")));
                next_id += 1;
                if let Some(w) = woken {
                    owner = w;
                }
                black_box(t.changes.len())
            })
        });
    }
    g.finish();
}

fn fifo(c: &mut Criterion) {
    let mut g = c.benchmark_group("fifo");
    g.bench_function("push_back + pop_front, 10k queued", |b| {
        let mut q = queue(10_000);
        let mut id = 10_001;
        b.iter(|| {
            q.push_back(id, req("w"));
            id += 1;
            black_box(q.pop_front().map(|(i, _)| i))
        })
    });
    g.bench_function("remove from the middle + push_back, 10k queued", |b| {
        let mut q = queue(10_000);
        let mut id = 10_001;
        let mut victim = 5_000;
        b.iter(|| {
            let w = q.remove(black_box(victim));
            q.push_back(id, w.unwrap_or_else(|| req("w")));
            victim = id - 5_000;
            id += 1;
        })
    });
    g.bench_function("build a queue of 10k", |b| {
        b.iter(|| black_box(queue(10_000).len()))
    });
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1500))
        .sample_size(50)
}

criterion_group! {
    name = rules;
    config = config();
    targets = acquire, release, fifo
}
criterion_main!(rules);
