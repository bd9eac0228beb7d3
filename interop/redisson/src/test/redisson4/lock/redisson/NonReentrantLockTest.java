package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;

/**
 * Redisson 4.4's non-reentrant {@code RLock} and {@code RFairLock}
 * ({@code getNonReentrantLock}, {@code getNonReentrantFairLock}): the same hash as the reentrant
 * kinds, whose scripts refuse a second hold by the holder; shared with {@code LOCK.*} callers
 * as the reentrant kinds are, and still refusing their own re-entry with the module loaded.
 */
class NonReentrantLockTest extends OnOneServer {
    private RLock lock(RedissonClient client, boolean fair, String key) {
        return fair ? client.getNonReentrantFairLock(key) : client.getNonReentrantLock(key);
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void sharedWithModuleCallersBothWays(boolean fair) {
        String key = name(fair ? "fair" : "lock");
        RLock lock = lock(redisson(), fair, key);
        ModuleCaller caller = module();

        // A module hold: Redisson sees it taken.
        assertEquals(1L, caller.acquire(key, "m1", 60_000));
        assertTrue(lock.isLocked());
        assertFalse(lock.tryLock());
        // A waiting Redisson thread is woken by the module's release (not its 60 s ttl).
        Async<Boolean> waiter = Async.start("redisson waiter", () -> lock.tryLock(15, 30, TimeUnit.SECONDS));
        if (fair) {
            Processes.waitUntil("the fair thread queued", () -> FairLockTest.fairQueue(key).size() == 1);
        } else {
            Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(key)) == 1);
        }
        long released = System.nanoTime();
        assertEquals(0L, caller.release(key, "m1"));
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.RELEASE -> waiting non-reentrant Redisson thread has the lock: %.2f ms%n",
                key, (waiter.doneNanos() - released) / 1e6);

        // A Redisson hold: the module caller waits, and the unlock serves it at once.
        assertNull(caller.acquire(key, "m1", 10_000));
        ModuleCaller waiting = module();
        Async<Long> moduleWaiter = Async.start("module waiter", () -> waiting.acquireWaiting(key, "m2", 10_000, 0));
        waitForModuleWaiters(key, 1);
        long unlocked = System.nanoTime();
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertEquals(1L, moduleWaiter.get());
        System.out.printf("[%s] non-reentrant Redisson unlock -> module caller answered: %.2f ms%n",
                key, (moduleWaiter.doneNanos() - unlocked) / 1e6);
        assertEquals(0L, waiting.release(key, "m2"));
        assertNothingLeft();
    }

    @ParameterizedTest
    @ValueSource(booleans = {false, true})
    void aSecondHoldByTheHolderIsStillRefused(boolean fair) {
        String key = name(fair ? "fair" : "lock");
        RLock lock = lock(redisson(), fair, key);
        lock.lock(30, TimeUnit.SECONDS);
        assertThrows(IllegalMonitorStateException.class, lock::tryLock);
        assertThrows(IllegalMonitorStateException.class, () -> lock.lock(30, TimeUnit.SECONDS));
        assertEquals(1L, look().info(key).get("holds"));
        lock.unlock();
        assertFalse(lock.isLocked());
        assertNothingLeft();
    }

    @Test
    void nonReentrantThreadsAndModuleCallersNeverHoldTogether() {
        String key = name("lock");
        Guard guard = Guard.exclusive();
        RedissonClient[] clients = {redisson(), redisson()};
        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            for (int t = 0; t < 3; t++) {
                String who = "redisson-" + c + "-" + t;
                RLock lock = clients[c].getNonReentrantLock(key);
                contenders.addRedisson(who, 15, lock, guard);
            }
        }
        for (int m = 0; m < 3; m++) {
            String who = "module-" + m;
            ModuleCaller caller = module();
            contenders.addModule(who, 15, caller, key, 30_000, guard);
        }
        contenders.start().join(Duration.ofSeconds(60));
        guard.assertNoBreach();
        assertEquals(9 * 15, guard.entries());
        assertNothingLeft();
    }
}
