package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import lock.redisson.harness.RedissonProcess;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.Jedis;

/**
 * A Redisson client killed with {@code kill -9} (its JVM, with its watchdog, subscriptions and
 * connections) while it holds a lock a module caller waits for, and while it waits itself. A
 * dead holder's lock ends with its last lease, renewed or asked for, and the queued module caller
 * is served at that moment by the module's lease timer; a dead waiter leaves nothing behind (a
 * fair waiter keeps its place in Redisson's queue until its deadline, as among Redisson clients).
 */
class KillTest extends OnOneServer {
    /** The watchdog lease the child runs with (Redisson's default is 30 s): renewed every 1 s. */
    static final long WATCHDOG_MS = 3_000;

    private long pexpireTime(String key) {
        return (Long) look().call("PEXPIRETIME", key);
    }

    @Test
    void aKilledWatchdogHolderHandsTheLockToTheModuleCallerAtItsLastLeaseEnd() {
        String key = name("lock");
        try (RedissonProcess holder = RedissonProcess.start(server, "lock", key, -1, WATCHDOG_MS, 0)) {
            holder.await("OWNER");
            holder.go();
            holder.await("HOLDING");
            ModuleCaller waiting = module();
            Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
            waitForModuleWaiters(key, 1);
            // The watchdog renews the lease while the client lives: a renewal moves the deadline.
            long first = pexpireTime(key);
            Processes.waitUntil("a watchdog renewal", () -> pexpireTime(key) > first);
            assertFalse(waiter.isDone());

            holder.kill();
            long lastDeadline = pexpireTime(key);
            assertEquals(1L, waiter.get());
            long granted = pexpireTime(key) - 10_000;
            assertTrue(granted > lastDeadline, "granted at " + granted + " before the last lease ended at " + lastDeadline);
            System.out.printf("[%s] Redisson holder killed -> module caller granted %d ms after its last watchdog lease ended%n",
                    key, granted - lastDeadline);
            assertEquals(0L, waiting.release(key, "m1"));
        }
        assertNothingLeft();
    }

    @Test
    void aKilledHolderWithALeaseTimeHandsTheLockOnAtThatLeaseEnd() {
        String key = name("lock");
        // 4 s: the module caller must be queued within the lease (it waits for its end).
        try (RedissonProcess holder = RedissonProcess.start(server, "lock", key, 4_000, 0, 0)) {
            holder.await("OWNER");
            holder.go();
            holder.await("HOLDING");
            long deadline = pexpireTime(key);
            ModuleCaller waiting = module();
            Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m1", 10_000, 0));
            waitForModuleWaiters(key, 1);
            holder.kill();
            assertEquals(1L, waiter.get());
            long granted = pexpireTime(key) - 10_000;
            assertTrue(granted > deadline, "granted at " + granted + " before the lease ended at " + deadline);
            System.out.printf("[%s] Redisson holder (4 s lease) killed -> module caller granted %d ms after the lease ended%n",
                    key, granted - deadline);
            assertEquals(0L, waiting.release(key, "m1"));
        }
        assertNothingLeft();
    }

    @Test
    void aKilledRedissonWaiterLeavesNothing() {
        String key = name("lock");
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "m1", 60_000));
        try (RedissonProcess waiting = RedissonProcess.start(server, "lock", key, -1, 0, 0)) {
            waiting.await("OWNER");
            waiting.go();
            Processes.waitUntil("the Redisson process subscribed", () -> server.subscribers(Channels.lock(key)) == 1);
            waiting.kill();
            // The server sees the connection close: no subscriber is left.
            Processes.waitUntil("the dead client's subscription gone", () -> server.subscribers(Channels.lock(key)) == 0);
        }
        assertEquals(0L, holder.release(key, "m1"));
        assertNothingLeft();
    }

    @Test
    void aKilledFairWaiterHoldsTheQueueUpUntilItsDeadlineOnly() {
        String key = name("fair");
        ModuleCaller holder = module();
        try (RedissonProcess fair = RedissonProcess.start(server, "fair", key, -1, 0, 2_000)) {
            String owner = fair.await("OWNER");
            // A fair waiter's deadline is the lock's lease end plus Redisson's
            // fairLockWaitTimeout (5 min by default, 2 s here): a short lease keeps the test
            // short, taken once the child is connected (its lock() then comes within it).
            assertEquals(1L, holder.acquire(key, "m1", 3_000));
            fair.go();
            Processes.waitUntil("the fair waiter queued", () -> FairLockTest.fairQueue(key).contains(owner));
            ModuleCaller waiting = module();
            Async<Long> waiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m2", 10_000, 0));
            waitForModuleWaiters(key, 1);
            fair.kill();

            long fairDeadline;
            try (Jedis jedis = server.jedis()) {
                fairDeadline = jedis.zscore("redisson_lock_timeout:{" + key + "}", owner).longValue();
            }
            // The release keeps the lock for the fair head, which came first; it is dead, so the
            // module drops it at its deadline and serves the module caller behind it.
            assertEquals(0L, holder.release(key, "m1"));
            assertEquals(1L, waiter.get());
            long granted = pexpireTime(key) - 10_000;
            assertTrue(granted >= fairDeadline, "granted at " + granted + " before the dead fair waiter's deadline " + fairDeadline);
            System.out.printf("[%s] dead fair waiter dropped at its deadline -> module caller granted %d ms after it%n",
                    key, granted - fairDeadline);
            assertEquals(List.of(), FairLockTest.fairQueue(key));
            assertEquals(0L, waiting.release(key, "m2"));
        }
        assertNothingLeft();
    }
}
