package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Parked;
import lock.redisson.harness.Processes;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RPermitExpirableSemaphore;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.Jedis;

/**
 * Redisson's {@code RSemaphore} beside {@code SEM.TAKE}/{@code SEM.GIVE} callers, and its
 * {@code RPermitExpirableSemaphore} beside {@code SEM.ACQUIRE}/{@code SEM.RELEASE} callers, on
 * the same names: permits taken on either side count against one total and each side reads the
 * same counts; a Redisson release serves a queued module caller at once; a module release wakes a
 * Redisson thread parked on its latch by the message on {@code redisson_sc:{name}} (the only thing
 * that could wake it within the test's bound); a permit lease that ends goes to the waiting
 * module caller at that moment; under contention no more permits are in use than the total, and
 * only the semaphore's counter is left, at its total.
 */
class SemaphoreTest extends OnOneServer {
    /** The permit set of a permit-expirable semaphore (the module's permits are members too). */
    static String timeoutKey(String key) {
        return "{" + key + "}:timeout";
    }

    /** The counter string: the permits available now (null when missing). */
    static Long counter(String key) {
        try (Jedis jedis = server.jedis()) {
            String value = jedis.get(key);
            return value == null ? null : Long.valueOf(value);
        }
    }

    /** The members of the permit set, as hex (Redisson's permit ids are 16 random bytes). */
    static TreeSet<String> permitMembers(String key) {
        try (Jedis jedis = server.jedis()) {
            TreeSet<String> members = new TreeSet<>();
            jedis.zrange(timeoutKey(key).getBytes(), 0, -1).forEach(m -> members.add(HexFormat.of().formatHex(m)));
            return members;
        }
    }

    static TreeSet<String> setOf(String... members) {
        return new TreeSet<>(List.of(members));
    }

    /** {@code SEM.ACQUIRE key owner PERMITS n PX lease} without BLOCK: the permits held, or null. */
    static Long semAcquire(ModuleCaller caller, String key, String owner, int permits, long leaseMs) {
        return (Long) caller.call("SEM.ACQUIRE", key, owner, "PERMITS", String.valueOf(permits), "PX", String.valueOf(leaseMs));
    }

    static String hex(String text) {
        return HexFormat.of().formatHex(text.getBytes());
    }

    /** The permits SEM.INFO counts as held, summed over its holders. */
    static long heldPermits(Map<String, Object> info) {
        long held = 0;
        for (Object holder : (List<?>) info.get("holders")) {
            List<?> fields = (List<?>) holder;
            for (int i = 0; i + 1 < fields.size(); i += 2) {
                if ("permits".equals(new String((byte[]) fields.get(i)))) {
                    held += (Long) fields.get(i + 1);
                }
            }
        }
        return held;
    }

    // RSemaphore and SEM.TAKE / SEM.GIVE: the counter alone, permits that belong to nobody.

    @Test
    void takesOnEitherSideCountAgainstOneTotal() throws Exception {
        String key = name("sem");
        RSemaphore semaphore = redisson().getSemaphore(key);
        ModuleCaller caller = module();
        assertTrue(semaphore.trySetPermits(5));
        assertEquals(0L, caller.call("SEM.INIT", key, "9"), "SEM.INIT found Redisson's semaphore set");

        semaphore.acquire(2);
        assertEquals(3, semaphore.availablePermits());
        assertEquals(2L, caller.call("SEM.TAKE", key, "PERMITS", "2"));
        assertEquals(1, semaphore.availablePermits());
        Map<String, Object> info = look().semInfo(key);
        assertEquals(1L, info.get("available"));
        assertEquals(0L, heldPermits(info), "taken permits belong to nobody");

        // Neither side takes more than is left.
        assertFalse(semaphore.tryAcquire(2));
        assertNull(caller.call("SEM.TAKE", key, "PERMITS", "2"));
        assertTrue(semaphore.tryAcquire(1));
        assertNull(caller.call("SEM.TAKE", key));
        assertFalse(semaphore.tryAcquire(1, 100, TimeUnit.MILLISECONDS));
        assertEquals(0L, counter(key));

        // Either side gives back what the other took.
        assertEquals(2L, caller.semGive(key, 2));
        assertEquals(2, semaphore.availablePermits());
        semaphore.release(3);
        assertEquals(5L, look().semInfo(key).get("available"));
        assertEquals(5L, look().semInfo(key).get("permits"));
        assertEquals(5L, counter(key));
        assertNothingLeft(key);
    }

