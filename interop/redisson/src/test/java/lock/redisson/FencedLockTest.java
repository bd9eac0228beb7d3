package lock.redisson;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.TimeUnit;

import lock.redisson.harness.Async;
import lock.redisson.harness.Channels;
import lock.redisson.harness.Contenders;
import lock.redisson.harness.Guard;
import lock.redisson.harness.Leftovers;
import lock.redisson.harness.ModuleCaller;
import lock.redisson.harness.OnOneServer;
import lock.redisson.harness.Processes;
import lock.redisson.harness.Redissons;
import lock.redisson.harness.Server;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.redisson.api.RFencedLock;
import org.redisson.api.RedissonClient;
import redis.clients.jedis.Jedis;

/**
 * Redisson's {@code RFencedLock} and {@code LOCK.ACQUIRE ... FENCE} callers on one name share
 * one fencing counter, {@code redisson_lock_token:{name}}: Redisson's {@code INCR} goes on from
 * the module's tokens and the module from Redisson's, so every token handed out, by either side,
 * is above every token handed out before it, whether the sides alternate, hand the lock to each
 * other, or contend for it, and however long the name stays idle (a counter Redisson has
 * incremented outlives the module's {@code lock.token-ttl-ms}); and never two holders at once.
 */
class FencedLockTest extends OnOneServer {
    static String tokenKey(String key) {
        return "redisson_lock_token:{" + key + "}";
    }

    static long pttl(Server on, String key) {
        try (Jedis jedis = on.jedis()) {
            return jedis.pttl(key);
        }
    }

    /** Tokens in the order they were handed out: each must be above all before it. */
    static final class Grants {
        private final List<String> grants = Collections.synchronizedList(new ArrayList<>());
        private final List<Long> tokens = Collections.synchronizedList(new ArrayList<>());

        void add(String who, Long token) {
            assertNotNull(token, who + " got no token");
            grants.add(who + "=" + token);
            tokens.add(token);
        }

        long last() {
            return tokens.isEmpty() ? 0 : tokens.get(tokens.size() - 1);
        }

        int size() {
            return tokens.size();
        }

        void assertStrictlyIncreasing() {
            synchronized (tokens) {
                for (int i = 1; i < tokens.size(); i++) {
                    if (tokens.get(i) <= tokens.get(i - 1)) {
                        throw new AssertionError("grant " + i + " (" + grants.get(i) + ") is not above grant " + (i - 1)
                                + " (" + grants.get(i - 1) + "); grants: " + grants.subList(Math.max(0, i - 5), Math.min(tokens.size(), i + 5)));
                    }
                }
            }
        }
    }

    @Test
    void tokensGoOnFromEachOtherWhenTheSidesAlternate() {
        String key = name("lock");
        RFencedLock lock = redisson().getFencedLock(key);
        ModuleCaller caller = module();
        ModuleCaller other = module();
        Grants grants = new Grants();

        for (int round = 0; round < 3; round++) {
            grants.add("module", caller.acquire(key, "m1", 10_000, "FENCE"));
            // A re-entry takes a token of its own.
            grants.add("module re-entry", caller.acquire(key, "m1", 10_000, "FENCE"));
            assertEquals(grants.last(), lock.getToken(), "Redisson reads the module's counter");
            // tryLockAndGetToken(0 ms): Redisson's tryLockAndGetToken() waits for ever (its wait -1 is read as no limit).
            assertNull(lock.tryLockAndGetToken(0, TimeUnit.MILLISECONDS));
            assertEquals(1L, caller.release(key, "m1"));
            assertEquals(0L, caller.release(key, "m1"));

            grants.add("redisson lockAndGetToken", lock.lockAndGetToken());
            assertNull(other.acquire(key, "m2", 1_000, "FENCE"));
            // A refused FENCE acquire takes no token.
            assertEquals(grants.last(), lock.getToken());
            lock.unlock();
            grants.add("redisson tryLockAndGetToken", lock.tryLockAndGetToken(1, 10, TimeUnit.SECONDS));
            lock.unlock();
            grants.assertStrictlyIncreasing();
        }
        // Redisson's INCRs made the counter Redisson's: the module drops the expiry it gave it
        // (an INCR keeps it, and would start again from 1 once it passed) and adds none again.
        Processes.waitUntil("the counter without an expiry", () -> pttl(server, tokenKey(key)) == -1);
        System.out.printf("[%s] alternating tokens: %s%n", key, grants.grants);
        assertNothingLeft(tokenKey(key));
    }

