package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.CommandStats;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.PerTestClients;
import lock.redisson.harness.Processes;
import lock.redisson.harness.Redissons;
import lock.redisson.harness.SentinelGroup;
import lock.redisson.harness.Server;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import org.redisson.config.Config;
import redis.clients.jedis.Jedis;
import redis.clients.jedis.exceptions.JedisConnectionException;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * Redisson in sentinel mode and {@code LOCK.*} callers on the master the sentinels name, a master
 * and one replica both with the module, under three real sentinels. Redisson keeps its default
 * {@code checkLockSyncedSlaves}: each lock, unlock and renewal script is followed by {@code WAIT 1}
 * and fails with {@code NoSyncedSlavesException} if the replica acknowledges nothing. With a
 * healthy replica, Redisson takes, frees and contends for locks the module holds and hands on,
 * its {@code WAIT}s answered (the replica has its hold when {@code lock()} returns). Across a
 * clean forced failover ({@code SENTINEL FAILOVER}, the old master then made a replica at once)
 * both sides' holds survive on the new master, the module's with its absolute deadline; Redisson
 * finds the new master and its watchdog renews there; the old master answers its queued module
 * caller {@code UNBLOCKED} (docs/semantics.md, Failover) and refuses {@code LOCK.*} writes; module
 * callers that ask the sentinels again wait and release on the new master, where a Redisson unlock
 * serves a queued module caller and a {@code LOCK.RELEASE} wakes a waiting Redisson thread by its
 * message; and no two ever hold one lock. When Sentinel alone demotes the old master (about 10 s
 * after the switch, {@code REPLICAOF} and {@code CLIENT KILL TYPE normal} in one transaction), a
 * caller queued there sees its connection closed instead, was granted nothing, and queues again
 * on the new master.
 *
 * <p>The tests share one group and work on whichever server the sentinels name; their order only
 * makes runs alike: the healthy group's tests first, then one failover of each kind.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class SentinelFailoverTest extends PerTestClients {
    /**
     * The failover test's watchdog lease, Redisson's default, renewed every third of it. A
     * renewal that Redisson sends in the moment between the old master's demotion and its own
     * switch to the new master (it asks a sentinel every second) gets {@code READONLY}; Redisson
     * retries the batch for 3.5 to 7 s ({@code retryAttempts} 4, {@code retryDelay} 0.5-1 s then
     * 1-2 s), re-sending {@code EVALSHA} to the new master, which never loaded the script
     * ({@code NOSCRIPT}, and the batch still reports the first {@code READONLY}), logs the
     * failure and renews again a third of the lease after that: up to 2/3 of the lease plus 7 s
     * after the last renewal that took. The lease must outlast that, so above 21 s: with 30 s
     * the renewal comes at most 27 s into it. With 10 s (as here before) the lease ran out on
     * the new master and the next renewal, finding no field, stopped the watchdog for good: the
     * Redisson thread believed it held a lock nobody held (seen once in CI, reproduced by
     * starting the failover 1.8 s after {@code lock()}, in both Redisson lines).
     */
    static final long WATCHDOG_MS = 30_000;

    /**
     * How long a holder waits to be told to leave before it gives up (reached only on failure):
     * the failover test keeps its holders inside until it has seen the watchdog renew on the new
     * master, up to one watchdog lease after {@code lock()}, then hands off.
     */
    static final Duration HOLDER_PATIENCE = Processes.PATIENCE.plusMillis(WATCHDOG_MS);

    private static SentinelGroup group;

    @BeforeAll
    static void startGroup() {
        group = SentinelGroup.start();
    }

    @AfterAll
    static void stopGroup() {
        if (group != null) {
            group.close();
        }
    }

    @BeforeEach
    void emptyMaster() {
        // A test may run after the failover: the master is whichever the sentinels name.
        try (Jedis jedis = group.waitUntilSettled().jedis()) {
            jedis.flushAll();
        }
    }

    /** A Redisson client that finds the master through the sentinels, shut down after the test. */
    private RedissonClient redisson(Consumer<Config> tweak) {
        return keep(Redissons.sentinel(SentinelGroup.MASTER_NAME, group.sentinelUrls(), tweak));
    }

    private static int moduleWaiters(Server server, String key) {
        try (ModuleCaller look = new ModuleCaller(server)) {
            return look.waiters(key);
        }
    }

    private static long pexpiretime(Server server, String key) {
        try (ModuleCaller look = new ModuleCaller(server)) {
            return (Long) look.call("PEXPIRETIME", key);
        }
    }

    private static Map<String, String> hash(Server server, String key) {
        try (Jedis jedis = server.jedis()) {
            return jedis.hgetAll(key);
        }
    }

    /** Whether {@code replica} has applied {@code master}'s replication stream up to where it stands now. */
    private static boolean caughtUp(Server master, Server replica) {
        long target = Long.parseLong(master.info("replication", "master_repl_offset"));
        String done = replica.info("replication", "slave_repl_offset");
        return "up".equals(replica.info("replication", "master_link_status")) && done != null && Long.parseLong(done) >= target;
    }

    private static void await(CountDownLatch latch, String what) {
        await(latch, what, Processes.PATIENCE);
    }

    private static void await(CountDownLatch latch, String what, Duration bound) {
        try {
            if (!latch.await(bound.toMillis(), TimeUnit.MILLISECONDS)) {
                throw new AssertionError("timed out waiting for " + what);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError("interrupted", e);
        }
    }

    /** A holder inside {@code guard} on a thread of its own, from now until {@link #leave()}. */
    private static final class Inside {
        private final CountDownLatch leave = new CountDownLatch(1);
        private final Async<Void> thread;

        Inside(Guard guard, String who) {
            thread = Async.start(who + " inside", () -> {
                guard.hold(who, () -> await(leave, who + " to leave", HOLDER_PATIENCE));
                return null;
            });
        }

        /** Leaves the guard (before the holder releases). */
        void leave() {
            leave.countDown();
            thread.get();
        }
    }

    @Test
    @Order(1)
    void redissonWithWaitTakesAndFreesALockTheModuleHeld() {
        Server master = group.waitUntilSettled();
        Server replica = group.other(master);
        RedissonClient redisson = redisson(c -> {});
        String key = name("lock");
        RLock lock = redisson.getLock(key);
        ModuleCaller holder = moduleOn(master);
        assertEquals(1L, holder.acquire(key, "m1", 60_000));
        long waits = CommandStats.calls(master, "wait");

        Async<Boolean> waiter = Async.start("redisson waiter", () -> {
            lock.lock();
            return lock.isHeldByCurrentThread();
        });
        Processes.waitUntil("the Redisson client subscribed", () -> master.subscribers(Channels.lock(key)) == 1);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m1"));
        // Redisson was told to retry when the 60 s lease ends: only the message wakes it sooner.
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.RELEASE -> waiting Redisson thread has the lock (its script and WAIT 1 done): %.2f ms%n",
                key, Processes.msSince(released, waiter.doneNanos()));
        // lock() returned once WAIT counted the replica's acknowledgement: the replica has the hold.
        String owner = redisson.getId() + ":" + waiter.thread().getId();
        assertEquals(Map.of(owner, "1"), hash(replica, key));

        ModuleCaller waiting = moduleOn(master);
        Async<Long> moduleWaiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m2", 10_000, 0));
        Processes.waitUntil("the module caller queued", () -> moduleWaiters(master, key) == 1);
        long unlocked = System.nanoTime();
        // A NoSyncedSlavesException would fail the join.
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertEquals(1L, moduleWaiter.get());
        System.out.printf("[%s] Redisson unlock (with WAIT 1) -> LOCK.ACQUIRE BLOCK caller answered: %.2f ms%n",
                key, Processes.msSince(unlocked, moduleWaiter.doneNanos()));
        long sent = CommandStats.calls(master, "wait") - waits;
        assertTrue(sent >= 2, "Redisson sent " + sent + " WAIT after its lock and unlock scripts");
        assertEquals("m2", waiting.info(key).get("owner"));
        assertEquals(0L, waiting.release(key, "m2"));
        group.assertNothingLeft();
    }

    @Test
    @Order(2)
    void redissonThreadsWithWaitAndModuleCallersNeverHoldTogether() {
        Server master = group.waitUntilSettled();
        String key = name("lock");
        Guard guard = Guard.exclusive();
        RedissonClient[] clients = {redisson(c -> {}), redisson(c -> {})};
        int threadsPerClient = 2;
        int moduleCallers = 2;
        int cycles = 10;
        long waits = CommandStats.calls(master, "wait");

        ModuleCaller first = moduleOn(master);
        assertEquals(1L, first.acquire(key, "first", 30_000));
        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RLock lock = clients[c].getLock(key);
            for (int t = 0; t < threadsPerClient; t++) {
                String who = "redisson-" + c + "-" + t;
                contenders.addRedisson(who, cycles, lock, guard);
            }
        }
        for (int m = 0; m < moduleCallers; m++) {
            String who = "module-" + m;
            ModuleCaller caller = moduleOn(master);
            contenders.addModule(who, cycles, caller, key, 30_000, guard);
        }
        long start = System.nanoTime();
        contenders.start();
        Processes.waitUntil("every contender waiting", () -> moduleWaiters(master, key) == moduleCallers
                && master.subscribers(Channels.lock(key)) == clients.length);
        assertEquals(0L, first.release(key, "first"));
        contenders.join(Duration.ofSeconds(60));

        guard.assertNoBreach();
        int holds = (clients.length * threadsPerClient + moduleCallers) * cycles;
        assertEquals(holds, guard.entries());
        System.out.printf("[%s] %d holds (%d Redisson threads in %d clients, each script followed by WAIT 1: %d WAIT; %d module callers) in %.0f ms, no overlap%n",
                key, holds, clients.length * threadsPerClient, clients.length, CommandStats.calls(master, "wait") - waits,
                moduleCallers, Processes.msSince(start, System.nanoTime()));
        group.assertNothingLeft();
    }

    @Test
    @Order(3)
    void holdsOfBothSidesSurviveAFailoverAndHandOffOnTheNewMaster() {
        Server old = group.waitUntilSettled();
        Server next = group.other(old);
        RedissonClient redisson = redisson(c -> c.setLockWatchdogTimeout(WATCHDOG_MS));
        String moduleHeld = name("module-held");
        String redissonHeld = name("redisson-held");
        Guard moduleHeldGuard = Guard.exclusive();
        Guard redissonHeldGuard = Guard.exclusive();

        // A module caller holds one lock on the old master: a 60 s lease, nothing renews it.
        ModuleCaller holder = moduleOn(old);
        assertEquals(1L, holder.acquire(moduleHeld, "holder", 60_000));
        Inside holderInside = new Inside(moduleHeldGuard, "module holder");

        // A Redisson thread holds the other, its watchdog renewing it, until told to unlock.
        RLock redissonLock = redisson.getLock(redissonHeld);
        CountDownLatch locked = new CountDownLatch(1);
        CountDownLatch unlock = new CountDownLatch(1);
        Async<Long> redissonHolder = Async.start("redisson holder", () -> {
            redissonLock.lock();
            locked.countDown();
            redissonHeldGuard.hold("redisson holder", () -> await(unlock, "the word to unlock", HOLDER_PATIENCE));
            long unlocking = System.nanoTime();
            redissonLock.unlock();
            return unlocking;
        });
        await(locked, "the Redisson holder's lock()");
        String redissonOwner = redisson.getId() + ":" + redissonHolder.thread().getId();

        // A module caller queued on the old master behind Redisson's hold.
        ModuleCaller queuedOnOld = moduleOn(old);
        Async<Long> waitOnOld = Async.start("module waiter on the old master",
                () -> queuedOnOld.acquireWaiting(redissonHeld, "waiter", 10_000, 0));
        Processes.waitUntil("the module caller queued on the old master", () -> moduleWaiters(old, redissonHeld) == 1);

        // The replica has both holds, the module's with the master's absolute deadline.
        long moduleDeadline = pexpiretime(old, moduleHeld);
        Processes.waitUntil("the replica caught up", () -> caughtUp(old, next));
        assertEquals(moduleDeadline, pexpiretime(next, moduleHeld));
        assertEquals(Map.of(redissonOwner, "1"), hash(next, redissonHeld));

        Duration failover = group.forceFailover(old, next);
        long switched = System.nanoTime();
        System.out.printf("[%s] SENTINEL FAILOVER -> every sentinel names the new master: %d ms%n",
                testName(), failover.toMillis());

        // The old master, now a replica, answered its queued caller: nothing granted, call again
        // on the new master. It refuses the holder's release on its old connection.
        Throwable unblocked = waitOnOld.failure();
        assertTrue(unblocked instanceof JedisDataException && unblocked.getMessage().startsWith("UNBLOCKED"),
                "the caller queued on the old master: " + unblocked);
        JedisDataException readonly = assertThrows(JedisDataException.class, () -> holder.release(moduleHeld, "holder"));
        assertTrue(readonly.getMessage().startsWith("READONLY"), readonly.getMessage());

        // Module callers find the new master through the sentinels, and both holds on it.
        Server master = group.master();
        assertSame(next, master);
        ModuleCaller look = moduleOn(master);
        assertEquals("holder", look.info(moduleHeld).get("owner"));
        assertEquals(moduleDeadline, pexpiretime(master, moduleHeld), "the module hold's deadline");
        assertEquals(redissonOwner, look.info(redissonHeld).get("owner"));

        // Redisson finds the new master and its watchdog renews there, before the lease in force
        // ends (else the lock was lost): nothing else writes that lease on the new master.
        long leaseEnd = pexpiretime(master, redissonHeld);
        Processes.waitUntil("Redisson's watchdog to renew on the new master before the lease ends",
                Duration.ofMillis(Math.max(0, leaseEnd - System.currentTimeMillis())),
                () -> pexpiretime(master, redissonHeld) > leaseEnd);
        System.out.printf("[%s] switch -> Redisson's watchdog renewed on the new master: %.0f ms%n",
                testName(), Processes.msSince(switched, System.nanoTime()));

        // The waiter calls again on the new master, and Redisson's unlock there serves it. The
        // unlock's WAIT 1 needs the old master attached as the new one's replica.
        ModuleCaller waiting = moduleOn(master);
        Async<Long> waitOnNew = Async.start("module waiter on the new master", () -> {
            Long granted = waiting.acquireWaiting(redissonHeld, "waiter", 10_000, 0);
            redissonHeldGuard.hold("module waiter", () -> {});
            return granted;
        });
        Processes.waitUntil("the module caller queued on the new master", () -> moduleWaiters(master, redissonHeld) == 1);
        assertSame(master, group.waitUntilSettled());
        unlock.countDown();
        long unlocking = redissonHolder.get();
        assertEquals(1L, waitOnNew.get());
        System.out.printf("[%s] Redisson unlock on the new master -> LOCK.ACQUIRE BLOCK caller answered: %.2f ms%n",
                redissonHeld, Processes.msSince(unlocking, waitOnNew.doneNanos()));
        assertEquals(0L, waiting.release(redissonHeld, "waiter"));

        // A Redisson thread waits for the module's hold on the new master; the holder, connected
        // there now, releases it, and the message wakes the thread long before the 60 s lease.
        RLock moduleHeldLock = redisson.getLock(moduleHeld);
        Async<Boolean> redissonWaiter = Async.start("redisson waiter", () -> {
            moduleHeldLock.lock();
            moduleHeldGuard.hold("redisson waiter", () -> {});
            return moduleHeldLock.isHeldByCurrentThread();
        });
        Processes.waitUntil("the Redisson client subscribed on the new master",
                () -> master.subscribers(Channels.lock(moduleHeld)) == 1);
        holderInside.leave();
        long released = System.nanoTime();
        assertEquals(0L, moduleOn(master).release(moduleHeld, "holder"));
        assertTrue(redissonWaiter.get());
        System.out.printf("[%s] LOCK.RELEASE on the new master -> waiting Redisson thread has the lock: %.2f ms%n",
                moduleHeld, Processes.msSince(released, redissonWaiter.doneNanos()));
        moduleHeldLock.unlockAsync(redissonWaiter.thread().getId()).toCompletableFuture().join();

        moduleHeldGuard.assertNoBreach();
        redissonHeldGuard.assertNoBreach();
        assertEquals(2, moduleHeldGuard.entries());
        assertEquals(2, redissonHeldGuard.entries());
        group.assertNothingLeft();
    }

    @Test
    @Order(4)
    void aCallerQueuedOnAMasterSentinelDemotesSeesItsConnectionClosedAndQueuesOnTheNewOne() {
        Server old = group.waitUntilSettled();
        Server next = group.other(old);
        String key = name("lock");
        Guard guard = Guard.exclusive();
        ModuleCaller holder = moduleOn(old);
        assertEquals(1L, holder.acquire(key, "holder", 60_000));
        Inside holderInside = new Inside(guard, "module holder");
        ModuleCaller queuedOnOld = moduleOn(old);
        Async<Long> waitOnOld = Async.start("module waiter on the old master", () -> {
            Long granted = queuedOnOld.acquireWaiting(key, "waiter", 10_000, 0);
            guard.hold("module waiter on the old master", () -> {});
            return granted;
        });
        Processes.waitUntil("the module caller queued on the old master", () -> moduleWaiters(old, key) == 1);
        long deadline = pexpiretime(old, key);
        Processes.waitUntil("the replica caught up", () -> caughtUp(old, next));

        // Sentinel alone: the old master stays a master until a sentinel demotes it, with
        // REPLICAOF and CLIENT KILL TYPE normal in one transaction, which closes the waiter's
        // connection before its UNBLOCKED answer is written. Nothing was granted: it calls again.
        group.failover(old, next);
        long switched = System.nanoTime();
        Throwable closed = waitOnOld.failure();
        System.out.printf("[%s] switch -> Sentinel demoted the old master, its queued caller's connection closed: %.0f ms%n",
                key, Processes.msSince(switched, System.nanoTime()));
        assertTrue(closed instanceof JedisConnectionException, "the caller queued on the old master: " + closed);
        assertSame(next, group.waitUntilSettled());

        // The hold is on the new master with its deadline; the caller queues there, and the
        // holder, connected there now, releases it to it.
        ModuleCaller waiting = moduleOn(next);
        assertEquals("holder", waiting.info(key).get("owner"));
        assertEquals(deadline, pexpiretime(next, key), "the module hold's deadline");
        Async<Long> waitOnNew = Async.start("module waiter on the new master", () -> {
            Long granted = waiting.acquireWaiting(key, "waiter", 10_000, 0);
            guard.hold("module waiter", () -> {});
            return granted;
        });
        Processes.waitUntil("the module caller queued on the new master", () -> moduleWaiters(next, key) == 1);
        holderInside.leave();
        assertEquals(0L, moduleOn(next).release(key, "holder"));
        assertEquals(1L, waitOnNew.get());
        assertEquals(0L, waiting.release(key, "waiter"));
        guard.assertNoBreach();
        assertEquals(2, guard.entries());
        group.assertNothingLeft();
    }
}