    @Test
    void aRedissonTrySetPermitsServesCallersWaitingForTheSemaphore() {
        String key = name("sem");
        RSemaphore semaphore = redisson().getSemaphore(key);
        ModuleCaller first = module();
        ModuleCaller second = module();
        // A missing semaphore has no permits: both wait, in arrival order.
        Async<Object> takesTwo = Async.start("SEM.TAKE 2", () -> first.semTakeWaiting(key, 2, 0));
        waitForModuleWaiters(key, 1);
        Async<Object> takesOne = Async.start("SEM.TAKE 1", () -> second.semTakeWaiting(key, 1, 0));
        waitForModuleWaiters(key, 2);

        assertTrue(semaphore.trySetPermits(3));
        assertEquals(2L, takesTwo.get());
        assertEquals(1L, takesOne.get());
        assertEquals(0, semaphore.availablePermits());
        semaphore.release(3);
        assertEquals(3L, counter(key));
        assertNothingLeft(key);
    }

    @Test
    void aRedissonReleaseServesAQueuedTakeAtOnce() throws Exception {
        String key = name("sem");
        RSemaphore semaphore = redisson().getSemaphore(key);
        ModuleCaller waiting = module();
        assertTrue(semaphore.trySetPermits(3));
        semaphore.acquire(3);

        Async<Object> waiter = Async.start("SEM.TAKE 2", () -> waiting.semTakeWaiting(key, 2, 0));
        waitForModuleWaiters(key, 1);
        // One permit back is not enough for it: it stays first in line.
        semaphore.release(1);
        assertEquals(1L, counter(key));
        assertEquals(1, look().waiters(key));
        long released = System.nanoTime();
        semaphore.release(1);
        // No BLOCK time to run out and nobody else gives: only Redisson's INCRBY serves it.
        assertEquals(2L, waiter.get());
        System.out.printf("[%s] Redisson release -> SEM.TAKE BLOCK caller answered: %.2f ms%n",
                key, Processes.msSince(released, waiter.doneNanos()));
        assertEquals(0L, counter(key));
        assertEquals(2L, waiting.semGive(key, 2));
        semaphore.release(1);
        assertEquals(3L, counter(key));
        assertNothingLeft(key);
    }