    @Test
    void aRedissonUnlockHandsTheLockToAQueuedFencedCallerWithAHigherToken() {
        String key = name("lock");
        RFencedLock lock = redisson().getFencedLock(key);
        ModuleCaller waiting = module();
        long redissonToken = lock.lockAndGetToken();

        Async<Long> waiter = Async.start("LOCK.ACQUIRE BLOCK FENCE", () -> waiting.acquireWaiting(key, "m1", 10_000, 0, "FENCE"));
        waitForModuleWaiters(key, 1);
        long unlocked = System.nanoTime();
        lock.unlock();
        // Served long before the 30 s watchdog lease Redisson took would have ended.
        long moduleToken = waiter.get();
        System.out.printf("[%s] Redisson unlock -> LOCK.ACQUIRE BLOCK FENCE caller answered: %.2f ms, token %d after Redisson's %d%n",
                key, Processes.msSince(unlocked, waiter.doneNanos()), moduleToken, redissonToken);
        assertTrue(moduleToken > redissonToken, moduleToken + " not above " + redissonToken);
        assertEquals(moduleToken, lock.getToken());
        assertEquals(0L, waiting.release(key, "m1"));
        assertNothingLeft(tokenKey(key));
    }

    @Test
    void aModuleReleaseWakesAWaitingFencedThreadByItsMessage() {
        String key = name("lock");
        RFencedLock lock = redisson().getFencedLock(key);
        ModuleCaller holder = module();
        long moduleToken = holder.acquire(key, "m1", 60_000, "FENCE");

        Async<Long> waiter = Async.start("redisson lockAndGetToken", lock::lockAndGetToken);
        Processes.waitUntil("the Redisson client subscribed", () -> server.subscribers(Channels.lock(key)) == 1);
        long released = System.nanoTime();
        assertEquals(0L, holder.release(key, "m1"));
        // Redisson was told to retry when the 60 s lease ends: only the message wakes it sooner.
        long redissonToken = waiter.get();
        System.out.printf("[%s] LOCK.RELEASE -> waiting RFencedLock thread has the lock: %.2f ms, token %d after the module's %d%n",
                key, Processes.msSince(released, waiter.doneNanos()), redissonToken, moduleToken);
        assertTrue(redissonToken > moduleToken, redissonToken + " not above " + moduleToken);
        assertNull(holder.acquire(key, "m1", 1_000, "FENCE"));
        lock.unlockAsync(waiter.thread().getId()).toCompletableFuture().join();
        assertNothingLeft(tokenKey(key));
    }

    /** Who takes the lock first, and holds it until the other side's contenders all wait. */
    enum First { REDISSON, MODULE }

