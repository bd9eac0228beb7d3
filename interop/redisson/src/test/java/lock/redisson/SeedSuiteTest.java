package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * The lock's first test suite (1,000 racing threads, 100 threads in turn, a wait that times
 * out, a lease that ends) with real Redisson, twice: Redisson alone on a server with the module
 * loaded, where the module must change nothing (it grants, hands off and releases nothing), and
 * Redisson threads mixed with {@code LOCK.*} callers, half and half.
 */
class SeedSuiteTest extends OnOneServer {
    enum Mode {
        /** Every contender a Redisson thread; the module only loaded. */
        REDISSON_ALONE,
        /** Redisson threads and module callers, alternating. */
        MIXED
    }

    /** A contender of either kind for one lock: Redisson thread or module caller. */
    private interface Holder {
        /** Takes the lock, waiting as long as it takes. */
        void lock();

        /** Takes it if it comes within {@code waitMs}. */
        boolean tryLock(long waitMs) throws InterruptedException;

        void unlock();
    }

    private Holder redissonHolder(RedissonClient client, String key) {
        RLock lock = client.getLock(key);
        return new Holder() {
            @Override
            public void lock() {
                lock.lock();
            }

            @Override
            public boolean tryLock(long waitMs) throws InterruptedException {
                return lock.tryLock(waitMs, TimeUnit.MILLISECONDS);
            }

            @Override
            public void unlock() {
                lock.unlock();
            }
        };
    }

    private Holder moduleHolder(String key, String owner, long leaseMs) {
        ModuleCaller caller = module();
        return new Holder() {
            @Override
            public void lock() {
                assertEquals(1L, caller.acquireWaiting(key, owner, leaseMs, 0));
            }

            @Override
            public boolean tryLock(long waitMs) {
                // BLOCK 0 would wait for ever: no wait is no BLOCK.
                Long reply = waitMs == 0 ? caller.acquire(key, owner, leaseMs) : caller.acquireWaiting(key, owner, leaseMs, waitMs);
                return reply != null;
            }

            @Override
            public void unlock() {
                assertEquals(0L, caller.release(key, owner));
            }
        };
    }

    /** The module's counters that any work of its own would move. */
    private long[] moduleWork() {
        return Arrays.stream(new String[] {"acquired", "reentered", "released", "handed_off", "expired_with_waiters",
                "wait_timeouts", "force_released"}).mapToLong(f -> Long.parseLong(server.info("lock", "lock_" + f))).toArray();
    }

    private void assertModuleDidNothing(Mode mode, long[] before) {
        if (mode == Mode.REDISSON_ALONE) {
            assertEquals(Arrays.toString(before), Arrays.toString(moduleWork()),
                    "the module acted on a Redisson-only run (acquired, reentered, released, handed_off, expired_with_waiters, wait_timeouts, force_released)");
        }
    }

    @ParameterizedTest
    @EnumSource(Mode.class)
    void aThousandRacingThreads(Mode mode) {
        String key = name("race-" + mode);
        long[] before = moduleWork();
        Guard guard = Guard.exclusive();
        int threads = 1_000;
        // Four Redisson "processes", sharing the Redisson threads.
        List<RedissonClient> clients = List.of(redisson(), redisson(), redisson(), redisson());
        CountDownLatch go = new CountDownLatch(1);
        Contenders contenders = new Contenders();
        for (int i = 0; i < threads; i++) {
            boolean module = mode == Mode.MIXED && i % 2 == 1;
            String who = (module ? "module-" : "redisson-") + i;
            Holder holder = module ? moduleHolder(key, who, 30_000) : redissonHolder(clients.get(i % clients.size()), key);
            contenders.add(who, 1, cycle -> {
                go.await();
                holder.lock();
                try {
                    guard.hold(who, () -> {});
                } finally {
                    holder.unlock();
                }
            });
        }
        long start = System.nanoTime();
        contenders.start();
        go.countDown();
        contenders.join(Duration.ofSeconds(120));

        guard.assertNoBreach();
        assertEquals(threads, guard.entries());
        System.out.printf("[%s] %d threads raced, each held once, no overlap, in %.0f ms%n",
                key, threads, (System.nanoTime() - start) / 1e6);
        assertModuleDidNothing(mode, before);
        assertNothingLeft();
    }

    @ParameterizedTest
    @EnumSource(Mode.class)
    void aHundredThreadsInTurn(Mode mode) throws Exception {
        String key = name("turn-" + mode);
        long[] before = moduleWork();
        Guard guard = Guard.exclusive();
        RedissonClient client = redisson();
        String channel = Channels.lock(key);
        int threads = 100;
        List<Double> handOffs = new ArrayList<>();

        // Thread i starts while thread i-1 holds, finds the lock taken, waits; i-1 releases once
        // i is seen waiting (queued in the module, or subscribed to the unlock channel), so each
        // hold is handed straight to the next, alternately across protocols when mixed.
        Holder previous = null;
        Async<Long> previousHold = null;
        CountDownLatch previousRelease = null;
        for (int i = 0; i < threads; i++) {
            boolean module = mode == Mode.MIXED && i % 2 == 1;
            String who = (module ? "module-" : "redisson-") + i;
            Holder holder = module ? moduleHolder(key, who, 30_000) : redissonHolder(client, key);
            CountDownLatch release = new CountDownLatch(1);
            if (!module) {
                // The last Redisson waiter's subscription is gone (Redisson unsubscribes after its grant).
                Processes.waitUntil("no Redisson client subscribed", () -> server.subscribers(channel) == 0);
            }
            boolean first = i == 0;
            CompletableFuture<Long> granted = new CompletableFuture<>();
            Async<Long> hold = Async.start(who, () -> {
                if (!first) {
                    assertFalse(holder.tryLock(0), who + " found the lock free while its predecessor held it");
                }
                holder.lock();
                granted.complete(System.nanoTime());
                guard.hold(who, () -> assertTrue(release.await(Processes.PATIENCE.toMillis(), TimeUnit.MILLISECONDS)));
                holder.unlock();
                return 0L;
            });
            if (previous != null) {
                if (module) {
                    waitForModuleWaiters(key, 1);
                } else {
                    Processes.waitUntil(who + " subscribed", () -> server.subscribers(channel) == 1);
                }
                long released = System.nanoTime();
                previousRelease.countDown();
                previousHold.get();
                handOffs.add((granted.get(Processes.PATIENCE.toMillis(), TimeUnit.MILLISECONDS) - released) / 1e6);
            } else {
                Processes.waitUntil("the first holder", () -> client.getLock(key).isLocked());
            }
            previous = holder;
            previousHold = hold;
            previousRelease = release;
        }
        previousRelease.countDown();
        previousHold.get();

        guard.assertNoBreach();
        assertEquals(threads, guard.entries());
        handOffs.sort(Double::compare);
        System.out.printf("[%s] %d threads in turn; hand-off from the release call to the next grant: median %.2f ms, max %.2f ms%n",
                key, threads, handOffs.get(handOffs.size() / 2), handOffs.get(handOffs.size() - 1));
        assertModuleDidNothing(mode, before);
        assertNothingLeft();
    }

