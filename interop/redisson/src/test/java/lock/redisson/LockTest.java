package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import lock.redisson.harness.Redissons;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.exceptions.JedisDataException;

/**
 * Redisson's {@code RLock} and {@code LOCK.*} callers on the same names: each sees the other's
 * holds, a release on either side serves a waiter on the other at once (a Redisson unlock a
 * queued {@code LOCK.ACQUIRE ... BLOCK} caller, a {@code LOCK.RELEASE} a waiting Redisson thread
 * by its message, long before the lease it was told to wait for), and under contention no two
 * hold at once.
 */
class LockTest extends OnOneServer {
    @Test
    void redissonSeesAModuleHold() throws Exception {
        String key = name("lock");
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "m1", 20_000));
        RLock lock = redisson().getLock(key);

        assertTrue(lock.isLocked());
        assertFalse(lock.isHeldByCurrentThread());
        assertEquals(0, lock.getHoldCount());
        long ttl = lock.remainTimeToLive();
        assertTrue(ttl > 0 && ttl <= 20_000, "remainTimeToLive " + ttl);
        assertFalse(lock.tryLock());
        assertFalse(lock.tryLock(50, 1_000, TimeUnit.MILLISECONDS));
        assertThrows(IllegalMonitorStateException.class, lock::unlock);

        assertEquals(2L, holder.acquire(key, "m1", 20_000));
        assertEquals(1L, holder.release(key, "m1"));
        assertTrue(lock.isLocked());
        assertEquals(0L, holder.release(key, "m1"));
        assertFalse(lock.isLocked());
        assertEquals(-2, lock.remainTimeToLive());
        assertNothingLeft();
    }

    @Test
    void moduleSeesAReentrantRedissonHold() {
        String key = name("lock");
        RedissonClient redisson = redisson();
        RLock lock = redisson.getLock(key);
        ModuleCaller other = module();

        lock.lock(20, TimeUnit.SECONDS);
        lock.lock(20, TimeUnit.SECONDS);
        Map<String, Object> info = other.info(key);
        assertEquals(Redissons.owner(redisson, Thread.currentThread()), info.get("owner"));
        assertEquals(2L, info.get("holds"));
        assertNull(other.acquire(key, "m1", 1_000));
        JedisDataException notOwner = assertThrows(JedisDataException.class, () -> other.release(key, "m1"));
        assertTrue(notOwner.getMessage().startsWith("NOTOWNER"), notOwner.getMessage());

        lock.unlock();
        assertEquals(1L, other.info(key).get("holds"));
        assertNull(other.acquire(key, "m1", 1_000));
        lock.unlock();
        assertEquals(1L, other.acquire(key, "m1", 1_000));
        assertEquals(0L, other.release(key, "m1"));
        assertNothingLeft();
    }

    @Test
    void aRedissonUnlockServesAQueuedModuleCallerAtOnce() {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller waiting = module();
        lock.lock(60, TimeUnit.SECONDS);

        Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
        waitForModuleWaiters(key, 1);
        long unlocked = System.nanoTime();
        lock.unlock();
        // Served long before the 60 s lease Redisson took would have ended.
        assertEquals(1L, waiter.get());
        System.out.printf("[%s] Redisson unlock -> LOCK.ACQUIRE BLOCK caller answered: %.2f ms%n",
                name("lock"), Processes.msSince(unlocked, waiter.doneNanos()));
        assertEquals("m1", look().info(key).get("owner"));
        assertEquals(0L, waiting.release(key, "m1"));
        assertNothingLeft();
    }

    @Test
    void aModuleReleaseWakesAWaitingRedissonThreadByItsMessage() {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "m1", 60_000));

        Async<Boolean> waiter = Async.start("redisson waiter", () -> {
            lock.lock();
            return lock.isHeldByCurrentThread();
        });
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(key)) == 1);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m1"));
        // Redisson was told to retry when the 60 s lease ends: only the message wakes it sooner.
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.RELEASE -> waiting Redisson thread has the lock: %.2f ms%n",
                name("lock"), Processes.msSince(released, waiter.doneNanos()));
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft();
    }

    @Test
    void theWatchdogKeepsARedissonHoldWhileAModuleCallerWaits() {
        String key = name("lock");
        // A short watchdog lease (renewed every third of it) to see several renewals.
        RLock lock = redisson(c -> c.setLockWatchdogTimeout(1_500)).getLock(key);
        ModuleCaller waiting = module();
        lock.lock();

        Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
        waitForModuleWaiters(key, 1);
        // Three leases: the module's lease timer follows each renewal and never hands the lock on.
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(4_500);
        while (System.nanoTime() < until) {
            assertFalse(waiter.isDone(), "the module caller was served while the watchdog renewed");
            Processes.sleep(50);
        }
        assertTrue(lock.isHeldByCurrentThread());
        long unlocked = System.nanoTime();
        lock.unlock();
        assertEquals(1L, waiter.get());
        System.out.printf("[%s] Redisson unlock (watchdog hold) -> module caller answered: %.2f ms%n",
                name("lock"), Processes.msSince(unlocked, waiter.doneNanos()));
        assertEquals(0L, waiting.release(key, "m1"));
        assertNothingLeft();
    }

    @Test
    void aRedissonLeaseThatEndsGoesToTheQueuedModuleCaller() {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller waiting = module();
        lock.lock(700, TimeUnit.MILLISECONDS);
        long deadline = (Long) look().call("PEXPIRETIME", key);

        Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
        assertEquals(1L, waiter.get());
        // The new lease is counted from the grant, which came after the old one ended.
        long granted = (Long) look().call("PEXPIRETIME", key) - 10_000;
        assertTrue(granted > deadline, "granted at " + granted + ", lease ended at " + deadline);
        System.out.printf("[%s] Redisson lease end -> module caller granted %d ms after the deadline%n",
                name("lock"), granted - deadline);
        assertTrue(lock.isLocked());
        assertFalse(lock.isHeldByCurrentThread());
        assertThrows(IllegalMonitorStateException.class, lock::unlock);
        assertEquals(0L, waiting.release(key, "m1"));
        assertNothingLeft();
    }

    @Test
    void tryLockWithWaitAndLeaseAgainstAModuleHolder() throws Exception {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "m1", 60_000));

        long start = System.nanoTime();
        assertFalse(lock.tryLock(300, 5_000, TimeUnit.MILLISECONDS));
        // Redisson counts its wait on System.currentTimeMillis(), whole milliseconds.
        assertTrue(Processes.msSince(start, System.nanoTime()) >= 299, "tryLock gave up before its wait");

        Async<Boolean> waiter = Async.start("redisson tryLock", () -> lock.tryLock(15_000, 5_000, TimeUnit.MILLISECONDS));
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(key)) == 1);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m1"));
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.RELEASE -> Redisson tryLock(15 s wait) returned: %.2f ms%n",
                name("lock"), Processes.msSince(released, waiter.doneNanos()));
        long ttl = lock.remainTimeToLive();
        assertTrue(ttl > 0 && ttl <= 5_000, "the lease Redisson asked for: " + ttl);
        assertNull(holder.acquire(key, "m1", 1_000));
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft();
    }

    @Test
    void forceUnlockEndsAModuleHoldAndServesTheNextModuleCaller() {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller holder = module();
        ModuleCaller waiting = module();
        assertEquals(1L, holder.acquire(key, "m1", 60_000));
        Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m2", 10_000, 0));
        waitForModuleWaiters(key, 1);

        assertTrue(lock.forceUnlock());
        assertEquals(1L, waiter.get());
        assertEquals("m2", look().info(key).get("owner"));
        JedisDataException notOwner = assertThrows(JedisDataException.class, () -> holder.release(key, "m1"));
        assertTrue(notOwner.getMessage().startsWith("NOTOWNER"), notOwner.getMessage());
        assertEquals(0L, waiting.release(key, "m2"));
        assertNothingLeft();
    }

    @Test
    void moduleForceReleaseWakesRedissonWaiters() {
        String key = name("lock");
        RLock lock = redisson().getLock(key);
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "m1", 60_000));
        Async<Boolean> waiter = Async.start("redisson waiter", () -> lock.tryLock(15_000, 5_000, TimeUnit.MILLISECONDS));
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(key)) == 1);

        assertEquals(1L, look().forceRelease(key));
        assertTrue(waiter.get());
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft();
    }

    /** Who takes the lock first, and holds it until the other side's contenders all wait. */
    enum First { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(First.class)
    void redissonThreadsAndModuleCallersNeverHoldTogether(First first) throws Exception {
        String key = name("lock-" + first);
        Guard guard = Guard.exclusive();
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 4;
        int moduleCallers = 4;
        int cycles = 20;

        // The first side's holder.
        RLock firstRedisson = clients[0].getLock(key);
        ModuleCaller firstModule = module();
        if (first == First.REDISSON) {
            firstRedisson.lock();
        } else {
            assertEquals(1L, firstModule.acquire(key, "first", 30_000));
        }

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
            ModuleCaller caller = module();
            contenders.addModule(who, cycles, caller, key, 30_000, guard);
        }
        long start = System.nanoTime();
        contenders.start();
        Processes.waitUntil("every contender waiting", () -> look().waiters(key) == moduleCallers
                && server.subscribers(Channels.lock(key)) == clients.length);
        if (first == First.REDISSON) {
            firstRedisson.unlock();
        } else {
            assertEquals(0L, firstModule.release(key, "first"));
        }
        contenders.join(Duration.ofSeconds(60));

        guard.assertNoBreach();
        int holds = (clients.length * threadsPerClient + moduleCallers) * cycles;
        assertEquals(holds, guard.entries());
        System.out.printf("[%s] %d holds (%d Redisson threads in %d clients, %d module callers) in %.0f ms, no overlap%n",
                key, holds, clients.length * threadsPerClient, clients.length, moduleCallers, Processes.msSince(start, System.nanoTime()));
        assertNothingLeft();
    }
}