    @Test
    void aModuleGiveWakesWaitingRedissonThreadsByTheirMessage() throws Exception {
        String key = name("sem");
        RedissonClient redisson = redisson();
        RSemaphore semaphore = redisson.getSemaphore(key);
        ModuleCaller holder = module();
        assertTrue(semaphore.trySetPermits(3));
        assertEquals(3L, holder.call("SEM.TAKE", key, "PERMITS", "3"));

        // acquire(n) waits on its latch with no timeout at all, tryAcquire for 15 s: neither polls
        // the server, so nothing but the message on redisson_sc:{name} wakes them within the bound.
        Async<Boolean> acquires = Async.start("redisson acquire(2)", () -> {
            semaphore.acquire(2);
            return true;
        });
        Async<Boolean> tries = Async.start("redisson tryAcquire(1, 15 s)",
                () -> semaphore.tryAcquire(1, 15, TimeUnit.SECONDS));
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.semaphore(key)) == 1);
        Parked.waitUntilParked(acquires);
        Parked.waitUntilParked(tries);

        long given = System.nanoTime();
        assertEquals(3L, holder.semGive(key, 3));
        assertTrue(acquires.get());
        assertTrue(tries.get(), "tryAcquire(1, 15 s) gave up: no message woke it");
        System.out.printf("[%s] SEM.GIVE -> waiting Redisson threads have their permits: acquire(2) %.2f ms, tryAcquire(1, 15 s) %.2f ms%n",
                key, Processes.msSince(given, acquires.doneNanos()), Processes.msSince(given, tries.doneNanos()));
        assertEquals(0L, counter(key));
        semaphore.release(3);
        assertEquals(3L, counter(key));
        assertNothingLeft(key);
    }

    // RPermitExpirableSemaphore and SEM.ACQUIRE / SEM.RELEASE: permits with an owner and a lease.

    @Test
    void expirablePermitsOnEitherSideCountAgainstOneTotal() throws Exception {
        String key = name("pool");
        RPermitExpirableSemaphore semaphore = redisson().getPermitExpirableSemaphore(key);
        ModuleCaller caller = module();
        assertTrue(semaphore.trySetPermits(5));
        assertEquals(0L, caller.call("SEM.INIT", key, "9"), "SEM.INIT found Redisson's semaphore set");

        String one = semaphore.acquire(30, TimeUnit.SECONDS);
        List<String> two = semaphore.acquire(2, 30, TimeUnit.SECONDS);
        assertEquals(2L, semAcquire(caller, key, "m1", 2, 30_000));
        // The module's permits are members <owner>:<i> of Redisson's permit set, Redisson's its ids.
        TreeSet<String> members = new TreeSet<>(List.of(one, two.get(0), two.get(1), hex("m1:1"), hex("m1:2")));
        assertEquals(members, permitMembers(key));

        assertEquals(0, semaphore.availablePermits());
        assertEquals(5, semaphore.getPermits());
        assertEquals(5, semaphore.acquiredPermits());
        Map<String, Object> info = look().semInfo(key);
        assertEquals(5L, info.get("permits"));
        assertEquals(0L, info.get("available"));
        assertEquals(5L, heldPermits(info));

        // Neither side takes a permit that is not there.
        assertNull(semaphore.tryAcquire());
        assertNull(semaphore.tryAcquire(100, 30_000, TimeUnit.MILLISECONDS));
        assertNull(semAcquire(caller, key, "m2", 1, 30_000));

        // A permit given back on either side is the other's to take.
        semaphore.release(one);
        assertEquals(1L, semAcquire(caller, key, "m2", 1, 30_000));
        assertEquals(1L, caller.semRelease(key, "m1", 1));
        String again = semaphore.tryAcquire(1_000, 30_000, TimeUnit.MILLISECONDS);
        assertNotNull(again);
        assertEquals(0L, look().semInfo(key).get("available"));

        assertEquals(0L, caller.semRelease(key, "m1", 1));
        assertEquals(0L, caller.semRelease(key, "m2", 1));
        semaphore.release(two);
        semaphore.release(again);
        assertEquals(5, semaphore.availablePermits());
        assertEquals(5L, counter(key));
        // The permit set goes with its last member: the counter alone is left.
        assertNothingLeft(key);
    }

    @Test
    void aRedissonPermitReleaseServesAQueuedModuleCallerAtOnce() throws Exception {
        String key = name("pool");
        RPermitExpirableSemaphore semaphore = redisson().getPermitExpirableSemaphore(key);
        ModuleCaller waiting = module();
        assertTrue(semaphore.trySetPermits(2));
        List<String> ids = semaphore.acquire(2, 60, TimeUnit.SECONDS);

        Async<Long> waiter = Async.start("SEM.ACQUIRE BLOCK", () -> waiting.semAcquireWaiting(key, "m1", 2, 10_000, 0));
        waitForModuleWaiters(key, 1);
        long released = System.nanoTime();
        semaphore.release(ids);
        // Served long before the 60 s leases Redisson took would have ended.
        assertEquals(2L, waiter.get());
        System.out.printf("[%s] Redisson permit release -> SEM.ACQUIRE BLOCK caller answered: %.2f ms%n",
                key, Processes.msSince(released, waiter.doneNanos()));
        assertEquals(setOf(hex("m1:1"), hex("m1:2")), permitMembers(key));
        assertEquals(0L, waiting.semRelease(key, "m1", 2));
        assertEquals(2L, counter(key));
        assertNothingLeft(key);
    }

    @Test
    void aModuleReleaseWakesWaitingPermitThreadsByTheirMessage() throws Exception {
        String key = name("pool");
        RPermitExpirableSemaphore semaphore = redisson().getPermitExpirableSemaphore(key);
        ModuleCaller holder = module();
        assertTrue(semaphore.trySetPermits(2));
        assertEquals(2L, semAcquire(holder, key, "m1", 2, 60_000));

        // Redisson's threads retry by themselves at the earliest lease end (the module's, 60 s
        // away) or at the end of their wait (15 s): within the bound only the message wakes them.
        Async<String> acquires = Async.start("redisson acquire(lease)", () -> semaphore.acquire(10, TimeUnit.SECONDS));
        Async<String> tries = Async.start("redisson tryAcquire(15 s, lease)",
                () -> semaphore.tryAcquire(15, 10, TimeUnit.SECONDS));
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.semaphore(key)) == 1);
        Parked.waitUntilParked(acquires);
        Parked.waitUntilParked(tries);

        long released = System.nanoTime();
        assertEquals(0L, holder.semRelease(key, "m1", 2));
        String first = acquires.get();
        String second = tries.get();
        assertNotNull(first);
        assertNotNull(second, "tryAcquire(15 s) gave up: no message woke it");
        System.out.printf("[%s] SEM.RELEASE -> waiting Redisson threads have their permits: acquire %.2f ms, tryAcquire %.2f ms%n",
                key, Processes.msSince(released, acquires.doneNanos()), Processes.msSince(released, tries.doneNanos()));
        assertEquals(setOf(first, second), permitMembers(key));
        assertEquals(0, semaphore.availablePermits());
        semaphore.release(List.of(first, second));
        assertEquals(2L, counter(key));
        assertNothingLeft(key);
    }

    @Test
    void aPermitLeaseThatEndsGoesToTheWaitingModuleCallerThen() throws Exception {
        String key = name("pool");
        RPermitExpirableSemaphore semaphore = redisson().getPermitExpirableSemaphore(key);
        ModuleCaller waiting = module();
        assertTrue(semaphore.trySetPermits(1));
        String id = semaphore.acquire(700, TimeUnit.MILLISECONDS);
        double deadline;
        try (Jedis jedis = server.jedis()) {
            deadline = jedis.zscore(timeoutKey(key).getBytes(), HexFormat.of().parseHex(id));
        }

        // Nobody releases and nobody runs Redisson's scripts: the module's lease timer gives it back.
        Async<Long> waiter = Async.start("SEM.ACQUIRE BLOCK", () -> waiting.semAcquireWaiting(key, "m1", 1, 10_000, 0));
        assertEquals(1L, waiter.get());
        double granted;
        try (Jedis jedis = server.jedis()) {
            // The new lease is counted from the grant, which came after the old one ended.
            granted = jedis.zscore(timeoutKey(key), "m1:1") - 10_000;
        }
        assertTrue(granted >= deadline, "granted at " + granted + ", the lease ended at " + deadline);
        System.out.printf("[%s] Redisson permit lease end -> SEM.ACQUIRE BLOCK caller granted %.0f ms after the deadline%n",
                key, granted - deadline);
        assertEquals(setOf(hex("m1:1")), permitMembers(key));
        assertFalse(semaphore.tryRelease(id), "Redisson released a permit whose lease had ended");
        assertEquals(0L, waiting.semRelease(key, "m1", 1));
        assertEquals(1L, counter(key));
        assertNothingLeft(key);
    }

    // Contention: Redisson threads in two clients and module callers on one semaphore.

    /** Who takes every permit first, and holds them until the other side's contenders all wait. */
    enum First { REDISSON, MODULE }

    static final int TOTAL = 3;
    static final int THREADS_PER_CLIENT = 3;
    static final int MODULE_CALLERS = 3;
    static final int CYCLES = 30;

    /** Contender {@code i} asks for 1 or 2 permits: requests of both sizes compete. */
    static int permitsOf(int i) {
        return 1 + i % 2;
    }

    @ParameterizedTest
    @EnumSource(First.class)
    void redissonThreadsAndTakersNeverUseMorePermitsThanTheTotal(First first) throws Exception {
        String key = name("sem-" + first);
        Guard guard = Guard.permits(TOTAL);
        RedissonClient[] clients = {redisson(), redisson()};
        RSemaphore firstRedisson = clients[0].getSemaphore(key);
        ModuleCaller firstModule = module();
        assertTrue(firstRedisson.trySetPermits(TOTAL));
        if (first == First.REDISSON) {
            firstRedisson.acquire(TOTAL);
        } else {
            assertEquals((long) TOTAL, firstModule.call("SEM.TAKE", key, "PERMITS", String.valueOf(TOTAL)));
        }

        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RSemaphore semaphore = clients[c].getSemaphore(key);
            for (int t = 0; t < THREADS_PER_CLIENT; t++) {
                String who = "redisson-" + c + "-" + t;
                int permits = permitsOf(c * THREADS_PER_CLIENT + t);
                contenders.add(who, CYCLES, i -> {
                    semaphore.acquire(permits);
                    try {
                        guard.hold(who, permits, () -> Processes.sleep(1));
                    } finally {
                        semaphore.release(permits);
                    }
                });
            }
        }
        for (int m = 0; m < MODULE_CALLERS; m++) {
            String who = "module-" + m;
            int permits = permitsOf(m);
            ModuleCaller caller = module();
            contenders.add(who, CYCLES, i -> {
                assertEquals((long) permits, caller.semTakeWaiting(key, permits, 0));
                guard.hold(who, permits, () -> Processes.sleep(1));
                caller.semGive(key, permits);
            });
        }
        long start = System.nanoTime();
        contenders.start();
        Processes.waitUntil("every contender waiting", () -> look().waiters(key) == MODULE_CALLERS
                && server.subscribers(Channels.semaphore(key)) == clients.length);
        if (first == First.REDISSON) {
            firstRedisson.release(TOTAL);
        } else {
            // Its reply, the permits left available, depends on the module callers it serves at once.
            firstModule.semGive(key, TOTAL);
        }
        contenders.join(Duration.ofSeconds(60));

        guard.assertNoBreach();
        int uses = (clients.length * THREADS_PER_CLIENT + MODULE_CALLERS) * CYCLES;
        assertEquals(uses, guard.entries());
        System.out.printf("[%s] %d permit uses (%d Redisson threads in %d clients, %d SEM.TAKE callers, 1 or 2 permits each) in %.0f ms, at most %d of %d in use at once%n",
                key, uses, clients.length * THREADS_PER_CLIENT, clients.length, MODULE_CALLERS,
                Processes.msSince(start, System.nanoTime()), guard.most(), TOTAL);
        assertNothingLeft(key);
        assertEquals((long) TOTAL, counter(key));
    }

    @ParameterizedTest
    @EnumSource(First.class)
    void permitThreadsAndModuleHoldersNeverUseMorePermitsThanTheTotal(First first) throws Exception {
        String key = name("pool-" + first);
        Guard guard = Guard.permits(TOTAL);
        RedissonClient[] clients = {redisson(), redisson()};
        RPermitExpirableSemaphore firstRedisson = clients[0].getPermitExpirableSemaphore(key);
        ModuleCaller firstModule = module();
        assertTrue(firstRedisson.trySetPermits(TOTAL));
        List<String> firstIds = new ArrayList<>();
        if (first == First.REDISSON) {
            firstIds.addAll(firstRedisson.acquire(TOTAL, 60, TimeUnit.SECONDS));
        } else {
            assertEquals((long) TOTAL, semAcquire(firstModule, key, "first", TOTAL, 60_000));
        }

        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RPermitExpirableSemaphore semaphore = clients[c].getPermitExpirableSemaphore(key);
            for (int t = 0; t < THREADS_PER_CLIENT; t++) {
                String who = "redisson-" + c + "-" + t;
                int permits = permitsOf(c * THREADS_PER_CLIENT + t);
                contenders.add(who, CYCLES, i -> {
                    List<String> ids = semaphore.acquire(permits, 30, TimeUnit.SECONDS);
                    try {
                        guard.hold(who, permits, () -> Processes.sleep(1));
                    } finally {
                        semaphore.release(ids);
                    }
                });
            }
        }
        for (int m = 0; m < MODULE_CALLERS; m++) {
            String who = "module-" + m;
            int permits = permitsOf(m);
            ModuleCaller caller = module();
            contenders.add(who, CYCLES, i -> {
                assertEquals((long) permits, caller.semAcquireWaiting(key, who, permits, 30_000, 0));
                guard.hold(who, permits, () -> Processes.sleep(1));
                assertEquals(0L, caller.semRelease(key, who, permits));
            });
        }
        long start = System.nanoTime();
        contenders.start();
        Processes.waitUntil("every contender waiting", () -> look().waiters(key) == MODULE_CALLERS
                && server.subscribers(Channels.semaphore(key)) == clients.length);
        if (first == First.REDISSON) {
            firstRedisson.release(firstIds);
        } else {
            assertEquals(0L, firstModule.semRelease(key, "first", TOTAL));
        }
        contenders.join(Duration.ofSeconds(60));

        guard.assertNoBreach();
        int uses = (clients.length * THREADS_PER_CLIENT + MODULE_CALLERS) * CYCLES;
        assertEquals(uses, guard.entries());
        System.out.printf("[%s] %d permit uses (%d Redisson threads in %d clients, %d SEM.ACQUIRE callers, 1 or 2 permits each) in %.0f ms, at most %d of %d in use at once%n",
                key, uses, clients.length * THREADS_PER_CLIENT, clients.length, MODULE_CALLERS,
                Processes.msSince(start, System.nanoTime()), guard.most(), TOTAL);
        // No {name}:timeout left: every permit of both kinds was given back.
        assertNothingLeft(key);
        assertEquals((long) TOTAL, counter(key));
    }
}