    @ParameterizedTest
    @EnumSource(Mode.class)
    void aWaitThatTimesOut(Mode mode) throws Exception {
        String key = name("timeout-" + mode);
        long[] before = moduleWork();
        RedissonClient client = redisson();
        // Every (holder, waiter) pair of kinds the mode has.
        boolean[] kinds = mode == Mode.MIXED ? new boolean[] {false, true} : new boolean[] {false};
        for (boolean moduleHolds : kinds) {
            for (boolean moduleWaits : kinds) {
                Holder holder = moduleHolds ? moduleHolder(key, "holder", 60_000) : redissonHolder(client, key);
                Holder waiter = moduleWaits ? moduleHolder(key, "waiter", 60_000) : redissonHolder(redisson(), key);
                Async<Boolean> held = Async.start("holder", () -> {
                    holder.lock();
                    return true;
                });
                assertTrue(held.get());
                long start = System.nanoTime();
                Async<Boolean> waited = Async.start("waiter", () -> waiter.tryLock(300));
                assertFalse(waited.get(), "the waiter got a lock held for 60 s");
                double ms = (waited.doneNanos() - start) / 1e6;
                // The module's BLOCK timer never fires before its time; Redisson counts its wait
                // on System.currentTimeMillis(), whole milliseconds, so it may end up to 1 ms early.
                double least = moduleWaits ? 300 : 299;
                assertTrue(ms >= least, "the wait ended after " + ms + " ms, before its 300 ms");
                if (moduleHolds) {
                    holder.unlock();
                } else {
                    RLock lock = client.getLock(key);
                    lock.unlockAsync(held.thread().getId()).toCompletableFuture().join();
                }
                System.out.printf("[%s] %s waiter on a %s hold gave up after %.0f ms (wait 300 ms)%n",
                        key, moduleWaits ? "module" : "Redisson", moduleHolds ? "module" : "Redisson", ms);
                assertNothingLeft();
            }
        }
        assertModuleDidNothing(mode, before);
    }

    @ParameterizedTest
    @EnumSource(Mode.class)
    void aLeaseThatEnds(Mode mode) throws Exception {
        String key = name("lease-" + mode);
        long[] before = moduleWork();
        boolean[] kinds = mode == Mode.MIXED ? new boolean[] {false, true} : new boolean[] {false};
        for (boolean moduleHolds : kinds) {
            for (boolean moduleWaits : kinds) {
                // A holder that takes a 500 ms lease and never releases.
                if (moduleHolds) {
                    assertEquals(1L, module().acquire(key, "holder", 500));
                } else {
                    RLock lock = redisson().getLock(key);
                    Async<Boolean> held = Async.start("holder", () -> {
                        lock.lock(500, TimeUnit.MILLISECONDS);
                        return true;
                    });
                    assertTrue(held.get());
                }
                long deadline = (Long) look().call("PEXPIRETIME", key);
                RLock redissonWaiter = redisson().getLock(key);
                Holder waiter = moduleWaits ? moduleHolder(key, "waiter", 10_000) : redissonHolder(redisson(), key);
                Async<Long> got = Async.start("waiter", () -> {
                    if (moduleWaits) {
                        waiter.lock();
                    } else {
                        redissonWaiter.lock();
                    }
                    return (Long) look().call("PEXPIRETIME", key);
                });
                long newDeadline = got.get();
                // The waiter's lease (10 s for a module caller, Redisson's 30 s watchdog lease)
                // was counted from its grant, which came after the holder's lease ended.
                long granted = newDeadline - (moduleWaits ? 10_000 : 30_000);
                assertTrue(granted > deadline, "granted at " + granted + " before the lease ended at " + deadline);
                if (moduleWaits) {
                    assertEquals("waiter", look().info(key).get("owner"));
                    waiter.unlock();
                } else {
                    assertTrue(redissonWaiter.isHeldByThread(got.thread().getId()));
                    redissonWaiter.unlockAsync(got.thread().getId()).toCompletableFuture().join();
                }
                System.out.printf("[%s] %s holder's lease ended -> %s waiter granted %d ms after the deadline%n",
                        key, moduleHolds ? "module" : "Redisson", moduleWaits ? "module" : "Redisson", granted - deadline);
                assertNothingLeft();
            }
        }
        assertModuleDidNothing(mode, before);
    }
}