    @ParameterizedTest
    @EnumSource(First.class)
    void tokensRiseInGrantOrderUnderContention(First first) {
        String key = name("lock-" + first);
        Guard guard = Guard.exclusive();
        Grants grants = new Grants();
        RedissonClient[] clients = {redisson(), redisson()};
        int threadsPerClient = 3;
        int moduleCallers = 3;
        int cycles = 20;

        RFencedLock firstRedisson = clients[0].getFencedLock(key);
        ModuleCaller firstModule = module();
        if (first == First.REDISSON) {
            grants.add("first", firstRedisson.lockAndGetToken());
        } else {
            grants.add("first", firstModule.acquire(key, "first", 30_000, "FENCE"));
        }

        Contenders contenders = new Contenders();
        for (int c = 0; c < clients.length; c++) {
            RFencedLock lock = clients[c].getFencedLock(key);
            for (int t = 0; t < threadsPerClient; t++) {
                String who = "redisson-" + c + "-" + t;
                contenders.add(who, cycles, i -> {
                    Long token = lock.lockAndGetToken();
                    try {
                        // Noted inside the exclusive hold: the list's order is the order of the grants.
                        guard.hold(who, () -> grants.add(who, token));
                    } finally {
                        lock.unlock();
                    }
                });
            }
        }
        for (int m = 0; m < moduleCallers; m++) {
            String who = "module-" + m;
            ModuleCaller caller = module();
            contenders.add(who, cycles, i -> {
                Long token = caller.acquireWaiting(key, who, 30_000, 0, "FENCE");
                guard.hold(who, () -> grants.add(who, token));
                assertEquals(0L, caller.release(key, who));
            });
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
        assertEquals(holds + 1, grants.size());
        grants.assertStrictlyIncreasing();
        assertEquals(grants.last(), firstRedisson.getToken());
        System.out.printf("[%s] %d fenced holds (%d RFencedLock threads in %d clients, %d LOCK.ACQUIRE FENCE callers) in %.0f ms, tokens rising in grant order%n",
                key, holds, clients.length * threadsPerClient, clients.length, moduleCallers, Processes.msSince(start, System.nanoTime()));
        assertNothingLeft(tokenKey(key));
    }

    /**
     * The module writes its token with a deadline ({@code SET ... PXAT}, lock.token-ttl-ms after
     * its latest token), so that names only the module fences leave nothing once idle. Redisson's
     * INCR keeps that deadline, and once the key is gone would start again from 1: so a counter
     * Redisson has incremented loses the deadline (the module hears the INCR), and every token,
     * however long the name stays idle, is above every token before it.
     */
    @Test
    void redissonsTokensOutliveTheModulesTokenTtl() throws Exception {
        long tokenTtlMs = 300;
        String key = name("lock");
        String moduleOnly = name("module-only");
        try (Server shortTokens = Server.builder().moduleArg("token-ttl-ms", String.valueOf(tokenTtlMs)).start();
                ModuleCaller caller = new ModuleCaller(shortTokens)) {
            RedissonClient client = Redissons.single(shortTokens);
            try {
                RFencedLock lock = client.getFencedLock(key);
                Grants grants = new Grants();
                grants.add("module", caller.acquire(key, "m1", 100, "FENCE"));
                assertEquals(0L, caller.release(key, "m1"));
                long ttl = pttl(shortTokens, tokenKey(key));
                assertTrue(ttl > 0 && ttl <= tokenTtlMs, "the module's counter: PTTL " + ttl);
                grants.add("redisson", lock.lockAndGetToken());
                lock.unlock();
                Processes.waitUntil("Redisson's counter without an expiry", () -> pttl(shortTokens, tokenKey(key)) == -1);

                // A name only the module fenced, after that, expires: by then the deadline the
                // shared counter had would have passed too.
                assertTrue(caller.acquire(moduleOnly, "m1", 100, "FENCE") > 0);
                assertEquals(0L, caller.release(moduleOnly, "m1"));
                Processes.waitUntil("the module-only counter expired", () -> pttl(shortTokens, tokenKey(moduleOnly)) == -2);

                grants.add("redisson after the token TTL", lock.lockAndGetToken());
                lock.unlock();
                grants.add("module after the token TTL", caller.acquire(key, "m1", 100, "FENCE"));
                assertEquals(0L, caller.release(key, "m1"));
                assertEquals(-1, pttl(shortTokens, tokenKey(key)), "the module gave Redisson's counter an expiry again");
                System.out.printf("[%s] tokens across the module's token TTL (token-ttl-ms %d): %s%n",
                        key, tokenTtlMs, grants.grants);
                grants.assertStrictlyIncreasing();
                Leftovers.assertNone(shortTokens, tokenKey(key));
            } finally {
                client.shutdown();
            }
        }
    }
}
