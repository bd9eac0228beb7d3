package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

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

/**
 * Redisson's {@code RedissonMultiLock} and {@code LOCK.MACQUIRE} / {@code LOCK.MRELEASE} callers
 * on the same keys: a module multi-lock keeps Redisson's waiting until it releases, and then
 * Redisson's is woken by the keys' messages long before the lease it was told to wait for; a
 * Redisson multi-lock keeps a {@code LOCK.MACQUIRE ... BLOCK} caller waiting, holding none of its
 * keys, until Redisson unlocks, and the caller then has them all at once; and under contention
 * on overlapping key sets no key is ever held by two at once.
 */
class MultiLockTest extends OnOneServer {
    /** This test's keys {@code k0 .. k<n-1>} (a standalone server: no hash tag needed). */
    List<String> keys(int n) {
        List<String> keys = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            keys.add(name("k" + i));
        }
        return keys;
    }

    /** Redisson's multi-lock over {@code keys}, in the order given, from one client. */
    static RLock multiLock(RedissonClient redisson, List<String> keys) {
        return redisson.getMultiLock(keys.stream().map(redisson::getLock).toArray(RLock[]::new));
    }

    /** {@code LOCK.MACQUIRE n keys... owner PX lease} without BLOCK: a reply per key, null if any is taken. */
    @SuppressWarnings("unchecked")
    static List<Long> macquire(ModuleCaller caller, List<String> keys, String owner, long leaseMs) {
        List<String> args = new ArrayList<>();
        args.add(String.valueOf(keys.size()));
        args.addAll(keys);
        args.addAll(List.of(owner, "PX", String.valueOf(leaseMs)));
        return (List<Long>) caller.call("LOCK.MACQUIRE", args.toArray(String[]::new));
    }

    static List<Long> each(int n, long value) {
        return Collections.nCopies(n, value);
    }

    /** Enters the guard of every key in {@code keys}, one inside the other, and runs {@code body}. */
    static void holdAll(Map<String, Guard> guards, List<String> keys, String who, Runnable body) {
        if (keys.isEmpty()) {
            body.run();
            return;
        }
        guards.get(keys.get(0)).hold(who, () -> holdAll(guards, keys.subList(1, keys.size()), who, body));
    }

    @Test
    void aModuleMultiLockKeepsARedissonMultiLockWaitingUntilItReleases() throws Exception {
        List<String> keys = keys(3);
        RedissonClient redisson = redisson();
        RLock multi = multiLock(redisson, keys);
        ModuleCaller holder = module();
        assertEquals(each(3, 1L), macquire(holder, keys, "m1", 60_000));

        assertFalse(multi.tryLock(300, 5_000, TimeUnit.MILLISECONDS));
        // Redisson gave up without taking anything: every key is still the module caller's.
        for (String key : keys) {
            assertEquals("m1", look().info(key).get("owner"), key);
        }
        Processes.waitUntil("the failed tryLock unsubscribed", () -> server.subscribers(Channels.lock(keys.get(0))) == 0);

        Async<Boolean> waiter = Async.start("redisson multi-lock", () -> multi.tryLock(15_000, 5_000, TimeUnit.MILLISECONDS));
        // Redisson takes its keys one by one: it waits for the first.
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(keys.get(0))) == 1);
        long released = System.nanoTime();
        assertEquals(each(3, 0L), holder.mrelease(keys, "m1"));
        // Told the keys' 60 s lease, Redisson would sleep out its 15 s wait and fail: only the message wakes it in time.
        assertTrue(waiter.get());
        System.out.printf("[%s] LOCK.MRELEASE -> Redisson multi-lock tryLock(15 s wait) returned: %.2f ms%n",
                keys.get(0), Processes.msSince(released, waiter.doneNanos()));
        String owner = Redissons.owner(redisson, waiter.thread());
        for (String key : keys) {
            Map<String, Object> info = look().info(key);
            assertEquals(owner, info.get("owner"), key);
            long ttl = (Long) info.get("ttl");
            assertTrue(ttl > 0 && ttl <= 5_000, key + ": the lease Redisson asked for: " + ttl);
        }
        assertNull(macquire(holder, keys, "m1", 1_000));
        multi.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertEquals(each(3, 1L), macquire(holder, keys, "m1", 1_000));
        assertEquals(each(3, 0L), holder.mrelease(keys, "m1"));
        assertNothingLeft();
    }

    @Test
    void aRedissonMultiLockUnlockServesAWaitingMacquireCallerAtOnce() {
        List<String> keys = keys(4);
        List<String> redissons = keys.subList(0, 3);
        RLock multi = multiLock(redisson(), redissons);
        ModuleCaller waiting = module();
        multi.lock(60, TimeUnit.SECONDS);

        // The caller names Redisson's keys in another order, and a fourth key nobody holds.
        List<String> wanted = List.of(keys.get(2), keys.get(3), keys.get(0), keys.get(1));
        Async<List<Long>> waiter = Async.start("module multi-lock", () -> waiting.macquireWaiting(wanted, "m1", 10_000, 0));
        for (String key : wanted) {
            waitForModuleWaiters(key, 1);
        }
        // Waiting, it holds none of its keys: the free one stays free.
        assertFalse(look().jedis().exists(keys.get(3)));
        assertFalse(waiter.isDone());
        long unlocked = System.nanoTime();
        multi.unlock();
        // Served long before the 60 s lease Redisson took would have ended.
        assertEquals(each(4, 1L), waiter.get());
        System.out.printf("[%s] Redisson multi-lock unlock (3 keys) -> LOCK.MACQUIRE BLOCK caller answered: %.2f ms%n",
                keys.get(0), Processes.msSince(unlocked, waiter.doneNanos()));
        for (String key : keys) {
            assertEquals("m1", look().info(key).get("owner"), key);
        }
        assertFalse(multi.tryLock());
        assertEquals(each(4, 0L), waiting.mrelease(wanted, "m1"));
        assertNothingLeft();
    }

    /** Who takes every key first, and holds them until the other side's contenders all wait. */
    enum First { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(First.class)
    void redissonMultiLocksAndMacquireCallersNeverHoldAKeyTogether(First first) {
        // Five keys in a ring; each holder takes three neighbours, so every two sets overlap.
        List<String> keys = keys(5);
        Map<String, Guard> guards = new LinkedHashMap<>();
        keys.forEach(k -> guards.put(k, Guard.exclusive()));
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 2;
        int moduleCallers = 4;
        int cycles = 20;
        AtomicInteger redissonRetries = new AtomicInteger();

        // The first side's holder of all five keys.
        RLock firstRedisson = multiLock(clients[0], keys);
        ModuleCaller firstModule = module();
        if (first == First.REDISSON) {
            firstRedisson.lock(30, TimeUnit.SECONDS);
        } else {
            assertEquals(each(5, 1L), macquire(firstModule, keys, "first", 30_000));
        }

        Contenders contenders = new Contenders();
        // A waiting Redisson multi-lock waits for its first key, subscribed to that key's channel
        // (once per client): the clients each first key's channel will have.
        Map<String, Set<Integer>> waitingOn = new TreeMap<>();
        int next = 0;
        for (int c = 0; c < clients.length; c++) {
            for (int t = 0; t < threadsPerClient; t++) {
                String who = "redisson-" + c + "-" + t;
                // Redisson's multi-locks name their keys in one order (sorted): in different
                // orders two of them can take a key each and back off again and again (livelock,
                // Redisson's own behaviour, docs/semantics.md "Multi-locks").
                List<String> set = ring(keys, next++).stream().sorted().toList();
                waitingOn.computeIfAbsent(set.get(0), k -> new HashSet<>()).add(c);
                RLock multi = multiLock(clients[c], set);
                contenders.add(who, cycles, i -> {
                    // A failed tryLock lets go of what it took; try again until it has them all.
                    while (!multi.tryLock(1_000, 30_000, TimeUnit.MILLISECONDS)) {
                        redissonRetries.incrementAndGet();
                    }
                    try {
                        holdAll(guards, set, who, () -> Processes.sleep(1));
                    } finally {
                        multi.unlock();
                    }
                });
            }
        }
        for (int m = 0; m < moduleCallers; m++) {
            String who = "module-" + m;
            // The module takes them all at once, whatever order they are named in.
            List<String> set = new ArrayList<>(ring(keys, next++));
            Collections.reverse(set);
            ModuleCaller caller = module();
            contenders.add(who, cycles, i -> {
                assertEquals(each(set.size(), 1L), caller.macquireWaiting(set, who, 30_000, 0));
                holdAll(guards, set, who, () -> Processes.sleep(1));
                assertEquals(each(set.size(), 0L), caller.mrelease(set, who));
            });
        }
        long start = System.nanoTime();
        contenders.start();
        // Each waiting LOCK.MACQUIRE caller is queued on each of its three keys.
        Processes.waitUntil("every contender waiting", () -> keys.stream().mapToInt(look()::waiters).sum() == moduleCallers * 3
                && waitingOn.entrySet().stream().allMatch(e -> server.subscribers(Channels.lock(e.getKey())) == e.getValue().size()));
        if (first == First.REDISSON) {
            firstRedisson.unlock();
        } else {
            assertEquals(each(5, 0L), firstModule.mrelease(keys, "first"));
        }
        contenders.join(Duration.ofSeconds(60));

        guards.values().forEach(Guard::assertNoBreach);
        int holds = (clients.length * threadsPerClient + moduleCallers) * cycles;
        // Every hold entered the guards of its three keys.
        assertEquals(holds * 3L, guards.values().stream().mapToLong(Guard::entries).sum());
        System.out.printf("[%s] %d multi-lock holds of 3 of 5 keys (%d Redisson threads in %d clients, %d LOCK.MACQUIRE callers) in %.0f ms, no key held twice, %d Redisson tryLock retries%n",
                name("k-" + first), holds, clients.length * threadsPerClient, clients.length, moduleCallers,
                Processes.msSince(start, System.nanoTime()), redissonRetries.get());
        assertNothingLeft();
    }

    /** Three neighbours in the ring of {@code keys}, from the {@code i}-th (modulo its size). */
    static List<String> ring(List<String> keys, int i) {
        List<String> set = new ArrayList<>();
        for (int j = 0; j < 3; j++) {
            set.add(keys.get((i + j) % keys.size()));
        }
        return set;
    }
}
