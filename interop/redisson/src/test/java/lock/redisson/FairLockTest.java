package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.api.Test;
import org.redisson.api.RLock;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.Jedis;

/**
 * Redisson's {@code RFairLock} and {@code LOCK.*} callers in one first-come-first-served order:
 * a release, on either side, hands the lock to whoever came first, a fair thread by the message
 * on its own channel ({@code redisson_lock__channel:{name}:<owner>}), a module caller by its
 * answer; under contention no two hold at once and Redisson's queue keys are gone at the end.
 */
class FairLockTest extends OnOneServer {
    static String queueKey(String key) {
        return "redisson_lock_queue:{" + key + "}";
    }

    /** Fair owners queued, first served first. */
    static List<String> fairQueue(String key) {
        try (Jedis jedis = server.jedis()) {
            return jedis.lrange(queueKey(key), 0, -1);
        }
    }

    /** A contender of either kind, started in a known order, recording when it got the lock. */
    private final class Arrival {
        final String who;
        final Async<Long> grant;
        final String fairOwner;

        /** A fair Redisson thread: {@code lock()}, then holds until told to release. */
        Arrival(String who, RedissonClient client, String key, List<String> order, Guard guard) {
            this.who = who;
            RLock lock = client.getFairLock(key);
            this.grant = Async.start(who, () -> {
                lock.lock(60, TimeUnit.SECONDS);
                long at = System.nanoTime();
                order.add(who);
                guard.hold(who, () -> {});
                lock.unlock();
                return at;
            });
            this.fairOwner = client.getId() + ":" + grant.thread().getId();
            Processes.waitUntil(who + " in Redisson's fair queue", () -> fairQueue(key).contains(fairOwner));
        }

        /** A module caller: {@code LOCK.ACQUIRE ... BLOCK 0}, then releases. */
        Arrival(String who, ModuleCaller caller, String key, List<String> order, Guard guard, int queuedBefore) {
            this.who = who;
            this.fairOwner = null;
            this.grant = Async.start(who, () -> {
                assertEquals(1L, caller.acquireWaiting(key, who, 60_000, 0));
                long at = System.nanoTime();
                order.add(who);
                guard.hold(who, () -> {});
                assertEquals(0L, caller.release(key, who));
                return at;
            });
            waitForModuleWaiters(key, queuedBefore + 1);
        }
    }

    enum First { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(First.class)
    void fairThreadsAndModuleCallersAreServedInArrivalOrder(First first) {
        String key = name("fair-" + first);
        Guard guard = Guard.exclusive();
        List<String> order = Collections.synchronizedList(new ArrayList<>());
        RedissonClient a = redisson();
        RedissonClient b = redisson();

        // The holder everyone queues behind.
        ModuleCaller holderModule = module();
        RLock holderFair = a.getFairLock(key);
        if (first == First.REDISSON) {
            holderFair.lock(60, TimeUnit.SECONDS);
        } else {
            assertEquals(1L, holderModule.acquire(key, "holder", 60_000));
        }

        List<Arrival> arrivals = new ArrayList<>();
        int moduleQueued = 0;
        for (int i = 0; i < 3; i++) {
            if (first == First.REDISSON) {
                arrivals.add(new Arrival("fair-" + i, i % 2 == 0 ? a : b, key, order, guard));
                arrivals.add(new Arrival("module-" + i, module(), key, order, guard, moduleQueued++));
            } else {
                arrivals.add(new Arrival("module-" + i, module(), key, order, guard, moduleQueued++));
                arrivals.add(new Arrival("fair-" + i, i % 2 == 0 ? a : b, key, order, guard));
            }
        }

        long released = System.nanoTime();
        if (first == First.REDISSON) {
            holderFair.unlock();
        } else {
            assertEquals(0L, holderModule.release(key, "holder"));
        }
        List<String> expected = new ArrayList<>();
        StringBuilder handOffs = new StringBuilder();
        long previous = released;
        for (Arrival arrival : arrivals) {
            long at = arrival.grant.get();
            expected.add(arrival.who);
            handOffs.append(String.format(" %s %.2f ms;", arrival.who, (at - previous) / 1e6));
            previous = at;
        }
        assertEquals(expected, order, "grants out of arrival order");
        guard.assertNoBreach();
        // Each hand-off, from the previous holder's release call to the next one's grant (fair threads
        // woken by their own channel's message, module callers by their answer).
        System.out.printf("[%s] hand-offs in arrival order:%s%n", key, handOffs);
        assertNothingLeft();
    }

    @Test
    void aReleaseKeepsTheLockForTheFairHeadAgainstACallerWithoutBlock() {
        String key = name("fair");
        RedissonClient a = redisson();
        ModuleCaller holder = module();
        assertEquals(1L, holder.acquire(key, "holder", 60_000));
        RLock fair = a.getFairLock(key);
        Async<Boolean> waiter = Async.start("fair waiter", () -> fair.tryLock(15, 60, TimeUnit.SECONDS));
        String owner = a.getId() + ":" + waiter.thread().getId();
        Processes.waitUntil("the fair thread queued", () -> fairQueue(key).contains(owner));

        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "holder"));
        // Until the fair head's script takes it, nobody else gets the lock.
        Long other = module().acquire(key, "intruder", 1_000);
        assertTrue(waiter.get(), "the fair thread did not get the lock in its 15 s wait");
        System.out.printf("[%s] LOCK.RELEASE -> fair head (woken on its own channel) has the lock: %.2f ms%n",
                key, (waiter.doneNanos() - released) / 1e6);
        assertEquals(null, other, "a caller without BLOCK took the lock kept for the fair head");
        assertEquals(a.getId() + ":" + waiter.thread().getId(), look().info(key).get("owner"));
        fair.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft();
    }

    @ParameterizedTest
    @EnumSource(First.class)
    void fairThreadsAndModuleCallersNeverHoldTogether(First first) {
        String key = name("fair-" + first);
        Guard guard = Guard.exclusive();
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 3;
        int moduleCallers = 3;
        int cycles = 15;

        RLock firstFair = clients[0].getFairLock(key);
        ModuleCaller firstModule = module();
        if (first == First.REDISSON) {
            firstFair.lock(30, TimeUnit.SECONDS);
        } else {
            assertEquals(1L, firstModule.acquire(key, "first", 30_000));
        }

        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RLock lock = clients[c].getFairLock(key);
            for (int t = 0; t < threadsPerClient; t++) {
                String who = "fair-" + c + "-" + t;
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
                && fairQueue(key).size() == clients.length * threadsPerClient);
        if (first == First.REDISSON) {
            firstFair.unlock();
        } else {
            assertEquals(0L, firstModule.release(key, "first"));
        }
        contenders.join(Duration.ofSeconds(90));

        guard.assertNoBreach();
        int holds = (clients.length * threadsPerClient + moduleCallers) * cycles;
        assertEquals(holds, guard.entries());
        System.out.printf("[%s] %d holds (%d fair threads, %d module callers) in %.0f ms, no overlap%n",
                key, holds, clients.length * threadsPerClient, moduleCallers, (System.nanoTime() - start) / 1e6);
        assertNothingLeft();
    }
}
